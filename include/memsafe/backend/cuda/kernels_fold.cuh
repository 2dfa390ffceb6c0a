// memsafe/backend/cuda/kernels_fold.cuh — the kernels that fold and merge per row.
//
// tile_rows_kernel folds a materialised tile into the per-row monoid states of its column split
// (one warp per row, the lanes' states merged by shuffles); merge_rows_kernel merges the column
// splits' partial states and writes the rows. softmax_sum keeps an online (max, sum) per row:
// softmax_tile_kernel turns a score tile into exp(s − max) in place and rescales the row's
// accumulator before cuBLAS adds P·V, softmax_finish_kernel divides by the sum. store_block_kernel
// writes a block of rows to strided outputs; transpose_block_kernel writes a block's transpose
// (the mirrored blocks of a symmetric product).
#pragma once
#include <cstdint>

#include "device_expr.cuh"
#include "device_monoids.cuh"

namespace memsafe::cuda::detail::kernels {

/// A monoid state moved between lanes word by word (states are trivially copyable, 4-byte multiples).
template <class S>
__device__ __forceinline__ S shfl_down_state(const S& v, int offset) {
  static_assert(sizeof(S) % 4 == 0, "memsafe::cuda: monoid states must be a multiple of 4 bytes");
  S r;
  const unsigned* src = reinterpret_cast<const unsigned*>(&v);
  unsigned* dst = reinterpret_cast<unsigned*>(&r);
#pragma unroll
  for (int w = 0; w < int(sizeof(S) / 4); ++w) dst[w] = __shfl_down_sync(0xffffffffu, src[w], offset);
  return r;
}

/// One warp per tile row: the lanes fold interleaved columns (coalesced reads), then the 32 lane
/// states are merged by shuffles into the row's partial state for split blockIdx.y (sums,
/// logsumexp, K·v; the selections go to select_rows_kernel).
template <class Mon, class T, class Src>
__global__ void tile_rows_kernel(Mon mon, Src src, const T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj,
                                 std::int64_t j_base, std::int64_t cps, typename Mon::state* part, bool first) {
  const std::int64_t i = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= ni) return;  // whole warps leave together
  const std::int64_t s = blockIdx.y;
  typename Mon::state st;
  mon.init(st);
  const std::int64_t jb = s * cps, je = jb + cps < nj ? jb + cps : nj;
  const T* row = tile + i * ld;
  // Four coalesced 128-byte loads in flight per warp before they are folded.
  std::int64_t j = jb + lane;
  for (; j + 96 < je; j += 128) {
    T e[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) e[u] = row[j + 32 * u];
#pragma unroll
    for (int u = 0; u < 4; ++u) src.fold(mon, st, e[u], i, j + 32 * u, j_base + j + 32 * u);
  }
  for (; j < je; j += 32) src.fold(mon, st, row[j], i, j, j_base + j);
  for (int o = 16; o > 0; o /= 2) {
    const auto other = shfl_down_state(st, o);
    mon.merge(st, other);
  }
  if (lane == 0) {
    if (!first) {
      typename Mon::state prev = part[s * ni + i];
      mon.merge(prev, st);
      st = prev;
    }
    part[s * ni + i] = st;
  }
}

__device__ __forceinline__ rank_key shfl_key(const rank_key& k, int src) {
  return {__shfl_sync(0xffffffffu, k.v, src), __shfl_sync(0xffffffffu, k.i, src)};
}
__device__ __forceinline__ rank_key shfl_up_key(const rank_key& k, int by) {
  return {__shfl_up_sync(0xffffffffu, k.v, by), __shfl_up_sync(0xffffffffu, k.i, by)};
}

/// A row's k best keys spread over a warp (k ≤ 32): lane q holds its q-th best, so a lane's
/// registers hold one key, not a list. Every lane of the warp calls each member (shuffles).
struct warp_list {
  rank_key mine = empty_key();
  int k = 1;
  /// Start from a state's keys (pad keys first, then the k best in order), or empty when fresh.
  __device__ void load(const rank_key* keys, int kept, int capacity, bool fresh, int lane) {
    k = kept;
    mine = (!fresh && lane < k) ? keys[capacity - k + lane] : empty_key();
  }
  /// The k-th best key (the empty key while fewer than k are held): the same in every lane.
  __device__ rank_key kth() const { return shfl_key(mine, k - 1); }
  /// Insert the candidates of the lanes with `cand` one at a time, in lane order (a shift by one
  /// lane); whether any lane offered one.
  __device__ bool offer(bool cand, const rank_key& key, int lane) {
    unsigned mask = __ballot_sync(0xffffffffu, cand);
    if (mask == 0) return false;
    rank_key thr = kth();
    while (mask) {
      const int from = __ffs(mask) - 1;
      mask &= mask - 1;
      const rank_key c = shfl_key(key, from);
      if (!(c < thr)) continue;  // uniform: every lane holds the same c and thr
      const rank_key prev = shfl_up_key(mine, 1);
      if (lane < k && c < mine) mine = (lane > 0 && c < prev) ? prev : c;
      thr = kth();
    }
    return true;
  }
  /// Back to the state's layout: capacity − k pad keys first, then the k best in order.
  __device__ void store(rank_key* keys, int capacity, int lane) const {
    const int pad = capacity - k;
    const rank_key shifted = shfl_key(mine, lane >= pad ? lane - pad : 0);
    if (lane < capacity) keys[lane] = lane < pad ? pad_key() : shifted;
  }
};

/// Selections (min, max, argmin, argmax, top-k with k ≤ 32): one warp per tile row, the row's list
/// spread over the warp (warp_list), so the SM runs many warps. Each lane reads its column
/// (coalesced), skips an entry its filter (Src::lane_filter) or the list's k-th rules out, builds
/// the key of the rest (a screen re-evaluates them exactly); the warp then inserts its candidates
/// one at a time, in lane order, and every lane learns the new k-th. Entries are taken in
/// increasing column order, so an entry that ties the k-th's value always loses the tie
/// (kernels_screen.cuh).
template <class Mon, class T, class Src>
__global__ void select_rows_kernel(Mon mon, Src src, const T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj,
                                   std::int64_t j_base, std::int64_t cps, typename Mon::state* part, bool first) {
  constexpr bool Max = Mon::max_first;
  constexpr int C = Mon::capacity;
  static_assert(C <= 32, "memsafe::cuda: a warp list holds at most 32 keys");
  const std::int64_t i = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= ni) return;  // whole warps leave together
  const std::int64_t s = blockIdx.y;
  rank_key* const keys = Mon::keys(part[s * ni + i]);
  warp_list list;
  list.load(keys, mon.kept(), C, first, lane);
  rank_key thr = list.kth();
  auto f = src.filter(i);
  src.template update<Max>(f, thr);
  const auto offer = [&](bool cand, const rank_key& key) {
    if (!list.offer(cand, key, lane)) return;
    thr = list.kth();
    src.template update<Max>(f, thr);
  };
  const std::int64_t jb = s * cps, je = jb + cps < nj ? jb + cps : nj;
  const T* row = tile + i * ld;
  // Warp-uniform bounds (the ballot needs every lane): whole steps of 4 × 32 columns, four
  // coalesced loads in flight per lane, then steps of 32 with the lanes past the end idle.
  std::int64_t jw = jb;
  for (; jw + 128 <= je; jw += 128) {
    T e[4];
    typename Src::column a[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      e[u] = row[jw + 32 * u + lane];
      a[u] = src.at(jw + 32 * u + lane);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const std::int64_t jj = jw + 32 * u + lane;
      rank_key key;
      const bool cand = src.template select<Max>(f, thr, e[u], a[u], i, jj, j_base + jj, key);
      offer(cand, key);
    }
  }
  for (; jw < je; jw += 32) {
    const std::int64_t jj = jw + lane;
    rank_key key;
    const bool cand = jj < je && src.template select<Max>(f, thr, row[jj], src.at(jj), i, jj, j_base + jj, key);
    offer(cand, key);
  }
  list.store(keys, C, lane);
}

/// Every row of an empty reduction (m = 0) set to its identity (rows.cuh, write_identities).
template <class T>
__global__ void fill_rows_kernel(dev_out<T> out, std::int64_t ni, std::int64_t c, T value, index_t index) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= ni) return;
  for (std::int64_t q = 0; q < c; ++q) {
    out.put(i, q, value);
    out.put_index(i, q, index);
  }
}

/// A row block's rows from their S split states, plus `add` (one more state per row) when given:
/// the symmetric K·v's column sums from earlier bands (rows.cuh, run_symmetric).
template <class Mon, class T>
__global__ void merge_rows_kernel(Mon mon, const typename Mon::state* part, std::int64_t ni, int S,
                                  dev_out<T> out, std::int64_t i_base, const typename Mon::state* add = nullptr) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= ni) return;
  typename Mon::state st = part[i];
  for (int s = 1; s < S; ++s) mon.merge(st, part[std::int64_t(s) * ni + i]);
  if (add) mon.merge(st, add[i]);
  mon.write(st, out, i_base + i);
}

/// Symmetric K·v (fused_sym_kernel): the column sums of a band's G row blocks, colpart[g·n + j],
/// added to each column's double state in row-block order, for the columns [r1, n) right of it.
template <class T>
__global__ void sym_columns_kernel(const T* colpart, int G, std::int64_t n, std::int64_t r1, double* colsum) {
  const std::int64_t j = r1 + std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  double c = colsum[j];
  for (int g = 0; g < G; ++g) c += static_cast<double>(colpart[std::int64_t(g) * n + j]);
  colsum[j] = c;
}

// ---- softmax_sum ------------------------------------------------------------------------------------

/// Row state of the online softmax.
struct softmax_state {
  double mx, l;
  int bad;
};

template <class S>
__global__ void softmax_init_kernel(S* st, std::int64_t ni) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < ni) st[i] = {-math::detail::inf_v<double>(), 0.0, 0};
}

/// One warp per row: P = exp(s − new max) in place (0 where the row is bad), l and the row of the
/// accumulator rescaled by exp(old max − new max) before cuBLAS adds P·V.
template <class T>
__global__ void softmax_tile_kernel(T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj, softmax_state* st,
                                    T* acc, std::int64_t dv) {
  const std::int64_t i = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= ni) return;
  T* row = tile + i * ld;
  double m = -math::detail::inf_v<double>();
  int bad = 0;
  for (std::int64_t j = lane; j < nj; j += 32) {
    const double v = static_cast<double>(row[j]);
    if (v != v || v == math::detail::inf_v<double>()) bad = 1;
    else if (v > m) m = v;
  }
  for (int o = 16; o > 0; o /= 2) {
    m = ::fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
    bad |= __shfl_xor_sync(0xffffffffu, bad, o);
  }
  softmax_state s = st[i];
  bad |= s.bad;
  const double nm = m > s.mx ? m : s.mx;
  const bool live = !bad && nm != -math::detail::inf_v<double>();
  double sum = 0;
  for (std::int64_t j = lane; j < nj; j += 32) {
    const double p = live ? ::exp(static_cast<double>(row[j]) - nm) : 0.0;
    row[j] = static_cast<T>(p);
    sum += static_cast<T>(p);
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const double scale = (live && s.mx != -math::detail::inf_v<double>()) ? ::exp(s.mx - nm) : (live ? 0.0 : 1.0);
  for (std::int64_t q = lane; q < dv; q += 32) acc[i * dv + q] = static_cast<T>(scale * static_cast<double>(acc[i * dv + q]));
  if (lane == 0) st[i] = {live ? nm : s.mx, live ? s.l * scale + sum : s.l, bad};
}

template <class T>
__global__ void softmax_finish_kernel(const softmax_state* st, const T* acc, std::int64_t ni, std::int64_t dv,
                                      dev_out<T> out, std::int64_t i_base) {
  const std::int64_t q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= ni * dv) return;
  const std::int64_t i = q / dv, c = q % dv;
  const softmax_state s = st[i];
  const T v = (s.bad || s.l == 0) ? math::detail::nan_v<T>() : static_cast<T>(static_cast<double>(acc[q]) / s.l);
  out.put(i_base + i, c, v);
}

/// out(i_base + i, c) = scale · src[i·ld + c] (a block of rows to strided outputs).
template <class T>
__global__ void store_block_kernel(const T* src, std::int64_t ld, std::int64_t ni, std::int64_t nc, dev_out<T> out,
                                   std::int64_t i_base) {
  const std::int64_t q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= ni * nc) return;
  const std::int64_t i = q / nc, c = q % nc;
  out.put(i_base + i, c, src[i * ld + c]);
}

inline constexpr int transpose_tile = 32, transpose_rows = 8;  ///< 32×32 blocks, 32×8 threads

/// dst[c·ldd + r] = src[r·lds + c] for r < nr, c < nc: a block's transpose, staged through shared
/// memory so that both the reads and the writes are coalesced. src and dst do not overlap.
template <class T>
__global__ void transpose_block_kernel(const T* src, std::int64_t lds, std::int64_t nr, std::int64_t nc, T* dst,
                                       std::int64_t ldd) {
  constexpr int TT = transpose_tile;
  __shared__ T t[TT][TT + 1];
  const std::int64_t r0 = std::int64_t(blockIdx.y) * TT, c0 = std::int64_t(blockIdx.x) * TT;
  for (int y = threadIdx.y; y < TT; y += transpose_rows) {
    const std::int64_t r = r0 + y, c = c0 + threadIdx.x;
    if (r < nr && c < nc) t[y][threadIdx.x] = src[r * lds + c];
  }
  __syncthreads();
  for (int y = threadIdx.y; y < TT; y += transpose_rows) {
    const std::int64_t c = c0 + y, r = r0 + threadIdx.x;
    if (c < nc && r < nr) dst[c * ldd + r] = t[threadIdx.x][y];
  }
}

}  // namespace memsafe::cuda::detail::kernels
