// The dense f64 pieces the GP tests build their independent references from (tests/test_gp.cpp,
// tests/test_exact_gp.cpp): each kernel's formula written out, a naive Cholesky and its solve —
// none of memsafe's code.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <memsafe/gp.hpp>
#include <vector>

namespace gp_test {

/// k(a, b) for an ARD kernel with lengthscales ell and variance s2.
inline double ref_kernel(memsafe::gp::kernel k, const double* a, const double* b, std::size_t d,
                         const std::vector<double>& ell, double s2) {
  namespace gp = memsafe::gp;
  double r2 = 0;
  for (std::size_t q = 0; q < d; ++q) r2 += (a[q] - b[q]) * (a[q] - b[q]) / (ell[q] * ell[q]);
  const double r = std::sqrt(r2);
  switch (k) {
    case gp::kernel::rbf: return s2 * std::exp(-r2 / 2);
    case gp::kernel::matern12: return s2 * std::exp(-r);
    case gp::kernel::matern32: return s2 * (1 + std::sqrt(3.0) * r) * std::exp(-std::sqrt(3.0) * r);
    case gp::kernel::matern52:
      return s2 * (1 + std::sqrt(5.0) * r + 5.0 * r2 / 3.0) * std::exp(-std::sqrt(5.0) * r);
  }
  return 0;
}

/// Naive Cholesky (lower, row-major) of an n×n SPD matrix.
inline std::vector<double> ref_chol(std::vector<double> A, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    double s = A[j * n + j];
    for (std::size_t k = 0; k < j; ++k) s -= A[j * n + k] * A[j * n + k];
    REQUIRE(s > 0);
    A[j * n + j] = std::sqrt(s);
    for (std::size_t i = j + 1; i < n; ++i) {
      double t = A[i * n + j];
      for (std::size_t k = 0; k < j; ++k) t -= A[i * n + k] * A[j * n + k];
      A[i * n + j] = t / A[j * n + j];
    }
    for (std::size_t k = j + 1; k < n; ++k) A[j * n + k] = 0;
  }
  return A;
}

/// Solve (L Lᵀ) x = b, L from ref_chol.
inline std::vector<double> ref_solve(const std::vector<double>& L, std::vector<double> b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < i; ++k) b[i] -= L[i * n + k] * b[k];
    b[i] /= L[i * n + i];
  }
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t k = i + 1; k < n; ++k) b[i] -= L[k * n + i] * b[k];
    b[i] /= L[i * n + i];
  }
  return b;
}

}  // namespace gp_test
