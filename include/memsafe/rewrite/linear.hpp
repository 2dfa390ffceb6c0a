// memsafe/rewrite/linear.hpp — the linear rules: scalar_hoist and diag_in_product.
//
//   scalar_hoist     sum(c·E) → c·sum(E);  sum(E/c) → sum(E)/c;  sum(−E) → −sum(E);
//                    (c·E)·M → c·(E·M)  (and the same for each factor of a lazy × lazy product)
//   diag_in_product  (E + D)·M → E·M + D·M;  sum(E + D) → sum(E) + D
//
// Both are type-to-type at compile time (split_linear strips the nodes and records them in a
// linear_post) and guarded at run time (split_is_exact): they change a result beyond rounding
// when the hoisted scale is 0, ±inf or NaN (0·inf entries become 0·Σ, an inf·0 on the diagonal
// disappears into inf·Σ), when nested factors pull in opposite directions (one magnifies, |c| > 1
// or a divisor |c| < 1, another shrinks: (E·10²⁰⁰)·10⁻²⁰⁰ overflows to inf entry by entry as
// written, and their product 1 would hide it), or when the dense factor M has a non-finite entry
// ((E + D)·M with M_j = inf: (E_jj + D_j)·inf vs E_jj·inf + D_j·inf). When the guard fails the
// original, unsplit expression is evaluated (a `guarded` node holds both forms). What the guard
// does not see: one factor c, or factors all one way, hoisted as c·ΣE, where an entry c·E_ij
// itself leaves T's range (docs/budget.md, "Rewrites keep IEEE results").
#pragma once
#include "../core/libm.hpp"
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../expr/diag.hpp"
#include "../expr/lazy.hpp"
#include "../expr/view.hpp"
#include "rules.hpp"

namespace memsafe::rewrite {

/// A diagonal split_linear stripped: a diag_plus node's constant or caller vector, read by its own
/// at<T>(i) (a value, not a std::function: <functional> costs every translation unit ≈ 0.04 s of
/// parsing).
template <class T>
struct stripped_diagonal {
  // memsafe::detail's: inside memsafe::rewrite a bare detail:: names memsafe::rewrite::detail once a
  // header has opened it (which made this header compile or not by the order of the includes).
  memsafe::detail::scalar_diagonal constant{0};
  std::optional<memsafe::detail::vector_diagonal<T>> vector;  ///< diag(v): v has the lazy matrix's value type
  stripped_diagonal(const memsafe::detail::scalar_diagonal& c) : constant(c) {}
  stripped_diagonal(const memsafe::detail::vector_diagonal<T>& v) : vector(v) {}
  T operator()(std::size_t i) const { return vector ? vector->template at<T>(i) : constant.template at<T>(i); }
};

/// What split_linear stripped: result = scale · (inner · M) + Σ coef_k · D_k · M (M = ones for sums).
template <class T>
struct linear_post {
  double scale = 1;
  /// Stripped factors that magnify (|c| > 1, a divisor |c| < 1) and that shrink: both, not hoisted.
  bool magnifies = false, shrinks = false;
  /// Record a factor c (divide: a divisor c) as the unsplit expression applies it.
  void scaled_by(double c, bool divide) {
    scale = divide ? scale / c : scale * c;
    const double a = libm::fabs(c);
    magnifies = magnifies || (divide ? !(a >= 1) : !(a <= 1));  // NaN: magnifies (and the scale is NaN)
    shrinks = shrinks || (divide ? a > 1 : a < 1);
  }
  std::vector<std::pair<double, stripped_diagonal<T>>> diags;
  bool trivial() const { return scale == 1 && diags.empty(); }
};

template <class E>
inline constexpr bool is_diag_plus = false;
template <class E, class Dg>
inline constexpr bool is_diag_plus<diag_plus<E, Dg>> = true;

/// The type split_linear<Diags> gives for E: E with the scalar maps (and, with Diags, the
/// diagonal terms) at its top removed.
template <bool Diags, class E>
struct split_linear_type {
  using type = E;
};
template <bool Diags, class E>
struct split_linear_type<Diags, unary_expr<op::mul_scalar<double>, E>> : split_linear_type<Diags, E> {};
template <bool Diags, class E>
struct split_linear_type<Diags, unary_expr<op::div_scalar<double>, E>> : split_linear_type<Diags, E> {};
template <bool Diags, class E>
struct split_linear_type<Diags, unary_expr<op::neg, E>> : split_linear_type<Diags, E> {};
template <class E, class Dg>
struct split_linear_type<true, diag_plus<E, Dg>> : split_linear_type<true, E> {};
template <bool Diags, class E>
using split_linear_t = typename split_linear_type<Diags, E>::type;

/// Strip scalar factors (and, with Diags, diagonal terms) off the top of a normalised
/// expression, recording them in `post` and the rules in `log` (`where`: "sum" or "product").
template <bool Diags, class E, class T>
split_linear_t<Diags, E> split_linear(const E& e, linear_post<T>& post, rule_log& log, const char* where) {
  using Op = typename unary_op_of<E>::type;
  if constexpr (std::is_same_v<Op, op::mul_scalar<double>>) {
    post.scaled_by(e.op.c, false);
    log.add(memsafe::detail::cat(memsafe::detail::msg{"scalar_hoist: ", where, "(c*E) -> c*", where, "(E)"}));
    return split_linear<Diags>(e.e, post, log, where);
  } else if constexpr (std::is_same_v<Op, op::div_scalar<double>>) {
    post.scaled_by(e.op.c, true);
    log.add(memsafe::detail::cat(memsafe::detail::msg{"scalar_hoist: ", where, "(E/c) -> ", where, "(E)/c"}));
    return split_linear<Diags>(e.e, post, log, where);
  } else if constexpr (std::is_same_v<Op, op::neg>) {
    post.scale = -post.scale;
    log.add(memsafe::detail::cat(memsafe::detail::msg{"scalar_hoist: ", where, "(-E) -> -", where, "(E)"}));
    return split_linear<Diags>(e.e, post, log, where);
  } else if constexpr (Diags && is_diag_plus<E>) {
    post.diags.emplace_back(post.scale, stripped_diagonal<T>(e.d));
    log.add(memsafe::detail::cat(memsafe::detail::msg{"diag_in_product: ", where, "(E + D) -> ", where, "(E) + ", where, "(D)"}));
    return split_linear<Diags>(e.e, post, log, where);
  } else {
    return e;
  }
}

/// The run-time guard of both rules: the split form equals the original up to rounding.
template <class T>
bool split_is_exact(const linear_post<T>& post, const matrix_view<const T>& rhs) {
  if (!(libm::isfinite(post.scale) && post.scale != 0) || (post.magnifies && post.shrinks)) return false;
  if (post.diags.empty() || rhs.data() == nullptr) return true;
  for (std::size_t i = 0; i < rhs.rows(); ++i)
    for (std::size_t q = 0; q < rhs.cols(); ++q)
      if (!libm::isfinite(rhs(i, q))) return false;
  return true;
}

/// The rule log's line when split_is_exact refuses the split of `where`.
MEMSAFE_COLD inline std::string guard_failed(const char* where) {
  return memsafe::detail::cat(memsafe::detail::msg{
      "scalar_hoist/diag_in_product not applied to ", where,
      ": a zero or non-finite scale, factors in opposite directions, or a non-finite dense factor (kept as written)"});
}

/// The rules applied with their guard: the split form when it is exact, else the original
/// (and then `post` is trivial). With nothing to split the type is E itself.
template <bool Diags, class E, class T>
auto split_linear_guarded(const E& e, linear_post<T>& post, const matrix_view<const T>& rhs, rule_log& log,
                          const char* where) {
  using S = split_linear_t<Diags, E>;
  if constexpr (std::is_same_v<S, E>) {
    return e;
  } else {
    rule_log fired;
    linear_post<T> p;
    S s = split_linear<Diags>(e, p, fired, where);
    const bool ok = split_is_exact(p, rhs);
    if (ok) {
      for (const auto& r : fired.fired) log.add(r);
      post = std::move(p);
    } else {
      log.add(guard_failed(where));
    }
    return guarded<S, E>{{}, s, e, ok};
  }
}

/// The guard of split_linear_guarded again, for a dense factor bound after lowering (a chain's
/// intermediate product): if the split is not exact for it, the original form is evaluated and
/// `post` becomes trivial. True if it switched.
template <class E, class T>
bool recheck_linear_guard(E& e, linear_post<T>& post, const matrix_view<const T>& rhs, rule_log& log,
                          const char* where) {
  if constexpr (requires { e.use_fast; e.slow; }) {
    if (e.use_fast && !split_is_exact(post, rhs)) {
      e.use_fast = false;
      post = {};
      log.add(guard_failed(where));
      return true;
    }
  }
  return false;
}

namespace detail {
template <class S, class E>
auto keep_or_guard(const S& s, const E& e, bool ok) {
  if constexpr (std::is_same_v<S, E>) return e;
  else return guarded<S, E>{{}, s, e, ok};
}
}  // namespace detail

/// scalar_hoist on both factors of a lazy × lazy product A·B: the scales of A and B are
/// combined into `post.scale`; the guard is the combined scale's.
template <class A, class B, class T>
auto split_product(const A& a, const B& b, linear_post<T>& post, rule_log& log) {
  rule_log fired;
  linear_post<T> p;
  auto sa = split_linear<false>(a, p, fired, "product");
  auto sb = split_linear<false>(b, p, fired, "product");
  const bool ok = split_is_exact(p, matrix_view<const T>{nullptr, 0, 0});
  if (ok) {
    for (const auto& r : fired.fired) log.add(r);
    post = std::move(p);
  } else {
    log.add("scalar_hoist not applied to product: a zero or non-finite scale, or factors in opposite directions (kept as written)");
  }
  return std::pair{detail::keep_or_guard(sa, a, ok), detail::keep_or_guard(sb, b, ok)};
}

/// The chosen form of a (possibly guarded) expression, for rules that inspect leaves.
template <class E>
const auto& chosen_fast(const E& e) {
  if constexpr (requires { e.use_fast; e.fast; }) return e.fast;
  else return e;
}

}  // namespace memsafe::rewrite
