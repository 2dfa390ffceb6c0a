// memsafe/expr/derivatives.hpp — derivatives of the pairwise formulas and of the elementwise maps,
// known at compile time (the gradients' capture-stage knowledge; docs/design.md, "Gradients").
//
// A formula's derivative is a specialisation of `derivative<F>`:
//   kind == stationary:  F = σ²·g(u), u = acc_scale · Σ_k (x̃_k − s·ỹ_k)²  (x̃ the per-dimension
//                        scaled coordinates, s = y_sign); at(u, p, f, dfdu) gives F and ∂F/∂u,
//                        dalpha(u, p, f) gives ∂F/∂α (rq). A formula of a = √(root_scale·u)
//                        (root_scale ≠ 0: dist, the Matérns) also has at_root(u, a, p, f, dfdu),
//                        so that a loop over a row can take its roots together (math::sqrt_n, which
//                        vectorises without -fno-math-errno; backend/host/grad_kernel.inc).
//   kind == dot:         F = Σ_k w_k x_k · s·y_k with w_k = σ² (scalar variance), the per-dimension
//                        variances (ard), or 1 (dot): linear in each side.
// `has_variance`, `has_lengthscale`, `has_alpha` say which parameters it has. Formulas without a
// derivative (l1, cosine) leave `defined` false; require_derivative<F>() turns that into a
// static_assert naming the formula.
//
// A map's derivative is `map_derivative<Op>`: `affine` (the derivative is a constant, so sums of
// lazy matrices may sit under it) and der(op, v) = op′(v).
#pragma once
#include <cstddef>

#include "../core/config.hpp"
#include "../core/math.hpp"
#include "formulas.hpp"
#include "lazy.hpp"

namespace memsafe {

enum class derivative_kind { stationary, dot };

/// No derivative (the primary template): `defined` is false; the rest only keeps the compiler
/// quiet after require_derivative's static_assert has named the formula.
template <class F>
struct derivative {
  static constexpr bool defined = false;
  static constexpr derivative_kind kind = derivative_kind::stationary;
  static constexpr bool has_variance = false, has_lengthscale = false, has_alpha = false;
  static constexpr int root_scale = 0;
  template <class T>
  static void at(T, const detail::formula_params<T>&, T& f, T& dfdu) {
    f = dfdu = T(0);
  }
  template <class T>
  static T dalpha(T, const detail::formula_params<T>&, T) {
    return T(0);
  }
};

namespace detail {
template <class T>
MEMSAFE_HD inline T dsel(bool c, T a, T b) {
  return math::detail::select(c, a, b);
}
/// Common head of the stationary kernels' derivatives.
struct stationary_kernel_head {
  static constexpr bool defined = true;
  static constexpr derivative_kind kind = derivative_kind::stationary;
  static constexpr bool has_variance = true, has_lengthscale = true, has_alpha = false;
  static constexpr int root_scale = 0;
  template <class T>
  static T dalpha(T, const detail::formula_params<T>&, T) {
    return T(0);
  }
};
struct stationary_distance_head {
  static constexpr bool defined = true;
  static constexpr derivative_kind kind = derivative_kind::stationary;
  static constexpr bool has_variance = false, has_lengthscale = false, has_alpha = false;
  static constexpr int root_scale = 0;
  template <class T>
  static T dalpha(T, const detail::formula_params<T>&, T) {
    return T(0);
  }
};
/// at() of a formula of a = √(root_scale · u): its at_root at that a (dist and the Matérn
/// kernels; the fused gradient kernels call at_root with the root they already hold).
template <class D>
struct root_at {
  template <class T>
  static void at(T u, const detail::formula_params<T>& p, T& f, T& dfdu) {
    D::at_root(u, math::sqrt(T(D::root_scale) * u), p, f, dfdu);
  }
};
}  // namespace detail

/// ‖x − y‖²: F = u, ∂F/∂u = 1.
template <>
struct derivative<formula::sqdist> : detail::stationary_distance_head {
  template <class T>
  static void at(T u, const detail::formula_params<T>&, T& f, T& dfdu) {
    f = u;
    dfdu = T(1);
  }
};
/// ‖x − y‖: F = √u, ∂F/∂u = 1/(2√u); at u = 0 (coincident points) the derivative does not
/// exist and 0 is used (the subgradient of smallest norm).
template <>
struct derivative<formula::dist> : detail::stationary_distance_head, detail::root_at<derivative<formula::dist>> {
  static constexpr int root_scale = formula::dist::root_scale;
  template <class T>
  static void at_root(T u, T a, const detail::formula_params<T>&, T& f, T& dfdu) {
    f = a;
    dfdu = detail::dsel(u == T(0), T(0), T(0.5) / a);
  }
};
/// σ² exp(−u/2): ∂F/∂u = −F/2.
template <>
struct derivative<formula::rbf> : detail::stationary_kernel_head {
  template <class T>
  static void at(T u, const detail::formula_params<T>& p, T& f, T& dfdu) {
    f = p.variance * math::exp(T(-0.5) * u);
    dfdu = T(-0.5) * f;
  }
};
/// σ² exp(−a), a = √u: ∂F/∂u = −F/(2a); at u = 0 the derivative does not exist (the kernel has a
/// cusp) and 0 is used, as GPflow's clamped distance gives; at an infinite distance 0.
template <>
struct derivative<formula::matern12> : detail::stationary_kernel_head, detail::root_at<derivative<formula::matern12>> {
  static constexpr int root_scale = formula::matern12::root_scale;
  template <class T>
  static void at_root(T u, T a, const detail::formula_params<T>& p, T& f, T& dfdu) {
    f = p.variance * math::exp(-a);
    dfdu = detail::dsel(u == T(0), T(0), T(-0.5) * f / a);
  }
};
/// σ² (1 + a) exp(−a), a = √(3u): ∂F/∂u = −(3/2) σ² exp(−a) (finite at u = 0).
template <>
struct derivative<formula::matern32> : detail::stationary_kernel_head, detail::root_at<derivative<formula::matern32>> {
  static constexpr int root_scale = formula::matern32::root_scale;
  template <class T>
  static void at_root(T, T a, const detail::formula_params<T>& p, T& f, T& dfdu) {
    const T e = math::exp(-a);
    f = detail::dsel(a == math::detail::inf_v<T>(), T(0), p.variance * ((T(1) + a) * e));
    dfdu = T(-1.5) * p.variance * e;
  }
};
/// σ² (1 + a + a²/3) exp(−a), a = √(5u): ∂F/∂u = −(5/6) σ² (1 + a) exp(−a) (finite at u = 0).
template <>
struct derivative<formula::matern52> : detail::stationary_kernel_head, detail::root_at<derivative<formula::matern52>> {
  static constexpr int root_scale = formula::matern52::root_scale;
  template <class T>
  static void at_root(T u, T a, const detail::formula_params<T>& p, T& f, T& dfdu) {
    const T a2 = T(5) * u, e = math::exp(-a);
    const bool inf = a == math::detail::inf_v<T>();
    f = detail::dsel(inf, T(0), p.variance * ((T(1) + a + a2 * T(1.0 / 3.0)) * e));
    dfdu = detail::dsel(inf, T(0), T(-5.0 / 6.0) * p.variance * ((T(1) + a) * e));
  }
};
/// σ² t^(−α), t = 1 + w, w = u/(2α): ∂F/∂u = −F/(2t); ∂F/∂α = F·(w/t − log t) (= F·(1 − 1/t − log t)),
/// with log t = log1p(w), as the forward formula. For small w (close points or a large α) w/t and
/// log t agree to ≈ w²/2 and their difference loses ≈ log₂(2/w) bits (float: 1.5e-3 relative at
/// α = 10⁵): below w = 1/2 it is the series in z = w/(2 + w) (w = 2z/(1 − z), log t = 2 atanh z),
/// −2z²/(1 + z) − 2z³ Σₖ z²ᵏ/(2k + 3), whose terms have one sign; truncated after K terms,
/// z² ≤ 1/25, it is within a few ulps, as is the difference from w = 1/2 up.
template <>
struct derivative<formula::rq> : detail::stationary_kernel_head {
  static constexpr bool has_alpha = true;
  template <class T>
  static void at(T u, const detail::formula_params<T>& p, T& f, T& dfdu) {
    const T w = u / (T(2) * p.alpha);
    f = p.variance * math::exp(-p.alpha * math::log1p(w));
    dfdu = T(-0.5) * f / (T(1) + w);
  }
  template <class T>
  static T dalpha(T u, const detail::formula_params<T>& p, T f) {
    const T w = u / (T(2) * p.alpha);
    return detail::dsel(f == T(0), T(0), f * dlog_t(w));
  }
  /// w/(1 + w) − log1p(w), to a few ulps for every w ≥ 0 (see above).
  template <class T>
  static T dlog_t(T w) {
    constexpr int K = sizeof(T) == 4 ? 4 : 10;  // z²ᴷ ≤ 25⁻ᴷ below the type's rounding
    const T z = w / (T(2) + w), y = z * z;
    T s = T(1) / T(2 * K + 3);
    for (int k = K - 1; k >= 0; --k) s = s * y + T(1) / T(2 * k + 3);
    const T series = T(-2) * y / (T(1) + z) - T(2) * z * y * s;
    return detail::dsel(w < T(0.5), series, w / (T(1) + w) - math::log1p(w));
  }
};
/// x · y: linear in each side, no parameters.
template <>
struct derivative<formula::dot> {
  static constexpr bool defined = true;
  static constexpr derivative_kind kind = derivative_kind::dot;
  static constexpr bool has_variance = false, has_lengthscale = false, has_alpha = false;
};
/// σ² x · y, or Σ_k σ_k² x_k y_k with per-dimension variances.
template <>
struct derivative<formula::linear> {
  static constexpr bool defined = true;
  static constexpr derivative_kind kind = derivative_kind::dot;
  static constexpr bool has_variance = true, has_lengthscale = false, has_alpha = false;
};

/// A static_assert naming F when F has no derivative; the gradient machinery calls it for every
/// pairwise leaf it differentiates.
template <class F>
constexpr void require_derivative() {
  if constexpr (std::is_same_v<F, formula::l1>)
    static_assert(derivative<F>::defined,
                  "memsafe: grad: the formula l1 (sum of |x_k - y_k|) has no derivative yet "
                  "(it is not differentiable where x_k = y_k); differentiate sqdist, dist, a kernel or dot instead");
  else if constexpr (std::is_same_v<F, formula::cosine>)
    static_assert(derivative<F>::defined,
                  "memsafe: grad: the formula cosine (1 - cos angle) has no derivative yet; "
                  "differentiate sqdist, dist, a kernel or dot instead");
  else
    static_assert(derivative<F>::defined,
                  "memsafe: grad: this pairwise formula has no derivative (specialise memsafe::derivative<F>)");
}

// ---- elementwise maps ----------------------------------------------------------------------------

/// The primary template: no derivative.
template <class Op>
struct map_derivative {
  static constexpr bool defined = false;
};
#define MEMSAFE_MAP_DERIVATIVE(OP, AFFINE, EXPR)                        \
  template <>                                                           \
  struct map_derivative<OP> {                                           \
    static constexpr bool defined = true;                               \
    static constexpr bool affine = AFFINE;                              \
    template <class T>                                                  \
    static T der([[maybe_unused]] const OP& op, [[maybe_unused]] T v) { \
      return EXPR;                                                      \
    }                                                                   \
  };
MEMSAFE_MAP_DERIVATIVE(op::neg, true, T(-1))
MEMSAFE_MAP_DERIVATIVE(op::mul_scalar<double>, true, T(op.c))
MEMSAFE_MAP_DERIVATIVE(op::div_scalar<double>, true, T(1) / T(op.c))
MEMSAFE_MAP_DERIVATIVE(op::add_scalar<double>, true, T(1))
MEMSAFE_MAP_DERIVATIVE(op::sub_from_scalar<double>, true, T(-1))
MEMSAFE_MAP_DERIVATIVE(op::exp, false, math::exp(v))
MEMSAFE_MAP_DERIVATIVE(op::log, false, T(1) / v)
MEMSAFE_MAP_DERIVATIVE(op::sqrt, false, T(0.5) / math::sqrt(v))
MEMSAFE_MAP_DERIVATIVE(op::square, false, T(2) * v)
MEMSAFE_MAP_DERIVATIVE(op::inv, false, T(-1) / (v * v))
MEMSAFE_MAP_DERIVATIVE(op::div_into_scalar<double>, false, -T(op.c) / (v * v))
MEMSAFE_MAP_DERIVATIVE(op::pow_scalar<double>, false, T(op.c) * math::pow(v, T(op.c) - T(1)))
MEMSAFE_MAP_DERIVATIVE(op::abs, false, (v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0))))
MEMSAFE_MAP_DERIVATIVE(op::clamp_min<double>, false, (v < T(op.c) ? T(0) : T(1)))
MEMSAFE_MAP_DERIVATIVE(op::clamp_max<double>, false, (v > T(op.c) ? T(0) : T(1)))
#undef MEMSAFE_MAP_DERIVATIVE

}  // namespace memsafe
