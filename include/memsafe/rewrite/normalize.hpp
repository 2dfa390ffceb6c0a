// memsafe/rewrite/normalize.hpp — type-to-type rules applied before planning.
//
// normalize(e, log) returns the rewritten expression (its type is the rewritten type) and records
// the rules that fired. The rules, each small and named (docs/design.md lists them):
//
//   transpose_pushdown   transpose(F(X, Y)) → F(Y, X) (every formula is symmetric);
//                        transpose(op(E)) → op(transpose(E)); transpose(op(A, B)) likewise;
//                        transpose(E + D) → transpose(E) + D
//   double_transpose     transpose(transpose(E)) → E
//   broadcast_sqdist     sum<2>((X[:,None,:] ∓ Y[None,:,:])²) → sqdist(X, ±Y)   (rewrite/broadcast.hpp)
//   constant_fold        −(−E) → E;  (−E)·a → E·(−a)   (exact; (E·a)·b and (E + a) + b are kept as
//                        written: folding a·b or a + b changes entries beyond rounding where the
//                        folded constant overflows or vanishes, e.g. (D·1e200)·1e200 with D = 0)
//   scalar_hoist         sum(c·E) → c·sum(E);  (c·E)·M → c·(E·M)   (rewrite/linear.hpp)
//   diag_in_product      (E + D)·M → E·M + D·M                     (rewrite/linear.hpp)
//   stationary_diagonal  diag(k(X, X)) → variance                  (rewrite/diagonal.hpp)
//   diagonal_of_map      diag(op(E)) → op(diag(E))                 (rewrite/diagonal.hpp)
//   diagonal_of_sum      diag(E + D) → diag(E) + D                 (rewrite/diagonal.hpp)
//   symmetric_product    A·Aᵀ → lower block triangle, mirrored     (rewrite/symmetric.hpp)
//   chain_order          cheapest order of a product chain          (rewrite/chain.hpp)
// The rules outside this file fire from lower/job.hpp, once per evaluation, into the same log.
//
// After normalisation no transpose node is left: every reduction runs over the column index j
// of a tree of pairwise leaves, guarded rewrites, diagonal terms and elementwise maps.
#pragma once
#include <type_traits>

#include "../expr/diag.hpp"
#include "../expr/lazy.hpp"
#include "../expr/tensor.hpp"
#include "broadcast.hpp"
#include "rules.hpp"

namespace memsafe::rewrite {

// ---- declarations (the rules recurse into each other) ------------------------------------------
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
pairwise<F, T, RX, RY, D> normalize(const pairwise<F, T, RX, RY, D>& e, rule_log&);
template <class Op, class E>
auto normalize(const unary_expr<Op, E>& e, rule_log&);
template <class Op, class A, class B>
auto normalize(const binary_expr<Op, A, B>& e, rule_log&);
template <class E>
auto normalize(const transpose_expr<E>& e, rule_log&);
template <class E>
auto normalize(const transpose_expr<transpose_expr<E>>& e, rule_log&);
template <std::size_t Ax, class E, bool Swap>
auto normalize(const tsum<Ax, E, Swap>& e, rule_log&);
template <class Fa, class Sl>
guarded<Fa, Sl> normalize(const guarded<Fa, Sl>& e, rule_log&);
template <class E, class Dg>
auto normalize(const diag_plus<E, Dg>& e, rule_log&);

template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
pairwise<F, T, RY, RX, D> transposed(const pairwise<F, T, RX, RY, D>& e, rule_log&);
template <class Op, class E>
auto transposed(const unary_expr<Op, E>& e, rule_log&);
template <class Op, class A, class B>
auto transposed(const binary_expr<Op, A, B>& e, rule_log&);
template <class E>
auto transposed(const transpose_expr<E>& e, rule_log&);
template <std::size_t Ax, class E, bool Swap>
tsum<Ax, E, !Swap> transposed(const tsum<Ax, E, Swap>& e, rule_log&);
template <class Fa, class Sl>
auto transposed(const guarded<Fa, Sl>& e, rule_log&);
template <class E, class Dg>
auto transposed(const diag_plus<E, Dg>& e, rule_log&);

// ---- normalize ---------------------------------------------------------------------------------
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
pairwise<F, T, RX, RY, D> normalize(const pairwise<F, T, RX, RY, D>& e, rule_log&) {
  return e;
}

namespace detail {
template <class Op>
inline constexpr bool is_mul_scalar = std::is_same_v<Op, op::mul_scalar<double>>;
}  // namespace detail

template <class Op, class E>
auto normalize(const unary_expr<Op, E>& e, rule_log& log) {
  auto c = normalize(e.e, log);
  using C = decltype(c);
  using Inner = typename unary_op_of<C>::type;
  if constexpr (std::is_same_v<Op, op::neg> && std::is_same_v<Inner, op::neg>) {
    log.add("constant_fold: -(-E) -> E");
    return c.e;
  } else if constexpr (detail::is_mul_scalar<Op> && std::is_same_v<Inner, op::neg>) {
    log.add("constant_fold: (-E)*a -> E*(-a)");
    return unary_expr<Op, decltype(c.e)>{{}, c.e, Op{-e.op.c}};
  } else {
    return unary_expr<Op, C>{{}, c, e.op};
  }
}
template <class Op, class A, class B>
auto normalize(const binary_expr<Op, A, B>& e, rule_log& log) {
  auto a = normalize(e.a, log);
  auto b = normalize(e.b, log);
  return binary_expr<Op, decltype(a), decltype(b)>{{}, a, b, e.op};
}
template <class E>
auto normalize(const transpose_expr<E>& e, rule_log& log) {
  return transposed(normalize(e.e, log), log);
}
template <std::size_t Ax, class E, bool Swap>
auto normalize(const tsum<Ax, E, Swap>& e, rule_log& log) {
  return broadcast_sqdist(e, log);
}
template <class Fa, class Sl>
guarded<Fa, Sl> normalize(const guarded<Fa, Sl>& e, rule_log&) {
  return e;
}
template <class E, class Dg>
auto normalize(const diag_plus<E, Dg>& e, rule_log& log) {
  auto c = normalize(e.e, log);
  return diag_plus<decltype(c), Dg>{{}, c, e.d};
}

// ---- transposed (input already normalised) ------------------------------------------------------
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
pairwise<F, T, RY, RX, D> transposed(const pairwise<F, T, RX, RY, D>& e, rule_log& log) {
  log.add("transpose_pushdown: transpose(F(X, Y)) -> F(Y, X)");
  return {{}, e.y, e.x, e.params};  // with y_sign = −1, Σ(x+y)² is symmetric too
}
template <class Op, class E>
auto transposed(const unary_expr<Op, E>& e, rule_log& log) {
  auto c = transposed(e.e, log);
  return unary_expr<Op, decltype(c)>{{}, c, e.op};
}
template <class Op, class A, class B>
auto transposed(const binary_expr<Op, A, B>& e, rule_log& log) {
  auto a = transposed(e.a, log);
  auto b = transposed(e.b, log);
  return binary_expr<Op, decltype(a), decltype(b)>{{}, a, b, e.op};
}
template <class E>
auto transposed(const transpose_expr<E>&, rule_log&) {
  static_assert(sizeof(E) == 0, "memsafe: internal: transposed() expects a normalised expression");
}
template <std::size_t Ax, class E, bool Swap>
tsum<Ax, E, !Swap> transposed(const tsum<Ax, E, Swap>& e, rule_log& log) {
  log.add("transpose_pushdown: transpose(sum<A>(T)) -> sum<A>(T) with swapped axes");
  return {{}, e.e};
}
template <class Fa, class Sl>
auto transposed(const guarded<Fa, Sl>& e, rule_log& log) {
  auto f = transposed(e.fast, log);
  auto s = transposed(e.slow, log);
  return guarded<decltype(f), decltype(s)>{{}, f, s, e.use_fast};
}
template <class E, class Dg>
auto transposed(const diag_plus<E, Dg>& e, rule_log& log) {
  auto c = transposed(e.e, log);
  return diag_plus<decltype(c), Dg>{{}, c, e.d};
}

/// normalize with a double transpose recognised before descending (transpose(transpose(E)) → E).
template <class E>
auto normalize(const transpose_expr<transpose_expr<E>>& e, rule_log& log) {
  log.add("double_transpose: transpose(transpose(E)) -> E");
  return normalize(e.e.e, log);
}

/// The type an expression has after normalisation.
template <class E>
using normalized_t = decltype(normalize(std::declval<const E&>(), std::declval<rule_log&>()));

}  // namespace memsafe::rewrite
