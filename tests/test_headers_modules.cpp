// tests/test_headers_modules.cpp — what including the gradient and attention modules costs a
// translation unit: <memsafe/grad.hpp> and <memsafe/attention.hpp>, included first and alone, bring
// in none of the standard or system headers tests/header_guards.hpp names (among them <cmath>,
// <algorithm>, <chrono> with its <sstream>, and <immintrin.h>, whose parsing alone cost more than
// all of memsafe.hpp: docs/design.md, "Compile time").
#include <memsafe/attention.hpp>
#include <memsafe/grad.hpp>

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
