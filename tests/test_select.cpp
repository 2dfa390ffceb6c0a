// The fused k-nearest selection (backend/host/select_driver.hpp, backend/host/select.hpp) against the portable
// tile path (MEMSAFE_KERNELS=reference) and against an independent dense reference in double:
// indices equal, values bitwise equal, at every budget, on awkward data (ties, NaN, inf, values
// whose squares overflow, zero vectors), for every supported formula, both precisions.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memsafe/memsafe.hpp>
#include <string>

#include "reference.hpp"
#include "sweep.hpp"

using namespace ref;

namespace {

/// Evaluate with the portable tile path only (restores the environment afterwards).
template <class X>
auto eval_reference(const X& x, const memsafe::options& o) {
  const char* old = std::getenv("MEMSAFE_KERNELS");
  const std::string saved = old ? old : "";
  ::setenv("MEMSAFE_KERNELS", "reference", 1);
  auto r = memsafe::eval(x, o);
  if (old) ::setenv("MEMSAFE_KERNELS", saved.c_str(), 1);
  else ::unsetenv("MEMSAFE_KERNELS");
  return r;
}

bool fused(const memsafe::tile_plan& p) { return p.reduction.find("fused: screened") != std::string::npos; }

/// The fused result equals the reference path's at every budget (and is taken when available).
template <class X>
void same_as_reference(const X& x, const std::string& what) {
  INFO(what);
  const auto want = eval_reference(x, memsafe::options{memsafe::unlimited, 1});
  CHECK_FALSE(fused(want.stats.plan));
  CHECK(fused(memsafe::plan_for(x)) == memsafe::host::simd_fast);
  for (const auto& r : eval_all(x)) {
    CHECK(r.indices == want.indices);
    CHECK(identical(r.values, want.values));
  }
}

/// Scatter special values over a data set.
template <class T>
void spoil(std::vector<T>& v, std::size_t d, unsigned seed) {
  const T specials[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::max() / T(8), T(1e18), T(0)};
  const std::size_t rows = v.size() / d;
  for (std::size_t q = 0; q < 12; ++q) {
    const std::size_t i = (seed * 7919u + q * 104729u) % rows;
    v[i * d + (q % d)] = specials[q % 6];
    if (q % 3 == 0)
      for (std::size_t k = 0; k < d; ++k) v[i * d + k] = T(0);  // zero vectors (cosine: distance 1)
  }
}

template <class T>
void all_formulas(std::size_t n, std::size_t m, std::size_t d, std::size_t k, bool integer, bool special) {
  auto x = cast<T>(data(n, d, 3 + unsigned(d), integer)), y = cast<T>(data(m, d, 5 + unsigned(d), integer));
  if (special) {
    spoil(x, d, 1);
    spoil(y, d, 2);
  }
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const std::string tag = std::string(sizeof(T) == 4 ? "f32" : "f64") + " n=" + std::to_string(n) +
                          " m=" + std::to_string(m) + " d=" + std::to_string(d) + " k=" + std::to_string(k) +
                          (integer ? " integer" : "") + (special ? " special" : "");
  same_as_reference(memsafe::argkmin(memsafe::sqdist(X, Y), k), "sqdist " + tag);
  same_as_reference(memsafe::argkmin(memsafe::l1(X, Y), k), "l1 " + tag);
  same_as_reference(memsafe::argkmin(memsafe::cosine(X, Y), k), "cosine " + tag);
  same_as_reference(memsafe::argkmax(memsafe::dot(X, Y), k), "dot " + tag);
  same_as_reference(memsafe::argmin(memsafe::sqdist(X, Y)), "argmin sqdist " + tag);
  same_as_reference(memsafe::min(memsafe::l1(X, Y)), "min l1 " + tag);
  same_as_reference(memsafe::argmax(memsafe::dot(X, Y)), "argmax dot " + tag);
  same_as_reference(memsafe::max(memsafe::dot(X, Y)), "max dot " + tag);
}

}  // namespace

TEST_CASE("select: fused k-nearest equals the reference path, every formula, both precisions") {
  for (std::size_t d : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{100}}) {
    all_formulas<float>(29, 517, d, 10, false, false);
    all_formulas<double>(29, 517, d, 10, false, false);
  }
}

TEST_CASE("select: ties (integer data) and large k are exact") {
  all_formulas<float>(13, 300, 2, 1, true, false);
  all_formulas<float>(13, 300, 2, 64, true, false);
  all_formulas<double>(7, 300, 4, 299, true, false);
}

TEST_CASE("select: NaN, inf, overflowing squares and zero vectors take the same answers") {
  for (std::size_t d : {std::size_t{1}, std::size_t{3}, std::size_t{20}}) {
    all_formulas<float>(23, 211, d, 5, false, true);
    all_formulas<double>(23, 211, d, 5, false, true);
  }
}

TEST_CASE("select: independent dense reference (indices of the k nearest, exact)") {
  const std::size_t n = 40, m = 900, d = 6, k = 12;
  auto x = data(n, d, 41), y = data(m, d, 42);
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  auto K = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  auto C = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return cosd(a, b, dd); });
  for (const auto& r : eval_all(memsafe::argkmin(memsafe::sqdist(X, Y), k)))
    check_ranked(r, K, n, m, k, false, true, "sqdist");
  for (const auto& r : eval_all(memsafe::argkmin(memsafe::cosine(X, Y), k)))
    check_ranked(r, C, n, m, k, false, true, "cosine");
}

TEST_CASE("select: few rows, threads split the columns and merge exactly") {
  const std::size_t n = 5, m = 20000, d = 3;
  auto x = cast<float>(data(n, d, 61)), y = cast<float>(data(m, d, 62));
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, Y), 50);
  const memsafe::options four{std::size_t{1} << 20, 4};
  const auto p = memsafe::plan_for(e, four);
  CHECK(p.split_columns);
  const auto a = memsafe::eval(e, four), b = eval_reference(e, memsafe::options{memsafe::unlimited, 1});
  CHECK(a.indices == b.indices);
  CHECK(identical(a.values, b.values));
  CHECK(a.stats.peak_temp_bytes <= *four.budget);
}

TEST_CASE("select: the broadcast form and per-dimension scaling take the fused path too") {
  const std::size_t n = 31, m = 400, d = 5;
  auto x = cast<float>(data(n, d, 71)), y = cast<float>(data(m, d, 72));
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto naive = memsafe::argkmin(
      memsafe::sum<2>(memsafe::square(memsafe::unsqueeze<1>(X) - memsafe::unsqueeze<0>(Y))), 7);
  same_as_reference(naive, "broadcast sqdist");
  const auto direct = memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, Y), 7), memsafe::options{memsafe::unlimited, 2});
  CHECK(memsafe::eval(naive, memsafe::options{memsafe::unlimited, 2}).indices == direct.indices);
}

TEST_CASE("select: too small a budget names the minimum before any work") {
  const std::size_t n = 10, m = 100, d = 64;
  auto x = cast<float>(data(n, d, 81)), y = cast<float>(data(m, d, 82));
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, Y), 4);
  const std::size_t mn = memsafe::plan_for(e, memsafe::options{memsafe::unlimited, 1}).min_bytes;
  CHECK_THROWS_AS((void)memsafe::eval(e, memsafe::options{mn - 1, 1}), memsafe::budget_error);
  CHECK(memsafe::eval(e, memsafe::options{mn, 1}).stats.peak_temp_bytes <= mn);
}
