// memsafe/expr/reductions.hpp — reductions and products of lazy matrices (still lazy: nothing runs
// until memsafe::eval).
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "lazy.hpp"
#include "view.hpp"

namespace memsafe {

/// Axis tags: reduce over j (the column index, default) or over i (the row index).
struct over_j_t {};
struct over_i_t {};
inline constexpr over_j_t over_j{};
inline constexpr over_i_t over_i{};

/// Reduction kinds.
namespace red {
struct sum { static constexpr const char* name = "sum"; };
struct min { static constexpr const char* name = "min"; };
struct max { static constexpr const char* name = "max"; };
struct argmin { static constexpr const char* name = "argmin"; };
struct argmax { static constexpr const char* name = "argmax"; };
struct argkmin { static constexpr const char* name = "argkmin"; std::size_t k; };
struct argkmax { static constexpr const char* name = "argkmax"; std::size_t k; };
struct logsumexp { static constexpr const char* name = "logsumexp"; };
}  // namespace red

/// Marker base of every node `eval` accepts (the nodes are in memsafe::detail; the tag is here for
/// argument-dependent lookup, as lazy_tag in expr/lazy.hpp).
struct evaluable_tag {};
template <class X>
concept evaluable = std::is_base_of_v<evaluable_tag, std::remove_cvref_t<X>>;

namespace detail {
/// R over j of the n×m lazy matrix E: n results (k per row for top-k).
template <class R, class E>
struct reduce_expr : evaluable_tag {
  using value_type = typename E::value_type;
  E e;
  R r;
  std::size_t rows() const { return e.rows(); }
  std::size_t cols() const {
    if constexpr (requires { r.k; }) return r.k;
    else return 1;
  }
  static constexpr bool has_indices = std::is_same_v<R, red::argmin> || std::is_same_v<R, red::argmax> ||
                                      std::is_same_v<R, red::argkmin> || std::is_same_v<R, red::argkmax>;
  MEMSAFE_COLD std::string str() const {
    if constexpr (requires { r.k; }) return cat(msg{R::name, "(", e.str(), ", k=", r.k, ")"});
    else return cat(msg{R::name, "(", e.str(), ")"});
  }
};

/// E (n×m) · M (m×c): n×c (or n values when `vector_out`). With `transpose_out` the result is
/// written transposed (c×n): that is how `M * E` and `v * E` are evaluated, as (Eᵀ Mᵀ)ᵀ.
/// FromLeft marks products written with the dense operand on the left (M·K, vᵀ·K), captured as
/// (Kᵀ Mᵀ)ᵀ: E is then transpose(K).
template <class E, bool FromLeft = false>
struct matmul_expr : evaluable_tag {
  using value_type = typename E::value_type;
  E e;
  matrix_view<const value_type> rhs;
  bool vector_out = false, transpose_out = false;
  static constexpr bool has_indices = false;
  std::size_t rows() const { return transpose_out ? rhs.cols() : e.rows(); }
  std::size_t cols() const { return transpose_out ? e.rows() : rhs.cols(); }
  MEMSAFE_COLD std::string str() const {
    if constexpr (FromLeft) {  // written M·K or vᵀ·K (captured as Kᵀ·Mᵀ): shown as written
      std::string k;
      if constexpr (is_transpose_node<E>) k = e.e.str();
      else k = cat(msg{"transpose(", e.str(), ")"});
      return vector_out ? cat(msg{"v[", rhs.rows(), "] * ", k})
                        : cat(msg{"M[", shape_str(rhs.cols(), rhs.rows()), "] * ", k});
    }
    return vector_out ? cat(msg{e.str(), " * v[", rhs.rows(), "]"}) : cat(msg{e.str(), " * M[", rhs.shape(), "]"});
  }
};

/// out_i = Σ_j softmax_j(s_ij) V_j  (V: m×dv).
template <class E>
struct softmax_sum_expr : evaluable_tag {
  using value_type = typename E::value_type;
  E e;
  matrix_view<const value_type> values;
  static constexpr bool has_indices = false;
  std::size_t rows() const { return e.rows(); }
  std::size_t cols() const { return values.cols(); }
  MEMSAFE_COLD std::string str() const { return cat(msg{"softmax_sum(", e.str(), ", V[", values.shape(), "])"}); }
};

/// A (p×n lazy) · B (n×q lazy): dense p×q, contracting the shared index n in tiles.
template <class A, class B>
struct lazy_product_expr : evaluable_tag {
  using value_type = typename A::value_type;
  A a;
  B b;
  static constexpr bool has_indices = false;
  std::size_t rows() const { return a.rows(); }
  std::size_t cols() const { return b.cols(); }
  MEMSAFE_COLD std::string str() const { return cat(msg{a.str(), " * ", b.str()}); }
};

/// The lazy matrix itself, materialised (tile by tile) into the result.
template <class E>
struct dense_expr : evaluable_tag {
  using value_type = typename E::value_type;
  E e;
  static constexpr bool has_indices = false;
  std::size_t rows() const { return e.rows(); }
  std::size_t cols() const { return e.cols(); }
  MEMSAFE_COLD std::string str() const { return cat(msg{"dense(", e.str(), ")"}); }
};

template <class R, lazy_matrix E>
auto make_reduce(const E& e, R r = {}) {
  return reduce_expr<R, E>{{}, e, r};
}
template <lazy_matrix E>
void check_nonempty(const E& e, const char* fn) {
  if (e.cols() == 0)
    throw argument_error(cat(msg{"memsafe: ", fn, ": the reduced index is empty (", e.str(),
                              " has 0 columns), so there is no index to return"}));
}
template <lazy_matrix E>
void check_k(const E& e, std::size_t k, const char* fn) {
  if (k == 0) throw argument_error(cat(msg{"memsafe: ", fn, ": k must be at least 1"}));
  if (k > e.cols())
    throw argument_error(cat(msg{"memsafe: ", fn, ": k = ", k, " is larger than the reduced extent ", e.cols()}));
}
template <std::size_t K, lazy_matrix E>
constexpr void check_static_k() {
  static_assert(K > 0, "memsafe: argkmin/argkmax: k must be at least 1");
  static_assert(E::static_cols == dyn || K <= E::static_cols,
                "memsafe: argkmin/argkmax: k is larger than the reduced (static) extent");
}
}  // namespace detail

#define MEMSAFE_REDUCTION(NAME, KIND, CHECK)                                             \
  template <lazy_matrix E>                                                               \
  auto NAME(const E& e, over_j_t = {}) {                                                 \
    CHECK;                                                                               \
    return detail::make_reduce<red::KIND>(e);                                            \
  }                                                                                      \
  template <lazy_matrix E>                                                               \
  auto NAME(const E& e, over_i_t) {                                                      \
    return NAME(transpose(e));                                                           \
  }
MEMSAFE_REDUCTION(sum, sum, (void)0)
MEMSAFE_REDUCTION(min, min, (void)0)
MEMSAFE_REDUCTION(max, max, (void)0)
MEMSAFE_REDUCTION(argmin, argmin, detail::check_nonempty(e, "argmin"))
MEMSAFE_REDUCTION(argmax, argmax, detail::check_nonempty(e, "argmax"))
MEMSAFE_REDUCTION(logsumexp, logsumexp, (void)0)
#undef MEMSAFE_REDUCTION

/// The k smallest entries of each row with their column indices, best first (ties: lower index).
template <lazy_matrix E>
auto argkmin(const E& e, std::size_t k, over_j_t = {}) {
  detail::check_k(e, k, "argkmin");
  return detail::make_reduce(e, red::argkmin{k});
}
template <lazy_matrix E>
auto argkmin(const E& e, std::size_t k, over_i_t) { return argkmin(transpose(e), k); }
template <std::size_t K, lazy_matrix E>
auto argkmin(const E& e) {
  detail::check_static_k<K, E>();
  return argkmin(e, K);
}
/// The k largest entries of each row with their column indices, best first (ties: lower index).
template <lazy_matrix E>
auto argkmax(const E& e, std::size_t k, over_j_t = {}) {
  detail::check_k(e, k, "argkmax");
  return detail::make_reduce(e, red::argkmax{k});
}
template <lazy_matrix E>
auto argkmax(const E& e, std::size_t k, over_i_t) { return argkmax(transpose(e), k); }
template <std::size_t K, lazy_matrix E>
auto argkmax(const E& e) {
  detail::check_static_k<K, E>();
  return argkmax(e, K);
}

/// Attention: out_i = Σ_j softmax_j(s_ij) V_j with the online max/sum merge.
template <lazy_matrix E, class VV>
auto softmax_sum(const E& s, const VV& V) {
  using T = typename E::value_type;
  static_assert(detail::is_matrix_view<VV>::value,
                "memsafe: softmax_sum(S, V): V must be a dense matrix (memsafe::matrix)");
  static_assert(std::is_same_v<std::remove_cv_t<typename VV::element_type>, T>,
                "memsafe: softmax_sum(S, V): V must have the scores' value type");
  static_assert(detail::extents_compatible<E::static_cols, VV::static_rows>,
                "memsafe: softmax_sum(S, V): S's column count and V's row count differ");
  if (V.rows() != s.cols())
    throw shape_error(detail::cat(detail::msg{"memsafe: softmax_sum(S, V): S is ", detail::shape_str(s.rows(), s.cols()),
                                   " but V is ", V.shape(), " (V needs one row per column of S)"}));
  return detail::softmax_sum_expr<E>{{}, s, matrix_view<const T>(V)};
}

/// Materialise a lazy matrix (only sensible when n×m fits in memory as a result).
template <lazy_matrix E>
auto dense(const E& e) { return detail::dense_expr<E>{{}, e}; }

// ---- products ----------------------------------------------------------------------------------

namespace detail {
template <class E, class MV>
void check_matmul(const E& e, const MV& M, std::size_t mrows, const char* form) {
  using T = typename E::value_type;
  static_assert(std::is_same_v<std::remove_cv_t<typename MV::element_type>, T>,
                "memsafe: product of a lazy matrix and a dense operand of a different value type");
  if (mrows != e.cols())
    throw shape_error(cat(msg{"memsafe: ", form, ": the lazy matrix is ", shape_str(e.rows(), e.cols()),
                           " but the dense operand is ", M.shape(), ": inner extents differ (", e.cols(), " vs ", mrows,
                           ")"}));
}
}  // namespace detail

/// K · v (n values).
template <lazy_matrix E, class T, std::size_t N>
auto operator*(const E& e, const vector_view<T, N>& v) {
  static_assert(detail::extents_compatible<E::static_cols, N>,
                "memsafe: K * v: the vector's static length differs from the lazy matrix's column count");
  using V = typename E::value_type;
  static_assert(std::is_same_v<std::remove_cv_t<T>, V>, "memsafe: K * v: v must have K's value type");
  auto col = matrix_view<const V>(v.as_column());
  if (v.size() != e.cols())
    throw shape_error(
        detail::cat(detail::msg{"memsafe: K * v: K is ", detail::shape_str(e.rows(), e.cols()), " but v has length ", v.size()}));
  return detail::matmul_expr<E>{{}, e, col, true, false};
}
/// K · M (n×c): many right-hand sides at once.
template <lazy_matrix E, class T, std::size_t R, std::size_t C>
auto operator*(const E& e, const matrix_view<T, R, C>& M) {
  static_assert(detail::extents_compatible<E::static_cols, R>,
                "memsafe: K * M: M's static row count differs from the lazy matrix's column count");
  using V = typename E::value_type;
  detail::check_matmul(e, M, M.rows(), "K * M");
  return detail::matmul_expr<E>{{}, e, matrix_view<const V>(M), false, false};
}
/// vᵀ · K (m values), evaluated as Kᵀ v.
template <class T, std::size_t N, lazy_matrix E>
auto operator*(const vector_view<T, N>& v, const E& e) {
  static_assert(detail::extents_compatible<E::static_rows, N>,
                "memsafe: v * K: the vector's static length differs from the lazy matrix's row count");
  using V = typename E::value_type;
  static_assert(std::is_same_v<std::remove_cv_t<T>, V>, "memsafe: v * K: v must have K's value type");
  if (v.size() != e.rows())
    throw shape_error(
        detail::cat(detail::msg{"memsafe: v * K: K is ", detail::shape_str(e.rows(), e.cols()), " but v has length ", v.size()}));
  auto t = transpose(e);
  return detail::matmul_expr<decltype(t), true>{{}, t, matrix_view<const V>(v.as_column()), true, false};
}
/// M · K (c×m) for M c×n, evaluated as (Kᵀ Mᵀ)ᵀ.
template <class T, std::size_t R, std::size_t C, lazy_matrix E>
auto operator*(const matrix_view<T, R, C>& M, const E& e) {
  static_assert(detail::extents_compatible<E::static_rows, C>,
                "memsafe: M * K: M's static column count differs from the lazy matrix's row count");
  using V = typename E::value_type;
  static_assert(std::is_same_v<std::remove_cv_t<T>, V>, "memsafe: M * K: M must have K's value type");
  if (M.cols() != e.rows())
    throw shape_error(detail::cat(detail::msg{"memsafe: M * K: M is ", M.shape(), " but K is ",
                                   detail::shape_str(e.rows(), e.cols()), ": inner extents differ (", M.cols(), " vs ",
                                   e.rows(), ")"}));
  auto t = transpose(e);
  return detail::matmul_expr<decltype(t), true>{{}, t, matrix_view<const V>(M).t(), false, true};
}
/// A · B for two lazy matrices (e.g. Kuf · Kufᵀ), contracting A's columns with B's rows.
template <lazy_matrix A, lazy_matrix B>
auto operator*(const A& a, const B& b) {
  static_assert(std::is_same_v<typename A::value_type, typename B::value_type>,
                "memsafe: A * B: lazy matrices of different value types");
  static_assert(detail::extents_compatible<A::static_cols, B::static_rows>,
                "memsafe: A * B: A's static column count differs from B's static row count");
  if (a.cols() != b.rows())
    throw shape_error(detail::cat(detail::msg{"memsafe: A * B: A is ", detail::shape_str(a.rows(), a.cols()), " but B is ",
                                   detail::shape_str(b.rows(), b.cols()), ": inner extents differ"}));
  return detail::lazy_product_expr<A, B>{{}, a, b};
}

}  // namespace memsafe
