// Lazy × lazy products, elementwise arithmetic, column splitting, large k, accounting.
#include "reference.hpp"
#include <cstdlib>
#include <string>

using namespace ref;

TEST_SUITE("products") {
TEST_CASE_TEMPLATE("lazy times lazy Kuf Kuf^T against the dense reference", T, float, double) {
  const std::size_t mu = 23, n = 301, d = 4;
  auto u = data(mu, d, 21), x = data(n, d, 22);
  auto uT = cast<T>(u), xT = cast<T>(x);
  auto ud = seen<T>(u), xd = seen<T>(x);
  auto U = memsafe::points(uT.data(), mu, d);
  auto X = memsafe::points(xT.data(), n, d);
  auto Kuf = memsafe::rbf(U, X, 0.9, 1.2);
  auto Kr = dense(ud, xd, mu, n, d, [](const double* a, const double* b, std::size_t dd) {
    return 1.2 * std::exp(-0.5 * sq(a, b, dd) / 0.81);
  });
  const auto [want, scale] = matmul(Kr, transpose(Kr, mu, n), mu, n, mu);
  auto rs = eval_all(Kuf * memsafe::transpose(Kuf));
  for (const auto& r : rs) {
    CHECK(r.rows == mu);
    CHECK(r.cols == mu);
    expect_close(r.values, want, scale, "Kuf*Kuf^T");
  }
  // A tight budget forces tiles far smaller than n.
  auto tight = memsafe::eval(Kuf * memsafe::transpose(Kuf), memsafe::options{std::size_t{4096}, 1});
  CHECK(tight.stats.peak_temp_bytes <= 4096);
  CHECK(tight.stats.tile_inner < n);
  CHECK(tight.stats.peak_temp_bytes < mu * n * sizeof(T));  // Kuf (mu×n) is never formed whole
  expect_close(tight.values, want, scale, "Kuf*Kuf^T tight");
}

TEST_CASE("lazy times lazy with different formulas and shapes") {
  const std::size_t p = 7, n = 45, q = 11, d = 3;
  auto a = data(p, d, 31), x = data(n, d, 32), b = data(q, d, 33);
  auto A = memsafe::points(a.data(), p, d), X = memsafe::points(x.data(), n, d), B = memsafe::points(b.data(), q, d);
  auto e = memsafe::sqdist(A, X) * memsafe::matern32(X, B, 1.1, 0.7);
  auto K1 = dense(a, x, p, n, d, [](const double* s, const double* t, std::size_t dd) { return sq(s, t, dd); });
  auto K2 = dense(x, b, n, q, d, [](const double* s, const double* t, std::size_t dd) {
    const double r = std::sqrt(3.0 * sq(s, t, dd)) / 1.1;
    return 0.7 * (1 + r) * std::exp(-r);
  });
  const auto [want, scale] = matmul(K1, K2, p, n, q);
  for (const auto& r : eval_all(e)) expect_close(r.values, want, scale, "sqdist*matern32");
}

TEST_CASE_TEMPLATE("elementwise arithmetic and unary functions match the reference", T, float, double) {
  const std::size_t n = 19, m = 67, d = 3;
  auto x = data(n, d, 41), y = data(m, d, 42);
  auto xT = cast<T>(x), yT = cast<T>(y);
  auto xd = seen<T>(x), yd = seen<T>(y);
  auto X = memsafe::points(xT.data(), n, d), Y = memsafe::points(yT.data(), m, d);
  auto D = memsafe::sqdist(X, Y);
  auto G = memsafe::dot(X, Y);
  // A composite written the naive way: exp(-D/2)·3 + 1/(1+D) − min(G, 0.5) + sqrt(D)·abs(G) + pow(D+1, 1.5) − log(1+D)
  auto e = memsafe::exp(-D / 2.0) * 3.0 + 1.0 / (1.0 + D) - memsafe::min(G, memsafe::clamp_max(G, 0.5)) +
           memsafe::hadamard(memsafe::sqrt(D), memsafe::abs(G)) + memsafe::pow(D + 1.0, 1.5) -
           memsafe::log(D + 1.0) + memsafe::square(G) / (D + 2.0) - memsafe::inv(D + 4.0) + memsafe::max(D, G) -
           memsafe::clamp_min(G, 0.0);
  auto want = dense(xd, yd, n, m, d, [](const double* a, const double* b, std::size_t dd) {
    const double Dv = sq(a, b, dd), Gv = dotp(a, b, dd);
    return std::exp(-Dv / 2) * 3 + 1 / (1 + Dv) - std::min(Gv, std::min(Gv, 0.5)) + std::sqrt(Dv) * std::fabs(Gv) +
           std::pow(Dv + 1, 1.5) - std::log(Dv + 1) + Gv * Gv / (Dv + 2) - 1 / (Dv + 4) + std::max(Dv, Gv) -
           std::max(Gv, 0.0);
  });
  std::vector<double> scale(want.size());
  for (std::size_t q = 0; q < want.size(); ++q) scale[q] = 10 + std::fabs(want[q]) * 4;
  for (const auto& r : eval_all(memsafe::dense(e))) expect_close(r.values, want, scale, "composite");
  // The same composite reduced, and transposed: transpose distributes over the elementwise tree.
  auto wt = transpose(want, n, m);
  for (const auto& r : eval_all(memsafe::dense(memsafe::transpose(e)))) expect_close(r.values, wt, scale, "composite^T");
  auto tt = memsafe::eval(memsafe::dense(memsafe::transpose(memsafe::transpose(e))), memsafe::budget_bytes(1 << 20));
  expect_close(tt.values, want, scale, "composite^T^T");
}

TEST_CASE("few rows many columns: threads split columns and merge exactly") {
  const std::size_t n = 3, m = 5000, d = 2;
  auto x = data(n, d, 51), y = data(m, d, 52);
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  auto e = memsafe::argkmin(memsafe::sqdist(X, Y), 9);
  memsafe::options one{std::size_t{1} << 20, 1}, four{std::size_t{1} << 20, 4};
  auto p4 = memsafe::plan_for(e, four);
  // Never more threads than cores (available_cores()); with two or more, they split the columns.
  CHECK(p4.threads == std::min<std::size_t>(4, memsafe::available_cores()));
  if (memsafe::available_cores() > 1) CHECK(p4.split_columns);
  auto r1 = memsafe::eval(e, one), r4 = memsafe::eval(e, four);
  CHECK(r1.indices == r4.indices);
  CHECK(identical(r1.values, r4.values));
  CHECK(r4.stats.peak_temp_bytes <= *four.budget);
  auto K = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  for (std::size_t i = 0; i < n; ++i) {
    auto s = row_sorted(K, m, i, false);
    for (std::size_t p = 0; p < 9; ++p) CHECK(r4.index(i, p) == s[p].i);
  }
  // sums merge too
  auto s1 = memsafe::eval(memsafe::sum(memsafe::rbf(X, Y)), one), s4 = memsafe::eval(memsafe::sum(memsafe::rbf(X, Y)), four);
  for (std::size_t i = 0; i < n; ++i) CHECK(s4[i] == doctest::Approx(s1[i]).epsilon(1e-12));
}

TEST_CASE("top-k with k = 1024 and k = 2048 is exact at every budget") {
  const std::size_t n = 5, m = 3001, d = 3;
  auto x = data(n, d, 61, true), y = data(m, d, 62, true);  // integer data: many exact ties
  auto xf = cast<float>(x), yf = cast<float>(y);
  auto X = memsafe::points(xf.data(), n, d), Y = memsafe::points(yf.data(), m, d);
  auto K = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  for (std::size_t k : {std::size_t{1024}, std::size_t{2048}}) {
    auto rs = eval_all(memsafe::argkmin(memsafe::sqdist(X, Y), k));
    for (const auto& r : rs) {
      CHECK(r.indices == rs[0].indices);
      for (std::size_t i = 0; i < n; ++i) {
        auto s = row_sorted(K, m, i, false);  // stable sort: ties in index order
        for (std::size_t p = 0; p < k; ++p) REQUIRE(r.index(i, p) == s[p].i);
      }
    }
    auto rmax = eval_all(memsafe::argkmax(memsafe::sqdist(X, Y), k));
    for (std::size_t i = 0; i < n; ++i) {
      auto s = row_sorted(K, m, i, true);
      for (std::size_t p = 0; p < k; ++p) REQUIRE(rmax.back().index(i, p) == s[p].i);
    }
  }
}

TEST_CASE("every temporary is accounted: allocations are one workspace per thread") {
  const std::size_t n = 100, m = 700, d = 3;
  auto x = data(n, d, 71), y = data(m, d, 72);
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  // Both the fused sum (sum_driver.hpp: no kernel tile) and the tile path (MEMSAFE_KERNELS=reference),
  // at a budget small enough that both take several tiles.
  const char* old = std::getenv("MEMSAFE_KERNELS");
  const std::string saved = old ? old : "";
  for (const char* kernels : {"", "reference"}) {
    INFO("MEMSAFE_KERNELS=" << kernels);
    if (*kernels) ::setenv("MEMSAFE_KERNELS", kernels, 1);
    else ::unsetenv("MEMSAFE_KERNELS");
    auto r = memsafe::eval(memsafe::rbf(X, Y) * memsafe::vec(y.data(), m), memsafe::options{std::size_t{8} << 10, 2});
    CHECK(r.stats.temp_allocations == r.stats.threads);
    CHECK(r.stats.peak_temp_bytes == r.stats.planned_temp_bytes);
    CHECK(r.stats.peak_temp_bytes <= (std::size_t{8} << 10));
    CHECK(r.stats.num_tiles > 1);
  }
  if (old) ::setenv("MEMSAFE_KERNELS", saved.c_str(), 1);
  else ::unsetenv("MEMSAFE_KERNELS");
}

TEST_CASE("static extents: points<D> and matrix<R, C> work like dynamic ones") {
  const std::size_t n = 10, m = 12;
  auto x = data(n, 3, 81), y = data(m, 3, 82), v = data(m, 1, 83);
  auto Xs = memsafe::points<3>(x.data(), n);
  auto Ys = memsafe::matrix<12, 3>(static_cast<const double*>(y.data()));
  auto Xd = memsafe::points(x.data(), n, 3), Yd = memsafe::points(y.data(), m, 3);
  static_assert(decltype(memsafe::sqdist(Xs, Ys))::static_cols == 12);
  static_assert(decltype(memsafe::sqdist(Xs, Ys))::static_dim == 3);
  auto a = memsafe::eval(memsafe::sqdist(Xs, Ys) * memsafe::vec<12>(static_cast<const double*>(v.data())));
  auto b = memsafe::eval(memsafe::sqdist(Xd, Yd) * memsafe::vec(v.data(), m));
  // Different instantiations (the static d unrolls the feature loop) may contract a·b+c into an FMA
  // differently, so they agree to rounding, not bitwise; each is budget-independent on its own.
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-13));
}

TEST_CASE("compile-time budget, run-time budget and options agree") {
  using namespace memsafe::literals;
  const std::size_t n = 50, m = 80;
  auto x = data(n, 2, 91), y = data(m, 2, 92);
  auto X = memsafe::points(x.data(), n, 2), Y = memsafe::points(y.data(), m, 2);
  auto e = memsafe::argkmin(memsafe::l1(X, Y), 4);
  auto a = memsafe::eval<memsafe::budget<1_MiB>>(e);
  auto b = memsafe::eval(e, memsafe::budget_bytes(1_MiB));
  CHECK(a.stats.budget_bytes == 1_MiB);
  CHECK(b.stats.budget_bytes == 1_MiB);
  CHECK(a.indices == b.indices);
  std::vector<double> vals(n * 4);
  std::vector<memsafe::index_t> idx(n * 4);
  auto st = memsafe::eval_into(e, vals.data(), idx.data(), memsafe::options{1_MiB, 1});
  CHECK(st.peak_temp_bytes <= 1_MiB);
  CHECK(idx == a.indices);
  const std::string ex = memsafe::explain(e, memsafe::options{1_MiB, 1});
  CHECK(ex.find("argkmin") != std::string::npos);
  CHECK(ex.find("tile:") != std::string::npos);
}

TEST_CASE("transpose and unary nodes nest at any depth") {
  const std::size_t n = 9;
  auto x = data(n, 2, 95);
  auto X = memsafe::points(x.data(), n, 2);
  auto K = memsafe::sqdist(X, X);
  auto a = memsafe::eval(memsafe::sum(-(K + K)), memsafe::budget_bytes(1 << 20));
  auto b = memsafe::eval(memsafe::sum(K + memsafe::transpose(K)), memsafe::budget_bytes(1 << 20));
  auto c = memsafe::eval(memsafe::sum(memsafe::exp(-memsafe::transpose(K + 2.0 * K))), memsafe::budget_bytes(1 << 20));
  auto Kr = dense(x, x, n, n, 2, [](const double* p, const double* q, std::size_t d) { return sq(p, q, d); });
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0, e = 0;
    for (std::size_t j = 0; j < n; ++j) {
      s += Kr[i * n + j];
      e += std::exp(-3.0 * Kr[j * n + i]);
    }
    CHECK(a[i] == doctest::Approx(-2 * s).epsilon(1e-12));
    CHECK(b[i] == doctest::Approx(2 * s).epsilon(1e-12));
    CHECK(c[i] == doctest::Approx(e).epsilon(1e-12));
  }
}
}
