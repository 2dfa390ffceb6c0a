// memsafe/backend/cuda/kernels_screen.cuh — what the selection kernels read from a tile: its values
// as they are, or cuBLAS screening values with exact re-evaluation.
//
// A squared-distance tile from cuBLAS (‖x‖² + ‖y‖² − 2x·y in T) is not the value the host and the
// direct kernels compute (Σ (x_k − y_k)², one FMA per coordinate in coordinate order): for
// near-duplicates it is off by ≈ u·‖x‖² in absolute terms, so a distance of 0 comes out as 3e-3 in
// FP32 at ‖x‖² ≈ 10⁵ and a Matérn-1/2 kernel's diagonal as 0.997. Such a tile is therefore only a
// *screen* (selections only — min, max, argmin, argmax, top-k — of a bare pairwise leaf, whose
// finalise is monotone in the squared distance): an entry is re-evaluated exactly, with the direct
// kernels' arithmetic, when its best possible key could still enter the row's state, and only the
// exact value is ever folded. The results equal the direct path's bit for bit.
//
// Margin. For any summation order, |fl(x·y) − x·y| ≤ γ_d Σ|x_k y_k| ≤ γ_d N/2 with N = ‖x‖² + ‖y‖²;
// the norms err by γ_d each, the epilogue's add and FMA by ≤ 3u·2N; the exact value v̂ is within
// γ_{d+3}·D ≤ 2γ_{d+3}N of D = ‖x − y‖² (D ≤ 2N). So |ŝ − v̂| ≤ (4d + 12)u·N (1 + O(du)), and
// δ = 8(d + 4)u gives twice that. With TF32 tensor-op GEMMs (options.allow_tf32) each product errs
// by up to 2⁻¹⁰ relative, so δ grows by 2⁻⁹. The bound [ŝ − δN, ŝ + δN] (computed in double, lower
// end clamped at 0) is mapped at both ends (the map is monotone, increasing or decreasing), the
// better key is relaxed by 8 units in the last place of its value (the map's own rounding), and an
// entry whose relaxed best key does not rank before the state's worst cannot enter: skipped. Entries
// with a NaN screening value or a non-finite N are always re-evaluated.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "kernels_pairwise.cuh"

namespace memsafe::cuda::detail {

/// δ of the file comment for T, d coordinates, and whether cuBLAS may use TF32.
template <class T>
double screen_margin(std::size_t d, bool tf32) {
  const double u = 0.5 * double(std::numeric_limits<T>::epsilon());
  return 8.0 * double(d + 4) * u + (tf32 && sizeof(T) == 4 ? 1.0 / 512.0 : 0.0);
}

namespace kernels {

/// The tile holds the expression's values: entry e = tile(i, j) is folded as it is. `gate` (the
/// row's worst kept key from earlier chunks, tile_rows_kernel) only matters to a screened tile.
template <class T>
struct tile_values {
  template <class Mon>
  __device__ __forceinline__ void fold(const Mon& mon, typename Mon::state& st, const rank_key&, T e, std::int64_t,
                                       std::int64_t j, std::int64_t jg) const {
    mon.fold(st, e, jg, j);
  }
  /// Top-k: the entry's key, and whether it ranks before `thr`.
  template <bool Max>
  __device__ __forceinline__ bool candidate(T e, std::int64_t, std::int64_t, std::int64_t jg, const rank_key& thr,
                                            rank_key& key) const {
    key = make_key<Max>(e, jg);
    return key < thr;
  }
};

/// The tile holds screening values ŝ of a squared distance (cuBLAS form, unmapped); X and Y are the
/// row block's and the column chunk's points, xn and yn their squared norms (the epilogue's).
template <class Map, class T>
struct screened_sqdist {
  Map map;
  dev_points<T> X, Y;
  const T* xn = nullptr;
  const T* yn = nullptr;
  T ysign = 1;
  double delta = 0;

  /// map(Σ (x_k − y_k)²): the direct kernels' arithmetic, coordinate by coordinate.
  __device__ T exact(std::int64_t i, std::int64_t j) const {
    T acc = 0;
#pragma unroll 4
    for (std::int64_t k = 0; k < X.d; ++k) acc = base_step<base_kind::sqeuclid>(X.at(i, k), ysign * Y.at(j, k), acc);
    return map(acc);
  }
  /// The best key entry (i, j) can have, relaxed; the smallest key when it must be re-evaluated.
  template <bool Max>
  __device__ rank_key best_key(T s, std::int64_t i, std::int64_t j, std::int64_t jg) const {
    const double N = static_cast<double>(xn[i]) + static_cast<double>(yn[j]);
    if (s != s || !(N <= DBL_MAX)) return {0, 0};
    const double m = delta * N, c = static_cast<double>(s);
    const T lo = static_cast<T>(c - m > 0 ? c - m : 0.0), hi = static_cast<T>(c + m);
    const rank_key a = make_key<Max>(map(lo), jg), b = make_key<Max>(map(hi), jg);
    rank_key k = a < b ? a : b;
    k.v = k.v > 8 ? k.v - 8 : 0;
    return k;
  }
  /// Re-evaluated only when its best key could enter the lane's state and ranks before `gate`, the
  /// row's worst kept key from the earlier chunks (tile_rows_kernel).
  template <class Mon>
  __device__ __forceinline__ void fold(const Mon& mon, typename Mon::state& st, const rank_key& gate, T e,
                                       std::int64_t i, std::int64_t j, std::int64_t jg) const {
    const rank_key b = best_key<Mon::max_first>(e, i, j, jg);
    if (b < gate && mon.admits(st, b)) mon.fold(st, exact(i, j), jg, j);
  }
  template <bool Max>
  __device__ __forceinline__ bool candidate(T e, std::int64_t i, std::int64_t j, std::int64_t jg, const rank_key& thr,
                                            rank_key& key) const {
    if (!(best_key<Max>(e, i, j, jg) < thr)) return false;
    key = make_key<Max>(exact(i, j), jg);
    return key < thr;
  }
};

}  // namespace kernels
}  // namespace memsafe::cuda::detail
