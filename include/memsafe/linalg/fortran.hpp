// memsafe/linalg/fortran.hpp — the BLAS/LAPACK symbols memsafe calls, declared by hand.
//
// No cblas.h / lapacke.h: memsafe declares the Fortran-77 entry points itself, so it links with
// any BLAS/LAPACK (OpenBLAS, reference, MKL in LP64 mode) through CMake's FindLAPACK.
//
// ABI (gfortran, LP64, which is what Debian's OpenBLAS and reference LAPACK use):
//   * every argument is passed by pointer; integers are 32-bit `int` (LP64, not ILP64);
//   * each CHARACTER argument has a hidden length argument appended after all the others, of type
//     size_t since GCC 8. memsafe always passes them (all 1). Implementations written in C
//     (OpenBLAS's own interfaces) ignore the extra arguments, which is harmless with the C calling
//     convention (the caller owns the arguments), and gfortran-compiled LAPACK routines read them.
//   * Fortran arrays are column-major. See dense.hpp for how row-major views are mapped.
//
// Only usable with MEMSAFE_HAS_LAPACK (link memsafe::lapack); the declarations are harmless without
// it, but nothing provides the symbols then.
#pragma once
#include <cstddef>

namespace memsafe::linalg::fortran {
using blas_int = int;         ///< LP64 Fortran INTEGER
using strlen_t = std::size_t; ///< gfortran hidden CHARACTER length (GCC ≥ 8)
}  // namespace memsafe::linalg::fortran

extern "C" {
// ---- LAPACK: Cholesky -------------------------------------------------------------------------
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t uplo_len);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, std::size_t uplo_len);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t uplo_len);
// A ← inv(L)·A·inv(Lᵀ) (itype 1, uplo 'L'; or inv(Uᵀ)·A·inv(U) with 'U') for symmetric A: one blocked
// routine, ≈ n³ flops against 2n³ for two triangular solves with n right-hand sides.
void dsygst_(const int* itype, const char* uplo, const int* n, double* a, const int* lda, const double* b,
             const int* ldb, int* info, std::size_t uplo_len);
void spotri_(const char* uplo, const int* n, float* a, const int* lda, int* info, std::size_t uplo_len);

// ---- BLAS level 3 -----------------------------------------------------------------------------
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc, std::size_t transa_len, std::size_t transb_len);
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc, std::size_t transa_len, std::size_t transb_len);
void dsyrk_(const char* uplo, const char* trans, const int* n, const int* k, const double* alpha, const double* a,
            const int* lda, const double* beta, double* c, const int* ldc, std::size_t uplo_len,
            std::size_t trans_len);
void ssyrk_(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha, const float* a,
            const int* lda, const float* beta, float* c, const int* ldc, std::size_t uplo_len, std::size_t trans_len);
void dsyr2k_(const char* uplo, const char* trans, const int* n, const int* k, const double* alpha, const double* a,
             const int* lda, const double* b, const int* ldb, const double* beta, double* c, const int* ldc,
             std::size_t uplo_len, std::size_t trans_len);
void dtrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const double* alpha, const double* a, const int* lda, double* b, const int* ldb, std::size_t side_len,
            std::size_t uplo_len, std::size_t transa_len, std::size_t diag_len);
void strsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const float* alpha, const float* a, const int* lda, float* b, const int* ldb, std::size_t side_len,
            std::size_t uplo_len, std::size_t transa_len, std::size_t diag_len);

// ---- BLAS level 2 -----------------------------------------------------------------------------
void dtrsv_(const char* uplo, const char* trans, const char* diag, const int* n, const double* a, const int* lda,
            double* x, const int* incx, std::size_t uplo_len, std::size_t trans_len, std::size_t diag_len);
void strsv_(const char* uplo, const char* trans, const char* diag, const int* n, const float* a, const int* lda,
            float* x, const int* incx, std::size_t uplo_len, std::size_t trans_len, std::size_t diag_len);

// ---- OpenBLAS thread control (weak: absent from reference BLAS, MKL, …) -------------------------
// A weak undefined reference resolves to null when no loaded library defines the symbol, so memsafe
// tests the address before calling. openblas_set_num_threads_local (OpenBLAS ≥ 0.3.27) sets the
// count for the calling thread only and returns the previous value.
__attribute__((weak)) void openblas_set_num_threads(int num_threads);
__attribute__((weak)) int openblas_get_num_threads(void);
__attribute__((weak)) int openblas_set_num_threads_local(int num_threads);
}

namespace memsafe::linalg {

/// True when the linked BLAS is OpenBLAS (its thread-control symbols are present).
inline bool blas_is_openblas() { return &openblas_get_num_threads != nullptr; }

/// OpenBLAS's process-wide thread count, or 1 when the BLAS has no such control (reference BLAS).
inline int blas_threads() { return blas_is_openblas() ? openblas_get_num_threads() : 1; }

/// Set OpenBLAS's process-wide thread count (no effect with a BLAS without that control).
inline void set_blas_threads(int n) {
  if (&openblas_set_num_threads != nullptr) openblas_set_num_threads(n < 1 ? 1 : n);
}

namespace detail {
/// Runs `f` (one BLAS call from inside a memsafe worker thread) so that the BLAS does not start
/// threads of its own: memsafe already runs one worker per core, and OpenBLAS's pthread pool would
/// otherwise oversubscribe the cores (OpenBLAS's documented advice for multi-threaded callers is one
/// BLAS thread). With OpenBLAS ≥ 0.3.27 the count is set for this thread only and restored after
/// the call. Older OpenBLAS (e.g. Debian 12's 0.3.21) has only the process-wide setting: memsafe
/// then sets it to 1 when it finds it larger (documented in docs/design.md; call set_blas_threads
/// afterwards to give your own dense calls more threads). Define MEMSAFE_BLAS_KEEP_THREADS to make
/// memsafe never touch OpenBLAS's thread count.
template <class F>
void single_threaded_blas(F&& f) {
#if defined(MEMSAFE_BLAS_KEEP_THREADS)
  f();
#else
  if (&openblas_set_num_threads_local != nullptr) {
    const int old = openblas_set_num_threads_local(1);
    f();
    openblas_set_num_threads_local(old);
    return;
  }
  if (&openblas_get_num_threads != nullptr && &openblas_set_num_threads != nullptr &&
      openblas_get_num_threads() != 1)
    openblas_set_num_threads(1);
  f();
#endif
}
}  // namespace detail

}  // namespace memsafe::linalg
