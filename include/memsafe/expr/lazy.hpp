// memsafe/expr/lazy.hpp — lazy matrices: pairwise formulas, elementwise maps, transpose.
//
// Nodes hold their operands (views, which are cheap) and a functor, nothing else. Building an
// expression computes nothing and allocates nothing.
#pragma once
#include "../core/libm.hpp"
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "formulas.hpp"
#include "view.hpp"

namespace memsafe {

/// Marker base of every lazy matrix node. The nodes themselves are implementation types
/// (memsafe::detail); the tag stays here so that memsafe is an associated namespace of every node
/// and argument-dependent lookup finds the operators and builders below (`K + K`, `exp(K)`)
/// wherever an expression is written.
struct lazy_tag {};

template <class E>
concept lazy_matrix = std::is_base_of_v<lazy_tag, std::remove_cvref_t<E>>;

// ---- pairwise ---------------------------------------------------------------------------------

namespace detail {
/// F(x_i, y_j) for the rows x_i of X (i < n) and y_j of Y (j < m): an n×m lazy matrix.
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
struct pairwise : lazy_tag {
  using value_type = T;
  using formula_type = F;
  static constexpr std::size_t static_rows = RX, static_cols = RY, static_dim = D;
  matrix_view<const T, RX, D> x;
  matrix_view<const T, RY, D> y;
  formula_params<T> params;

  std::size_t rows() const { return x.rows(); }
  std::size_t cols() const { return y.rows(); }
  std::size_t dim() const { return x.cols(); }
  /// "rbf(X[n×d], Y[m×d])"; "rbf(X[n×d], X[n×d])" when Y is X (the same memory and layout).
  MEMSAFE_COLD std::string str() const {
    return cat(msg{F::name, "(X[", x.shape(), "], ", same_view(x, y) ? "X[" : "Y[", y.shape(), "])"});
  }
};
}  // namespace detail

// ---- elementwise ------------------------------------------------------------------------------

namespace op {
// Unary ops may carry a scalar. Each is applied to a whole tile row in a loop that vectorises.
#define MEMSAFE_UNARY_OP(NAME, STR, EXPR)                 \
  struct NAME {                                            \
    static constexpr const char* name = STR;               \
    template <class T>                                     \
    MEMSAFE_HD T operator()(T v) const { return EXPR; }     \
  };
MEMSAFE_UNARY_OP(neg, "neg", -v)
MEMSAFE_UNARY_OP(exp, "exp", math::exp(v))
MEMSAFE_UNARY_OP(log, "log", math::log(v))
MEMSAFE_UNARY_OP(sqrt, "sqrt", math::sqrt(v))
MEMSAFE_UNARY_OP(abs, "abs", (v < T(0) ? -v : v))
MEMSAFE_UNARY_OP(square, "square", v* v)
MEMSAFE_UNARY_OP(inv, "inv", T(1) / v)
#undef MEMSAFE_UNARY_OP
#define MEMSAFE_SCALAR_OP(NAME, STR, EXPR)                \
  template <class S>                                       \
  struct NAME {                                            \
    static constexpr const char* name = STR;               \
    S c;                                                   \
    template <class T>                                     \
    MEMSAFE_HD T operator()(T v) const { return EXPR; }     \
  };
MEMSAFE_SCALAR_OP(add_scalar, "add", v + T(c))
MEMSAFE_SCALAR_OP(mul_scalar, "mul", v* T(c))
MEMSAFE_SCALAR_OP(sub_from_scalar, "rsub", T(c) - v)
MEMSAFE_SCALAR_OP(div_scalar, "div", v / T(c))
MEMSAFE_SCALAR_OP(div_into_scalar, "rdiv", T(c) / v)
MEMSAFE_SCALAR_OP(pow_scalar, "pow", math::pow(v, T(c)))
MEMSAFE_SCALAR_OP(clamp_min, "clamp_min", (v < T(c) ? T(c) : v))
MEMSAFE_SCALAR_OP(clamp_max, "clamp_max", (v > T(c) ? T(c) : v))
#undef MEMSAFE_SCALAR_OP
#define MEMSAFE_BINARY_OP(NAME, STR, EXPR)                \
  struct NAME {                                            \
    static constexpr const char* name = STR;               \
    template <class T>                                     \
    MEMSAFE_HD T operator()(T a, T b) const { return EXPR; } \
  };
MEMSAFE_BINARY_OP(add, "+", a + b)
MEMSAFE_BINARY_OP(sub, "-", a - b)
MEMSAFE_BINARY_OP(mul, "*", a* b)
MEMSAFE_BINARY_OP(div, "/", a / b)
// min/max propagate NaN from either side (as NumPy's minimum/maximum and the reductions do)
MEMSAFE_BINARY_OP(min, "min", ((b < a || b != b) ? b : a))
MEMSAFE_BINARY_OP(max, "max", ((b > a || b != b) ? b : a))
#undef MEMSAFE_BINARY_OP
}  // namespace op

namespace detail {
/// "name(inner)" or "name(inner, c)" for ops that carry a scalar.
template <class Op>
std::string op_str(const Op& op, const std::string& inner) {
  if constexpr (requires { op.c; }) return cat(msg{Op::name, "(", inner, ", ", op.c, ")"});
  else return cat(msg{Op::name, "(", inner, ")"});
}

/// op(e_ij)
template <class Op, class E>
struct unary_expr : lazy_tag {
  using value_type = typename E::value_type;
  static constexpr std::size_t static_rows = E::static_rows, static_cols = E::static_cols;
  E e;
  Op op;
  std::size_t rows() const { return e.rows(); }
  std::size_t cols() const { return e.cols(); }
  MEMSAFE_COLD std::string str() const { return detail::op_str(op, e.str()); }
};

/// op(a_ij, b_ij) for two lazy matrices of the same shape.
template <class Op, class A, class B>
struct binary_expr : lazy_tag {
  using value_type = typename A::value_type;
  static constexpr std::size_t static_rows = A::static_rows != dyn ? A::static_rows : B::static_rows;
  static constexpr std::size_t static_cols = A::static_cols != dyn ? A::static_cols : B::static_cols;
  A a;
  B b;
  Op op;
  std::size_t rows() const { return a.rows(); }
  std::size_t cols() const { return a.cols(); }
  MEMSAFE_COLD std::string str() const { return cat(msg{"(", a.str(), " ", Op::name, " ", b.str(), ")"}); }
};

/// e_ji (captured as written; the rewrite stage pushes it down to the leaves).
template <class E>
struct transpose_expr : lazy_tag {
  using value_type = typename E::value_type;
  static constexpr std::size_t static_rows = E::static_cols, static_cols = E::static_rows;
  E e;
  std::size_t rows() const { return e.cols(); }
  std::size_t cols() const { return e.rows(); }
  MEMSAFE_COLD std::string str() const { return cat(msg{"transpose(", e.str(), ")"}); }
};
template <class E>
inline constexpr bool is_transpose_node = false;
template <class E>
inline constexpr bool is_transpose_node<transpose_expr<E>> = true;

// ---- building pairwise expressions ------------------------------------------------------------

template <class XV, class YV>
using pair_value_t = std::remove_cv_t<typename XV::element_type>;

/// make_pairwise's shape error, out of line (one copy per translation unit, not per formula).
template <class = void>
[[noreturn, gnu::noinline]] MEMSAFE_COLD void feature_dims_differ(const char* fn, const std::string& xs,
                                                                        const std::string& ys, std::size_t dx,
                                                                        std::size_t dy) {
  throw shape_error(cat(msg{"memsafe: ", fn, "(X, Y): X is ", xs, " but Y is ", ys, ": feature dimensions differ (", dx,
                         " vs ", dy, ")"}));
}

template <class F, class XV, class YV>
auto make_pairwise(const XV& X, const YV& Y, formula_params<pair_value_t<XV, YV>> p = {}) {
  static_assert(is_matrix_view<XV>::value && is_matrix_view<YV>::value,
                "memsafe: pairwise formulas take point sets (memsafe::points / matrix_view)");
  using T = pair_value_t<XV, YV>;
  static_assert(std::is_same_v<T, std::remove_cv_t<typename YV::element_type>>,
                "memsafe: X and Y must have the same value type (both float or both double)");
  constexpr std::size_t DX = XV::static_cols, DY = YV::static_cols;
  static_assert(extents_compatible<DX, DY>,
                "memsafe: X and Y have different static feature dimensions (d): "
                "every point of X and Y must have the same number of coordinates");
  constexpr std::size_t D = DX != dyn ? DX : DY;
  if (X.cols() != Y.cols()) feature_dims_differ(F::name, X.shape(), Y.shape(), X.cols(), Y.cols());
  using P = pairwise<F, T, XV::static_rows, YV::static_rows, D>;
  return P{{}, {X.data(), X.rows(), X.cols(), X.row_stride(), X.col_stride()},
           {Y.data(), Y.rows(), Y.cols(), Y.row_stride(), Y.col_stride()}, p};
}

template <class T>
void check_positive(T v, const char* what, const char* fn) {
  if (!(v > T(0)) || !libm::isfinite(v))
    throw argument_error(cat(msg{"memsafe: ", fn, ": ", what, " must be positive and finite, got ", v}));
}
template <class T>
void check_nonneg(T v, const char* what, const char* fn) {
  if (!(v >= T(0)) || !libm::isfinite(v))
    throw argument_error(cat(msg{"memsafe: ", fn, ": ", what, " must be non-negative and finite, got ", v}));
}

/// A lengthscale must keep 1/ℓ² a normal number of T with room for the formulas' constants
/// (5/ℓ² for Matérn 5/2): ℓ in [√(8/max), √(1/min_normal)], about [1.5e-19, 9.2e18] for float and
/// [2.1e-154, 6.7e153] for double. Outside it 1/ℓ² overflows (K_ii = 0·inf = NaN) or loses its
/// precision to underflow, so such values are rejected instead of producing NaN.
template <class T>
bool lengthscale_in_range(T ls) {
  const T ls2 = ls * ls;
  return ls2 >= std::numeric_limits<T>::min() && libm::isfinite(ls2) && T(1) / ls2 >= std::numeric_limits<T>::min() &&
         libm::isfinite(T(8) / ls2);
}

/// "<what> <ls> is outside the range <T> supports (lo to hi): 1/ℓ² is not a normal number".
template <class T>
std::string lengthscale_range_message(T ls, const char* what) {
  const double lo = libm::sqrt(8.0 / double(std::numeric_limits<T>::max())),
               hi = libm::sqrt(1.0 / double(std::numeric_limits<T>::min()));
  char buf[192];
  std::snprintf(buf, sizeof buf, "%s %g is outside the range %s supports (%.3g to %.3g): 1/ℓ² is not a normal number",
                what, double(ls), std::is_same_v<T, float> ? "float" : "double", lo, hi);
  return buf;
}

template <class T>
void check_lengthscale(T ls, const char* what, const char* fn) {
  check_positive(ls, what, fn);
  if (!lengthscale_in_range(ls))
    throw argument_error(
        cat(msg{"memsafe: ", fn, ": ", lengthscale_range_message(ls, what), "; rescale the data (or use double)"}));
}

/// Scalar lengthscale → acc_scale = 1/ℓ²; ARD lengthscales → per-dimension division.
template <class T>
void set_lengthscale(formula_params<T>& p, T ls, std::size_t, const char* fn) {
  check_lengthscale(ls, "lengthscale", fn);
  p.acc_scale = T(1) / (ls * ls);
}
template <class T, class U>
void set_lengthscale(formula_params<T>& p, ard_view<U> ls, std::size_t d, const char* fn) {
  static_assert(std::is_same_v<T, U>, "memsafe: ARD lengthscales must have the points' value type");
  if (ls.size != d)
    throw shape_error(cat(msg{"memsafe: ", fn, ": ", ls.size, " ARD lengthscales for points of dimension d = ", d}));
  check_data(ls.data, d, fn);  // an ard_view filled in by hand
  for (std::size_t k = 0; k < d; ++k) check_lengthscale(ls.data[k], "every ARD lengthscale", fn);
  p.per_dim = ls.data;
  p.kind = per_dim_kind::inverse;
}

template <class F, class XV, class YV, class LS>
auto make_kernel(const XV& X, const YV& Y, LS ls, double variance, const char* fn, double alpha = 1) {
  using T = pair_value_t<XV, YV>;
  formula_params<T> p;
  if constexpr (std::is_arithmetic_v<LS>)
    set_lengthscale(p, static_cast<T>(ls), X.cols(), fn);
  else
    set_lengthscale(p, ls, X.cols(), fn);
  check_positive(static_cast<T>(variance), "variance", fn);
  check_positive(static_cast<T>(alpha), "alpha", fn);
  p.variance = static_cast<T>(variance);
  p.alpha = static_cast<T>(alpha);
  if constexpr (std::is_same_v<F, formula::rq>) {  // the formula scales r² by 1/(2αℓ²)
    const T s = p.acc_scale / (T(2) * p.alpha);
    if (!(T(2) * p.alpha >= std::numeric_limits<T>::min()) || !libm::isfinite(s))
      throw argument_error(cat(msg{"memsafe: ", fn, ": alpha ", alpha,
                                " with this lengthscale makes 1/(2αℓ²) overflow; use a larger alpha"}));
    if (!libm::isfinite(T(2) * p.alpha))  // s would be 0: σ² for every finite distance
      throw argument_error(cat(msg{"memsafe: ", fn, ": alpha ", alpha,
                                " is too large (2α overflows); as α grows rq tends to the RBF kernel: use rbf"}));
  }
  return make_pairwise<F>(X, Y, p);
}
}  // namespace detail

// Distances -------------------------------------------------------------------------------------
template <class XV, class YV>
auto sqdist(const XV& X, const YV& Y) { return detail::make_pairwise<formula::sqdist>(X, Y); }
template <class XV, class YV>
auto dist(const XV& X, const YV& Y) { return detail::make_pairwise<formula::dist>(X, Y); }
template <class XV, class YV>
auto l1(const XV& X, const YV& Y) { return detail::make_pairwise<formula::l1>(X, Y); }
template <class XV, class YV>
auto cosine(const XV& X, const YV& Y) { return detail::make_pairwise<formula::cosine>(X, Y); }
template <class XV, class YV>
auto dot(const XV& X, const YV& Y) { return detail::make_pairwise<formula::dot>(X, Y); }

// Kernels ---------------------------------------------------------------------------------------
template <class XV, class YV, class LS = double>
auto rbf(const XV& X, const YV& Y, LS lengthscale = 1, double variance = 1) {
  return detail::make_kernel<formula::rbf>(X, Y, lengthscale, variance, "rbf");
}
template <class XV, class YV, class LS = double>
auto matern12(const XV& X, const YV& Y, LS lengthscale = 1, double variance = 1) {
  return detail::make_kernel<formula::matern12>(X, Y, lengthscale, variance, "matern12");
}
template <class XV, class YV, class LS = double>
auto matern32(const XV& X, const YV& Y, LS lengthscale = 1, double variance = 1) {
  return detail::make_kernel<formula::matern32>(X, Y, lengthscale, variance, "matern32");
}
template <class XV, class YV, class LS = double>
auto matern52(const XV& X, const YV& Y, LS lengthscale = 1, double variance = 1) {
  return detail::make_kernel<formula::matern52>(X, Y, lengthscale, variance, "matern52");
}
template <class XV, class YV, class LS = double>
auto rq(const XV& X, const YV& Y, LS lengthscale = 1, double variance = 1, double alpha = 1) {
  return detail::make_kernel<formula::rq>(X, Y, lengthscale, variance, "rq", alpha);
}
/// σ² x·y with a scalar variance, or Σ_k σ_k² x_k y_k with `ard(variances, d)`.
template <class XV, class YV, class V = double>
auto linear(const XV& X, const YV& Y, V variance = 1) {
  using T = detail::pair_value_t<XV, YV>;
  detail::formula_params<T> p;
  if constexpr (std::is_arithmetic_v<V>) {
    detail::check_positive(static_cast<T>(variance), "variance", "linear");
    p.variance = static_cast<T>(variance);
  } else {
    static_assert(std::is_same_v<V, ard_view<T>>, "memsafe: linear: variance is a scalar or ard(ptr, d)");
    if (variance.size != X.cols())
      throw shape_error(detail::cat(detail::msg{"memsafe: linear: ", variance.size,
                                     " per-dimension variances for points of dimension d = ", X.cols()}));
    detail::check_data(variance.data, variance.size, "linear");  // an ard_view filled in by hand
    for (std::size_t k = 0; k < variance.size; ++k) detail::check_nonneg(variance.data[k], "every variance", "linear");
    p.per_dim = variance.data;
    p.kind = detail::per_dim_kind::sqrt;
  }
  return detail::make_pairwise<formula::linear>(X, Y, p);
}

// ---- elementwise arithmetic -------------------------------------------------------------------

namespace detail {
template <class A, class B>
void check_same_shape(const A& a, const B& b, const char* opname) {
  static_assert(extents_compatible<A::static_rows, B::static_rows> && extents_compatible<A::static_cols, B::static_cols>,
                "memsafe: elementwise operation on lazy matrices of different static shapes");
  static_assert(std::is_same_v<typename A::value_type, typename B::value_type>,
                "memsafe: elementwise operation on lazy matrices of different value types");
  if (a.rows() != b.rows() || a.cols() != b.cols())
    throw shape_error(cat(msg{"memsafe: elementwise '", opname, "': left is ", shape_str(a.rows(), a.cols()),
                           " but right is ", shape_str(b.rows(), b.cols())}));
}
template <class Op, class E>
auto make_unary(const E& e, Op op = {}) {
  return unary_expr<Op, E>{{}, e, op};
}
template <class Op, class A, class B>
auto make_binary(const A& a, const B& b, const char* name) {
  check_same_shape(a, b, name);
  return binary_expr<Op, A, B>{{}, a, b, {}};
}
template <class S>
concept scalar = std::is_arithmetic_v<S>;
}  // namespace detail

template <lazy_matrix A, lazy_matrix B>
auto operator+(const A& a, const B& b) { return detail::make_binary<op::add>(a, b, "+"); }
template <lazy_matrix A, lazy_matrix B>
auto operator-(const A& a, const B& b) { return detail::make_binary<op::sub>(a, b, "-"); }
/// Elementwise (Hadamard) product of two lazy matrices. (`A * B` with both lazy is the matrix product.)
template <lazy_matrix A, lazy_matrix B>
auto hadamard(const A& a, const B& b) { return detail::make_binary<op::mul>(a, b, "hadamard"); }
template <lazy_matrix A, lazy_matrix B>
auto operator/(const A& a, const B& b) { return detail::make_binary<op::div>(a, b, "/"); }
template <lazy_matrix A, lazy_matrix B>
auto min(const A& a, const B& b) { return detail::make_binary<op::min>(a, b, "min"); }
template <lazy_matrix A, lazy_matrix B>
auto max(const A& a, const B& b) { return detail::make_binary<op::max>(a, b, "max"); }

template <lazy_matrix E, detail::scalar S>
auto operator+(const E& e, S c) { return detail::make_unary(e, op::add_scalar<double>{static_cast<double>(c)}); }
template <lazy_matrix E, detail::scalar S>
auto operator+(S c, const E& e) { return e + c; }
template <lazy_matrix E, detail::scalar S>
auto operator-(const E& e, S c) { return detail::make_unary(e, op::add_scalar<double>{-static_cast<double>(c)}); }
template <lazy_matrix E, detail::scalar S>
auto operator-(S c, const E& e) { return detail::make_unary(e, op::sub_from_scalar<double>{static_cast<double>(c)}); }
template <lazy_matrix E, detail::scalar S>
auto operator*(const E& e, S c) { return detail::make_unary(e, op::mul_scalar<double>{static_cast<double>(c)}); }
template <lazy_matrix E, detail::scalar S>
auto operator*(S c, const E& e) { return e * c; }
template <lazy_matrix E, detail::scalar S>
auto operator/(const E& e, S c) { return detail::make_unary(e, op::div_scalar<double>{static_cast<double>(c)}); }
template <lazy_matrix E, detail::scalar S>
auto operator/(S c, const E& e) { return detail::make_unary(e, op::div_into_scalar<double>{static_cast<double>(c)}); }
template <lazy_matrix E>
auto operator-(const E& e) { return detail::make_unary<op::neg>(e); }

template <lazy_matrix E>
auto exp(const E& e) { return detail::make_unary<op::exp>(e); }
template <lazy_matrix E>
auto log(const E& e) { return detail::make_unary<op::log>(e); }
template <lazy_matrix E>
auto sqrt(const E& e) { return detail::make_unary<op::sqrt>(e); }
template <lazy_matrix E>
auto abs(const E& e) { return detail::make_unary<op::abs>(e); }
template <lazy_matrix E>
auto square(const E& e) { return detail::make_unary<op::square>(e); }
template <lazy_matrix E>
auto inv(const E& e) { return detail::make_unary<op::inv>(e); }
template <lazy_matrix E, detail::scalar S>
auto pow(const E& e, S p) { return detail::make_unary(e, op::pow_scalar<double>{static_cast<double>(p)}); }
template <lazy_matrix E, detail::scalar S>
auto clamp_min(const E& e, S c) { return detail::make_unary(e, op::clamp_min<double>{static_cast<double>(c)}); }
template <lazy_matrix E, detail::scalar S>
auto clamp_max(const E& e, S c) { return detail::make_unary(e, op::clamp_max<double>{static_cast<double>(c)}); }

/// The transposed lazy matrix (m×n).
template <lazy_matrix E>
auto transpose(const E& e) { return detail::transpose_expr<E>{{}, e}; }

}  // namespace memsafe
