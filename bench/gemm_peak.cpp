// gemm_peak — the measured f64 peak of the BLAS memsafe links (memsafe::lapack): DGEMM of two
// 4096 × 4096 matrices and DSYRK C (4096 × 4096) += A·Aᵀ with A 4096 × 16384 — the call shapes the SGPR
// bound's n-sized work and its m × m algebra reduce to — best of three, on the given number of
// BLAS threads. One JSON line: GFLOP/s of each (DGEMM 2n³ flops, DSYRK n(n + 1)k). The SGPR
// benchmark reports its bound's time as a share of these (docs/benchmarks.md).
//   gemm_peak [threads]     (default: all cores)
#include <memsafe/linalg/fortran.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

template <class F>
double best_seconds(F&& f) {
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned hc = std::thread::hardware_concurrency();
  const int threads = argc > 1 ? std::atoi(argv[1]) : int(hc ? hc : 1);
  memsafe::linalg::set_blas_threads(threads);
  const int n = 4096, k = 16384;
  std::vector<double> A(std::size_t(n) * k), B(std::size_t(n) * n), C(std::size_t(n) * n);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = double((i * 2654435761u) % 1000) / 1000.0 - 0.5;
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = A[i];
  const double one = 1, zero = 0;
  const double gemm_s = best_seconds([&] {
    dgemm_("N", "N", &n, &n, &n, &one, A.data(), &n, B.data(), &n, &zero, C.data(), &n, 1, 1);
  });
  const double syrk_s = best_seconds([&] {
    dsyrk_("L", "N", &n, &k, &one, A.data(), &n, &zero, C.data(), &n, 1, 1);
  });
  const double gemm_gf = 2.0 * n * double(n) * n / gemm_s / 1e9;
  const double syrk_gf = double(n) * (n + 1.0) * k / syrk_s / 1e9;
  std::printf("{\"bench\": \"gemm_peak\", \"threads\": %d, \"blas_threads\": %d, \"dgemm_gflops\": %.1f, "
              "\"dsyrk_gflops\": %.1f, \"c00\": %.6g}\n",
              threads, memsafe::linalg::blas_threads(), gemm_gf, syrk_gf, C[0]);
}
