// memsafe::linalg (BLAS/LAPACK through memsafe::lapack) against naive loops in double.
#include <doctest/doctest.h>

#if defined(MEMSAFE_HAS_LAPACK)
#include <cmath>
#include <limits>
#include <cstddef>
#include <memsafe/linalg.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

std::vector<double> randn(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> N;
  std::vector<double> v(n);
  for (auto& a : v) a = N(g);
  return v;
}

/// n×n SPD matrix G·Gᵀ/n + I (row-major, double), well conditioned.
std::vector<double> spd(std::size_t n, unsigned seed) {
  auto G = randn(n * n, seed);
  std::vector<double> A(n * n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < n; ++k) s += G[i * n + k] * G[j * n + k];
      A[i * n + j] = s / double(n) + (i == j ? 1.0 : 0.0);
    }
  return A;
}

/// Cholesky–Banachiewicz, row-major, double.
std::vector<double> naive_cholesky(const std::vector<double>& A, std::size_t n) {
  std::vector<double> L(n * n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) {
      double s = A[i * n + j];
      for (std::size_t k = 0; k < j; ++k) s -= L[i * n + k] * L[j * n + k];
      L[i * n + j] = i == j ? std::sqrt(s) : s / L[j * n + j];
    }
  return L;
}

/// X = L⁻¹B (trans false) or L⁻ᵀB by substitution; B n×k row-major.
std::vector<double> naive_solve(const std::vector<double>& L, std::size_t n, std::vector<double> B, std::size_t k,
                                bool trans) {
  for (std::size_t c = 0; c < k; ++c) {
    if (!trans) {
      for (std::size_t i = 0; i < n; ++i) {
        double s = B[i * k + c];
        for (std::size_t j = 0; j < i; ++j) s -= L[i * n + j] * B[j * k + c];
        B[i * k + c] = s / L[i * n + i];
      }
    } else {
      for (std::size_t ii = n; ii-- > 0;) {
        double s = B[ii * k + c];
        for (std::size_t j = ii + 1; j < n; ++j) s -= L[j * n + ii] * B[j * k + c];
        B[ii * k + c] = s / L[ii * n + ii];
      }
    }
  }
  return B;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
double tol() {
  return std::is_same_v<T, float> ? 2e-4 : 1e-11;
}

/// max |got − want| / (1 + max |want|)
template <class T>
double max_err(const std::vector<T>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double scale = 0, e = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(double(got[i]) - want[i]));
  return e / (1 + scale);
}

}  // namespace

TEST_SUITE("linalg") {
TEST_CASE_TEMPLATE("linalg cholesky matches a naive factorisation and zeroes the upper part", T, float, double) {
  const std::size_t n = 37;
  const auto A = spd(n, 1);
  auto a = as<T>(A);
  a[0 * n + 5] = T(1234);  // the strict upper triangle is never read
  memsafe::linalg::cholesky(memsafe::matrix(a.data(), n, n));
  const auto want = naive_cholesky(A, n);
  CHECK(max_err(a, want) < tol<T>());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) REQUIRE(a[i * n + j] == T(0));
  // L·Lᵀ reproduces A
  double e = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < n; ++k) s += double(a[i * n + k]) * double(a[j * n + k]);
      e = std::max(e, std::fabs(s - A[i * n + j]));
    }
  CHECK(e < 10 * tol<T>());
  // A column-major (transposed) view factorises the same symmetric matrix into the same L.
  auto b = as<T>(A);
  memsafe::linalg::cholesky(memsafe::matrix(b.data(), n, n).t());
  std::vector<T> bt(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) bt[i * n + j] = b[j * n + i];
  CHECK(max_err(bt, want) < tol<T>());
}

TEST_CASE_TEMPLATE("linalg solve_lower with matrix and vector right-hand sides", T, float, double) {
  const std::size_t n = 29, k = 7;
  const auto L = naive_cholesky(spd(n, 2), n);
  const auto B = randn(n * k, 3);
  const auto Lt = as<T>(L);
  auto Lv = memsafe::matrix(static_cast<const T*>(Lt.data()), n, n);
  for (bool trans : {false, true}) {
    CAPTURE(trans);
    const auto want = naive_solve(L, n, B, k, trans);
    auto b = as<T>(B);  // row-major n×k right-hand side
    memsafe::linalg::solve_lower(Lv, memsafe::matrix(b.data(), n, k), trans);
    CHECK(max_err(b, want) < tol<T>());
    // the same right-hand side stored column-major (a transposed view of a k×n row-major array)
    std::vector<T> bc(n * k);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < k; ++c) bc[c * n + i] = T(B[i * k + c]);
    memsafe::linalg::solve_lower(Lv, memsafe::matrix(bc.data(), k, n).t(), trans);
    std::vector<T> back(n * k);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < k; ++c) back[i * k + c] = bc[c * n + i];
    CHECK(max_err(back, want) < tol<T>());
    // L given column-major: its transposed view holds the same lower-triangular L
    std::vector<T> Lc(n * n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) Lc[j * n + i] = Lt[i * n + j];
    auto b2 = as<T>(B);
    memsafe::linalg::solve_lower(memsafe::matrix(static_cast<const T*>(Lc.data()), n, n).t(),
                                 memsafe::matrix(b2.data(), n, k), trans);
    CHECK(max_err(b2, want) < tol<T>());
    // a vector: column 2 of B, contiguous and as a strided column of the row-major array
    std::vector<double> col(n), wantc(n);
    for (std::size_t i = 0; i < n; ++i) col[i] = B[i * k + 2], wantc[i] = want[i * k + 2];
    auto v = as<T>(col);
    memsafe::linalg::solve_lower(Lv, memsafe::vec(v.data(), n), trans);
    CHECK(max_err(v, wantc) < tol<T>());
    auto b3 = as<T>(B);
    memsafe::linalg::solve_lower(Lv, memsafe::vec(b3.data() + 2, n, k), trans);
    for (std::size_t i = 0; i < n; ++i) v[i] = b3[i * k + 2];
    CHECK(max_err(v, wantc) < tol<T>());
  }
  // a 1×1 system: the one element's stride is never used, so 0 or one past INT_MAX is no error
  const T l11[1] = {T(2)};
  for (std::size_t stride : {std::size_t{0}, std::size_t{1} << 31}) {
    CAPTURE(stride);
    T b1[1] = {T(3)};
    memsafe::linalg::solve_lower(memsafe::matrix(l11, 1, 1), memsafe::vec(b1, 1, stride));
    CHECK(b1[0] == T(1.5));
  }
}

TEST_CASE_TEMPLATE("linalg cholesky refuses a matrix with a NaN or infinite entry", T, float, double) {
  // POTRF's pivot test (ajj <= 0) is false for NaN: it returned info = 0 and a factor of NaNs
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  for (const auto& A0 : {std::vector<T>{nan, 0, 0, 1}, std::vector<T>{4, 2, 2, nan}, std::vector<T>{inf, 0, 0, 1},
                         std::vector<T>{4, 2, 2, -1}}) {
    std::vector<T> A = A0;
    CHECK_THROWS_WITH_AS(memsafe::linalg::cholesky(memsafe::matrix(A.data(), 2, 2)), doctest::Contains("not positive definite"),
                         memsafe::argument_error);
  }
  std::vector<T> A = {4, 2, 2, 3};
  CHECK_NOTHROW(memsafe::linalg::cholesky(memsafe::matrix(A.data(), 2, 2)));
}

TEST_CASE_TEMPLATE("linalg logdet_from_cholesky is twice the log of the diagonal product", T, float, double) {
  const std::size_t n = 23;
  const auto A = spd(n, 4);
  auto a = as<T>(A);
  memsafe::linalg::cholesky(memsafe::matrix(a.data(), n, n));
  const auto L = naive_cholesky(A, n);
  double want = 0;
  for (std::size_t i = 0; i < n; ++i) want += 2 * std::log(L[i * n + i]);
  const double got = memsafe::linalg::logdet_from_cholesky(memsafe::matrix(static_cast<const T*>(a.data()), n, n));
  CHECK(std::fabs(got - want) < tol<T>() * (1 + std::fabs(want)) * 10);
}

TEST_CASE_TEMPLATE("linalg gemm for every transpose and layout combination", T, float, double) {
  const std::size_t p = 13, k = 9, q = 6;
  const double alpha = 0.7, beta = -1.3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool c_colmajor : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(c_colmajor);
        // A stored as op(A) = A or Aᵀ: row-major array of shape (ta ? k×p : p×k); B likewise.
        const auto Ad = randn(p * k, 10), Bd = randn(k * q, 11), Cd = randn(p * q, 12);
        auto opA = [&](std::size_t i, std::size_t s) { return ta ? Ad[s * p + i] : Ad[i * k + s]; };
        auto opB = [&](std::size_t s, std::size_t j) { return tb ? Bd[j * k + s] : Bd[s * q + j]; };
        std::vector<double> want(p * q);
        for (std::size_t i = 0; i < p; ++i)
          for (std::size_t j = 0; j < q; ++j) {
            double s = 0;
            for (std::size_t t = 0; t < k; ++t) s += opA(i, t) * opB(t, j);
            want[i * q + j] = alpha * s + beta * Cd[i * q + j];
          }
        const auto A = as<T>(Ad), B = as<T>(Bd);
        auto Av = ta ? memsafe::matrix(A.data(), k, p) : memsafe::matrix(A.data(), p, k);
        auto Bv = tb ? memsafe::matrix(B.data(), q, k) : memsafe::matrix(B.data(), k, q);
        std::vector<T> C(p * q), got(p * q);
        if (!c_colmajor) {
          C = as<T>(Cd);
          memsafe::linalg::gemm(T(alpha), Av, ta, Bv, tb, T(beta), memsafe::matrix(C.data(), p, q));
          got = C;
        } else {
          for (std::size_t i = 0; i < p; ++i)
            for (std::size_t j = 0; j < q; ++j) C[j * p + i] = T(Cd[i * q + j]);
          memsafe::linalg::gemm(T(alpha), Av, ta, Bv, tb, T(beta), memsafe::matrix(C.data(), q, p).t());
          for (std::size_t i = 0; i < p; ++i)
            for (std::size_t j = 0; j < q; ++j) got[i * q + j] = C[j * p + i];
        }
        CHECK(max_err(got, want) < tol<T>());
      }
  // beta = 0 ignores NaN in C
  const auto Ad = randn(p * k, 13), Bd = randn(k * q, 14);
  const auto A = as<T>(Ad), B = as<T>(Bd);
  std::vector<T> C(p * q, std::nan(""));
  memsafe::linalg::gemm(T(1), memsafe::matrix(A.data(), p, k), false, memsafe::matrix(B.data(), k, q), false, T(0),
                        memsafe::matrix(C.data(), p, q));
  std::vector<double> want(p * q, 0);
  for (std::size_t i = 0; i < p; ++i)
    for (std::size_t j = 0; j < q; ++j)
      for (std::size_t t = 0; t < k; ++t) want[i * q + j] += Ad[i * k + t] * Bd[t * q + j];
  CHECK(max_err(C, want) < tol<T>());
}

TEST_CASE_TEMPLATE("linalg syrk fills the whole symmetric result", T, float, double) {
  const std::size_t n = 11, k = 17;
  const auto Ad = randn(n * k, 20), Cd = spd(n, 21);
  for (bool ta : {false, true}) {
    CAPTURE(ta);
    // op(A) is n×k; stored as A (n×k) or, when ta, as Aᵀ (k×n row-major)
    std::vector<double> store(n * k);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t s = 0; s < k; ++s) (ta ? store[s * n + i] : store[i * k + s]) = Ad[i * k + s];
    const auto A = as<T>(store);
    auto Av = ta ? memsafe::matrix(A.data(), k, n) : memsafe::matrix(A.data(), n, k);
    auto C = as<T>(Cd);
    memsafe::linalg::syrk(T(2), Av, ta, T(0.5), memsafe::matrix(C.data(), n, n));
    std::vector<double> want(n * n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::size_t t = 0; t < k; ++t) s += Ad[i * k + t] * Ad[j * k + t];
        want[i * n + j] = 2 * s + 0.5 * Cd[i * n + j];
      }
    CHECK(max_err(C, want) < tol<T>());
  }
}

TEST_CASE_TEMPLATE("linalg errors: not positive definite and shape mismatches", T, float, double) {
  const std::size_t n = 8;
  auto A = as<T>(spd(n, 30));
  for (std::size_t j = 0; j < n; ++j) A[4 * n + j] = A[j * n + 4] = T(0);  // row/column 4 zero: minor 5 singular
  try {
    memsafe::linalg::cholesky(memsafe::matrix(A.data(), n, n));
    FAIL("cholesky accepted a singular matrix");
  } catch (const memsafe::argument_error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("leading minor of order 5") != std::string::npos);
  }
  auto neg = as<T>(spd(n, 31));
  neg[0] = T(-1);
  CHECK_THROWS_AS(memsafe::linalg::cholesky(memsafe::matrix(neg.data(), n, n)), memsafe::argument_error);
  std::vector<T> rect(n * (n + 1));
  CHECK_THROWS_AS(memsafe::linalg::cholesky(memsafe::matrix(rect.data(), n, n + 1)), memsafe::shape_error);
  auto L = as<T>(naive_cholesky(spd(n, 32), n));
  std::vector<T> B((n + 1) * 2);
  CHECK_THROWS_AS(memsafe::linalg::solve_lower(memsafe::matrix(L.data(), n, n), memsafe::matrix(B.data(), n + 1, 2)),
                  memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::linalg::solve_lower(memsafe::matrix(L.data(), n, n), memsafe::vec(B.data(), n + 1)),
                  memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::linalg::solve_lower(memsafe::matrix(rect.data(), n, n + 1), memsafe::vec(B.data(), n)),
                  memsafe::shape_error);
  std::vector<T> C(n * n);
  CHECK_THROWS_AS(memsafe::linalg::gemm(T(1), memsafe::matrix(L.data(), n, n), false, memsafe::matrix(B.data(), n + 1, 2),
                                        false, T(0), memsafe::matrix(C.data(), n, 2)),
                  memsafe::shape_error);
  // a view with no unit stride cannot go to BLAS
  std::vector<T> big(4 * n * n, T(0));
  for (std::size_t i = 0; i < n; ++i) big[(2 * i) * 2 * n + 2 * i] = T(1);
  memsafe::matrix_view<T> strided(big.data(), n, n, 4 * n, 2);
  CHECK_THROWS_AS(memsafe::linalg::cholesky(strided), memsafe::argument_error);
}

TEST_CASE_TEMPLATE("linalg refuses an output that shares memory with an operand", T, float, double) {
  // BLAS and LAPACK read the operands while they write the output: aliased, the answer is wrong.
  const std::size_t n = 6;
  auto L = as<T>(naive_cholesky(spd(n, 33), n));
  std::vector<T> M(3 * n * n, T(0.5));  // room for operands and outputs side by side
  const auto Lv = memsafe::matrix(L.data(), n, n);
  const auto said = [](auto&& f) {
    try {
      f();
    } catch (const memsafe::argument_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using memsafe::linalg::gemm;
  const auto A = memsafe::matrix(static_cast<const T*>(M.data()), n, n);
  CHECK(said([&] { gemm(T(1), A, false, Lv, false, T(0), memsafe::matrix(M.data() + n, n, n)); })
            .find("memsafe::linalg::gemm: the output C shares memory with the input A") != std::string::npos);
  CHECK(said([&] { gemm(T(1), Lv, true, A, false, T(0), memsafe::matrix(M.data(), n, n)); })
            .find("the output C shares memory with the input B") != std::string::npos);
  CHECK_NOTHROW(gemm(T(1), A, false, Lv, false, T(0), memsafe::matrix(M.data() + n * n, n, n)));  // just after A
  CHECK(said([&] { memsafe::linalg::syrk(T(1), A, false, T(0), memsafe::matrix(M.data() + 1, n, n)); })
            .find("memsafe::linalg::syrk: the output C shares memory with the input A") != std::string::npos);
  CHECK(said([&] { memsafe::linalg::solve_lower(Lv, memsafe::matrix(L.data() + n, n, 1)); })
            .find("memsafe::linalg::solve_lower: the output B shares memory with the input L") != std::string::npos);
  CHECK(said([&] { memsafe::linalg::solve_lower(Lv, memsafe::vec(L.data() + n * n - n, n)); })
            .find("the output b shares memory with the input L") != std::string::npos);
  // interleaved without a common element: the columns of one buffer (col-major n×n at stride 2n)
  std::vector<T> W(2 * n * n, T(0));
  for (std::size_t i = 0; i < n; ++i) W[i * 2 * n + i] = T(1);  // identity in the even columns
  const auto Lin = memsafe::matrix_view<T>(W.data(), n, n, 2 * n, 1);
  auto Bs = memsafe::matrix_view<T>(W.data() + n, n, 1, 2 * n, 1);
  for (std::size_t i = 0; i < n; ++i) Bs(i, 0) = T(i + 1);
  CHECK_NOTHROW(memsafe::linalg::solve_lower(Lin, Bs));
  for (std::size_t i = 0; i < n; ++i) CHECK(Bs(i, 0) == T(i + 1));  // L = I: B unchanged
}

TEST_CASE("linalg lazy times lazy in double through DGEMM matches a naive product") {
  // Large enough that the tiled product calls DGEMM on many tiles, with 2 threads and a tight budget.
  const std::size_t mu = 70, n = 2500, d = 5;
  const int threads_before = memsafe::linalg::blas_threads();
  const auto u = randn(mu * d, 40), x = randn(n * d, 41);
  auto U = memsafe::points(u.data(), mu, d);
  auto X = memsafe::points(x.data(), n, d);
  auto Kuf = memsafe::rbf(U, X, 1.3, 0.8);
  std::vector<double> K(mu * n);
  for (std::size_t a = 0; a < mu; ++a)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t t = 0; t < d; ++t) s += (u[a * d + t] - x[j * d + t]) * (u[a * d + t] - x[j * d + t]);
      K[a * n + j] = 0.8 * std::exp(-0.5 * s / (1.3 * 1.3));
    }
  std::vector<double> want(mu * mu, 0);
  for (std::size_t a = 0; a < mu; ++a)
    for (std::size_t b = 0; b < mu; ++b)
      for (std::size_t j = 0; j < n; ++j) want[a * mu + b] += K[a * n + j] * K[b * n + j];
  for (std::size_t budget : {std::size_t{1} << 16, std::size_t{8} << 20}) {
    for (unsigned threads : {1u, 2u}) {
      CAPTURE(budget);
      CAPTURE(threads);
      auto r = memsafe::eval(Kuf * memsafe::transpose(Kuf), memsafe::options{budget, threads});
      CHECK(r.stats.peak_temp_bytes <= budget);
      double e = 0, scale = 0;
      for (std::size_t q = 0; q < want.size(); ++q) {
        e = std::max(e, std::fabs(r.values[q] - want[q]));
        scale = std::max(scale, std::fabs(want[q]));
      }
      CHECK(e <= 1e-12 * scale);
    }
  }
#if !defined(MEMSAFE_BLAS_KEEP_THREADS)
  // memsafe keeps OpenBLAS to one thread inside its workers; an OpenBLAS without the thread-local
  // setting keeps the process-wide setting afterwards (linalg/fortran.hpp); set_blas_threads
  // gives the previous count back.
  if (memsafe::linalg::blas_is_openblas() && &openblas_set_num_threads_local == nullptr) {
    CHECK(memsafe::linalg::blas_threads() == 1);
    memsafe::linalg::set_blas_threads(threads_before);
  }
#endif
}
}

TEST_CASE("linalg blas_core_note speaks only when OpenBLAS runs kernels narrower than the CPU") {
  using memsafe::linalg::detail::blas_core_note_for;
  const std::string dyn = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64";
  const auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  for (const char* core : {"Haswell", "Zen", "Sandybridge"}) {
    CAPTURE(core);
    // An AVX2 set on an AVX-512 CPU, chosen by OpenBLAS: the note names the set and the variable.
    const std::string own = blas_core_note_for(core, true, nullptr, dyn);
    CHECK(has(own, std::string("runs its ") + core + " kernels"));
    CHECK(has(own, "OPENBLAS_CORETYPE=SkylakeX"));
    CHECK(has(own, dyn));
    // Chosen by the environment: the note names the variable and its value.
    const std::string env = blas_core_note_for(core, true, core, dyn);
    CHECK(has(env, std::string("OPENBLAS_CORETYPE=") + core + " in the environment"));
    CHECK(has(env, std::string("run its ") + core + " kernels"));
  }
  // Silent: OpenBLAS's AVX-512 sets (any letter case, whoever chose them), a CPU without AVX-512, not OpenBLAS.
  for (const char* core : {"SkylakeX", "skylakex", "Cooperlake", "SAPPHIRERAPIDS"}) {
    CAPTURE(core);
    CHECK(blas_core_note_for(core, true, nullptr, dyn).empty());
    CHECK(blas_core_note_for(core, true, "SkylakeX", dyn).empty());
  }
  CHECK(blas_core_note_for("Haswell", false, nullptr, dyn).empty());
  CHECK(blas_core_note_for("Haswell", false, "Haswell", dyn).empty());
  CHECK(blas_core_note_for("", true, nullptr, "").empty());
  // An empty or unknown OPENBLAS_CORETYPE, which OpenBLAS ignores, did not choose the set: the note
  // speaks of OpenBLAS's own choice.
  for (const char* ignored : {"", "NoSuchCore"}) {
    CAPTURE(ignored);
    const std::string own = blas_core_note_for("Haswell", true, ignored, dyn);
    CHECK(has(own, "older than the CPU"));
    CHECK_FALSE(has(own, "in the environment makes"));
  }
  // A build for one target only: the variable would not help, so the note says what would.
  const std::string fixed = blas_core_note_for("Haswell", true, nullptr, "OpenBLAS 0.3.21 NO_LAPACKE Haswell MAX_THREADS=64");
  CHECK(has(fixed, "built for its Haswell kernels only"));
  CHECK_FALSE(has(fixed, "OPENBLAS_CORETYPE"));
  // What the linked BLAS says: OpenBLAS names a set, which its build line lists too (DYNAMIC_ARCH
  // builds name the set they run; single-target builds their target).
  const std::string_view core = memsafe::linalg::blas_core(), config = memsafe::linalg::blas_config();
  if (memsafe::linalg::blas_is_openblas()) {
    CHECK_FALSE(core.empty());
    CHECK(config.find(core) != std::string_view::npos);
    const std::string seen = std::string("OpenBLAS kernel set: ") + std::string(core) + " (" + std::string(config) + ")";
    MESSAGE(seen);
  } else {
    CHECK(core.empty());
  }
}
#endif  // MEMSAFE_HAS_LAPACK
