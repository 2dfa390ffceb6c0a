// memsafe/backend/cuda/kernels_screen.cuh — what the selection kernels read from a tile: its values
// as they are, or cuBLAS screening values with exact re-evaluation.
//
// A squared-distance tile from cuBLAS (‖x‖² + ‖y‖² − 2x·y in T) is not the value the host and the
// direct kernels compute (Σ (x_k − y_k)², one FMA per coordinate in coordinate order): for
// near-duplicates it is off by ≈ u·‖x‖² in absolute terms, so a distance of 0 comes out as 3e-3 in
// FP32 at ‖x‖² ≈ 10⁵ and a Matérn-1/2 kernel's diagonal as 0.997. A cosine tile from a TF32 GEMM is
// off by ≈ 2⁻¹⁰. Such a tile is therefore only a *screen* (selections only — min, max, argmin,
// argmax, top-k — of a bare pairwise leaf, whose finalise is monotone in the base value): an entry
// is re-evaluated exactly, with the direct kernels' arithmetic, when its best possible key could
// still enter the row's state, and only the exact value is ever folded. The results equal the
// direct path's bit for bit.
//
// Margin, squared distance. For any summation order, |fl(x·y) − x·y| ≤ γ_d Σ|x_k y_k| ≤ γ_d N/2
// with N = ‖x‖² + ‖y‖²; the norms err by γ_d each, the epilogue's add and FMA by ≤ 3u·2N; the
// exact value v̂ is within γ_{d+3}·D ≤ 2γ_{d+3}N of D = ‖x − y‖² (D ≤ 2N). So
// |ŝ − v̂| ≤ (4d + 12)u·N (1 + O(du)), and δ = 8(d + 4)u gives twice that. With TF32 tensor-op
// GEMMs (options.allow_tf32, options.screen_tf32) each product errs by up to 2⁻¹⁰ relative, so δ
// grows by 2⁻⁹. The bound [ŝ − δN, ŝ + δN] (computed in T with the margin widened by 16u for that
// computation's own rounding, screen_bounds_margin; lower end clamped at 0: v̂ is a sum of squares)
// is mapped at both ends (the map is monotone, increasing or decreasing), the better key is relaxed
// by 8 units in the last place of its value (the map's own rounding), and an entry whose relaxed
// best key does not rank before the state's worst cannot enter: skipped. Entries with a NaN or
// infinite screening value or a non-finite N are always re-evaluated.
//
// Margin, cosine (1 − x·y/(‖x‖‖y‖), with the inverse norms x̃ = 1/‖x‖, ỹ = 1/‖y‖ of norms_kernel,
// which the exact value uses too). ŝ = 1 − e·x̃·ỹ from the tile's e ≈ x·y, v̂ = 1 − s·x̃·ỹ from
// the sequential dot s. |e − s| ≤ |e − x·y| + |s − x·y| ≤ (τ + 2γ_d)·Σ|x_k y_k| ≤ (τ + 2γ_d)‖x‖‖y‖,
// τ = 0 in FP32, τ ≤ 2⁻⁹ + 2⁻²⁰ with TF32 inputs (each rounded or truncated to 10 bits); x̃ỹ‖x‖‖y‖
// ≤ 1 + (d + 4)u; the products and the FMAs of ŝ and v̂ round by ≤ 6u in all (|v̂| ≤ 2). So
// |ŝ − v̂| ≤ τ + (2d + 8)u (1 + O(du)) and δ = 2τ + 8(d + 4)u (N = 1: the margin is absolute). Not
// clamped: a computed v̂ may be slightly below 0.
//
// Underflow. Those bounds are relative; a product, sum or norm rounded into the subnormal range errs
// by up to half the smallest subnormal absolutely, and a GEMM that flushes subnormal inputs (tensor
// cores may) by < 2⁻¹²⁶|y_k| per flushed x_k (float): for data at a tiny scale (coordinates ≈ 1e-24
// in float) δN is below either, and an entry that beats the state could be skipped. The margin adds
// η_T = 2⁻¹⁰⁰ (float; it covers (8d + 16)·2⁻¹⁵⁰ of gradual underflow and 2⁻¹²⁶√(dN) of flushing for
// d < 2⁴⁸ while N < 1 — above, 2⁻¹²⁶√(dN) is far inside δN) or 2⁻¹⁰⁰⁰ (double): tiny data is
// re-evaluated more often, never wrongly skipped (the host's screens, select.hpp, "Underflow").
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "kernels_pairwise.cuh"

namespace memsafe::cuda::detail {

/// δ of the file comment for the base B, T, d coordinates, and whether cuBLAS may use TF32.
template <class T>
double screen_margin(base_kind B, std::size_t d, bool tf32) {
  const double u = 0.5 * double(std::numeric_limits<T>::epsilon());
  // TF32 products: 2⁻⁹ of N for the squared distance, 2τ = 2⁻⁸ + 2⁻¹⁹ absolute for the cosine.
  const double tensor = B == base_kind::cosine ? 2.0 / 512.0 + 2.0 / 1048576.0 : 1.0 / 512.0;
  return 8.0 * double(d + 4) * u + (tf32 && sizeof(T) == 4 ? tensor : 0.0);
}

/// The margin the kernels use, in T: δ + 16u. Computing N = ‖x‖² + ‖y‖², m = δN and ŝ ∓ m in T
/// errs by at most u(|ŝ| + m) + 2uδN ≤ 3uN (|ŝ| ≤ 2.1N, δ ≤ 1/2; for cosine N = 1 and |ŝ| ≤ 2.1),
/// and the extra 16u·N (15u·N after the conversion's rounding) covers it: [lo, hi] computed in T
/// contains [ŝ − δN, ŝ + δN].
template <class T>
T screen_bounds_margin(double delta) {
  return static_cast<T>(delta + 16.0 * 0.5 * double(std::numeric_limits<T>::epsilon()));
}

namespace kernels {

/// The tile holds the expression's values: entry e = tile(i, j) is folded as it is.
template <class T>
struct tile_values {
  template <class Mon>
  __device__ __forceinline__ void fold(const Mon& mon, typename Mon::state& st, T e, std::int64_t, std::int64_t j,
                                       std::int64_t jg) const {
    mon.fold(st, e, jg, j);
  }
  /// A lane's filter in select_rows_kernel: the threshold's value (NaN while the list is not full),
  /// an entry beyond it skipped without building its key.
  struct lane_filter {
    T thr;
  };
  /// What select needs of column j besides the entry, loaded with it (nothing here).
  struct column {};
  __device__ __forceinline__ column at(std::int64_t) const { return {}; }
  __device__ __forceinline__ lane_filter filter(std::int64_t) const { return {math::detail::nan_v<T>()}; }
  template <bool Max>
  __device__ __forceinline__ void update(lane_filter& f, const rank_key& thr) const {
    f.thr = key_value<Max, T>(thr);
  }
  template <bool Max>
  __device__ __forceinline__ bool select(lane_filter& f, const rank_key& thr, T e, column, std::int64_t, std::int64_t,
                                         std::int64_t jg, rank_key& key) const {
    if (beyond_value<Max>(e, f.thr)) return false;
    key = make_key<Max>(e, jg);
    return key < thr;
  }
  /// Top-k by block sort: the entry's key, and whether it ranks before `thr`.
  template <bool Max>
  __device__ __forceinline__ bool candidate(T e, std::int64_t i, std::int64_t j, std::int64_t jg, const rank_key& thr,
                                            rank_key& key) const {
    lane_filter f = filter(i);  // NaN threshold: rules nothing out
    return select<Max>(f, thr, e, at(j), i, j, jg, key);
  }
};

/// The tile holds cuBLAS's x_i·y_j of a squared distance's or a cosine's screen (the epilogue is
/// not run: the screening value ŝ is formed here with the epilogue's arithmetic: max(‖x‖² + ‖y‖² −
/// 2x·y, 0), or 1 − x·y·x̃·ỹ); X and Y are the row block's and the column chunk's points, xn and yn
/// their squared norms (B = sqeuclid) or inverse norms (B = cosine), from norms_kernel.
template <class Map, class T, base_kind B>
struct screened_leaf {
  static_assert(B == base_kind::sqeuclid || B == base_kind::cosine, "screens: squared distance or cosine");
  Map map;
  dev_points<T> X, Y;
  const T* xn = nullptr;
  const T* yn = nullptr;
  T ysign = 1;
  T delta = 0;  ///< δ + 16u (screen_bounds_margin): the margin with the rounding of its own computation in T

  /// ŝ from the tile's x_i·y_j and the two points' norms (gemm_epilogue_kernel's arithmetic); N, the
  /// scale of the margin (‖x‖² + ‖y‖², or 1 for cosine).
  __device__ __forceinline__ T screen_value(T e, T xni, T ynj, T& N) const {
    if constexpr (B == base_kind::cosine) {
      N = T(1);
      return cosine_value(ysign * e, xni, ynj);
    } else {
      N = xni + ynj;
      const T v = ::fma(T(-2), ysign * e, N);
      return v < T(0) ? T(0) : v;
    }
  }
  /// map(F(x_i, y_j)): the direct kernels' arithmetic, coordinate by coordinate.
  __device__ T exact(std::int64_t i, std::int64_t j) const {
    T acc = 0;
#pragma unroll 4
    for (std::int64_t k = 0; k < X.d; ++k) acc = base_step<B>(X.at(i, k), ysign * Y.at(j, k), acc);
    if constexpr (B == base_kind::cosine) return map(cosine_value(acc, xn[i], yn[j]));
    else return map(acc);
  }
  /// [lo, hi] ⊇ [ŝ − δN, ŝ + δN] (a squared distance's lower end clamped at 0), computed in T; false
  /// when the entry must be re-evaluated whatever its bounds (ŝ NaN or infinite, N not finite in T).
  __device__ __forceinline__ bool bounds(T s, T N, T& lo, T& hi) const {
    constexpr T inf = math::detail::inf_v<T>();
    if (!(s > -inf && s < inf) || !(N < inf)) return false;
    const T m = delta * N + T(memsafe::detail::screen_eta<T>());
    lo = s - m;
    if constexpr (B == base_kind::sqeuclid) lo = lo > T(0) ? lo : T(0);
    hi = s + m;
    return true;
  }
  /// The best key a value in [lo, hi] can have, relaxed by 8 units in the last place (the map's
  /// own rounding; the map is monotone, increasing or decreasing).
  template <bool Max>
  __device__ __forceinline__ rank_key best_key(T lo, T hi, std::int64_t jg) const {
    const rank_key a = make_key<Max>(map(lo), jg), b = make_key<Max>(map(hi), jg);
    rank_key k = a < b ? a : b;
    k.v = k.v > 8 ? k.v - 8 : 0;
    return k;
  }
  /// A lane's filter in select_rows_kernel: the hull [rlo, rhi] of the bounds it has rejected. The
  /// values whose keys cannot rank before the list's k-th form a ray (the map is monotone; an equal
  /// value loses the tie, every later entry having a higher index than every kept one), the k-th
  /// only improves, so an entry whose bounds lie in the hull cannot enter: skipped with two
  /// comparisons, no map and no key.
  struct lane_filter {
    T rlo, rhi;
    T xn;  ///< ‖x_i‖² (or 1/‖x_i‖) of the warp's row
  };
  /// ‖y_j‖² (or 1/‖y_j‖), loaded with the entry (one more coalesced load in flight, not a dependent one).
  using column = T;
  __device__ __forceinline__ column at(std::int64_t j) const { return yn[j]; }
  __device__ __forceinline__ lane_filter filter(std::int64_t i) const {
    return {math::detail::inf_v<T>(), -math::detail::inf_v<T>(), xn[i]};
  }
  template <bool Max>
  __device__ __forceinline__ void update(lane_filter&, const rank_key&) const {}
  template <bool Max>
  __device__ __forceinline__ bool select(lane_filter& f, const rank_key& thr, T e, column ynj, std::int64_t i,
                                         std::int64_t j, std::int64_t jg, rank_key& key) const {
    T N, lo, hi;
    const T sv = screen_value(e, f.xn, ynj, N);
    if (bounds(sv, N, lo, hi)) {
      if (lo >= f.rlo && hi <= f.rhi) return false;
      if (!(best_key<Max>(lo, hi, jg) < thr)) {
        f.rlo = lo < f.rlo ? lo : f.rlo;
        f.rhi = hi > f.rhi ? hi : f.rhi;
        return false;
      }
    }
    key = make_key<Max>(exact(i, j), jg);
    return key < thr;
  }
  /// Top-k by block sort: re-evaluated only when its best key could rank before `thr` (select with
  /// an empty hull).
  template <bool Max>
  __device__ __forceinline__ bool candidate(T e, std::int64_t i, std::int64_t j, std::int64_t jg, const rank_key& thr,
                                            rank_key& key) const {
    lane_filter f = filter(i);
    return select<Max>(f, thr, e, at(j), i, j, jg, key);
  }
};

}  // namespace kernels
}  // namespace memsafe::cuda::detail
