// memsafe/rewrite/diagonal.hpp — the diagonal rules: diag(K) as a tree of diagonal nodes.
//
//   stationary_diagonal  diag(k(X, X)) → variance for rbf, matern12/32/52, rq; → 0 for sqdist,
//                        dist, l1 (guarded at run time: Y is X itself and every point finite,
//                        since a NaN or ±inf coordinate makes K(x, x) NaN as written)
//   diagonal_of_map      diag(op(E)) → op(diag(E))
//   diagonal_of_sum      diag(E + D) → diag(E) + D
//   (no rule)            diag(E) → E(i, i) entry by entry (diag_entries)
//
// diagonal(e, log) maps a normalised lazy matrix to its diagonal tree; the host backend
// evaluates the tree structurally (backend/host/diag.hpp), reading pairs only at diag_entries.
#pragma once
#include "../core/libm.hpp"
#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../expr/diag.hpp"
#include "../expr/formulas.hpp"
#include "../expr/lazy.hpp"
#include "linear.hpp"
#include "rules.hpp"

namespace memsafe::rewrite {

/// n diagonal entries all equal to `value` (the rule stationary_diagonal fired).
template <class T>
struct diag_constant {
  using value_type = T;
  static constexpr std::size_t static_rows = 0, static_cols = 0;
  T value;
  std::size_t n;
  std::size_t rows() const { return n; }
  std::size_t cols() const { return 1; }
  MEMSAFE_COLD std::string str() const { return "constant diagonal"; }
};
/// E(i, i) for every i, evaluated pair by pair (no rule knows the value).
template <class E>
struct diag_entries {
  using value_type = typename E::value_type;
  static constexpr std::size_t static_rows = 0, static_cols = 0;
  E e;
  std::size_t rows() const { return e.rows(); }
  std::size_t cols() const { return 1; }
  MEMSAFE_COLD std::string str() const { return memsafe::detail::cat(memsafe::detail::msg{"diag(", e.str(), ")"}); }
};
/// op applied to each entry of a diagonal (diagonal_of_map).
template <class Op, class D>
struct diag_map {
  using value_type = typename D::value_type;
  static constexpr std::size_t static_rows = 0, static_cols = 0;
  D d;
  Op op;
  std::size_t rows() const { return d.rows(); }
  std::size_t cols() const { return 1; }
  MEMSAFE_COLD std::string str() const { return memsafe::detail::cat(memsafe::detail::msg{"op(", d.str(), ")"}); }
};
/// A diagonal plus a diagonal term (diagonal_of_sum).
template <class D, class Dg>
struct diag_add {
  using value_type = typename D::value_type;
  static constexpr std::size_t static_rows = 0, static_cols = 0;
  D d;
  Dg term;
  std::size_t rows() const { return d.rows(); }
  std::size_t cols() const { return 1; }
  MEMSAFE_COLD std::string str() const { return memsafe::detail::cat(memsafe::detail::msg{d.str(), " + D"}); }
};

template <class F>
inline constexpr bool stationary_kernel =
    std::is_same_v<F, formula::rbf> || std::is_same_v<F, formula::matern12> || std::is_same_v<F, formula::matern32> ||
    std::is_same_v<F, formula::matern52> || std::is_same_v<F, formula::rq>;
template <class F>
inline constexpr bool zero_diagonal_distance =
    std::is_same_v<F, formula::sqdist> || std::is_same_v<F, formula::dist> || std::is_same_v<F, formula::l1>;

/// Guard of stationary_diagonal: Y is X itself (same view, y not negated) and every point finite
/// as the formula sees it — after its per-dimension scaling (ARD: x/ℓ_k, which overflows for x = 1e300,
/// ℓ_k = 1e−100, and the dense K_ii is then NaN from inf − inf).
template <class P>
bool same_finite_points(const P& e) {
  if (!(same_view(e.x, e.y) && e.params.y_sign == 1)) return false;
  for (std::size_t i = 0; i < e.x.rows(); ++i)
    for (std::size_t k = 0; k < e.x.cols(); ++k)
      if (!libm::isfinite(e.params.scale(k, e.x(i, k)))) return false;
  return true;
}

template <class E>
auto diagonal(const E& e, rule_log& log);

namespace detail {
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
auto diagonal_of_pairwise(const pairwise<F, T, RX, RY, D>& e, rule_log& log) {
  using P = pairwise<F, T, RX, RY, D>;
  if constexpr (stationary_kernel<F> || zero_diagonal_distance<F>) {
    const bool ok = same_finite_points(e);
    if (ok)
      log.add(memsafe::detail::cat(memsafe::detail::msg{"stationary_diagonal: diag(", F::name, "(X, X)) -> ",
                                    stationary_kernel<F> ? "variance" : "0", ", no pairs evaluated"}));
    const T v = stationary_kernel<F> ? e.params.variance : T(0);
    return guarded<diag_constant<T>, diag_entries<P>>{{}, {v, e.rows()}, {e}, ok};
  } else {
    return diag_entries<P>{e};
  }
}
}  // namespace detail

/// The diagonal tree of a normalised lazy matrix (rules above; `log` records those that fired).
template <class E>
auto diagonal(const E& e, rule_log& log) {
  if constexpr (requires { typename E::formula_type; }) {
    return detail::diagonal_of_pairwise(e, log);
  } else if constexpr (requires { e.use_fast; e.fast; }) {
    rule_log unchosen;  // the rules of the form the guard did not choose are not reported
    auto f = diagonal(e.fast, e.use_fast ? log : unchosen);
    auto s = diagonal(e.slow, e.use_fast ? unchosen : log);
    return guarded<decltype(f), decltype(s)>{{}, f, s, e.use_fast};
  } else if constexpr (is_diag_plus<E>) {
    log.add("diagonal_of_sum: diag(E + D) -> diag(E) + D");
    auto d = diagonal(e.e, log);
    return diag_add<decltype(d), std::remove_cvref_t<decltype(e.d)>>{d, e.d};
  } else if constexpr (!std::is_void_v<typename unary_op_of<E>::type>) {
    log.add("diagonal_of_map: diag(op(E)) -> op(diag(E))");
    auto d = diagonal(e.e, log);
    return diag_map<std::remove_cvref_t<decltype(e.op)>, decltype(d)>{d, e.op};
  } else {
    return diag_entries<E>{e};
  }
}

/// The type diagonal() gives for E.
template <class E>
using diagonal_t = decltype(diagonal(std::declval<const E&>(), std::declval<rule_log&>()));

}  // namespace memsafe::rewrite
