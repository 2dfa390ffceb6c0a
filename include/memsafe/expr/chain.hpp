// memsafe/expr/chain.hpp — products of up to 32 factors: dense matrices, vectors, lazy matrices.
//
// `A * B * v`, `K * (transpose(K) * v)`, `(K * transpose(K)) * v` are captured as one flat chain
// of factors; the evaluation order is chosen at evaluation time from the run-time extents
// (rewrite/chain.hpp: cost in flops and temporary bytes against the budget). `pin(x)` is a barrier:
// the pinned product is evaluated on its own first and enters the chain as a dense factor.
#pragma once
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>

#include "../core/error.hpp"
#include "lazy.hpp"
#include "reductions.hpp"
#include "view.hpp"

namespace memsafe {

namespace detail {
/// A dense factor over caller memory (any strides), with static extents when known.
template <class T, std::size_t R = dyn, std::size_t C = dyn>
struct dense_factor {
  using value_type = T;
  static constexpr std::size_t static_rows = R, static_cols = C;
  matrix_view<const T> m;
  std::size_t rows() const { return m.rows(); }
  std::size_t cols() const { return m.cols(); }
  MEMSAFE_COLD std::string str() const { return "M[" + m.shape() + "]"; }
};

/// A product evaluated on its own before the chain around it (an evaluation barrier).
template <class X>
struct pinned {
  using value_type = typename X::value_type;
  static constexpr std::size_t static_rows = dyn, static_cols = dyn;
  X x;
  std::size_t rows() const { return x.rows(); }
  std::size_t cols() const { return x.cols(); }
  MEMSAFE_COLD std::string str() const { return "pin(" + x.str() + ")"; }
};

/// The most factors a product chain takes.
inline constexpr std::size_t max_chain_factors = 32;

/// F1 · F2 · … · FN.
template <class... Fs>
struct chain_expr : evaluable_tag {
  static_assert(sizeof...(Fs) >= 2, "memsafe: internal: a chain has at least two factors");
  // The planner's code is instantiated per kind of step (lower/chain.hpp: at most 4N + 1 kinds), so a
  // chain compiles in time about linear in N (g++ -O2, one chain in a translation unit: 9 factors
  // ≈ 5 s, 32 ≈ 11 s); the limit bounds that and says so, rather than a deep template error.
  static_assert(sizeof...(Fs) <= max_chain_factors,
                "memsafe: a product chain has at most 32 factors; "
                "evaluate part of it first with memsafe::pin(...), which enters the chain as one factor");
  using value_type = typename std::tuple_element_t<0, std::tuple<Fs...>>::value_type;
  static constexpr bool has_indices = false;
  static constexpr std::size_t size = sizeof...(Fs);
  std::tuple<Fs...> f;
  bool vector_out = false;
  std::size_t rows() const { return std::get<0>(f).rows(); }
  std::size_t cols() const { return std::get<size - 1>(f).cols(); }
  MEMSAFE_COLD std::string str() const {
    std::string s;
    std::apply([&](const auto&... x) { ((s += (s.empty() ? "" : " * ") + x.str()), ...); }, f);
    return s;
  }
};

template <class>
struct is_chain_node : std::false_type {};
template <class... Fs>
struct is_chain_node<chain_expr<Fs...>> : std::true_type {};
template <class E, bool L>
struct is_chain_node<matmul_expr<E, L>> : std::true_type {};
template <class A, class B>
struct is_chain_node<lazy_product_expr<A, B>> : std::true_type {};
template <class X>
struct is_chain_node<pinned<X>> : std::true_type {};

template <class X>
concept chain_node = is_chain_node<std::remove_cvref_t<X>>::value;
template <class X>
concept chain_operand = chain_node<X> || lazy_matrix<X> || is_matrix_view<std::remove_cvref_t<X>>::value ||
                        is_vector_view<std::remove_cvref_t<X>>::value;
}  // namespace detail

/// Pin the evaluation order: `x` is evaluated as a whole before any product it is part of.
template <class X>
  requires detail::chain_node<X>
detail::pinned<X> pin(const X& x) {
  return {x};
}
/// pin(pin(x)) is pin(x).
template <class X>
detail::pinned<X> pin(const detail::pinned<X>& p) {
  return p;
}

namespace detail {
template <class T, std::size_t R, std::size_t C>
auto factors(const matrix_view<T, R, C>& m) {
  return std::tuple<dense_factor<std::remove_cv_t<T>, R, C>>{{matrix_view<const std::remove_cv_t<T>>(m)}};
}
template <class T, std::size_t N>
auto factors(const vector_view<T, N>& v) {
  return std::tuple<dense_factor<std::remove_cv_t<T>, N, 1>>{{matrix_view<const std::remove_cv_t<T>>(v.as_column())}};
}
template <lazy_matrix E>
auto factors(const E& e) {
  return std::tuple<E>{e};
}
template <class E, bool L>
auto factors(const matmul_expr<E, L>& x) {
  using T = typename E::value_type;
  if constexpr (L)  // M·K and vᵀ·K were captured as (Kᵀ Mᵀ)ᵀ: factors M, K
    return std::tuple<dense_factor<T>, transpose_expr<E>>{{x.rhs.t()}, transpose_expr<E>{{}, x.e}};
  else
    return std::tuple<E, dense_factor<T>>{x.e, {x.rhs}};
}
template <class A, class B>
auto factors(const lazy_product_expr<A, B>& x) {
  return std::tuple<A, B>{x.a, x.b};
}
template <class... Fs>
auto factors(const chain_expr<Fs...>& c) {
  return c.f;
}
template <class X>
auto factors(const pinned<X>& p) {
  return std::tuple<pinned<X>>{p};
}

template <class X>
bool vector_result(const X& x) {
  if constexpr (is_vector_view<std::remove_cvref_t<X>>::value) return true;
  else if constexpr (requires { x.vector_out; }) return x.vector_out;
  else return false;
}

template <class L, class R>
auto make_chain(const L& l, const R& r) {
  auto fl = factors(l);
  auto fr = factors(r);
  using FL = std::tuple_element_t<std::tuple_size_v<decltype(fl)> - 1, decltype(fl)>;
  using FR = std::tuple_element_t<0, decltype(fr)>;
  static_assert(std::is_same_v<typename FL::value_type, typename FR::value_type>,
                "memsafe: product chain: factors of different value types (both float or both double)");
  static_assert(extents_compatible<FL::static_cols, FR::static_rows>,
                "memsafe: product chain: inner extents differ (the left factor's static column count is not the "
                "right factor's static row count)");
  const auto& a = std::get<std::tuple_size_v<decltype(fl)> - 1>(fl);
  const auto& b = std::get<0>(fr);
  if (a.cols() != b.rows())
    throw shape_error("memsafe: product chain: " + a.str() + " is " + shape_str(a.rows(), a.cols()) + " but " +
                      b.str() + " is " + shape_str(b.rows(), b.cols()) + ": inner extents differ");
  auto all = std::tuple_cat(fl, fr);
  return std::apply(
      [&](const auto&... x) {
        return chain_expr<std::remove_cvref_t<decltype(x)>...>{{}, {x...}, vector_result(r)};
      },
      all);
}
}  // namespace detail

template <class L, class R>
  requires detail::chain_node<L> && detail::chain_operand<R>
auto operator*(const L& l, const R& r) {
  return detail::make_chain(l, r);
}
template <class L, class R>
  requires(detail::chain_operand<L> && !detail::chain_node<L>) && detail::chain_node<R>
auto operator*(const L& l, const R& r) {
  return detail::make_chain(l, r);
}
/// Dense × dense and dense × vector start a chain (evaluated with BLAS where available).
template <class T1, std::size_t R1, std::size_t C1, class T2, std::size_t R2, std::size_t C2>
auto operator*(const matrix_view<T1, R1, C1>& a, const matrix_view<T2, R2, C2>& b) {
  return detail::make_chain(a, b);
}
template <class T1, std::size_t R1, std::size_t C1, class T2, std::size_t N>
auto operator*(const matrix_view<T1, R1, C1>& a, const vector_view<T2, N>& v) {
  return detail::make_chain(a, v);
}

}  // namespace memsafe
