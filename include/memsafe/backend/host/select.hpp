// memsafe/backend/host/select.hpp — fused nearest-neighbour micro-kernels (AVX-512).
//
// k-smallest (or largest) selection over a pairwise distance never needs the distance tile: a
// block of R query rows × NP packed panels of W points accumulates a cheap *screening* value in
// registers — the dot-product form of the distance, one FMA per feature — and compares it with
// a per-row threshold; only lanes that pass (a bitmask, almost always empty) are looked at again.
//
// Screening is conservative and the answer exact: a lane passes when its screening value is
// within a proven rounding margin of the row's current k-th best *exact* value, and every lane
// that passes is re-evaluated with `exact_value`, the same arithmetic as the portable tile path
// (tile.hpp's pairwise_rows), before it may enter the top k. So the indices and values equal the
// reference path's bit for bit, at every tile size and budget.
//
//   kind     exact value                 screening (per lane)                          margin
//   sqdist   Σ (x_k − y_k)²              ½(1−δ)‖y‖² − Σ x_k y_k  <  ½(thr − (1−δ)‖x‖²)   δ(‖x‖²+‖y‖²)
//   l1       Σ |x_k − y_k|               the exact value itself                         0
//   cosine   1 − x̂·ŷ (unit vectors)       −(x̂·ŷ)·w_y  <  (thr − 1 + δ)·1                 δ
//   dot_max  x·y (largest first)         −½δ‖y‖² − x·y  <  −thr + ½δ‖x‖²               ½δ(‖x‖²+‖y‖²)
//
// δ = 8(d+4)u (u the unit roundoff) bounds, with a factor two to spare, the error of a d-term
// FMA chain (γ_d) plus that of the exact value (γ_{d+2}) relative to ‖x‖²+‖y‖², which bounds
// 2Σ|x_k y_k| and the distance. Cosine works on unit vectors x̂, ŷ (host::normalize) with weights
// w ∈ {1, 0 for a zero vector, NaN for a non-finite one}: the screening sum is the exact value's
// dot product negated step by step (fnmadd against madd, both rounded once), so only the final
// 1 − dot differs, by less than one rounding; w_y = 0 screens a zero point at 0 (it passes whenever
// its exact value 1 can enter), a zero query (w_x = 0) accepts everything. Lanes whose screening
// inputs are not finite (overflowing norms, NaN, inf) always pass (their init is −inf, or the row
// threshold is NaN), so unusual data costs time, never correctness. A row holding fewer than k values, or whose k-th value is NaN
// (NaN ranks last), has threshold NaN and screens nothing out (`not_ge` is an unordered
// compare: every lane passes a NaN threshold, and NaN lanes pass any threshold).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels.hpp"
#include "simd.hpp"

namespace memsafe::host {

enum class select_kind { sqdist, l1, cosine, dot_max };

/// δ of the table above for T and feature dimension d.
template <class T>
double select_margin(std::size_t d) {
  return 8.0 * double(d + 4) * double(std::numeric_limits<T>::epsilon()) * 0.5;
}

/// Round a double to T upwards (so a threshold is never tightened by the conversion).
template <class T>
T round_up(double v) {
  T t = static_cast<T>(v);
  if (std::isfinite(v) && double(t) < v) t = std::nextafter(t, std::numeric_limits<T>::infinity());
  return t;
}

/// Screening offsets for the `np` packed panels of a column tile (np·W values, `nj` real points);
/// point j's packed coordinates are at pack[(j/W)·d·W + k·W + j%W]. Padding lanes get +inf (they
/// never pass; callers check j < nj regardless). Returns whether every point is finite with a
/// representable squared norm (the tile is "clean": no NaN can arise in its screening values).
template <class T, select_kind K>
bool screening_init(const T* pack, std::size_t d, std::size_t nj, std::size_t np, std::size_t W, T* init) {
  const double delta = select_margin<T>(d), big = double(std::numeric_limits<T>::max()) / 4;
  bool clean = true;
  for (std::size_t p = 0; p < np; ++p)
    for (std::size_t w = 0; w < W; ++w) {
      const std::size_t j = p * W + w;
      T& o = init[j];
      if (j >= nj) {
        o = std::numeric_limits<T>::infinity();
        continue;
      }
      const T* y = pack + p * d * W + w;
      double s = 0;
      for (std::size_t k = 0; k < d; ++k) s += double(y[k * W]) * double(y[k * W]);
      const bool fin = std::isfinite(s) && s < big;
      clean = clean && fin;
      if constexpr (K == select_kind::l1 || K == select_kind::cosine) {
        o = T(0);
      } else {
        // Not representable (or NaN/inf data): screen nothing out for this point.
        o = fin ? static_cast<T>(K == select_kind::sqdist ? 0.5 * (1.0 - delta) * s : -0.5 * delta * s)
                : -std::numeric_limits<T>::infinity();
      }
    }
  return clean;
}

/// Per-row constants of the screening threshold.
template <class T>
struct row_screen {
  double xn2 = 0;   ///< ‖x‖² (sqdist, dot_max)
  double xnorm = 0; ///< ‖x‖ (cosine; +inf when x is zero)
  bool finite = true;
};

template <class T, select_kind K>
row_screen<T> screen_row(const T* x, std::size_t d, T xinv) {
  row_screen<T> s;
  double n2 = 0;
  for (std::size_t k = 0; k < d; ++k) n2 += double(x[k]) * double(x[k]);
  s.xn2 = n2;
  s.xnorm = xinv > T(0) ? 1.0 / double(xinv) : std::numeric_limits<double>::infinity();
  s.finite = std::isfinite(n2) && n2 < double(std::numeric_limits<T>::max()) / 4;  // also: no NaN/inf in x
  return s;
}

/// The screening threshold of a row whose current k-th best exact value is `worst`
/// (`full` false: fewer than k values held → accept everything: the threshold is NaN).
template <class T, select_kind K>
T screen_threshold(bool full, T worst, const row_screen<T>& rs, std::size_t d) {
  constexpr T all = std::numeric_limits<T>::quiet_NaN();  // !(v >= NaN) holds for every v, +inf and NaN too
  if (!full || worst != worst || !rs.finite) return all;
  const double delta = select_margin<T>(d), w = double(worst);
  if constexpr (K == select_kind::l1) return worst;
  // Computed in double: its rounding is far below the margin δ, which is at least 40 units of T's.
  if constexpr (K == select_kind::sqdist) return round_up<T>(0.5 * (w - (1.0 - delta) * rs.xn2));
  if constexpr (K == select_kind::cosine) return std::isfinite(rs.xnorm) ? round_up<T>((w - 1.0 + delta) * rs.xnorm) : all;
  if constexpr (K == select_kind::dot_max) return round_up<T>(-w + 0.5 * delta * rs.xn2);
  return all;
}

/// The exact value of one pair, with the portable tile kernel's arithmetic (pairwise_rows):
/// x contiguous, y with stride W (a packed panel column).
template <class T, select_kind K>
T exact_value(const T* x, const T* y, std::size_t d, std::size_t W, T xinv, T yinv) {
  T acc = T(0);
  for (std::size_t k = 0; k < d; ++k) {
    if constexpr (K == select_kind::sqdist) {
      const T t = x[k] - y[k * W];
      acc = madd(t, t, acc);
    } else if constexpr (K == select_kind::l1) {
      const T t = x[k] - y[k * W];
      acc += t < T(0) ? -t : t;
    } else {
      acc = madd(x[k], y[k * W], acc);
    }
  }
  if constexpr (K == select_kind::cosine) acc = cosine_finish(acc, xinv, yinv);
  return acc;
}

#if defined(MEMSAFE_SIMD_AVX512)
/// Screen R rows (xs: R×d contiguous, d ≥ 1) against NP consecutive packed panels starting at
/// `yp` (panel stride d·W), with offsets `init` (NP·W) and, for cosine, the points' weights in `yinv` (NP·W).
/// masks[r·NP + p] receives the lanes of row r, panel p that pass thr[r]; returns whether any did
/// (masks are written only then).
///
/// `Clean`: every screening input is finite (no NaN/inf lanes possible), so a row's panels can be
/// reduced with min before a single compare; otherwise every lane is compared unordered.
template <class T, select_kind K, int R, int NP, bool Clean>
inline bool screen_block(const T* xs, std::size_t d, const T* yp, const T* init, const T* yinv, const T* thr,
                         std::uint32_t* masks) {
  using V = simd<T>;
  using reg = typename V::reg;
  constexpr std::size_t W = V::W;
  reg acc[R][NP];
  {  // first feature: start from the offsets
    reg y[NP];
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) y[p] = V::load(yp + p * d * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const reg xb = V::set1(xs[r * d]);
#pragma GCC unroll 8
      for (int p = 0; p < NP; ++p) {
        if constexpr (K == select_kind::l1) acc[r][p] = V::abs(V::sub(xb, y[p]));
        else if constexpr (K == select_kind::cosine) acc[r][p] = V::mul(V::sub(V::zero(), xb), y[p]);
        else acc[r][p] = V::fnmadd(xb, y[p], V::load(init + p * W));
      }
    }
  }
  for (std::size_t k = 1; k < d; ++k) {
    reg y[NP];
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) y[p] = V::load(yp + p * d * W + k * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const reg xb = V::set1(xs[r * d + k]);
#pragma GCC unroll 8
      for (int p = 0; p < NP; ++p) {
        if constexpr (K == select_kind::l1) acc[r][p] = V::add(acc[r][p], V::abs(V::sub(xb, y[p])));
        else acc[r][p] = V::fnmadd(xb, y[p], acc[r][p]);
      }
    }
  }
  if constexpr (K == select_kind::cosine) {
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      const reg s = V::load(yinv + p * W);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][p] = V::mul(acc[r][p], s);
    }
  }
  std::uint32_t any = 0;
  if constexpr (Clean) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      reg mn = acc[r][0];
#pragma GCC unroll 8
      for (int p = 1; p < NP; ++p) mn = V::min(mn, acc[r][p]);
      any |= V::not_ge(mn, V::set1(thr[r]));
    }
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < NP; ++p) any |= V::not_ge(acc[r][p], V::set1(thr[r]));
  }
  if (!any) return false;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) masks[r * NP + p] = V::not_ge(acc[r][p], V::set1(thr[r]));
  return true;
}
#endif

}  // namespace memsafe::host
