// memsafe/linalg/dense.hpp — small dense linear algebra through BLAS/LAPACK, on memsafe views.
//
// For the m×m matrices that follow a memsafe reduction (Kuu, Kuf·Kufᵀ, …): Cholesky, triangular
// solves, log-determinant, GEMM and SYRK. Reached through <memsafe/linalg.hpp> (link memsafe::lapack).
// These routines allocate nothing themselves; the BLAS/LAPACK's own internal buffers (OpenBLAS's
// per-thread GEMM buffers) are outside memsafe's budget accounting (docs/design.md).
//
// Layout. memsafe views are row-major by default (element (i, j) at i·row_stride + j·col_stride)
// and Fortran routines are column-major. A view is passed to BLAS when one of its strides is 1:
//   * col_stride == 1 (row-major):    the memory, read column-major with ld = row_stride, is Mᵀ;
//   * row_stride == 1 (column-major): the memory is M itself with ld = col_stride.
// So a transposed view `v.t()` of a row-major matrix is a column-major view of the same memory and
// costs nothing. Every routine computes, for each operand, whether BLAS sees M or Mᵀ and flips
// TRANS / UPLO / SIDE accordingly:
//   * a row-major lower triangle is a column-major upper triangle ('L' ↔ 'U');
//   * a symmetric matrix is its own transpose, so only the triangle flips;
//   * a row-major result C = op(A)·op(B) is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ;
//   * a row-major right-hand side B of op(L)·X = B is solved as Xᵀ·op(L)ᵀ = Bᵀ (SIDE = 'R').
// Views with neither stride 1 are an argument_error. Extents must fit a 32-bit Fortran INTEGER.
#pragma once

#if !defined(MEMSAFE_HAS_LAPACK)
#error "memsafe/linalg/dense.hpp needs MEMSAFE_HAS_LAPACK: include <memsafe/linalg.hpp> and link memsafe::lapack"
#endif

#include <climits>
#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/algo.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/libm.hpp"
#include "../expr/overlap.hpp"
#include "../expr/view.hpp"
#include "fortran.hpp"

namespace memsafe::linalg {

namespace detail {

/// How BLAS sees a view: `transposed` when the column-major memory holds Mᵀ (a row-major view).
struct blas_layout {
  bool transposed;
  int ld;
};

inline int to_int(std::size_t v, const char* fn, const char* what) {
  if (v > static_cast<std::size_t>(INT_MAX))
    throw argument_error(
        memsafe::detail::cat(memsafe::detail::msg{"memsafe::linalg::", fn, ": ", what, " = ", v,
                                                   " does not fit a 32-bit BLAS/LAPACK integer"}));
  return static_cast<int>(v);
}

template <class V>
blas_layout layout(const V& v, const char* fn, const char* what) {
  const std::size_t r = v.rows(), c = v.cols();
  const auto fits = [&](std::size_t ld, std::size_t minimum) { return ld >= (minimum > 0 ? minimum : 1); };
  // Row-major (memory = Mᵀ, c×r column-major with ld = row_stride); a single row or column is
  // accepted with any stride along its length-1 direction.
  if ((v.col_stride() == 1 || c <= 1) && (r <= 1 || fits(v.row_stride(), c)))
    return {true, to_int(r <= 1 ? (c > 0 ? c : 1) : v.row_stride(), fn, "leading dimension")};
  if ((v.row_stride() == 1 || r <= 1) && (c <= 1 || fits(v.col_stride(), r)))
    return {false, to_int(c <= 1 ? (r > 0 ? r : 1) : v.col_stride(), fn, "leading dimension")};
  throw argument_error(memsafe::detail::cat(
      memsafe::detail::msg{"memsafe::linalg::", fn, ": ", what, " (", v.shape(), ", strides ", v.row_stride(), ", ",
                           v.col_stride(), ") has no unit stride; BLAS needs row- or column-contiguous storage"}));
}

template <class V>
void require_square(const V& v, const char* fn, const char* what) {
  if (v.rows() != v.cols())
    throw shape_error(memsafe::detail::cat(
        memsafe::detail::msg{"memsafe::linalg::", fn, ": ", what, " must be square, got ", v.shape()}));
}

/// A named operand for check_apart (expr/overlap.hpp): BLAS and LAPACK read the operands while they
/// write the output, so an output sharing memory with one is refused (argument_error) before the call
/// — aliased, the answer would be wrong without a word.
template <class V>
memsafe::detail::named_block operand(const char* name, const V& v) {
  return {name, memsafe::detail::block_of(v)};
}
inline constexpr const char* prefix = "memsafe::linalg::";

inline std::string shapes(std::size_t r1, std::size_t c1, std::size_t r2, std::size_t c2) {
  return memsafe::detail::cat(
      memsafe::detail::msg{memsafe::detail::shape_str(r1, c1), " and ", memsafe::detail::shape_str(r2, c2)});
}

template <class T>
using value_t = std::remove_cv_t<T>;

/// Square blocks of the loops below that read a matrix across what they write: one of the two is
/// read along columns in any layout, and a plain double loop then touches one cache line (and, for
/// n in the thousands, one page) per element.
inline constexpr std::size_t transposed_block = 64;

/// A(i, j) ← A(j, i) for j > i: the lower triangle copied onto the upper one, in blocks (at
/// n = 10⁴: 0.4 s as a plain double loop, 0.12 s in blocks).
template <class V>
void mirror_lower(V A) {
  constexpr std::size_t b = transposed_block;
  const std::size_t n = A.rows();
  for (std::size_t i0 = 0; i0 < n; i0 += b)
    for (std::size_t j0 = i0; j0 < n; j0 += b) {
      const std::size_t i1 = std::min(n, i0 + b), j1 = std::min(n, j0 + b);
      for (std::size_t i = i0; i < i1; ++i)
        for (std::size_t j = std::max(j0, i + 1); j < j1; ++j) A(i, j) = A(j, i);
    }
}

/// D(i, j) −= S(j, i) for the rows × cols block D and the cols × rows block S, both column-major
/// with leading dimension ld, in blocks.
inline void subtract_transposed(double* D, const double* S, std::size_t rows, std::size_t cols, std::size_t ld) {
  constexpr std::size_t b = transposed_block;
  for (std::size_t j0 = 0; j0 < cols; j0 += b)
    for (std::size_t i0 = 0; i0 < rows; i0 += b)
      for (std::size_t j = j0; j < std::min(cols, j0 + b); ++j)
        for (std::size_t i = i0; i < std::min(rows, i0 + b); ++i) D[i + j * ld] -= S[j + i * ld];
}

}  // namespace detail

/// In-place Cholesky factorisation A = L·Lᵀ of a symmetric positive-definite matrix.
/// Reads only A's lower triangle (in A's own indexing, whatever its layout), overwrites it with L
/// and sets the strict upper triangle to zero, so A afterwards holds exactly L.
/// Throws shape_error if A is not square, argument_error naming the first leading minor that is not
/// positive definite (A is then partly overwritten).
template <class T, std::size_t R, std::size_t C>
void cholesky(matrix_view<T, R, C> A) {
  static_assert(!std::is_const_v<T>, "memsafe::linalg::cholesky factorises in place: pass a writable view");
  detail::require_square(A, "cholesky", "A");
  const std::size_t n = A.rows();
  if (n == 0) return;
  const auto lay = detail::layout(A, "cholesky", "A");
  const int N = detail::to_int(n, "cholesky", "n");
  // Row-major memory holds Aᵀ: A's lower triangle is the column-major upper triangle, and the
  // factor U with Aᵀ = UᵀU there is L = Uᵀ seen row-major (Aᵀ = A).
  const char uplo = lay.transposed ? 'U' : 'L';
  int info = 0;
  if constexpr (std::is_same_v<T, double>)
    dpotrf_(&uplo, &N, A.data(), &lay.ld, &info, 1);
  else
    spotrf_(&uplo, &N, A.data(), &lay.ld, &info, 1);
  if (info > 0)
    throw argument_error(memsafe::detail::cat(memsafe::detail::msg{
        "memsafe::linalg::cholesky: the matrix (", A.shape(), ") is not positive definite: its leading minor of order ",
        info, " is not positive definite (add jitter to the diagonal?)"}));
  if (info < 0)
    throw argument_error(
        memsafe::detail::cat(memsafe::detail::msg{"memsafe::linalg::cholesky: LAPACK rejected argument ", -info}));
  // POTRF's test of a pivot (ajj ≤ 0) is false for NaN: a NaN or infinite entry can come back
  // with info = 0 and a factor of NaNs
  for (std::size_t i = 0; i < n; ++i)
    if (!(libm::isfinite(A(i, i)) && A(i, i) > T(0)))
      throw argument_error(memsafe::detail::cat(
          memsafe::detail::msg{"memsafe::linalg::cholesky: the matrix (", A.shape(), ") is not positive definite: pivot ",
                               i + 1, " is not a finite positive number (a NaN or infinite entry?)"}));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) A(i, j) = T(0);
}

/// In place A⁻¹ from its Cholesky factor: A holds L (lower, as cholesky() leaves it) on entry and
/// (L·Lᵀ)⁻¹, both triangles, on return (LAPACK POTRI). Throws argument_error on a zero diagonal.
template <class T, std::size_t R, std::size_t C>
void cholesky_inverse(matrix_view<T, R, C> A) {
  static_assert(!std::is_const_v<T>, "memsafe::linalg::cholesky_inverse works in place: pass a writable view");
  detail::require_square(A, "cholesky_inverse", "A");
  const std::size_t n = A.rows();
  if (n == 0) return;
  const auto lay = detail::layout(A, "cholesky_inverse", "A");
  const int N = detail::to_int(n, "cholesky_inverse", "n");
  // As in cholesky(): a row-major lower triangle is the column-major upper one (U = Lᵀ, A = UᵀU).
  const char uplo = lay.transposed ? 'U' : 'L';
  int info = 0;
  if constexpr (std::is_same_v<T, double>)
    dpotri_(&uplo, &N, A.data(), &lay.ld, &info, 1);
  else
    spotri_(&uplo, &N, A.data(), &lay.ld, &info, 1);
  if (info != 0)
    throw argument_error(
        memsafe::detail::cat(memsafe::detail::msg{"memsafe::linalg::cholesky_inverse: LAPACK POTRI failed (info ", info,
                                                  "): the factor is singular"}));
  detail::mirror_lower(A);
}

/// In place B ← L⁻¹·B (trans = false) or B ← L⁻ᵀ·B (trans = true) for lower-triangular L (n×n,
/// non-unit diagonal; only the lower triangle is read) and B n×k, through TRSM.
template <class TL, std::size_t R1, std::size_t C1, class T, std::size_t R2, std::size_t C2>
void solve_lower(matrix_view<TL, R1, C1> L, matrix_view<T, R2, C2> B, bool trans = false) {
  static_assert(std::is_same_v<detail::value_t<TL>, T> && !std::is_const_v<T>,
                "memsafe::linalg::solve_lower: L and a writable B of the same value type");
  detail::require_square(L, "solve_lower", "L");
  if (L.rows() != B.rows())
    throw shape_error(memsafe::detail::cat(memsafe::detail::msg{
        "memsafe::linalg::solve_lower: L and B do not fit: ", detail::shapes(L.rows(), L.cols(), B.rows(), B.cols())}));
  if (B.rows() == 0 || B.cols() == 0) return;
  memsafe::detail::check_apart({detail::operand("B", B)}, {detail::operand("L", L)}, "solve_lower", detail::prefix);
  const auto ll = detail::layout(L, "solve_lower", "L");
  const auto bl = detail::layout(B, "solve_lower", "B");
  // Memory of L (column-major) is L or Lᵀ; a row-major lower L is a column-major upper triangle.
  const char uplo = ll.transposed ? 'U' : 'L';
  // Column-major B: solve op(L)·X = B (SIDE 'L'), op(L) = L^trans.
  // Row-major B (memory = Bᵀ): solve Xᵀ·op(L)ᵀ = Bᵀ (SIDE 'R'), so BLAS needs L^(!trans).
  const bool want_t = bl.transposed ? !trans : trans;  // the op BLAS must apply, in L's terms
  const char transa = (ll.transposed != want_t) ? 'T' : 'N';
  const char side = bl.transposed ? 'R' : 'L';
  const char diag = 'N';
  const int M = detail::to_int(bl.transposed ? B.cols() : B.rows(), "solve_lower", "rows");
  const int N = detail::to_int(bl.transposed ? B.rows() : B.cols(), "solve_lower", "cols");
  const T one = T(1);
  if constexpr (std::is_same_v<T, double>)
    dtrsm_(&side, &uplo, &transa, &diag, &M, &N, &one, L.data(), &ll.ld, B.data(), &bl.ld, 1, 1, 1, 1);
  else
    strsm_(&side, &uplo, &transa, &diag, &M, &N, &one, L.data(), &ll.ld, B.data(), &bl.ld, 1, 1, 1, 1);
}

/// In place b ← L⁻¹·b or L⁻ᵀ·b for a vector (any stride), through TRSV.
template <class TL, std::size_t R1, std::size_t C1, class T, std::size_t N1>
void solve_lower(matrix_view<TL, R1, C1> L, vector_view<T, N1> b, bool trans = false) {
  static_assert(std::is_same_v<detail::value_t<TL>, T> && !std::is_const_v<T>,
                "memsafe::linalg::solve_lower: L and a writable b of the same value type");
  detail::require_square(L, "solve_lower", "L");
  if (L.rows() != b.size())
    throw shape_error(
        memsafe::detail::cat(memsafe::detail::msg{"memsafe::linalg::solve_lower: L (", L.shape(), ") and b (length ",
                                                  b.size(), ") do not fit"}));
  if (b.size() == 0) return;
  memsafe::detail::check_apart({detail::operand("b", b)}, {detail::operand("L", L)}, "solve_lower", detail::prefix);
  const auto ll = detail::layout(L, "solve_lower", "L");
  const char uplo = ll.transposed ? 'U' : 'L';
  const char transa = (ll.transposed != trans) ? 'T' : 'N';
  const char diag = 'N';
  const int N = detail::to_int(b.size(), "solve_lower", "n");
  // A single element's stride is never used: any value (0, or one past INT_MAX) is fine.
  const int inc = N == 1 ? 1 : detail::to_int(b.stride(), "solve_lower", "stride");
  if (inc == 0) throw argument_error("memsafe::linalg::solve_lower: b has stride 0");
  if constexpr (std::is_same_v<T, double>)
    dtrsv_(&uplo, &transa, &diag, &N, L.data(), &ll.ld, b.data(), &inc, 1, 1, 1);
  else
    strsv_(&uplo, &transa, &diag, &N, L.data(), &ll.ld, b.data(), &inc, 1, 1, 1);
}

/// log det(A) = 2·Σ log L_ii from A's Cholesky factor L (accumulated in double).
template <class T, std::size_t R, std::size_t C>
double logdet_from_cholesky(matrix_view<T, R, C> L) {
  detail::require_square(L, "logdet_from_cholesky", "L");
  double s = 0;
  for (std::size_t i = 0; i < L.rows(); ++i) s += libm::log(static_cast<double>(L(i, i)));
  return 2 * s;
}

/// An estimate of ‖A⁻¹‖₁ for A = L·Lᵀ from its Cholesky factor L (lower-triangular n×n): Hager's
/// method with Higham's refinements (LAPACK's xLACN2, here for a symmetric A), at most 5 steps of two
/// triangular solves each (O(n²) flops apiece), one more for Higham's alternative vector and 4 of
/// inverse iteration from it. A lower bound of the true norm, in practice within a small factor of
/// it (often equal). `work` (n entries,
/// unit stride) is its only workspace and is overwritten. 0 for n = 0.
template <class TL, std::size_t R1, std::size_t C1, class T, std::size_t N1>
double inverse_norm1_estimate(matrix_view<TL, R1, C1> L, vector_view<T, N1> work) {
  detail::require_square(L, "inverse_norm1_estimate", "L");
  const std::size_t n = L.rows();
  if (work.size() != n)
    throw shape_error(memsafe::detail::cat(memsafe::detail::msg{"memsafe::linalg::inverse_norm1_estimate: L (",
                                                                L.shape(), ") and work (length ", work.size(),
                                                                ") do not fit"}));
  if (n == 0) return 0;
  T* x = work.data();
  const auto apply = [&] {  // x ← A⁻¹x = L⁻ᵀ(L⁻¹x)
    solve_lower(L, work);
    solve_lower(L, work, true);
  };
  const auto norm1 = [&] {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += libm::fabs(static_cast<double>(x[i]));
    return s;
  };
  std::fill(x, x + n, T(1) / static_cast<T>(n));
  apply();
  double est = norm1();
  if (n > 1) {
    std::size_t prev = n;  // the index of the unit vector just applied (n: the first, constant one)
    for (int step = 0; step < 5; ++step) {
      for (std::size_t i = 0; i < n; ++i) x[i] = x[i] >= T(0) ? T(1) : T(-1);  // ξ = sign(A⁻¹x)
      apply();                                                               // z = A⁻ᵀξ = A⁻¹ξ
      std::size_t j = 0;
      for (std::size_t i = 1; i < n; ++i)
        if (libm::fabs(static_cast<double>(x[i])) > libm::fabs(static_cast<double>(x[j]))) j = i;
      double ztx = 0;  // zᵀx of the vector applied last: no direction promises more
      if (prev == n)
        for (std::size_t i = 0; i < n; ++i) ztx += static_cast<double>(x[i]) / static_cast<double>(n);
      else
        ztx = static_cast<double>(x[prev]);
      if (step > 0 && libm::fabs(static_cast<double>(x[j])) <= ztx) break;
      std::fill(x, x + n, T(0));
      x[j] = T(1);
      apply();
      const double next = norm1();
      prev = j;
      if (next <= est) break;
      est = next;
    }
    for (std::size_t i = 0; i < n; ++i)  // Higham's alternative: (−1)^i (1 + i/(n−1))
      x[i] = static_cast<T>((i % 2 ? -1.0 : 1.0) * (1.0 + static_cast<double>(i) / static_cast<double>(n - 1)));
    apply();
    est = std::max(est, 2.0 * norm1() / (3.0 * static_cast<double>(n)));
    // Hager's steps can miss a column of A⁻¹ far larger than the rest when the sign vectors never
    // alternate where it does (close pairs of points in a kernel matrix: A⁻¹ ≈ ±c on a 2×2 block);
    // a few steps of inverse iteration from the alternating vector find the dominant direction of
    // A⁻¹, and ‖A⁻¹x‖₁/‖x‖₁ is a lower bound of ‖A⁻¹‖₁ for every x.
    for (int step = 0; step < 4; ++step) {
      const double s = norm1();
      if (!(s > 0) || !libm::isfinite(s)) break;
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<double>(x[i]) / s);
      apply();
      est = std::max(est, norm1());
    }
  }
  return est;
}

/// C ← alpha·op(A)·op(B) + beta·C with op(X) = Xᵀ when transX, through GEMM.
/// op(A) is p×k, op(B) k×q, C p×q; beta = 0 ignores C's previous contents (NaN included).
template <class TA, std::size_t RA, std::size_t CA, class TB, std::size_t RB, std::size_t CB, class T,
          std::size_t RC, std::size_t CC>
void gemm(std::type_identity_t<T> alpha, matrix_view<TA, RA, CA> A, bool transA, matrix_view<TB, RB, CB> B,
          bool transB, std::type_identity_t<T> beta, matrix_view<T, RC, CC> C) {
  static_assert(std::is_same_v<detail::value_t<TA>, T> && std::is_same_v<detail::value_t<TB>, T> &&
                    !std::is_const_v<T>,
                "memsafe::linalg::gemm: A, B and a writable C of the same value type");
  const std::size_t p = transA ? A.cols() : A.rows(), k = transA ? A.rows() : A.cols();
  const std::size_t kb = transB ? B.cols() : B.rows(), q = transB ? B.rows() : B.cols();
  if (k != kb || C.rows() != p || C.cols() != q)
    throw shape_error(memsafe::detail::cat(
        memsafe::detail::msg{"memsafe::linalg::gemm: op(A) ", memsafe::detail::shape_str(p, k), ", op(B) ",
                             memsafe::detail::shape_str(kb, q), " and C ", C.shape(), " do not fit"}));
  if (p == 0 || q == 0) return;
  if (k != 0) {
    memsafe::detail::check_apart({detail::operand("C", C)}, {detail::operand("A", A), detail::operand("B", B)}, "gemm",
                                 detail::prefix);
  }
  if (k == 0) {  // BLAS would only scale C; do it here (and honour beta = 0 exactly)
    for (std::size_t i = 0; i < p; ++i)
      for (std::size_t j = 0; j < q; ++j) C(i, j) = beta == T(0) ? T(0) : beta * C(i, j);
    return;
  }
  const auto al = detail::layout(A, "gemm", "A");
  const auto bl = detail::layout(B, "gemm", "B");
  const auto cl = detail::layout(C, "gemm", "C");
  // BLAS applies 'T' to an operand's memory; the memory holds X (column-major) or Xᵀ (row-major),
  // so 'T' is needed iff the wanted op differs from what the memory holds.
  const auto op = [](const detail::blas_layout& l, bool want_transposed) { return l.transposed != want_transposed ? 'T' : 'N'; };
  const int P = detail::to_int(p, "gemm", "rows"), Q = detail::to_int(q, "gemm", "cols"),
            K = detail::to_int(k, "gemm", "inner");
  const auto call = [&](const char ta, const char tb, const int m, const int n, const T* a, int lda, const T* b,
                        int ldb) {
    if constexpr (std::is_same_v<T, double>)
      dgemm_(&ta, &tb, &m, &n, &K, &alpha, a, &lda, b, &ldb, &beta, C.data(), &cl.ld, 1, 1);
    else
      sgemm_(&ta, &tb, &m, &n, &K, &alpha, a, &lda, b, &ldb, &beta, C.data(), &cl.ld, 1, 1);
  };
  if (!cl.transposed)  // column-major C = op(A)·op(B)
    call(op(al, transA), op(bl, transB), P, Q, A.data(), al.ld, B.data(), bl.ld);
  else  // row-major C: its memory is Cᵀ = op(B)ᵀ·op(A)ᵀ
    call(op(bl, !transB), op(al, !transA), Q, P, B.data(), bl.ld, A.data(), al.ld);
}

/// C ← alpha·op(A)·op(A)ᵀ + beta·C (C symmetric n×n; op(A) = Aᵀ when transA) through SYRK.
/// SYRK updates one triangle; the other is then filled by symmetry, so all of C is valid.
template <class TA, std::size_t RA, std::size_t CA, class T, std::size_t RC, std::size_t CC>
void syrk(std::type_identity_t<T> alpha, matrix_view<TA, RA, CA> A, bool transA, std::type_identity_t<T> beta,
          matrix_view<T, RC, CC> C) {
  static_assert(std::is_same_v<detail::value_t<TA>, T> && !std::is_const_v<T>,
                "memsafe::linalg::syrk: A and a writable C of the same value type");
  detail::require_square(C, "syrk", "C");
  const std::size_t n = transA ? A.cols() : A.rows(), k = transA ? A.rows() : A.cols();
  if (C.rows() != n)
    throw shape_error(memsafe::detail::cat(memsafe::detail::msg{
        "memsafe::linalg::syrk: op(A) ", memsafe::detail::shape_str(n, k), " and C ", C.shape(), " do not fit"}));
  if (n == 0) return;
  if (k == 0) {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) C(i, j) = beta == T(0) ? T(0) : beta * C(i, j);
    return;
  }
  memsafe::detail::check_apart({detail::operand("C", C)}, {detail::operand("A", A)}, "syrk", detail::prefix);
  const auto al = detail::layout(A, "syrk", "A");
  const auto cl = detail::layout(C, "syrk", "C");
  // C is symmetric, so its memory is C whatever the layout; we update C's lower triangle (in C's
  // own indexing), which is the column-major upper triangle of a row-major C.
  const char uplo = cl.transposed ? 'U' : 'L';
  // SYRK 'N' computes M·Mᵀ of the memory M (= A or Aᵀ); we need op(A)·op(A)ᵀ, i.e. M = op(A).
  const char trans = (al.transposed == transA) ? 'N' : 'T';
  const int N = detail::to_int(n, "syrk", "n"), K = detail::to_int(k, "syrk", "k");
  if constexpr (std::is_same_v<T, double>)
    dsyrk_(&uplo, &trans, &N, &K, &alpha, A.data(), &al.ld, &beta, C.data(), &cl.ld, 1, 1);
  else
    ssyrk_(&uplo, &trans, &N, &K, &alpha, A.data(), &al.ld, &beta, C.data(), &cl.ld, 1, 1);
  detail::mirror_lower(C);
}

}  // namespace memsafe::linalg
