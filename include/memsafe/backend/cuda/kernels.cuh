// memsafe/backend/cuda/kernels.cuh — the device kernels.
//
//   fused_rows_kernel   pairwise map-reduce without a tile: the j-tile of Y in shared memory, R query
//                       rows per thread with their coordinates in registers (d ≤ 64), the formula,
//                       the map and the monoid fold in registers; a partial state per (row, split).
//   tile_kernel         a ti×tj tile of the lazy matrix (any d): 64×64 per block, 4×4 per thread,
//                       k-chunks of 16 through shared memory, the map applied before the store.
//   gemm_epilogue       turns a cuBLAS X·Yᵀ tile into the formula's values (norms, map) in place.
//   tile_rows_kernel    folds a materialised tile into the per-row monoid states.
//   merge_rows_kernel   merges the partial states of the column splits and writes the rows.
//   topk_tile_kernel    top-k for large k: one block per row keeps the row's k best (value, index)
//                       keys; candidates under the k-th are merged with a CUB block radix sort.
//   softmax_tile_kernel online max/sum update of a score tile for softmax_sum (P = exp(s − max)).
#pragma once
#include <cub/block/block_radix_sort.cuh>
#include <cuda/std/tuple>

#include <cstdint>

#include "device_expr.cuh"
#include "device_monoids.cuh"

namespace memsafe::cuda::kernels {

using memsafe::detail::base_kind;  // expr/formulas.hpp

template <base_kind B, class T>
__device__ __forceinline__ T base_step(T x, T y, T acc) {
  if constexpr (B == base_kind::sqeuclid) {
    const T t = x - y;
    return ::fma(t, t, acc);
  } else if constexpr (B == base_kind::l1) {
    const T t = x - y;
    return acc + (t < T(0) ? -t : t);
  } else {
    return ::fma(x, y, acc);
  }
}
/// 1/‖v‖ from ‖v‖²; 0 for a zero vector, NaN when ‖v‖² is not finite (inf or NaN coordinates, or
/// a norm beyond T's range: the host normalises with scaling instead, see host::normalize).
template <class T>
__device__ __forceinline__ T inv_norm(T sq) {
  if (!(sq <= math::detail::inf_v<T>()) || sq == math::detail::inf_v<T>()) return math::detail::nan_v<T>();
  return sq > T(0) ? T(1) / ::sqrt(sq) : T(0);
}
/// The host's cosine semantics: exactly 1 when either vector is zero (similarity 0 with everything),
/// NaN for a non-finite vector, else 1 − x·y/(‖x‖‖y‖).
template <class T>
__device__ __forceinline__ T cosine_value(T dot, T xinv, T yinv) {
  return (xinv == T(0) || yinv == T(0)) ? T(1) : ::fma(-(dot * xinv), yinv, T(1));
}

// ---- fused map-reduce ---------------------------------------------------------------------------

/// Threads own rows; each block walks the columns of its split [s·cps, (s+1)·cps) in tiles of TJ
/// points staged in shared memory (zero-padded to DB coordinates, so the d-loop is unrolled).
template <class Map, class Mon, base_kind B, int DB, int R, int TJ, class T>
__global__ void __launch_bounds__(TJ) fused_rows_kernel(Map map, Mon mon, dev_points<T> X, dev_scale<T> sx,
                                                        dev_points<T> Y, dev_scale<T> sy, T ysign,
                                                        std::int64_t j_base, std::int64_t cps,
                                                        typename Mon::state* part, std::int64_t ni, bool first) {
  // Points per shared-memory tile: TJ, fewer when their coordinates would pass 32 KiB.
  constexpr int TP = int(sizeof(T)) * DB * TJ > 32768 ? 32768 / (int(sizeof(T)) * DB) : TJ;
  __shared__ T ys[TP * DB];
  __shared__ T yinv[TP];
  const int t = threadIdx.x;
  const std::int64_t s = blockIdx.y;
  const std::int64_t row0 = std::int64_t(blockIdx.x) * TJ * R;
  const std::int64_t d = X.d;
  T xr[R][DB];
  T xinv[R];
  typename Mon::state st[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = row0 + r * TJ + t;
    T sq = 0;
#pragma unroll
    for (int k = 0; k < DB; ++k) {
      xr[r][k] = (i < ni && k < d) ? sx.apply(k, X.at(i, k)) : T(0);
      sq = ::fma(xr[r][k], xr[r][k], sq);
    }
    xinv[r] = inv_norm(sq);
    if (i < ni && !first) st[r] = part[s * ni + i];
    else mon.init(st[r]);
  }
  const std::int64_t jb = s * cps;
  const std::int64_t je = jb + cps < Y.n ? jb + cps : Y.n;
  for (std::int64_t jt = jb; jt < je; jt += TP) {
    __syncthreads();
    for (int idx = t; idx < TP * DB; idx += TJ) {
      const int jj = idx / DB, k = idx % DB;
      const std::int64_t j = jt + jj;
      ys[idx] = (j < je && k < d) ? ysign * sy.apply(k, Y.at(j, k)) : T(0);
    }
    __syncthreads();
    if constexpr (B == base_kind::cosine) {
      if (t < TP) {
        T sq = 0;
#pragma unroll
        for (int k = 0; k < DB; ++k) sq = ::fma(ys[t * DB + k], ys[t * DB + k], sq);
        yinv[t] = inv_norm(sq);
      }
      __syncthreads();
    }
    const int nt = je - jt < TP ? int(je - jt) : TP;
    for (int jj = 0; jj < nt; ++jj) {
      const T* y = ys + jj * DB;
      T acc[R];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = T(0);
#pragma unroll
      for (int k = 0; k < DB; ++k) {
        const T yk = y[k];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = base_step<B>(xr[r][k], yk, acc[r]);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        T v = acc[r];
        if constexpr (B == base_kind::cosine) v = cosine_value(v, xinv[r], yinv[jj]);
        mon.fold(st[r], map(v), j_base + jt + jj, jt + jj);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = row0 + r * TJ + t;
    if (i < ni) part[s * ni + i] = st[r];
  }
}

// ---- tiles --------------------------------------------------------------------------------------

inline constexpr int tile_bm = 64, tile_bn = 64, tile_bk = 16, tile_threads = 256;

/// out[i·ld + j] = map(F(x_i, y_j)) for i < X.n, j < Y.n (a 64×64 block per thread block).
template <class Map, base_kind B, class T>
__global__ void __launch_bounds__(tile_threads) tile_kernel(Map map, dev_points<T> X, dev_scale<T> sx,
                                                            dev_points<T> Y, dev_scale<T> sy, T ysign, T* out,
                                                            std::int64_t ld) {
  constexpr int BM = tile_bm, BN = tile_bn, BK = tile_bk;
  __shared__ T xs[BK][BM + 1];
  __shared__ T ysh[BK][BN + 1];
  __shared__ T xinv[BM], yinv[BN];
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const std::int64_t i0 = std::int64_t(blockIdx.y) * BM, j0 = std::int64_t(blockIdx.x) * BN;
  const std::int64_t d = X.d;
  T acc[4][4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int v = 0; v < 4; ++v) acc[u][v] = T(0);
  T nsq = 0;  // threads 0..63: ‖x‖² of row t; 64..127: ‖y‖² of column t − 64 (cosine)
  for (std::int64_t k0 = 0; k0 < d; k0 += BK) {
#pragma unroll
    for (int q = 0; q < (BM * BK) / tile_threads; ++q) {
      const int idx = t + q * tile_threads, r = idx / BK, k = idx % BK;
      const std::int64_t kk = k0 + k;
      xs[k][r] = (i0 + r < X.n && kk < d) ? sx.apply(kk, X.at(i0 + r, kk)) : T(0);
      ysh[k][r] = (j0 + r < Y.n && kk < d) ? ysign * sy.apply(kk, Y.at(j0 + r, kk)) : T(0);
    }
    __syncthreads();
    if constexpr (B == base_kind::cosine) {
      if (t < BM)
        for (int k = 0; k < BK; ++k) nsq = ::fma(xs[k][t], xs[k][t], nsq);
      else if (t < BM + BN)
        for (int k = 0; k < BK; ++k) nsq = ::fma(ysh[k][t - BM], ysh[k][t - BM], nsq);
    }
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      T a[4], b[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) a[u] = xs[k][ty + 16 * u];
#pragma unroll
      for (int v = 0; v < 4; ++v) b[v] = ysh[k][tx + 16 * v];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[u][v] = base_step<B>(a[u], b[v], acc[u][v]);
    }
    __syncthreads();
  }
  if constexpr (B == base_kind::cosine) {
    if (t < BM) xinv[t] = inv_norm(nsq);
    else if (t < BM + BN) yinv[t - BM] = inv_norm(nsq);
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int r = ty + 16 * u, c = tx + 16 * v;
      if (i0 + r < X.n && j0 + c < Y.n) {
        T val = acc[u][v];
        if constexpr (B == base_kind::cosine) val = cosine_value(val, xinv[r], yinv[c]);
        out[(i0 + r) * ld + j0 + c] = map(val);
      }
    }
}

/// Per point: ‖p‖² (sqeuclid) or 1/‖p‖ (cosine), for the GEMM path.
template <base_kind B, class T>
__global__ void norms_kernel(dev_points<T> P, T* out) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= P.n) return;
  T sq = 0;
  for (std::int64_t k = 0; k < P.d; ++k) {
    const T v = P.at(i, k);
    sq = ::fma(v, v, sq);
  }
  out[i] = B == base_kind::cosine ? inv_norm(sq) : sq;
}

/// tile[i·ld + j] holds x_i·y_j (from cuBLAS); replace it by map(F(x_i, y_j)).
template <class Map, base_kind B, class T>
__global__ void gemm_epilogue_kernel(Map map, T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj,
                                     const T* xn, const T* yn, T ysign) {
  const std::int64_t total = ni * nj;
  for (std::int64_t q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < total;
       q += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = q / nj, j = q % nj;
    T& e = tile[i * ld + j];
    const T dot = ysign * e;
    T v;
    if constexpr (B == base_kind::sqeuclid) {
      v = ::fma(T(-2), dot, xn[i] + yn[j]);
      v = v < T(0) ? T(0) : v;  // cancellation can make it slightly negative
    } else if constexpr (B == base_kind::cosine) {
      v = cosine_value(dot, xn[i], yn[j]);
    } else {
      v = dot;
    }
    e = map(v);
  }
}

// ---- reductions over a tile, merges ---------------------------------------------------------------

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
/// states are merged by shuffles into the row's partial state for split blockIdx.y.
template <class Mon, class T>
__global__ void tile_rows_kernel(Mon mon, const T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj,
                                 std::int64_t j_base, std::int64_t cps, typename Mon::state* part, bool first) {
  const std::int64_t i = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= ni) return;  // whole warps leave together
  const std::int64_t s = blockIdx.y;
  typename Mon::state st;
  mon.init(st);
  const std::int64_t jb = s * cps, je = jb + cps < nj ? jb + cps : nj;
  const T* row = tile + i * ld;
  for (std::int64_t j = jb + lane; j < je; j += 32) mon.fold(st, row[j], j_base + j, j);
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

template <class Mon, class T>
__global__ void merge_rows_kernel(Mon mon, const typename Mon::state* part, std::int64_t ni, int S,
                                  dev_out<T> out, std::int64_t i_base) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= ni) return;
  typename Mon::state st = part[i];
  for (int s = 1; s < S; ++s) mon.merge(st, part[std::int64_t(s) * ni + i]);
  mon.write(st, out, i_base + i);
}

// ---- top-k for large k ----------------------------------------------------------------------------

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
template <bool Max, class T>
__global__ void __launch_bounds__(topk_threads) topk_tile_kernel(const T* tile, std::int64_t ld, std::int64_t nj,
                                                                 std::int64_t j_base, rank_key* lists, int k) {
  extern __shared__ unsigned char raw[];
  topk_smem& sm = *reinterpret_cast<topk_smem*>(raw);
  int& count = *reinterpret_cast<int*>(raw + sizeof(topk_smem));
  const int t = threadIdx.x;
  const std::int64_t row = blockIdx.x;
  const T* src = tile + row * ld;
  rank_key* list = lists + row * k;
  const std::int64_t C = topk_capacity - k;
  for (std::int64_t c0 = 0; c0 < nj; c0 += C) {
    const rank_key thr = list[k - 1];
    if (t == 0) count = 0;
    __syncthreads();
    const std::int64_t ce = c0 + C < nj ? c0 + C : nj;
    for (std::int64_t j = c0 + t; j < ce; j += topk_threads) {
      const rank_key key = make_key<Max>(src[j], j_base + j);
      if (key < thr) sm.cand[atomicAdd(&count, 1)] = key;
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

}  // namespace memsafe::cuda::kernels
