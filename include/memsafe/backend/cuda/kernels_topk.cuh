// memsafe/backend/cuda/kernels_topk.cuh — top-k for large k (16 < k ≤ 2048) by block sort.
//
// One thread block per row keeps the row's k best (value, index) keys (rank_key, the host's
// ranking order) as a sorted list in global memory. Per tile, the row's entries that rank before
// its current k-th key are gathered in shared memory and merged with the list by a CUB
// BlockRadixSort of 4096 keys (so k ≤ 2048 leaves room for at least as many candidates per pass);
// topk_write_kernel writes the lists as values and indices.
#pragma once
#include <cub/block/block_radix_sort.cuh>
#include <cuda/std/tuple>

#include <cstddef>
#include <cstdint>

#include "device_expr.cuh"
#include "device_monoids.cuh"

namespace memsafe::cuda::detail::kernels {

struct rank_key_decomposer {
  __host__ __device__ ::cuda::std::tuple<unsigned long long&, unsigned long long&> operator()(rank_key& k) const {
    return {k.v, k.i};
  }
};

inline constexpr int topk_threads = 256, topk_items = 16, topk_capacity = topk_threads * topk_items;
using topk_sort = cub::BlockRadixSort<rank_key, topk_threads, topk_items>;
union topk_smem {
  typename topk_sort::TempStorage sort;
  rank_key cand[topk_capacity];
};
/// Dynamic shared memory the top-k kernel needs.
inline constexpr std::size_t topk_smem_bytes = sizeof(topk_smem) + 16;

// Kernels in a header are templates (a plain __global__ function would be defined in every
// translation unit that includes it).
template <class K>
__global__ void init_keys_kernel(K* keys, std::int64_t count) {
  const std::int64_t q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q < count) keys[q] = empty_key();
}

/// Block = one row: merge the tile row's entries that rank before the row's current k-th into its
/// sorted list of k keys (k ≤ 2048). Chunks of (capacity − k) entries, each merged by one block sort.
/// Src reads the entries (kernels_screen.cuh): the tile's values, or screening values re-evaluated.
template <bool Max, class T, class Src>
__global__ void __launch_bounds__(topk_threads) topk_tile_kernel(Src src, const T* tile, std::int64_t ld,
                                                                 std::int64_t nj, std::int64_t j_base,
                                                                 rank_key* lists, int k) {
  extern __shared__ unsigned char raw[];
  topk_smem& sm = *reinterpret_cast<topk_smem*>(raw);
  int& count = *reinterpret_cast<int*>(raw + sizeof(topk_smem));
  const int t = threadIdx.x;
  const std::int64_t row = blockIdx.x;
  const T* entries = tile + row * ld;
  rank_key* list = lists + row * k;
  const std::int64_t C = topk_capacity - k;
  for (std::int64_t c0 = 0; c0 < nj; c0 += C) {
    const rank_key thr = list[k - 1];
    if (t == 0) count = 0;
    __syncthreads();
    const std::int64_t ce = c0 + C < nj ? c0 + C : nj;
    for (std::int64_t j = c0 + t; j < ce; j += topk_threads) {
      rank_key key;
      if (src.template candidate<Max>(entries[j], row, j, j_base + j, thr, key)) sm.cand[atomicAdd(&count, 1)] = key;
    }
    __syncthreads();
    const int cnt = count;
    if (cnt == 0) continue;  // uniform: every thread read the same count
    rank_key keys[topk_items];
#pragma unroll
    for (int q = 0; q < topk_items; ++q) {
      const int pos = t * topk_items + q;
      keys[q] = pos < k ? list[pos] : (pos - k < cnt ? sm.cand[pos - k] : empty_key());
    }
    __syncthreads();  // the candidates are in registers; the shared memory becomes the sort's
    topk_sort(sm.sort).Sort(keys, rank_key_decomposer{});
#pragma unroll
    for (int q = 0; q < topk_items; ++q) {
      const int pos = t * topk_items + q;
      if (pos < k) list[pos] = keys[q];
    }
    __syncthreads();  // the new k-th is visible to every thread of the block
  }
}

template <bool Max, class T>
__global__ void topk_write_kernel(const rank_key* lists, std::int64_t ni, int k, dev_out<T> out, std::int64_t i_base) {
  const std::int64_t q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= ni * k) return;
  const std::int64_t i = q / k, c = q % k;
  const rank_key key = lists[q];
  out.put(i_base + i, c, key_value<Max, T>(key));
  out.put_index(i_base + i, c, key.i == ~0ull ? index_t(-1) : index_t(key.i));
}

}  // namespace memsafe::cuda::detail::kernels
