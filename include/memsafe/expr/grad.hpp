// memsafe/expr/grad.hpp — capture of a vector–Jacobian product: vjp(reduction, upstream, wrt(...)).
//
// `vjp(x, upstream, wrt(X, Y, params, operand))` checks shapes and computes nothing; it is
// lowered (lower/grad.hpp), planned and run (backend/host/grad.hpp) by memsafe::grad
// (api/grad.hpp). docs/design.md, "Gradients".
//
//   x          sum(E), logsumexp(E), E·v, E·M, v·E, M·E, softmax_sum(E, V), dense(E), A·B (lazy × lazy),
//              diag(E), trace(E)
//   upstream   ∂L/∂(x's output) in the output's shape: a vec for vector outputs, a matrix otherwise
//   wrt        point sets (views given to the formulas, matched by address/extents/strides: the
//              gradient is the total over every leaf side where the view appears), `params`
//              (every pairwise leaf's parameters) and `operand` (the dense v, M or V)
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "derivatives.hpp"
#include "diag.hpp"
#include "lazy.hpp"
#include "reductions.hpp"
#include "view.hpp"

namespace memsafe {

/// wrt(…) tag: the parameters (variance, lengthscales, α) of every pairwise leaf.
struct params_t {};
inline constexpr params_t params{};
/// wrt(…) tag: the dense operand of the reduction (v of K·v, M of K·M, V of softmax_sum).
struct operand_t {};
inline constexpr operand_t operand{};

/// What to differentiate with respect to.
template <class T>
struct wrt_set {
  std::vector<matrix_view<const T>> points;
  bool params = false;
  bool operand = false;
  MEMSAFE_COLD std::string str() const {
    std::string s;
    for (const auto& p : points) s += detail::cat(detail::msg{s.empty() ? "" : ", ", "points[", p.shape(), "]"});
    if (params) s += s.empty() ? "params" : ", params";
    if (operand) s += s.empty() ? "operand" : ", operand";
    return s;
  }
};

namespace detail {
template <class A>
struct wrt_value {
  using type = void;
};
template <class U, std::size_t R, std::size_t C>
struct wrt_value<matrix_view<U, R, C>> {
  using type = std::remove_cv_t<U>;
};
template <class... A>
struct first_value {
  using type = void;
};
template <class A, class... R>
struct first_value<A, R...> {
  using type = std::conditional_t<std::is_void_v<typename wrt_value<A>::type>, typename first_value<R...>::type,
                                  typename wrt_value<A>::type>;
};
template <class T, class A>
void add_wrt(wrt_set<T>& w, const A& a) {
  if constexpr (std::is_same_v<A, params_t>) {
    w.params = true;
  } else if constexpr (std::is_same_v<A, operand_t>) {
    w.operand = true;
  } else {
    static_assert(detail::is_matrix_view<A>::value,
                  "memsafe: wrt(...) takes point sets (memsafe::points / matrix_view), memsafe::params and "
                  "memsafe::operand");
    static_assert(std::is_same_v<std::remove_cv_t<typename A::element_type>, T>,
                  "memsafe: wrt(...): every point set must have the same value type");
    w.points.push_back(matrix_view<const T>(a));
  }
}
}  // namespace detail

/// The set of inputs to differentiate with respect to: `wrt(X, Y, memsafe::params, memsafe::operand)`.
/// With no point set, give the value type: `wrt<double>(memsafe::params)`.
template <class T0 = void, class... A>
auto wrt(const A&... a) {
  using T = std::conditional_t<std::is_void_v<T0>, typename detail::first_value<A...>::type, T0>;
  static_assert(!std::is_void_v<T>,
                "memsafe: wrt(...) without a point set needs the value type: wrt<double>(memsafe::params)");
  wrt_set<T> w;
  (detail::add_wrt(w, a), ...);
  return w;
}

/// vjp(x, upstream, wrt): the captured backward node (not evaluable: memsafe::grad runs it).
template <class X>
struct backward_expr {
  using value_type = typename X::value_type;
  using T = value_type;
  X x;
  matrix_view<const T> upstream;  ///< ∂L/∂(x's output), x.rows() × x.cols()
  wrt_set<T> w;
  MEMSAFE_COLD std::string str() const {
    return detail::cat(detail::msg{"vjp(", x.str(), ", upstream[", upstream.shape(), "]) wrt ", w.str()});
  }
};

namespace detail {
template <class X>
inline constexpr bool is_vjp_reduction = false;
template <class E>
inline constexpr bool is_vjp_reduction<detail::reduce_expr<red::sum, E>> = true;
template <class E>
inline constexpr bool is_vjp_reduction<detail::reduce_expr<red::logsumexp, E>> = true;
template <class E, bool L>
inline constexpr bool is_vjp_reduction<detail::matmul_expr<E, L>> = true;
template <class E>
inline constexpr bool is_vjp_reduction<detail::softmax_sum_expr<E>> = true;
template <class E>
inline constexpr bool is_vjp_reduction<detail::dense_expr<E>> = true;
template <class A, class B>
inline constexpr bool is_vjp_reduction<detail::lazy_product_expr<A, B>> = true;
template <class E>
inline constexpr bool is_vjp_reduction<detail::diag_expr<E>> = true;
template <class E>
inline constexpr bool is_vjp_reduction<detail::trace_expr<E>> = true;

template <class X>
constexpr void require_vjp_reduction() {
  if constexpr (X::has_indices)
    static_assert(!X::has_indices, "memsafe: grad: argmin/argmax/argkmin/argkmax return indices and have no gradient");
  else
    static_assert(is_vjp_reduction<X>,
                  "memsafe: grad: this reduction has no vector-Jacobian product yet (supported: sum, logsumexp, "
                  "K*v, K*M, v*K, M*K, softmax_sum, dense, lazy x lazy A*B, diag, trace; not yet: min/max, "
                  "chains, batches)");
}
template <class X, class U>
matrix_view<const typename X::value_type> upstream_view(const X& x, const U& u) {
  using T = typename X::value_type;
  matrix_view<const T> g{nullptr, 0, 0};
  if constexpr (detail::is_vector_view<U>::value) {
    static_assert(std::is_same_v<std::remove_cv_t<typename U::element_type>, T>,
                  "memsafe: vjp: the upstream gradient must have the expression's value type");
    if (x.cols() != 1 && x.rows() != 1)
      throw shape_error(cat(msg{"memsafe: vjp: ", x.str(), " is ", shape_str(x.rows(), x.cols()),
                             ": give the upstream gradient as a matrix of that shape, not a vector"}));
    if (u.size() != x.rows() * x.cols())
      throw shape_error(cat(msg{"memsafe: vjp: ", x.str(), " has ", x.rows() * x.cols(),
                             " values but the upstream gradient has ", u.size()}));
    g = x.cols() == 1 ? matrix_view<const T>(u.data(), u.size(), 1, u.stride(), 1)
                      : matrix_view<const T>(u.data(), 1, u.size(), u.size() * u.stride(), u.stride());
  } else {
    static_assert(detail::is_matrix_view<U>::value,
                  "memsafe: vjp: the upstream gradient is a memsafe::vec or a memsafe::matrix");
    static_assert(std::is_same_v<std::remove_cv_t<typename U::element_type>, T>,
                  "memsafe: vjp: the upstream gradient must have the expression's value type");
    if (u.rows() != x.rows() || u.cols() != x.cols())
      throw shape_error(cat(msg{"memsafe: vjp: ", x.str(), " is ", shape_str(x.rows(), x.cols()),
                             " but the upstream gradient is ", u.shape()}));
    g = matrix_view<const T>(u);
  }
  return g;
}
}  // namespace detail

/// Capture the vector–Jacobian product of the reduction x for the upstream gradient ∂L/∂x.
template <evaluable X, class U, class T>
backward_expr<X> vjp(const X& x, const U& upstream, const wrt_set<T>& w) {
  detail::require_vjp_reduction<X>();
  static_assert(std::is_same_v<T, typename X::value_type>,
                "memsafe: vjp: wrt(...) point sets must have the expression's value type");
  return backward_expr<X>{x, detail::upstream_view(x, upstream), w};
}

}  // namespace memsafe
