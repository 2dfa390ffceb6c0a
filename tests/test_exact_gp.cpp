// memsafe::gp::exact_solve / exact_predict_mean / exact_predict_variance (the exact GP by
// preconditioned CG) against an independent dense f64 reference (K + σ²I formed with the kernel
// formulas of tests/gp_reference.hpp and factorised by its naive Cholesky), at budgets from the minimum to
// unlimited. Built as its own executable (memsafe_exact_gp_tests, label `gp`), so that it compiles
// without the full unit-test binary.
#include <doctest/doctest.h>

#if defined(MEMSAFE_HAS_LAPACK)
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memsafe/gp.hpp>
#include <random>
#include <string>
#include <vector>

#include "gp_reference.hpp"
#include "reference.hpp"

namespace {

namespace gp = memsafe::gp;
using vec = std::vector<double>;

using gp_test::ref_chol;
using gp_test::ref_kernel;
using gp_test::ref_solve;
using ref::contains;
using ref::message_of;

struct problem {
  std::size_t n, d, c;
  vec X, B, Xs;  // B: n×c row-major; column 0 is y
  gp::hyperparameters h;
  problem(std::size_t n_, std::size_t d_, std::size_t c_, gp::kernel k, unsigned seed = 3, double noise = 0.05)
      : n(n_), d(d_), c(c_) {
    std::mt19937_64 g(seed);
    std::normal_distribution<double> N;
    X.resize(n * d);
    for (auto& v : X) v = N(g);
    Xs.resize(9 * d);
    for (auto& v : Xs) v = N(g);
    B.resize(n * c);
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::size_t q = 0; q < d; ++q) s += X[i * d + q];
      B[i * c] = std::sin(s) + 0.1 * N(g);
      for (std::size_t j = 1; j < c; ++j) B[i * c + j] = N(g);
    }
    h.kind = k;
    h.variance = 1.3;
    h.noise = noise;
    h.lengthscales.resize(d);
    for (std::size_t q = 0; q < d; ++q) h.lengthscales[q] = 0.9 + 0.35 * double(q);
  }
  gp::data_view data() const { return {X.data(), B.data(), n, d}; }
  gp::points_view tests() const { return {Xs.data(), Xs.size() / d, d}; }
  /// chol(K + σ²I), naive.
  vec factor() const {
    vec K(n * n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        K[i * n + j] = ref_kernel(h.kind, &X[i * d], &X[j * d], d, h.lengthscales, h.variance) + (i == j ? h.noise : 0.0);
    return ref_chol(K, n);
  }
  /// α = (K + σ²I)⁻¹B, column by column (n×c row-major).
  vec alpha(const vec& L) const {
    vec A(n * c);
    for (std::size_t j = 0; j < c; ++j) {
      vec b(n);
      for (std::size_t i = 0; i < n; ++i) b[i] = B[i * c + j];
      b = ref_solve(L, b, n);
      for (std::size_t i = 0; i < n; ++i) A[i * c + j] = b[i];
    }
    return A;
  }
};

/// max over columns of ‖a_j − b_j‖ / ‖b_j‖ (a, b: n×c row-major).
double col_rel(const vec& a, const vec& b, std::size_t c) {
  double worst = 0;
  for (std::size_t j = 0; j < c; ++j) {
    double e = 0, s = 0;
    for (std::size_t i = j; i < a.size(); i += c) {
      e += (a[i] - b[i]) * (a[i] - b[i]);
      s += b[i] * b[i];
    }
    worst = std::max(worst, std::sqrt(e / s));
  }
  return worst;
}

const gp::kernel all_kernels[] = {gp::kernel::rbf, gp::kernel::matern12, gp::kernel::matern32, gp::kernel::matern52};

}  // namespace

TEST_SUITE("gp") {
TEST_CASE("exact_solve: alpha matches a dense Cholesky solve for every kernel, several right-hand sides, any budget") {
  for (auto k : all_kernels) {
    problem p(300, 3, 3, k);
    const vec want = p.alpha(p.factor());
    gp::exact_options o;
    o.tolerance = 1e-12;
    o.preconditioner_rank = 20;
    const std::size_t minimum = gp::exact_minimum_bytes(p.data(), p.c, p.h, o);
    vec first;
    for (std::size_t budget : {minimum, minimum + 3000, std::size_t(1) << 20, memsafe::unlimited}) {
      CAPTURE(gp::kernel_name(k));
      CAPTURE(budget);
      o.budget = budget;
      const auto r = gp::exact_solve(p.data(), p.B.data(), p.c, p.h, o);
      CHECK(r.converged);
      CHECK_FALSE(r.breakdown);
      REQUIRE(r.alpha.size() == p.n * p.c);
      CHECK(col_rel(r.alpha, want, p.c) < 1e-7);
      for (std::size_t j = 0; j < p.c; ++j) {
        CHECK(r.residual[j] <= 1e-12);
        CHECK(r.true_residual[j] < 1e-9);
      }
      CHECK(r.stats.peak_temp_bytes <= budget);
      CHECK(r.stats.peak_temp_bytes >= r.stats.solver_bytes);
      CHECK(r.stats.minimum_bytes == minimum);
      CHECK(r.stats.preconditioner_rank == 20);
      // Budget independence: only the order of the kernel sums changes.
      if (first.empty())
        first = r.alpha;
      else
        CHECK(col_rel(r.alpha, first, p.c) < 1e-8);
    }
  }
}

TEST_CASE("exact_solve: the kernel cache (K's first rows in the budget's free part) gives the same alpha") {
  namespace dg = memsafe::detail::gp;
  for (auto k : {gp::kernel::rbf, gp::kernel::matern32}) {
    for (std::size_t c : {1, 2}) {
      problem p(700, 4, c, k, 5);  // block rows of 256: 256, 256, 188
      const vec want = p.alpha(p.factor());
      gp::exact_options o;
      o.tolerance = 1e-12;
      o.preconditioner_rank = 10;
      o.threads = 2;
      o.cache = false;
      o.budget = memsafe::unlimited;
      const auto plain = gp::exact_solve(p.data(), p.B.data(), c, p.h, o);
      CHECK(plain.stats.cache_rows == 0);
      CHECK(plain.stats.cache_bytes == 0);
      CHECK(col_rel(plain.alpha, want, c) < 1e-7);
      o.cache = true;
      const std::size_t base = plain.stats.solver_bytes + plain.stats.matvec_peak_bytes + 2 * p.n * c * sizeof(double);
      const std::size_t one_block = dg::kernel_strip::bytes(p.n, 256), two_blocks = dg::kernel_strip::bytes(p.n, 512);
      struct expect_rows {
        std::size_t budget, lo, hi;
      };
      for (const auto& e : {expect_rows{plain.stats.minimum_bytes, 0, 0}, expect_rows{base + one_block + 64, 256, 256},
                            expect_rows{base + two_blocks + 64, 512, 512}, expect_rows{memsafe::unlimited, 700, 700}}) {
        CAPTURE(gp::kernel_name(k));
        CAPTURE(c);
        CAPTURE(e.budget);
        o.budget = e.budget;
        const auto r = gp::exact_solve(p.data(), p.B.data(), c, p.h, o);
        CHECK(r.converged);
        CHECK(r.stats.cache_rows >= e.lo);
        CHECK(r.stats.cache_rows <= e.hi);
        CHECK(r.stats.cache_bytes == dg::kernel_strip::bytes(p.n, r.stats.cache_rows));
        CHECK(r.stats.peak_temp_bytes <= e.budget);
        if (r.stats.cache_rows) CHECK(r.stats.peak_temp_bytes >= r.stats.solver_bytes + r.stats.cache_bytes);
        CHECK(col_rel(r.alpha, want, c) < 1e-7);
        CHECK(col_rel(r.alpha, plain.alpha, c) < 1e-8);  // only the order of the sums differs
        for (std::size_t j = 0; j < c; ++j) CHECK(r.true_residual[j] < 1e-9);
      }
    }
  }
}

TEST_CASE("exact_solve: one right-hand side (y) at GPyTorch's default tolerance, and predictions against dense ones") {
  for (auto k : {gp::kernel::rbf, gp::kernel::matern32}) {
    CAPTURE(gp::kernel_name(k));
    problem p(400, 4, 1, k, 5, 0.1);
    const vec L = p.factor();
    const vec want = p.alpha(L);
    const auto r = gp::exact_solve(p.data(), p.h, {.budget = std::size_t(1) << 20});
    CHECK(r.converged);
    CHECK(r.residual[0] <= 1e-2);
    CHECK(r.true_residual[0] < 2e-2);
    // Predictive means with the CG α and with the exact α; variances at tolerance 1e-11.
    const auto T = p.tests();
    vec mean(T.n), exact_mean(T.n, 0.0), var(T.n), exact_var(T.n);
    const std::size_t small_budget = std::size_t(1) << 16;
    const auto ps = gp::exact_predict_mean(p.data(), r.alpha.data(), 1, p.h, T, mean.data(), {.budget = small_budget});
    CHECK(ps.peak_temp_bytes <= small_budget);
    vec mean_exact_alpha(T.n);
    gp::exact_predict_mean(p.data(), want.data(), 1, p.h, T, mean_exact_alpha.data(), {.budget = memsafe::unlimited});
    for (std::size_t s = 0; s < T.n; ++s) {
      vec kx(p.n);
      for (std::size_t i = 0; i < p.n; ++i)
        kx[i] = ref_kernel(p.h.kind, &T.X[s * p.d], &p.X[i * p.d], p.d, p.h.lengthscales, p.h.variance);
      for (std::size_t i = 0; i < p.n; ++i) exact_mean[s] += kx[i] * want[i];
      const vec a = ref_solve(L, kx, p.n);
      double q = 0;
      for (std::size_t i = 0; i < p.n; ++i) q += kx[i] * a[i];
      exact_var[s] = p.h.variance - q;
    }
    double scale = 0, err_exact = 0, err_cg = 0;
    for (std::size_t s = 0; s < T.n; ++s) {
      scale = std::max(scale, std::fabs(exact_mean[s]));
      err_exact = std::max(err_exact, std::fabs(mean_exact_alpha[s] - exact_mean[s]));
      err_cg = std::max(err_cg, std::fabs(mean[s] - exact_mean[s]));
    }
    CHECK(err_exact <= 1e-10 * scale);
    CHECK(err_cg <= 5e-2 * scale);  // CG stopped at a relative residual of 1e-2
    gp::exact_options vo;
    vo.tolerance = 1e-11;
    vo.budget = std::size_t(1) << 20;
    const auto vs = gp::exact_predict_variance(p.data(), p.h, T, var.data(), vo, 4);  // 9 points: batches 4, 4, 1
    CHECK(vs.converged);
    CHECK(vs.peak_temp_bytes <= *vo.budget);
    for (std::size_t s = 0; s < T.n; ++s) CHECK(std::fabs(var[s] - exact_var[s]) < 1e-7 * p.h.variance);
  }
}

TEST_CASE("exact_solve: the pivoted-Cholesky preconditioner cuts the iterations") {
  // Long lengthscales and a small noise: K + σ²I is ill conditioned, K's spectrum decays fast.
  problem p(1500, 2, 1, gp::kernel::rbf, 9, 1e-3);
  for (auto& l : p.h.lengthscales) l = 1.5;
  gp::exact_options o;
  o.tolerance = 1e-6;
  o.budget = std::size_t(64) << 20;
  o.preconditioner_rank = 0;
  const auto plain = gp::exact_solve(p.data(), p.h, o);
  o.preconditioner_rank = 60;
  const auto pre = gp::exact_solve(p.data(), p.h, o);
  MESSAGE("iterations: rank 0 ", plain.iterations, ", rank 60 ", pre.iterations, " (trace error ",
          pre.stats.preconditioner_trace_error, ")");
  CHECK(plain.converged);
  CHECK(pre.converged);
  CHECK(pre.stats.preconditioner_rank == 60);
  CHECK(pre.stats.preconditioner_trace_error < 1e-3);
  CHECK(pre.iterations * 3 < plain.iterations);
  CHECK(col_rel(pre.alpha, plain.alpha, 1) < 1e-4);
  CHECK(plain.stats.peak_temp_bytes <= *o.budget);
  CHECK(pre.stats.peak_temp_bytes <= *o.budget);
  // A rank above the numerical rank of K stops early (here: n = 5 points, rank 50 requested).
  problem q(5, 2, 1, gp::kernel::matern52);
  gp::exact_options qo;
  qo.tolerance = 1e-12;
  qo.preconditioner_rank = 50;
  const auto r = gp::exact_solve(q.data(), q.h, qo);
  CHECK(r.stats.preconditioner_rank <= 5);
  CHECK(r.converged);
  CHECK(r.iterations <= 3);  // P = K + σ²I up to rounding
}

TEST_CASE("exact_solve: non-convergence is reported, not thrown") {
  problem p(500, 3, 2, gp::kernel::matern12, 4, 1e-4);
  gp::exact_options o;
  o.tolerance = 1e-12;
  o.max_iterations = 3;
  o.preconditioner_rank = 0;
  const auto r = gp::exact_solve(p.data(), p.B.data(), p.c, p.h, o);
  CHECK_FALSE(r.converged);
  CHECK(r.iterations == 3);
  for (std::size_t j = 0; j < p.c; ++j) {
    CHECK(r.column_iterations[j] == 3);
    CHECK(r.residual[j] > 1e-12);
  }
  o.max_iterations = 0;
  const auto z = gp::exact_solve(p.data(), p.h, o);
  CHECK_FALSE(z.converged);
  CHECK(z.iterations == 0);
  // A zero right-hand side is solved by α = 0 at once.
  vec zero(p.n, 0.0);
  const auto zr = gp::exact_solve(p.data(), zero.data(), 1, p.h, {});
  CHECK(zr.converged);
  CHECK(zr.iterations == 0);
  CHECK(std::all_of(zr.alpha.begin(), zr.alpha.end(), [](double v) { return v == 0; }));
}

TEST_CASE("exact_solve: a column solved exactly before min_iterations converges, it is not a breakdown") {
  // n = 1, K + σ²I = 1 + 1: one CG step gives α = 0.5 with r = 0 exactly; before, min_iterations
  // kept the column going, p became 0, pᵀAp = 0 read as a breakdown and converged was false.
  const vec x = {0.0}, y = {1.0};
  gp::hyperparameters h;
  h.kind = gp::kernel::rbf;
  h.variance = 1.0;
  h.noise = 1.0;
  h.lengthscales = {1.0};
  gp::exact_options o;
  o.preconditioner_rank = 0;
  o.min_iterations = 10;
  const auto r = gp::exact_solve(gp::data_view{x.data(), y.data(), 1, 1}, h, o);
  CHECK(r.converged);
  CHECK_FALSE(r.breakdown);
  CHECK(r.iterations == 1);
  CHECK(r.alpha.at(0) == 0.5);
  CHECK(r.residual.at(0) == 0.0);
}

TEST_CASE("exact_solve: a budget too small is an error before any work, naming the minimum") {
  problem p(200, 3, 2, gp::kernel::matern32);
  gp::exact_options o;
  o.preconditioner_rank = 10;
  const std::size_t minimum = gp::exact_minimum_bytes(p.data(), p.c, p.h, o);
  CHECK(minimum > (4 * p.n * p.c + p.n * 10) * sizeof(double));
  o.budget = minimum - 1;
  try {
    gp::exact_solve(p.data(), p.B.data(), p.c, p.h, o);
    FAIL("expected a budget_error");
  } catch (const memsafe::budget_error& e) {
    CHECK(e.minimum_bytes == minimum);
    CHECK(e.budget_bytes == minimum - 1);
    CHECK(std::string(e.what()).find(std::to_string(minimum)) != std::string::npos);
  }
  o.budget = minimum;
  const auto r = gp::exact_solve(p.data(), p.B.data(), p.c, p.h, o);
  CHECK(r.stats.peak_temp_bytes <= minimum);
  // A lower rank needs less.
  o.preconditioner_rank = 0;
  CHECK(gp::exact_minimum_bytes(p.data(), p.c, p.h, o) < minimum);
  // Predictions: the kernel product's own minimum.
  vec mean(p.tests().n);
  CHECK_THROWS_AS(gp::exact_predict_mean(p.data(), r.alpha.data(), p.c, p.h, p.tests(), mean.data(), {.budget = 8}),
                  memsafe::budget_error);
  CHECK_THROWS_AS(gp::exact_predict_variance(p.data(), p.h, p.tests(), mean.data(), {.budget = minimum}),
                  memsafe::budget_error);
  // The variances' minimum, asked before any work: what exact_predict_variance refuses below and
  // runs within, for the default batch and a smaller one.
  o.preconditioner_rank = 10;
  for (std::size_t batch : {std::size_t(16), std::size_t(3)}) {
    CAPTURE(batch);
    const std::size_t vmin = gp::exact_predict_variance_minimum_bytes(p.data(), p.h, p.tests().n, o, batch);
    CHECK(vmin > 2 * p.n * std::min(batch, p.tests().n) * sizeof(double));
    gp::exact_options ov = o;
    ov.budget = vmin - 1;
    try {
      gp::exact_predict_variance(p.data(), p.h, p.tests(), mean.data(), ov, batch);
      FAIL("expected a budget_error");
    } catch (const memsafe::budget_error& e) {
      CHECK(e.minimum_bytes == vmin);
    }
    ov.budget = vmin;
    const auto vs = gp::exact_predict_variance(p.data(), p.h, p.tests(), mean.data(), ov, batch);
    CHECK(vs.peak_temp_bytes <= vmin);
  }
  CHECK(gp::exact_predict_variance_minimum_bytes(p.data(), p.h, 0, o) == 0);
  CHECK(gp::exact_predict_variance_minimum_bytes(p.data(), p.h, 0, o, 0) == 0);  // as the call: nothing to do
  CHECK_THROWS_AS((void)gp::exact_predict_variance_minimum_bytes(p.data(), p.h, 5, o, 0), memsafe::argument_error);
  CHECK_THROWS_AS((void)gp::exact_predict_variance_minimum_bytes(p.data(), p.h, 5, {.tolerance = -1.0}),
                  memsafe::argument_error);
}

TEST_CASE("exact_solve: bad inputs") {
  problem p(30, 3, 1, gp::kernel::rbf);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(gp::exact_solve({p.X.data(), p.B.data(), 0, 3}, p.h), memsafe::shape_error);
  CHECK_THROWS_AS(gp::exact_solve({p.X.data(), p.B.data(), p.n, 2}, p.h), memsafe::shape_error);  // 3 lengthscales
  CHECK_THROWS_AS(gp::exact_solve({nullptr, p.B.data(), p.n, 3}, p.h), memsafe::argument_error);
  CHECK_THROWS_AS(gp::exact_solve({p.X.data(), nullptr, p.n, 3}, p.h), memsafe::argument_error);
  CHECK_THROWS_AS(gp::exact_solve(p.data(), p.B.data(), 0, p.h), memsafe::shape_error);
  // exact_minimum_bytes checks what exact_solve checks: no right-hand side, bad options
  CHECK(contains(message_of<memsafe::shape_error>([&] { (void)gp::exact_minimum_bytes(p.data(), 0, p.h); }),
                 "memsafe::gp::exact_minimum_bytes: no right-hand side"));
  CHECK_THROWS_AS((void)gp::exact_minimum_bytes(p.data(), p.c, p.h, {.tolerance = -1.0}), memsafe::argument_error);
  auto h = p.h;
  h.noise = 0;
  CHECK_THROWS_AS(gp::exact_solve(p.data(), h), memsafe::argument_error);
  h.noise = -1;
  CHECK_THROWS_AS(gp::exact_solve(p.data(), h), memsafe::argument_error);
  h = p.h;
  h.variance = nan;
  CHECK_THROWS_AS(gp::exact_solve(p.data(), h), memsafe::argument_error);
  h = p.h;
  h.lengthscales[2] = 0;
  CHECK_THROWS_AS(gp::exact_solve(p.data(), h), memsafe::argument_error);
  // 1/ℓ² out of double's normal range: refused by exact_solve itself, as SGPR does, with one prefix
  for (double l : {1e-160, 1e160}) {
    h.lengthscales[2] = l;
    const std::string why = message_of<memsafe::argument_error>([&] { gp::exact_solve(p.data(), h); });
    CHECK(contains(why, "memsafe::gp::exact_solve: lengthscale 2 = "));
    CHECK(contains(why, "is outside the range double supports"));
    CHECK_FALSE(contains(why, "memsafe: "));
    CHECK_THROWS_AS(gp::exact_solve(p.data(), h), memsafe::argument_error);
  }
  h = p.h;
  h.jitter = -1;  // not used by the exact GP (σ² > 0 makes K + σ²I positive definite)
  CHECK_NOTHROW(gp::exact_solve(p.data(), h));
  vec X = p.X;
  X[7] = nan;
  try {
    gp::exact_solve({X.data(), p.B.data(), p.n, p.d}, p.h);
    FAIL("expected an argument_error");
  } catch (const memsafe::argument_error& e) {
    CHECK(std::string(e.what()).find("training input 2") != std::string::npos);
  }
  vec y = p.B;
  y[4] = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(gp::exact_solve({p.X.data(), y.data(), p.n, p.d}, p.h), memsafe::argument_error);
  gp::exact_options bad;
  bad.tolerance = -1;
  CHECK_THROWS_AS(gp::exact_solve(p.data(), p.h, bad), memsafe::argument_error);
  bad.tolerance = nan;
  CHECK_THROWS_AS(gp::exact_solve(p.data(), p.h, bad), memsafe::argument_error);
  // Predictions: test points of another dimension, NaN test inputs.
  const auto r = gp::exact_solve(p.data(), p.h);
  vec mean(3), Xs(3 * 2, 0.0);
  CHECK_THROWS_AS(gp::exact_predict_mean(p.data(), r.alpha.data(), 1, p.h, {Xs.data(), 3, 2}, mean.data()),
                  memsafe::shape_error);
  vec Xn(3 * 3, 0.0);
  Xn[4] = nan;
  CHECK_THROWS_AS(gp::exact_predict_mean(p.data(), r.alpha.data(), 1, p.h, {Xn.data(), 3, 3}, mean.data()),
                  memsafe::argument_error);
  CHECK_THROWS_AS(gp::exact_predict_variance(p.data(), p.h, {Xs.data(), 3, 2}, mean.data()), memsafe::shape_error);
  // Outputs over an input: the means over the test points, the training points or alpha; the
  // variances over the test points (each is written while they are still read).
  vec T3(p.Xs.begin(), p.Xs.begin() + 3 * p.d), a = r.alpha, X2 = p.X;
  const auto over = [&](auto&& f) { return ref::message_of<memsafe::argument_error>(f); };
  CHECK(ref::contains(over([&] { gp::exact_predict_mean(p.data(), a.data(), 1, p.h, {T3.data(), 3, p.d}, T3.data() + 1); }),
                      "memsafe::gp::exact_predict_mean: the output mean shares memory with the input test points"));
  CHECK(ref::contains(over([&] {
                        gp::exact_predict_mean({X2.data(), p.B.data(), p.n, p.d}, a.data(), 1, p.h, p.tests(), X2.data());
                      }),
                      "the input training points"));
  CHECK(ref::contains(over([&] { gp::exact_predict_mean(p.data(), a.data(), 1, p.h, p.tests(), a.data() + 2); }),
                      "the input alpha"));
  CHECK(ref::contains(over([&] { gp::exact_predict_variance(p.data(), p.h, {T3.data(), 3, p.d}, T3.data() + 3); }),
                      "memsafe::gp::exact_predict_variance: the output var shares memory with the input test points"));
  vec m3(3);
  CHECK_NOTHROW(gp::exact_predict_mean(p.data(), a.data(), 1, p.h, {T3.data(), 3, p.d}, m3.data()));
}

TEST_CASE("exact GP with a point whose squared distance overflows: Matérn kernels give 0 there, not NaN") {
  for (const auto kind : {gp::kernel::rbf, gp::kernel::matern12, gp::kernel::matern32, gp::kernel::matern52}) {
    CAPTURE(int(kind));
    const vec X = {0.0, 0.5, 1.0, 1e200}, y = {0.3, -0.2, 0.5, 1.0};
    gp::hyperparameters h{kind, 1.0, {1.0}, 0.1, 1e-6};
    const auto far = gp::exact_solve({X.data(), y.data(), 4, 1}, h, {.budget = 1 << 20, .tolerance = 1e-12});
    const auto near = gp::exact_solve({X.data(), y.data(), 3, 1}, h, {.budget = 1 << 20, .tolerance = 1e-12});
    CHECK(far.converged);
    // the far point is independent of the others: α_j = y_j/(σ_f² + σ²)
    CHECK(far.alpha[3] == doctest::Approx(1.0 / 1.1).epsilon(1e-10));
    for (std::size_t i = 0; i < 3; ++i) CHECK(far.alpha[i] == doctest::Approx(near.alpha[i]).epsilon(1e-9));
    double xs[1] = {1e200}, var[1] = {-1};
    gp::exact_predict_variance({X.data(), y.data(), 3, 1}, h, {xs, 1, 1}, var, {.budget = 1 << 20, .tolerance = 1e-10});
    CHECK(var[0] == doctest::Approx(1.0).epsilon(1e-12));  // the prior's
  }
}

TEST_CASE("exact_solve: alpha scales with the right-hand side and the system at any magnitude") {
  // CG runs on B's columns and on K + sigma^2 I scaled by powers of two: scaling either by 2^e scales
  // alpha by the same power, bit for bit, and decimal scales of 1e-200 .. 1e160 (whose squared norms
  // underflow or overflow: alpha came back 0, "converged", or a breakdown) agree to rounding.
  problem p(120, 2, 2, gp::kernel::matern32);
  const gp::exact_options o{.budget = 8 << 20, .tolerance = 1e-10};
  const auto base = gp::exact_solve(p.data(), p.B.data(), p.c, p.h, o);
  REQUIRE(base.converged);
  for (const int e : {-900, -600, 550, 900}) {
    CAPTURE(e);
    vec B = p.B;
    for (auto& v : B) v = std::ldexp(v, e);
    const auto r = gp::exact_solve(p.data(), B.data(), p.c, p.h, o);
    CHECK(r.converged);
    CHECK(r.iterations == base.iterations);
    for (std::size_t i = 0; i < B.size(); ++i) CHECK(r.alpha[i] == std::ldexp(base.alpha[i], e));
  }
  for (const double s : {1e-200, 1e-170, 1e160}) {
    CAPTURE(s);
    vec B = p.B, want = base.alpha;
    for (auto& v : B) v *= s;
    for (auto& v : want) v *= s;
    const auto r = gp::exact_solve(p.data(), B.data(), p.c, p.h, o);
    CHECK(r.converged);
    CHECK_FALSE(r.breakdown);
    CHECK(col_rel(r.alpha, want, p.c) < 1e-9);
  }
  // sigma_f^2 and sigma^2 both times 2^e (alpha times 2^-e), and the variances' (times 2^e): a variance
  // of 1e-165 gave the prior (k(X, x) read as 0) and one of 1e308 overflowed K*p
  vec var0(4), var1(4);
  gp::exact_predict_variance(p.data(), p.h, {p.Xs.data(), 4, p.d}, var0.data(), o);
  for (const int e : {-560, 1000}) {
    CAPTURE(e);
    auto h = p.h;
    h.variance = std::ldexp(h.variance, e);
    h.noise = std::ldexp(h.noise, e);
    const auto r = gp::exact_solve(p.data(), p.B.data(), p.c, h, o);
    CHECK(r.converged);
    for (std::size_t i = 0; i < r.alpha.size(); ++i) CHECK(r.alpha[i] == std::ldexp(base.alpha[i], -e));
    gp::exact_predict_variance(p.data(), h, {p.Xs.data(), 4, p.d}, var1.data(), o);
    for (std::size_t q = 0; q < 4; ++q) CHECK(var1[q] == doctest::Approx(std::ldexp(var0[q], e)).epsilon(1e-12));
  }
}

TEST_CASE("exact GP: a noise whose reciprocal overflows, coordinates over lengthscales that overflow and sizes past size_t are refused") {
  problem p(30, 3, 1, gp::kernel::matern32);
  auto h = p.h;
  for (const double tiny : {1e-310, std::numeric_limits<double>::denorm_min()}) {
    h.noise = tiny;  // 1/sigma^2 = inf: every alpha came back NaN and the CLI blamed alpha
    CHECK(contains(message_of<memsafe::argument_error>([&] { gp::exact_solve(p.data(), h); }),
                   "memsafe::gp::exact_solve: noise variance"));
    CHECK(contains(message_of<memsafe::argument_error>([&] { gp::exact_solve(p.data(), h); }), "is too small"));
  }
  h = p.h;
  h.noise = std::numeric_limits<double>::min();  // the smallest normal: accepted
  CHECK_NOTHROW((void)gp::exact_minimum_bytes(p.data(), 1, h));
  // x_k / l_k = inf (the lazy ARD kernel scales before it subtracts: k(x, x) was NaN and the solve
  // broke down for every point)
  vec X = p.X;
  X[5 * 3 + 1] = 1e308;
  h = p.h;
  h.lengthscales[1] = 0.5;
  const std::string why = message_of<memsafe::argument_error>([&] { gp::exact_solve({X.data(), p.B.data(), p.n, p.d}, h); });
  CHECK(contains(why, "memsafe::gp::exact_solve: training point 5, coordinate 1"));
  CHECK(contains(why, "rescale the inputs"));
  const auto r = gp::exact_solve(p.data(), h);
  vec T(3, 0.0), mean(1);
  T[1] = -1e308;
  CHECK(contains(message_of<memsafe::argument_error>(
                     [&] { gp::exact_predict_mean(p.data(), r.alpha.data(), 1, h, {T.data(), 1, 3}, mean.data()); }),
                 "test point 0, coordinate 1"));
  // the solver's bytes for n = 2^31 and a rank-n preconditioner (n^2 doubles) wrapped to a small
  // "minimum"; an accounted buffer of more than size_t bytes asked for a wrapped size
  CHECK(contains(message_of<memsafe::argument_error>(
                     [] { (void)memsafe::detail::gp::pcg_solver_bytes(std::size_t{1} << 31, 1, std::size_t{1} << 31, 1); }),
                 "overflow the size type"));
  // (and the aligned operator new, asked for SIZE_MAX bytes, returned a few)
  memsafe::detail::accountant unlimited, budgeted(1 << 20);
  CHECK_THROWS_AS(memsafe::detail::temp_buffer<double>(unlimited, std::size_t(-1) / 4), memsafe::out_of_memory);
  CHECK_THROWS_AS(memsafe::detail::temp_buffer<double>(unlimited, std::size_t(-1) / 8), memsafe::out_of_memory);
  CHECK_THROWS_AS(memsafe::detail::temp_buffer<double>(budgeted, std::size_t(-1) / 4), memsafe::out_of_memory);
  CHECK_THROWS_AS(memsafe::detail::temp_buffer<double>(budgeted, std::size_t{1} << 20), memsafe::budget_error);
  CHECK(unlimited.current() == 0);
  CHECK(budgeted.current() == 0);
}

TEST_CASE("exact_predict_mean names itself when the budget is too small") {
  const vec X = {0.0, 0.5, 1.0}, y = {0.3, -0.2, 0.5}, alpha = {1, 2, 3}, xs = {0.25};
  gp::hyperparameters h{gp::kernel::rbf, 1.0, {1.0}, 0.1, 1e-6};
  double mean[1];
  CHECK_THROWS_WITH_AS(gp::exact_predict_mean({X.data(), y.data(), 3, 1}, alpha.data(), 1, h, {xs.data(), 1, 1}, mean,
                                              {.budget = 10}),
                       doctest::Contains("memsafe::gp::exact_predict_mean: "), memsafe::budget_error);
  const std::string why = message_of<memsafe::budget_error>([&] {
    gp::exact_predict_mean({X.data(), y.data(), 3, 1}, alpha.data(), 1, h, {xs.data(), 1, 1}, mean, {.budget = 10});
  });
  CHECK(contains(why, "memsafe::gp::exact_predict_mean: a budget of "));
  CHECK_FALSE(contains(why, "memsafe: "));
}
}
#endif
