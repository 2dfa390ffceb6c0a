// memsafe/rewrite/normalize.hpp — type-to-type rules applied before planning.
//
// Rule `transpose_pushdown`: every formula memsafe offers is symmetric (F(x, y) = F(y, x)), so
//   transpose(F(X, Y))        → F(Y, X)
//   transpose(op(E))          → op(transpose(E))
//   transpose(op(A, B))       → op(transpose(A), transpose(B))
//   transpose(transpose(E))   → E
// After normalisation no transpose node is left: every reduction runs over the column index j
// of a tree of pairwise leaves and elementwise maps, which is what the executor tiles.
#pragma once
#include "../expr/lazy.hpp"

namespace memsafe::rewrite {

template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
pairwise<F, T, RY, RX, D> transposed(const pairwise<F, T, RX, RY, D>& e) {
  return {{}, e.y, e.x, e.params};
}
template <class Op, class E>
auto transposed(const unary_expr<Op, E>& e);
template <class Op, class A, class B>
auto transposed(const binary_expr<Op, A, B>& e);
template <class E>
auto transposed(const transpose_expr<E>& e);

template <class Op, class E>
auto normalize(const unary_expr<Op, E>& e);
template <class Op, class A, class B>
auto normalize(const binary_expr<Op, A, B>& e);
template <class E>
auto normalize(const transpose_expr<E>& e);

template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
pairwise<F, T, RX, RY, D> normalize(const pairwise<F, T, RX, RY, D>& e) {
  return e;
}
template <class Op, class E>
auto normalize(const unary_expr<Op, E>& e) {
  auto c = normalize(e.e);
  return unary_expr<Op, decltype(c)>{{}, c, e.op};
}
template <class Op, class A, class B>
auto normalize(const binary_expr<Op, A, B>& e) {
  auto a = normalize(e.a);
  auto b = normalize(e.b);
  return binary_expr<Op, decltype(a), decltype(b)>{{}, a, b, e.op};
}
template <class E>
auto normalize(const transpose_expr<E>& e) {
  return transposed(normalize(e.e));
}

template <class Op, class E>
auto transposed(const unary_expr<Op, E>& e) {
  auto c = transposed(e.e);
  return unary_expr<Op, decltype(c)>{{}, c, e.op};
}
template <class Op, class A, class B>
auto transposed(const binary_expr<Op, A, B>& e) {
  auto a = transposed(e.a);
  auto b = transposed(e.b);
  return binary_expr<Op, decltype(a), decltype(b)>{{}, a, b, e.op};
}
template <class E>
auto transposed(const transpose_expr<E>& e) {
  return normalize(e.e);
}

/// The type an expression has after normalisation.
template <class E>
using normalized_t = decltype(normalize(std::declval<const E&>()));

}  // namespace memsafe::rewrite
