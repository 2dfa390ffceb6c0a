// tests/test_headers_modules.cpp — what including the gradient, attention and (with LAPACK) GP and
// linalg modules costs a translation unit: <memsafe/grad.hpp>, <memsafe/attention.hpp>,
// <memsafe/gp.hpp> and <memsafe/linalg.hpp>, included first and alone, bring
// in none of the standard or system headers tests/header_guards.hpp names (among them <cmath>,
// <algorithm>, <chrono> with its <sstream>, and <immintrin.h>, whose parsing alone cost more than
// all of memsafe.hpp: docs/design.md, "Compile time").
#include <memsafe/attention.hpp>
#include <memsafe/grad.hpp>
#if defined(MEMSAFE_HAS_LAPACK)  // the GP and dense linear-algebra modules: only with memsafe::lapack
#include <memsafe/gp.hpp>
#include <memsafe/linalg.hpp>
#endif

#include "header_guards.hpp"

#include <doctest/doctest.h>

#include <vector>

TEST_CASE("headers: the gradient and attention modules alone are enough to use them") {
  // a gradient: d/dx of sum_j exp(-(x - y_j)^2 / 2) at x = 0 with y = {1}: exp(-1/2)
  const std::vector<double> x = {0.0}, y = {1.0}, ones = {1.0};
  const auto X = memsafe::points(x.data(), 1, 1), Y = memsafe::points(y.data(), 1, 1);
  const auto g = memsafe::grad(memsafe::rbf(X, Y, 1.0, 1.0) * memsafe::vec(ones.data(), 1), memsafe::vec(ones.data(), 1),
                               memsafe::wrt(X), memsafe::budget_bytes(1 << 20));
  REQUIRE(g.points.size() == 1);
  REQUIRE(g.points[0].size() == 1);
  CHECK(g.points[0][0] == doctest::Approx(0.6065306597126334).epsilon(1e-12));  // (y - x) exp(-(x-y)^2/2)
  // attention: one query, two keys with equal scores, so O is the mean of the values
  const std::vector<float> q = {1.0f}, k = {0.5f, 0.5f}, v = {2.0f, 4.0f};
  std::vector<float> o(1);
  const auto A = memsafe::softmax_sum(memsafe::dot(memsafe::heads(q.data(), 1, 1, 1, 1), memsafe::heads(k.data(), 1, 1, 2, 1)),
                                      memsafe::heads(v.data(), 1, 1, 2, 1));
  CHECK(memsafe::attention_minimum_bytes(A).forward > 0);
  memsafe::eval_into(A, memsafe::heads(o.data(), 1, 1, 1, 1), nullptr);
  CHECK(o[0] == doctest::Approx(3.0f));
}

#if defined(MEMSAFE_HAS_LAPACK)
TEST_CASE("headers: the GP module alone is enough to use it") {
  CHECK(memsafe::gp::parse_kernel(memsafe::gp::kernel_name(memsafe::gp::kernel::matern52)) == memsafe::gp::kernel::matern52);
  CHECK_THROWS_AS(memsafe::gp::parse_kernel("cubic"), memsafe::argument_error);
  // one training point that is also the one inducing point: the bound is log N(y | 0, σ_f² + σ²)
  // up to the jitter's ≈ 1e-6 (Qff = σ_f⁴/(σ_f² + jitter), trace term ≈ jitter/(2σ²))
  const std::vector<double> x = {0.25}, y = {0.5};
  memsafe::gp::hyperparameters h;
  h.kind = memsafe::gp::kernel::matern32;
  h.lengthscales = {1.0};
  const auto r = memsafe::gp::sgpr({x.data(), y.data(), 1, 1}, {x.data(), 1, 1}, h, {});
  CHECK(r.bound == doctest::Approx(-1.0802299867431988).epsilon(1e-5));  // -log(2π·1.1)/2 - 0.5²/(2·1.1)
  CHECK(r.stats.peak_temp_bytes <= r.stats.budget_bytes);
}
#endif
