// memsafe/backend/cuda/kernels_pairwise.cuh — the kernels that evaluate the pairwise formula.
//
// The formula's base (squared difference, absolute difference, product or cosine) is accumulated
// over the coordinates here, then the elementwise map runs on the entry. The fused kernels write no
// tile: fused_rows_kernel folds each entry straight into a register monoid state (sums, K·v,
// logsumexp: the j-tile of Y in shared memory, R query rows per thread with their d ≤ 64
// coordinates in registers, a partial state per (row, column split)); fused_select_kernel serves
// the selections (rows over warps, each row's k best spread over the lanes, the lanes splitting
// the columns). tile_kernel writes a ti×tj tile for any d (64×64 per block, 4×4 per thread,
// k-chunks of 16 through shared memory). For dot-based formulas the tile may instead come from a
// cuBLAS X·Yᵀ: norms_kernel and gemm_epilogue_kernel turn it into the formula's values in place.
#pragma once
#include <concepts>
#include <cstdint>
#include <type_traits>

#include "device_expr.cuh"
#include "kernels_fold.cuh"

namespace memsafe::cuda::detail::kernels {

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

/// Four consecutive coordinates from 16-byte-aligned shared memory (one or two vector loads).
template <class T>
__device__ __forceinline__ void load4(const T* p, T (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    const double2 a = reinterpret_cast<const double2*>(p)[0], b = reinterpret_cast<const double2*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  }
}

/// Four consecutive values to 16-byte-aligned shared memory (one or two vector stores).
template <class T>
__device__ __forceinline__ void store4(T* p, const T (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
    reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
  }
}

// ---- fused map-reduce ---------------------------------------------------------------------------

/// An elementwise map of the form amplitude() · 2^(log2_scale() · base) (the RBF kernel: σ² and
/// −log₂e/(2ℓ²)), which the fused kernel may evaluate as one hardware 2^x per entry with the
/// amplitude applied once per tile partial (see exp2_approx).
template <class Map, class T>
concept exp2_map = requires(const Map& m) {
  { m.log2_scale() } -> std::same_as<T>;
  { m.amplitude() } -> std::same_as<T>;
};

/// Whether fused_rows_kernel sums Map's entries with Mon by the hardware 2^x (K·v of the RBF
/// kernel in float); the launch then also instantiates the exact small-d kernels (DE = d ≤ 3).
template <class Map, class Mon, base_kind B, class T>
inline constexpr bool exp2_sum =
    tile_partial_sums<Mon> && std::is_same_v<T, float> && B == base_kind::sqeuclid && exp2_map<Map, T>;

/// 2^x by the special-function unit (PTX ex2.approx.ftz.f32): the instruction CUDA's exp2f
/// compiles to, whose documented error is 2 ulp, without exp2f's rescaling of results below
/// 2^−126, which are flushed to zero here (an absolute error below 2^−126 per entry, before the
/// amplitude and weight). exp2(−inf) = +0, exp2(NaN) = NaN.
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

/// Points per shared-memory tile of the fused sums: TJ, fewer when their DB coordinates would pass
/// 32 KiB.
template <class T, int DB, int TJ>
inline constexpr int sum_tile_points = int(sizeof(T)) * DB * TJ > 32768 ? 32768 / (int(sizeof(T)) * DB) : TJ;

/// Row i's first KE coordinates (scaled; zero past d, and all zero for a padded row) into x; returns
/// 1/‖x‖ (for a cosine).
template <int KE, class T>
__device__ __forceinline__ T load_row(T (&x)[KE], const dev_points<T>& X, const dev_scale<T>& sx, std::int64_t i,
                                      bool live) {
  T sq = 0;
#pragma unroll
  for (int k = 0; k < KE; ++k) {
    x[k] = (live && k < X.d) ? sx.apply(k, X.at(i, k)) : T(0);
    sq = ::fma(x[k], x[k], sq);
  }
  return inv_norm(sq);
}

/// Stage the tile of points [jt, min(jt + TP, je)) of Y in shared memory for the fused sums: the
/// coordinates (scaled, times ysign) zero-padded to DB, and the points' weights — in the padding
/// slot of each point with Wslot, in `wts` with Wts, zero past je —, then the inverse norms for a
/// cosine. Ends with the tile ready (a barrier); the caller's barrier before it frees the last one.
template <base_kind B, int DB, int TP, int TJ, bool Wslot, bool Wts, class Mon, class T>
__device__ __forceinline__ void stage_sum_tile(T* ys, T* yinv, T* wts, const Mon& mon, const dev_points<T>& Y,
                                               const dev_scale<T>& sy, T ysign, std::int64_t jt, std::int64_t je) {
  const int t = threadIdx.x;
  for (int idx = t; idx < TP * DB; idx += TJ) {
    const int jj = idx / DB, k = idx % DB;
    const std::int64_t j = jt + jj;
    T v = (j < je && k < Y.d) ? ysign * sy.apply(k, Y.at(j, k)) : T(0);
    if constexpr (Wslot) {
      if (k == DB - 1) v = j < je ? mon.weight(j) : T(0);
    }
    ys[idx] = v;
  }
  if constexpr (Wts) {
    for (int q = t; q < TP; q += TJ) wts[q] = jt + q < je ? mon.weight(jt + q) : T(0);
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
}

/// The bases of R rows (their first KE coordinates in registers) against one staged point y: the
/// first DE coordinates, read four at a time; with Wslot the point's weight from its padding slot.
template <base_kind B, int R, int KE, int DE, bool Wslot, class T>
__device__ __forceinline__ void entry_bases(const T (&xr)[R][KE], const T* y, T (&acc)[R], T& w) {
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = T(0);
#pragma unroll
  for (int k0 = 0; k0 < KE; k0 += 4) {
    T yv[4];
    load4(y + k0, yv);
    if constexpr (Wslot) w = yv[3];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (k0 + q < DE) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = base_step<B>(xr[r][k0 + q], yv[q], acc[r]);
      }
    }
  }
}

/// An entry from its base: the cosine's normalisation, then the map — or, in the exp2 form
/// (Ex2), 2^(l2s·base) by the hardware 2^x, the amplitude left to the caller.
template <bool Ex2, base_kind B, class Map, class T>
__device__ __forceinline__ T entry_value(const Map& map, T v, T xinv, T yinv, T l2s) {
  if constexpr (B == base_kind::cosine) v = cosine_value(v, xinv, yinv);
  if constexpr (Ex2) return exp2_approx(v * l2s);
  else return map(v);
}

/// Sums, K·v and logsumexp (selections: fused_select_kernel below). Threads own rows; each block
/// walks the columns of its split [s·cps, (s+1)·cps) in tiles of TJ points staged in shared memory
/// (zero-padded to DB coordinates, read four at a time, so the d-loop is unrolled). The first DE
/// coordinates are evaluated (DE = DB but for the exact small-d instances: the padding's zero
/// terms are skipped, the sum and its order are the same). K·v of an exp2_map in float (the RBF
/// kernel) takes the hardware 2^x per entry and applies the amplitude once per tile partial.
template <class Map, class Mon, base_kind B, int DB, int R, int TJ, class T, int DE = DB>
__global__ void __launch_bounds__(TJ) fused_rows_kernel(Map map, Mon mon, dev_points<T> X, dev_scale<T> sx,
                                                        dev_points<T> Y, dev_scale<T> sy, T ysign,
                                                        std::int64_t j_base, std::int64_t cps,
                                                        typename Mon::state* part, std::int64_t ni, bool first) {
  static_assert(DB % 4 == 0 && DE >= 1 && DE <= DB, "fused_rows_kernel: DB a multiple of 4, 1 <= DE <= DB");
  constexpr int TP = sum_tile_points<T, DB, TJ>;
  constexpr bool partials = tile_partial_sums<Mon>;
  constexpr bool ex2 = exp2_sum<Map, Mon, B, T>;
  constexpr int KE = (DE + 3) / 4 * 4;  // coordinates read (whole groups of four)
  // Exact small d (DE < DB = 4): a point's last slot is padding, and its weight rides there, read
  // with the coordinates by the same 16-byte load instead of a second shared-memory load per point.
  constexpr bool wslot = ex2 && DE < DB;
  __shared__ __align__(16) T ys[TP * DB];
  __shared__ T yinv[TP];
  __shared__ T wts[partials && !wslot ? TP : 1];  // the tile's weights (K·v's v), for tile partial sums
  const int t = threadIdx.x;
  const std::int64_t s = blockIdx.y;
  const std::int64_t row0 = std::int64_t(blockIdx.x) * TJ * R;
  T xr[R][KE];
  T xinv[R];
  typename Mon::state st[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = row0 + r * TJ + t;
    xinv[r] = load_row(xr[r], X, sx, i, i < ni);
    if (i < ni && !first) st[r] = part[s * ni + i];
    else mon.init(st[r]);
  }
  T l2s = T(0), amp = T(1);  // ex2: 2^(l2s·base), times amp once per tile
  if constexpr (ex2) l2s = map.log2_scale(), amp = map.amplitude();
  const std::int64_t jb = s * cps;
  const std::int64_t je = jb + cps < Y.n ? jb + cps : Y.n;
  for (std::int64_t jt = jb; jt < je; jt += TP) {
    __syncthreads();
    stage_sum_tile<B, DB, TP, TJ, wslot, partials && !wslot>(ys, yinv, wts, mon, Y, sy, ysign, jt, je);
    const int nt = je - jt < TP ? int(je - jt) : TP;
    T part[R];  // tile partial sums (partials only): in T, added to the state once per tile
#pragma unroll
    for (int r = 0; r < R; ++r) part[r] = T(0);
#pragma unroll 2
    for (int jj = 0; jj < nt; ++jj) {
      T acc[R];
      T w = T(0);  // the point's weight (partials)
      entry_bases<B, R, KE, DE, wslot>(xr, ys + jj * DB, acc, w);
      if constexpr (partials && !wslot) w = wts[jj];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const T e = entry_value<ex2, B>(map, acc[r], xinv[r], yinv[jj], l2s);
        if constexpr (partials) part[r] = ::fma(e, w, part[r]);
        else mon.fold(st[r], e, j_base + jt + jj, jt + jj);
      }
    }
    if constexpr (partials) {
#pragma unroll
      for (int r = 0; r < R; ++r) mon.add_partial(st[r], ex2 ? amp * part[r] : part[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = row0 + r * TJ + t;
    if (i < ni) part[s * ni + i] = st[r];
  }
}

/// Symmetric K·v, k(X, X)·v with each pair evaluated once (rows.cuh, run_symmetric). One launch
/// per band of ni rows starting at r0 (ni a multiple of TJ·R but for the last band): block x owns
/// the band's rows r0 + x·TJ·R + r·TJ + t, block y the columns [r0 + y·cps, …) of [r0, X.n) (cps a
/// multiple of TJ, so no tile straddles r1 = r0 + ni). A tile of the band's own square (j < r1)
/// folds into its rows only; a tile right of it both ways: Σ_j k_ij·v_j into the rows' partial
/// states (part, one per row and split, as fused_rows_kernel) and Σ_i k_ij·v_i into its columns,
/// written once per column and row block to colpart[x·X.n + j] (in T, amplitude applied). The lanes
/// of a warp take a group of 32 columns in rotated order — lane l at step q takes column
/// (l + q) mod 32 — so a column's running sum passes from lane to lane by one shuffle per step (a
/// systolic sum over the warp's 32 × R rows), and the warps' sums meet in shared memory in warp
/// order. Every sum's order is fixed: results are deterministic. Rows right of the band have no
/// padded rows (only the last band is ragged, and nothing lies right of it), so a padded row never
/// reaches a column sum; padded columns of a ragged tile are skipped.
template <class Map, class Mon, base_kind B, int DB, int R, int TJ, class T, int DE = DB>
__global__ void __launch_bounds__(TJ) fused_sym_kernel(Map map, Mon mon, dev_points<T> X, dev_scale<T> sx, T ysign,
                                                       std::int64_t r0, std::int64_t cps,
                                                       typename Mon::state* part, std::int64_t ni, T* colpart) {
  static_assert(DB % 4 == 0 && DE >= 1 && DE <= DB, "fused_sym_kernel: DB a multiple of 4, 1 <= DE <= DB");
  static_assert(tile_partial_sums<Mon> && TJ % 32 == 0, "fused_sym_kernel: weighted sums, whole warps");
  constexpr int TP = sum_tile_points<T, DB, TJ>;
  static_assert(TP % 32 == 0 && TJ % TP == 0, "fused_sym_kernel: tiles of whole 32-column groups dividing TJ");
  constexpr bool ex2 = exp2_sum<Map, Mon, B, T>;
  constexpr int KE = (DE + 3) / 4 * 4;
  constexpr bool wslot = ex2 && DE < DB;
  constexpr int W = TJ / 32;
  __shared__ __align__(16) T ys[TP * DB];
  __shared__ T yinv[TP];
  __shared__ T wts[wslot ? 1 : TP];
  __shared__ T colw[W][TP];  // each warp's column sums of the tile
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const std::int64_t s = blockIdx.y;
  const std::int64_t lrow0 = std::int64_t(blockIdx.x) * TJ * R;  // within the band
  const std::int64_t n = X.n, r1 = r0 + ni;
  T xr[R][KE];
  T xinv[R];
  T wr[R];  // the rows' own weights v_i, for the column sums
  typename Mon::state st[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t li = lrow0 + r * TJ + t;
    const bool live = li < ni;
    xinv[r] = load_row(xr[r], X, sx, r0 + li, live);
    wr[r] = live ? mon.weight(r0 + li) : T(0);
    mon.init(st[r]);
  }
  T l2s = T(0), amp = T(1);
  if constexpr (ex2) l2s = map.log2_scale(), amp = map.amplitude();
  const std::int64_t jb = r0 + s * cps;
  const std::int64_t je = jb + cps < n ? jb + cps : n;
  for (std::int64_t jt = jb; jt < je; jt += TP) {
    __syncthreads();
    stage_sum_tile<B, DB, TP, TJ, wslot, !wslot>(ys, yinv, wts, mon, X, sx, ysign, jt, je);
    const int nt = je - jt < TP ? int(je - jt) : TP;
    const bool both = jt >= r1;
    T part[R];
#pragma unroll
    for (int r = 0; r < R; ++r) part[r] = T(0);
    // One group of 32 columns from g0; Guard: some of them lie past the tile's end.
    const auto group = [&](int g0, auto guard) {
      T run = T(0);  // the running sum of the column this lane holds
#pragma unroll 2
      for (int q = 0; q < 32; ++q) {
        const int c = g0 + ((lane + q) & 31);
        T cs = T(0);
        if (!decltype(guard)::value || c < nt) {
          T acc[R];
          T w = T(0);
          entry_bases<B, R, KE, DE, wslot>(xr, ys + c * DB, acc, w);
          if constexpr (!wslot) w = wts[c];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const T e = entry_value<ex2, B>(map, acc[r], xinv[r], yinv[c], l2s);
            part[r] = ::fma(e, w, part[r]);
            cs = ::fma(e, wr[r], cs);
          }
        }
        if (both) {
          // Lane l + 1 held, at step q − 1, the column lane l holds now.
          if (q > 0) run = __shfl_sync(0xffffffffu, run, (lane + 1) & 31);
          run += cs;
        }
      }
      // After step 31 lane l holds column g0 + (l + 31) mod 32, summed over the warp.
      if (both) colw[warp][g0 + ((lane + 31) & 31)] = run;
    };
    for (int g0 = 0; g0 < nt; g0 += 32) {
      if (g0 + 32 <= nt) group(g0, std::false_type{});
      else group(g0, std::true_type{});
    }
#pragma unroll
    for (int r = 0; r < R; ++r) mon.add_partial(st[r], ex2 ? amp * part[r] : part[r]);
    if (both) {
      __syncthreads();
      for (int q = t; q < nt; q += TJ) {
        T c = colw[0][q];
#pragma unroll
        for (int w = 1; w < W; ++w) c += colw[w][q];
        colpart[std::int64_t(blockIdx.x) * n + jt + q] = ex2 ? amp * c : c;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t li = lrow0 + r * TJ + t;
    if (li < ni) part[s * ni + li] = st[r];
  }
}

// ---- fused selections ------------------------------------------------------------------------------

/// Point i's coordinates (scaled, times `sign`) into shared memory at `dst`, zero-padded to dp, four
/// at a time; zeros for a point past the end.
template <class T>
__device__ __forceinline__ void stage_point(T* dst, const dev_points<T>& P, const dev_scale<T>& sc, T sign,
                                            std::int64_t i, bool live, int dp) {
  for (int k0 = 0; k0 < dp; k0 += 4) {
    T v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = (live && k0 + q < P.d) ? sign * sc.apply(k0 + q, P.at(i, k0 + q)) : T(0);
    store4(dst + k0, v);
  }
}

/// The fused selection's shared-memory layout for dp coordinates (a multiple of 4): the block's
/// query rows (dp each, read by every lane at once), then tp columns of Y (ldy each: dp, plus 16
/// bytes when a column's bytes are a multiple of 32, so that the lanes' 16-byte reads of
/// consecutive columns fall in distinct banks), then the columns' 1/‖y‖ (cosine).
struct fsel_layout {
  int dp, ldy, tp;
  template <class T>
  static constexpr int ld_for(int dp) {
    return (dp * int(sizeof(T))) % 32 == 0 ? dp + 16 / int(sizeof(T)) : dp;
  }
  template <class T>
  constexpr std::size_t bytes() const {
    return sizeof(T) * (std::size_t(fsel_block_rows) * dp + std::size_t(tp) * ldy + tp);
  }
};

/// Selections folded straight from the coordinates (no tile), for d ≤ 64: a warp owns
/// fsel_rows query rows and keeps each row's k best spread over its lanes (warp_list: one key per
/// lane and row, not a list per thread); the lanes split the columns of a shared-memory tile of Y,
/// fsel_cols each per step, so every lane evaluates fsel_rows × fsel_cols entries at once (x from
/// a broadcast read, y from its own 16-byte reads, the coordinates in chunks of four). An entry
/// beyond its row's k-th value is dropped by one float comparison; the warp inserts the rest.
/// Entries are the fused kernel's bit for bit: the coordinates are summed in order, zero-padded.
template <class Map, class Mon, base_kind B, class T>
__global__ void __launch_bounds__(fsel_warps * 32, 2) fused_select_kernel(
    Map map, Mon mon, dev_points<T> X, dev_scale<T> sx, dev_points<T> Y, dev_scale<T> sy, T ysign,
    std::int64_t j_base, std::int64_t cps, typename Mon::state* part, std::int64_t ni, bool first, fsel_layout L) {
  constexpr bool Max = Mon::max_first;
  constexpr int C = Mon::capacity, R = fsel_rows, U = fsel_cols;
  static_assert(C <= 32, "memsafe::cuda: a warp list holds at most 32 keys");
  extern __shared__ __align__(16) unsigned char fsel_smem[];
  T* const xs = reinterpret_cast<T*>(fsel_smem);
  T* const ys = xs + fsel_block_rows * L.dp;
  T* const yinv = ys + L.tp * L.ldy;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const std::int64_t s = blockIdx.y;
  const std::int64_t block_row0 = std::int64_t(blockIdx.x) * fsel_block_rows;
  const std::int64_t row0 = block_row0 + w * R;  // this warp's rows
  for (int r = threadIdx.x; r < fsel_block_rows; r += blockDim.x)
    stage_point(xs + r * L.dp, X, sx, T(1), block_row0 + r, block_row0 + r < ni, L.dp);
  __syncthreads();
  const T* const xw = xs + w * R * L.dp;
  T xinv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    xinv[r] = T(0);
    if constexpr (B == base_kind::cosine) {
      T sq = 0;
      for (int k = 0; k < L.dp; ++k) sq = ::fma(xw[r * L.dp + k], xw[r * L.dp + k], sq);
      xinv[r] = inv_norm(sq);
    }
  }
  warp_list list[R];
  T thr[R];        // the rows' k-th values (NaN while a list is not full): warp-uniform
  bool row_live[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = row0 + r;
    row_live[r] = i < ni;
    list[r].load(i < ni ? Mon::keys(part[s * ni + i]) : nullptr, mon.kept(), C, first || i >= ni, lane);
    thr[r] = key_value<Max, T>(list[r].kth());
  }
  const std::int64_t jb = s * cps;
  const std::int64_t je = jb + cps < Y.n ? jb + cps : Y.n;
  for (std::int64_t jt = jb; jt < je; jt += L.tp) {
    __syncthreads();
    for (int c = threadIdx.x; c < L.tp; c += blockDim.x) stage_point(ys + c * L.ldy, Y, sy, ysign, jt + c, jt + c < je, L.dp);
    __syncthreads();
    if constexpr (B == base_kind::cosine) {
      for (int c = threadIdx.x; c < L.tp; c += blockDim.x) {
        T sq = 0;
        for (int k = 0; k < L.dp; ++k) sq = ::fma(ys[c * L.ldy + k], ys[c * L.ldy + k], sq);
        yinv[c] = inv_norm(sq);
      }
      __syncthreads();
    }
    const int nt = je - jt < L.tp ? int(je - jt) : L.tp;
    for (int c0 = 0; c0 < nt; c0 += fsel_step) {  // warp-uniform: every lane takes part in the ballots
      bool col_live[U];
#pragma unroll
      for (int u = 0; u < U; ++u) col_live[u] = c0 + lane + 32 * u < nt;
      T acc[R][U];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u) acc[r][u] = T(0);
      for (int k0 = 0; k0 < L.dp; k0 += 4) {
        T yv[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) load4(ys + (c0 + lane + 32 * u) * L.ldy + k0, yv[u]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          T xv[4];
          load4(xw + r * L.dp + k0, xv);
#pragma unroll
          for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int u = 0; u < U; ++u) acc[r][u] = base_step<B>(xv[k], yv[u][k], acc[r][u]);
        }
      }
      // The entries' values, and one vote for the whole step: an entry beyond its row's k-th value
      // at the step's start stays beyond it (the k-th only improves within the step), so when no
      // lane has a candidate the per-entry votes below would all be false and are skipped.
      bool any = false;
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          T v = acc[r][u];
          if constexpr (B == base_kind::cosine) v = cosine_value(v, xinv[r], yinv[c0 + lane + 32 * u]);
          acc[r][u] = map(v);
          // NaN, ties and a list not yet full go to the keys (beyond_value is false for them).
          any |= col_live[u] && row_live[r] && !beyond_value<Max>(acc[r][u], thr[r]);
        }
      }
      if (!__any_sync(0xffffffffu, any)) continue;
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const bool cand = col_live[u] && row_live[r] && !beyond_value<Max>(acc[r][u], thr[r]);
          if (__any_sync(0xffffffffu, cand)) {
            list[r].offer(cand, make_key<Max>(acc[r][u], j_base + jt + c0 + lane + 32 * u), lane);
            thr[r] = key_value<Max, T>(list[r].kth());
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = row0 + r;
    if (i < ni) list[r].store(Mon::keys(part[s * ni + i]), C, lane);
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

/// tile[i·ld + j] holds x_i·y_j (from cuBLAS); replace it by map(F(x_i, y_j)), or with `screen` by
/// the unmapped value (a squared distance's screening value, kernels_screen.cuh).
template <class Map, base_kind B, class T>
__global__ void gemm_epilogue_kernel(Map map, T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj,
                                     const T* xn, const T* yn, T ysign, bool screen) {
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
    e = screen ? v : map(v);
  }
}

}  // namespace memsafe::cuda::detail::kernels
