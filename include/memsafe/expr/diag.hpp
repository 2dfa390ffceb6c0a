// memsafe/expr/diag.hpp — diagonal terms: K + σ²·I, K + diag(d), and the diagonal / trace of K.
//
// `identity(n)` and `diag(v)` are captured symbols, never dense matrices. Adding one to a square
// lazy matrix gives a `diag_plus` node: its tiles add the diagonal to the entries that lie on it,
// and in a product the rewrite stage splits it off ((K + D)·v = K·v + D·v, rule `diag_in_product`).
// `diag(K)` and `trace(K)` read the diagonal without evaluating pairs: for a stationary kernel
// of a point set with itself every diagonal entry is the variance (rule `stationary_diagonal`).
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "lazy.hpp"
#include "reductions.hpp"
#include "view.hpp"

namespace memsafe {

namespace detail {
/// s·I (n×n), a symbol. Its operators are here with it, where argument-dependent lookup finds them.
struct scaled_identity {
  std::size_t n;
  double s = 1;
};
inline scaled_identity operator*(double s, scaled_identity I) { return {I.n, I.s * s}; }
inline scaled_identity operator*(scaled_identity I, double s) { return {I.n, I.s * s}; }
inline scaled_identity operator-(scaled_identity I) { return {I.n, -I.s}; }

/// diag(v) (n×n), a symbol over caller memory.
template <class T>
struct diag_matrix {
  vector_view<const T> d;
};
}  // namespace detail

/// The n×n identity, a symbol: `K + 0.1 * identity(n)`.
inline detail::scaled_identity identity(std::size_t n) { return {n, 1.0}; }

/// diag(v), a symbol: `K + diag(v)`.
template <class T, std::size_t N>
detail::diag_matrix<std::remove_cv_t<T>> diag(const vector_view<T, N>& v) {
  return {vector_view<const std::remove_cv_t<T>>(v)};
}

namespace detail {

/// The diagonal of a diag_plus node: a constant or a caller vector.
struct scalar_diagonal {
  double s;
  template <class T>
  T at(std::size_t) const { return static_cast<T>(s); }
  std::string str(std::size_t n) const { return cat(msg{s, "·I[", n, "]"}); }
};
template <class T>
struct vector_diagonal {
  vector_view<const T> d;
  template <class U = T>
  U at(std::size_t i) const { return static_cast<U>(d[i]); }
  std::string str(std::size_t n) const { return cat(msg{"diag(v[", n, "])"}); }
};

/// E + D for a square lazy matrix E and a diagonal D.
template <class E, class Dg>
struct diag_plus : lazy_tag {
  using value_type = typename E::value_type;
  static constexpr std::size_t static_rows = E::static_rows, static_cols = E::static_cols;
  E e;
  Dg d;
  std::size_t rows() const { return e.rows(); }
  std::size_t cols() const { return e.cols(); }
  MEMSAFE_COLD std::string str() const { return cat(msg{"(", e.str(), " + ", d.str(e.rows()), ")"}); }
};

template <class E>
void check_square(const E& e, std::size_t n, const char* what) {
  static_assert(extents_compatible<E::static_rows, E::static_cols>,
                "memsafe: a diagonal term needs a square lazy matrix (static rows and columns differ)");
  if (e.rows() != e.cols())
    throw shape_error(
        cat(msg{"memsafe: ", what, ": K must be square, but the lazy matrix is ", shape_str(e.rows(), e.cols())}));
  if (e.rows() != n)
    throw shape_error(cat(msg{"memsafe: ", what, ": the lazy matrix is ", shape_str(e.rows(), e.cols()),
                           " but the diagonal term is ", shape_str(n, n)}));
}
}  // namespace detail

template <lazy_matrix E>
auto operator+(const E& e, detail::scaled_identity I) {
  detail::check_square(e, I.n, "K + s*I");
  return detail::diag_plus<E, detail::scalar_diagonal>{{}, e, {I.s}};
}
template <lazy_matrix E>
auto operator+(detail::scaled_identity I, const E& e) { return e + I; }
template <lazy_matrix E>
auto operator-(const E& e, detail::scaled_identity I) { return e + (-I); }
template <lazy_matrix E, class T>
auto operator+(const E& e, const detail::diag_matrix<T>& D) {
  static_assert(std::is_same_v<T, typename E::value_type>, "memsafe: K + diag(v): v must have K's value type");
  detail::check_square(e, D.d.size(), "K + diag(v)");
  return detail::diag_plus<E, detail::vector_diagonal<T>>{{}, e, {D.d}};
}
template <lazy_matrix E, class T>
auto operator+(const detail::diag_matrix<T>& D, const E& e) { return e + D; }

namespace detail {
/// diag(K): the n diagonal entries of a square lazy matrix (n values).
template <class E>
struct diag_expr : evaluable_tag {
  using value_type = typename E::value_type;
  static constexpr bool has_indices = false;
  E e;
  std::size_t rows() const { return e.rows(); }
  std::size_t cols() const { return 1; }
  MEMSAFE_COLD std::string str() const { return cat(msg{"diag(", e.str(), ")"}); }
};
/// trace(K) = Σ_i K_ii (one value).
template <class E>
struct trace_expr : evaluable_tag {
  using value_type = typename E::value_type;
  static constexpr bool has_indices = false;
  E e;
  std::size_t rows() const { return 1; }
  std::size_t cols() const { return 1; }
  MEMSAFE_COLD std::string str() const { return cat(msg{"trace(", e.str(), ")"}); }
};
}  // namespace detail

template <lazy_matrix E>
auto diag(const E& e) {
  detail::check_square(e, e.rows(), "diag(K)");
  return detail::diag_expr<E>{{}, e};
}
template <lazy_matrix E>
auto trace(const E& e) {
  detail::check_square(e, e.rows(), "trace(K)");
  return detail::trace_expr<E>{{}, e};
}

}  // namespace memsafe
