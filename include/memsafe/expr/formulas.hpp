// memsafe/expr/formulas.hpp — pairwise formulas F(x_i, y_j) as stateless named types.
//
// A formula is: a *base* accumulated over the feature dimension (squared difference, absolute
// difference, product, or the cosine of the angle), with an optional per-dimension scale applied
// to both points (ARD), then an elementwise *finalise* on the accumulated value (exp for RBF, ...).
// The base decides the inner loop; the finalise runs once per pair on a whole tile row, so both
// vectorise. The types are what later rewrite rules match on.
#pragma once
#include "../core/libm.hpp"
#include <cstddef>

#include "../core/config.hpp"
#include "../core/math.hpp"

namespace memsafe {

namespace detail {

/// How a formula accumulates the coordinates of a pair (the inner loop it selects).
enum class base_kind { sqeuclid, l1, dot, cosine };

/// How the optional per-dimension parameter scales each coordinate before the base.
enum class per_dim_kind {
  none,
  inverse,  ///< x_k / p_k   (ARD lengthscales)
  sqrt      ///< x_k * sqrt(p_k)  (per-dimension variances of the linear kernel)
};

/// Run-time parameters of a pairwise formula.
template <class T>
struct formula_params {
  T variance = 1;
  T alpha = 1;         ///< rational-quadratic shape
  T acc_scale = 1;     ///< multiplies the accumulated base (1/ℓ² for a scalar lengthscale)
  T y_sign = 1;        ///< −1: the formula sees −y (Σ(x+y)² is sqdist(x, −y)); set by rewrite rules
  const T* per_dim = nullptr;
  per_dim_kind kind = per_dim_kind::none;
  T scale(std::size_t k, T v) const {
    switch (kind) {
      case per_dim_kind::inverse: return v / per_dim[k];
      case per_dim_kind::sqrt: return v * libm::sqrt(per_dim[k]);
      default: return v;
    }
  }
};

/// The finalise of a formula with roots (F::root_scale ≠ 0): the roots √(root_factor(p)·u) in
/// place, then F::after_root; root_factor is root_scale·acc_scale unless F has its own.
template <class F>
struct rooted {
  static constexpr bool has_finalise = true;
  template <class T>
  MEMSAFE_HD static T root_factor(const formula_params<T>& p) {
    return T(F::root_scale) * p.acc_scale;
  }
  template <class T>
  MEMSAFE_HD static void finalise(T* r, std::size_t n, const formula_params<T>& p) {
    math::sqrt_n(r, F::root_factor(p), r, n);
    F::after_root(r, n, p);
  }
};

}  // namespace detail

namespace formula {

// ROOT ≠ 0: the finalise starts with the root a = √(root_factor(p)·u) of the accumulated u
// (root_factor = ROOT·acc_scale for the Matérns), taken in place by math::sqrt_n, and
// after_root(a, n, p) is the rest of it — so a fused kernel can take the roots with its own
// instruction set's vector square root (sum_kernel.inc) and then call after_root.
#define MEMSAFE_FORMULA_HEAD(NAME, BASE, ROOT)            \
  static constexpr const char* name = NAME;              \
  static constexpr detail::base_kind base = detail::base_kind::BASE; \
  static constexpr int root_scale = ROOT;

/// ‖x − y‖²
struct sqdist {
  MEMSAFE_FORMULA_HEAD("sqdist", sqeuclid, 0)
  static constexpr bool has_finalise = false;
  template <class T>
  MEMSAFE_HD static void finalise(T*, std::size_t, const detail::formula_params<T>&) {}
};
/// ‖x − y‖
struct dist : detail::rooted<dist> {
  MEMSAFE_FORMULA_HEAD("dist", sqeuclid, 1)
  template <class T>
  MEMSAFE_HD static T root_factor(const detail::formula_params<T>&) {
    return T(1);
  }
  template <class T>
  MEMSAFE_HD static void after_root(T*, std::size_t, const detail::formula_params<T>&) {}
};
/// Σ |x_k − y_k|
struct l1 {
  MEMSAFE_FORMULA_HEAD("l1", l1, 0)
  static constexpr bool has_finalise = false;
  template <class T>
  MEMSAFE_HD static void finalise(T*, std::size_t, const detail::formula_params<T>&) {}
};
/// x · y
struct dot {
  MEMSAFE_FORMULA_HEAD("dot", dot, 0)
  static constexpr bool has_finalise = false;
  template <class T>
  MEMSAFE_HD static void finalise(T*, std::size_t, const detail::formula_params<T>&) {}
};
/// 1 − x·y / (‖x‖‖y‖); a zero vector has similarity 0 (distance 1) with everything.
struct cosine {
  MEMSAFE_FORMULA_HEAD("cosine", cosine, 0)
  static constexpr bool has_finalise = false;
  template <class T>
  MEMSAFE_HD static void finalise(T*, std::size_t, const detail::formula_params<T>&) {}
};
/// σ² exp(−r²/2), r² = Σ ((x_k − y_k)/ℓ_k)²
struct rbf {
  MEMSAFE_FORMULA_HEAD("rbf", sqeuclid, 0)
  static constexpr bool has_finalise = true;
  template <class T>
  MEMSAFE_HD static void finalise(T* r, std::size_t n, const detail::formula_params<T>& p) {
    const T s = T(-0.5) * p.acc_scale, v = p.variance;
    for (std::size_t j = 0; j < n; ++j) r[j] = v * math::exp(s * r[j]);
  }
};
/// σ² exp(−r)
struct matern12 : detail::rooted<matern12> {
  MEMSAFE_FORMULA_HEAD("matern12", sqeuclid, 1)
  template <class T>
  MEMSAFE_HD static void after_root(T* r, std::size_t n, const detail::formula_params<T>& p) {
    const T v = p.variance;
    for (std::size_t j = 0; j < n; ++j) r[j] = v * math::exp(-r[j]);
  }
};
/// σ² (1 + √3 r) exp(−√3 r)
struct matern32 : detail::rooted<matern32> {
  MEMSAFE_FORMULA_HEAD("matern32", sqeuclid, 3)
  template <class T>
  MEMSAFE_HD static void after_root(T* r, std::size_t n, const detail::formula_params<T>& p) {
    const T v = p.variance;
    for (std::size_t j = 0; j < n; ++j) {
      const T a = r[j];
      // (1 + a)·e^(−a) ≤ 1 first, so σ² times it cannot overflow; at an infinite distance the
      // kernel is 0, not (1 + inf)·0 = NaN; NaN stays NaN.
      r[j] = math::detail::select(a == math::detail::inf_v<T>(), T(0), v * ((T(1) + a) * math::exp(-a)));
    }
  }
};
/// σ² (1 + √5 r + 5r²/3) exp(−√5 r)
struct matern52 : detail::rooted<matern52> {
  MEMSAFE_FORMULA_HEAD("matern52", sqeuclid, 5)
  template <class T>
  MEMSAFE_HD static void after_root(T* r, std::size_t n, const detail::formula_params<T>& p) {
    const T v = p.variance;
    for (std::size_t j = 0; j < n; ++j) {
      const T a = r[j];  // a² below is a·a (not 5r² itself: the roots are taken in place)
      r[j] = math::detail::select(a == math::detail::inf_v<T>(), T(0),
                                  v * ((T(1) + a + a * a * T(1.0 / 3.0)) * math::exp(-a)));
    }
  }
};
/// σ² (1 + r²/(2α))^(−α)
struct rq {
  MEMSAFE_FORMULA_HEAD("rq", sqeuclid, 0)
  static constexpr bool has_finalise = true;
  template <class T>
  MEMSAFE_HD static void finalise(T* r, std::size_t n, const detail::formula_params<T>& p) {
    // log1p: log(1 + s·r²) would round 1 + s·r² first and multiply that error by α (α = 10⁵ in
    // float: 7e-4 relative; 10¹⁷ in double: σ² itself)
    const T s = p.acc_scale / (T(2) * p.alpha), v = p.variance, na = -p.alpha;
    for (std::size_t j = 0; j < n; ++j) r[j] = v * math::exp(na * math::log1p(s * r[j]));
  }
};
/// σ² x·y (per-dimension variances through ard())
struct linear {
  MEMSAFE_FORMULA_HEAD("linear", dot, 0)
  static constexpr bool has_finalise = true;
  template <class T>
  MEMSAFE_HD static void finalise(T* r, std::size_t n, const detail::formula_params<T>& p) {
    const T v = p.variance;
    for (std::size_t j = 0; j < n; ++j) r[j] = v * r[j];
  }
};
#undef MEMSAFE_FORMULA_HEAD

}  // namespace formula
}  // namespace memsafe
