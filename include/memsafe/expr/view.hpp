// memsafe/expr/view.hpp — non-owning views over caller memory (capture stage terminals).
#pragma once
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/error.hpp"

namespace memsafe {

namespace detail {
/// Compile-time or run-time extent: stores nothing when static.
template <std::size_t E>
struct extent_holder {
  static constexpr std::size_t value = E;
  constexpr extent_holder(std::size_t) {}
  constexpr std::size_t get() const { return E; }
};
template <>
struct extent_holder<dyn> {
  std::size_t v;
  constexpr extent_holder(std::size_t x) : v(x) {}
  constexpr std::size_t get() const { return v; }
};
inline std::string shape_str(std::size_t r, std::size_t c) { return cat(msg{r, "×", c}); }
/// a·b, or argument_error starting with `what` when the product does not fit in std::size_t.
inline std::size_t checked_mul(std::size_t a, std::size_t b, const std::string& what) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw argument_error(cat(msg{what, ": the extents ", a, " × ", b, " overflow the size type"}));
  return r;
}
inline void check_data(const void* p, std::size_t count, const char* what) {
  if (!p && count != 0)
    throw argument_error(cat(msg{"memsafe: ", what, ": null data pointer with ", count, " elements"}));
}
/// The largest extent of any view (2⁴⁰ rows, columns or coordinates): the planners multiply an
/// extent by tile sizes, lanes and element sizes, which must not wrap around std::size_t. A larger
/// one can only come from a stride of 0 (a point of 2⁴⁰ doubles is 8 TiB).
inline constexpr std::size_t max_extent = std::size_t{1} << 40;
/// The extents of a view of any rank (ext[0..rank), element strides str[0..rank)) must not pass
/// max_extent, its elements (as if dense) must be addressable, and so must the elements it spans:
/// the last one's byte offset fits in std::ptrdiff_t (no extent or stride product wraps around, so
/// no check can be bypassed by it). Every view checks itself here (matrix_view, vector_view,
/// tensor, heads_view): one instance for every element type (its size is an argument), compiled
/// only where used.
template <class = void>
[[gnu::noinline]] MEMSAFE_COLD void check_extents(const std::size_t* ext, const std::size_t* str, std::size_t rank,
                                            std::size_t elem, const char* what) {
  auto list = [rank](const std::size_t* v, const char* sep) {
    std::string r;
    for (std::size_t k = 0; k < rank; ++k) {
      if (k) r += sep;
      r += msg_piece(v[k]).view();
    }
    return r;
  };
  auto shape = [&] { return cat(msg{"memsafe: ", what, ": ", list(ext, "×"), " elements"}); };
  std::size_t count = 1;
  bool big = false;
  for (std::size_t k = 0; k < rank; ++k) {
    if (__builtin_mul_overflow(count, ext[k], &count))
      throw argument_error(cat(msg{shape(), ": their count overflows std::size_t"}));
    big = big || ext[k] > max_extent;
  }
  if (big)
    throw argument_error(cat(msg{shape(), ": an extent above 2^40 (", max_extent,
                              ") is not supported (the planners' byte counts would overflow)"}));
  constexpr auto top = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  std::size_t bytes, last = 0, t;
  if (__builtin_mul_overflow(count, elem, &bytes) || bytes > top)
    throw argument_error(cat(msg{shape(), " of ", elem, " bytes are more than can be addressed"}));
  if (count == 0) return;
  bool wraps = false;
  for (std::size_t k = 0; k < rank; ++k)
    wraps = wraps || __builtin_mul_overflow(ext[k] - 1, str[k], &t) || __builtin_add_overflow(last, t, &last);
  if (wraps || __builtin_add_overflow(last, std::size_t{1}, &last) || __builtin_mul_overflow(last, elem, &bytes) ||
      bytes > top)
    throw argument_error(cat(msg{shape(), " with strides (", list(str, ", "), ") span more memory than can be addressed"}));
}
/// check_extents for a rows × cols view of T with strides (rs, cs).
template <class T>
void check_span(std::size_t rows, std::size_t cols, std::size_t rs, std::size_t cs, const char* what) {
  const std::size_t e[2] = {rows, cols}, s[2] = {rs, cs};
  check_extents(e, s, 2, sizeof(T), what);
}
/// Static extents A and B can be equal (either is dynamic, or both agree).
template <std::size_t A, std::size_t B>
inline constexpr bool extents_compatible = (A == dyn || B == dyn || A == B);
}  // namespace detail

/// Row-major (by default) matrix over caller memory: `rows × cols`, element (i, j) at
/// data[i * row_stride + j * col_stride]. R and C are static extents or `dyn`.
template <class T, std::size_t R = dyn, std::size_t C = dyn>
class matrix_view {
  static_assert(real<T>, "memsafe: views hold float or double");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  static constexpr std::size_t static_rows = R, static_cols = C;

  constexpr matrix_view(T* data, std::size_t rows, std::size_t cols, std::size_t row_stride, std::size_t col_stride)
      : data_(data), rows_(rows), cols_(cols), rs_(row_stride), cs_(col_stride) {
    if constexpr (R != dyn)
      if (rows != R) throw shape_error(detail::cat(detail::msg{"memsafe: matrix_view: static rows ", R, " but given ", rows}));
    if constexpr (C != dyn)
      if (cols != C) throw shape_error(detail::cat(detail::msg{"memsafe: matrix_view: static cols ", C, " but given ", cols}));
    detail::check_span<T>(rows, cols, row_stride, col_stride, "matrix_view");
    detail::check_data(data, rows * cols, "matrix_view");
  }
  constexpr matrix_view(T* data, std::size_t rows, std::size_t cols) : matrix_view(data, rows, cols, cols, 1) {}

  /// Implicit conversion to a view over const data and to dynamic extents.
  template <class U, std::size_t R2, std::size_t C2>
    requires(std::is_same_v<const U, T> || std::is_same_v<U, T>) && (R == dyn || R == R2) && (C == dyn || C == C2)
  constexpr matrix_view(const matrix_view<U, R2, C2>& o)
      : data_(o.data()), rows_(o.rows()), cols_(o.cols()), rs_(o.row_stride()), cs_(o.col_stride()) {}

  constexpr T* data() const { return data_; }
  constexpr std::size_t rows() const { return rows_.get(); }
  constexpr std::size_t cols() const { return cols_.get(); }
  constexpr std::size_t row_stride() const { return rs_; }
  constexpr std::size_t col_stride() const { return cs_; }
  constexpr bool row_contiguous() const { return cs_ == 1; }
  constexpr T& operator()(std::size_t i, std::size_t j) const { return data_[i * rs_ + j * cs_]; }
  constexpr T* row(std::size_t i) const { return data_ + i * rs_; }
  std::string shape() const { return detail::shape_str(rows(), cols()); }

  /// The transposed view (no copy): rows and strides swap.
  constexpr matrix_view<T, C, R> t() const { return {data_, cols(), rows(), cs_, rs_}; }

 private:
  T* data_;
  [[no_unique_address]] detail::extent_holder<R> rows_;
  [[no_unique_address]] detail::extent_holder<C> cols_;
  std::size_t rs_, cs_;
};

/// Vector over caller memory with a stride.
template <class T, std::size_t N = dyn>
class vector_view {
  static_assert(real<T>, "memsafe: views hold float or double");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  static constexpr std::size_t static_size = N;

  constexpr vector_view(T* data, std::size_t n, std::size_t stride = 1) : data_(data), n_(n), stride_(stride) {
    if constexpr (N != dyn)
      if (n != N) throw shape_error(detail::cat(detail::msg{"memsafe: vector_view: static size ", N, " but given ", n}));
    detail::check_span<T>(n, 1, stride, 1, "vector_view");
    detail::check_data(data, n, "vector_view");
  }
  template <class U, std::size_t N2>
    requires(std::is_same_v<const U, T> || std::is_same_v<U, T>) && (N == dyn || N == N2)
  constexpr vector_view(const vector_view<U, N2>& o) : data_(o.data()), n_(o.size()), stride_(o.stride()) {}

  constexpr T* data() const { return data_; }
  constexpr std::size_t size() const { return n_.get(); }
  constexpr std::size_t stride() const { return stride_; }
  constexpr T& operator[](std::size_t i) const { return data_[i * stride_]; }
  /// The vector as an n×1 matrix (a single right-hand side).
  constexpr matrix_view<T, N, 1> as_column() const { return {data_, size(), 1, stride_, 1}; }

 private:
  T* data_;
  [[no_unique_address]] detail::extent_holder<N> n_;
  std::size_t stride_;
};

// ---- factories --------------------------------------------------------------------------------

/// n points of dimension d, row-major, read-only: `points(ptr, n, d)`.
template <real T>
constexpr matrix_view<const T> points(const T* data, std::size_t n, std::size_t d) {
  return {data, n, d};
}
/// Points with a static dimension: `points<3>(ptr, n)`.
template <std::size_t D, real T>
constexpr matrix_view<const T, dyn, D> points(const T* data, std::size_t n) {
  static_assert(D != dyn && D > 0, "memsafe: a static point dimension must be positive");
  return {data, n, D};
}
/// Points from a contiguous range: `points(std::span<const float>(v), d)`; size must divide by d.
template <real T>
matrix_view<const T> points(std::span<const T> s, std::size_t d) {
  if (d == 0 ? !s.empty() : s.size() % d != 0)
    throw shape_error(detail::cat(detail::msg{"memsafe: points: ", s.size(), " values do not make rows of d = ", d}));
  return {s.data(), d == 0 ? 0 : s.size() / d, d};
}

/// Dense row-major matrix (read-only or writable, following the pointer's constness).
template <class T>
  requires real<T>
constexpr matrix_view<T> matrix(T* data, std::size_t rows, std::size_t cols) {
  return {data, rows, cols};
}
template <std::size_t R, std::size_t C, class T>
  requires real<T>
constexpr matrix_view<T, R, C> matrix(T* data) {
  return {data, R, C};
}

/// Dense vector.
template <class T>
  requires real<T>
constexpr vector_view<T> vec(T* data, std::size_t n, std::size_t stride = 1) {
  return {data, n, stride};
}
template <std::size_t N, class T>
  requires real<T>
constexpr vector_view<T, N> vec(T* data) {
  return {data, N};
}

/// Per-dimension parameter (ARD lengthscales, or linear-kernel variances): `ard(ptr, d)`.
template <real T>
struct ard_view {
  const T* data;
  std::size_t size;
};
template <real T>
constexpr ard_view<T> ard(const T* data, std::size_t d) {
  detail::check_data(data, d, "ard");
  return {data, d};
}
template <real T>
constexpr ard_view<T> ard(std::span<const T> s) {
  return {s.data(), s.size()};
}

namespace detail {
template <class>
struct is_matrix_view : std::false_type {};
template <class T, std::size_t R, std::size_t C>
struct is_matrix_view<matrix_view<T, R, C>> : std::true_type {};
template <class>
struct is_vector_view : std::false_type {};
template <class T, std::size_t N>
struct is_vector_view<vector_view<T, N>> : std::true_type {};

/// The index of the first of the n entries p[0], p[s], …, p[(n−1)·s] that is not finite (±∞ or NaN),
/// or n when all are: one pass summing x − x (0 for a finite x, NaN otherwise), and a second only
/// over a run that holds one.
template <class T>
std::size_t first_nonfinite(const T* p, std::size_t n, std::size_t s) {
  T z = 0;
  for (std::size_t c = 0; c < n; ++c) z += p[c * s] - p[c * s];
  if (z == z) return n;
  std::size_t c = 0;
  while (p[c * s] - p[c * s] == 0) ++c;
  return c;
}

/// Whether two views are the same memory with the same layout: the "same points" fact that the
/// guards of stationary_diagonal and symmetric_product check at run time (rewrite::same_view), and
/// that a pairwise node's label shows (X twice).
template <class U, class V>
bool same_view(const U& u, const V& v) {
  return u.data() == v.data() && u.rows() == v.rows() && u.cols() == v.cols() && u.row_stride() == v.row_stride() &&
         u.col_stride() == v.col_stride();
}
}  // namespace detail

}  // namespace memsafe
