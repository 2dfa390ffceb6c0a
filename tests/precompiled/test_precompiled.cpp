// memsafe::precompiled: a translation unit linking it (MEMSAFE_PRECOMPILED=1) takes the listed
// evaluations from the library. Every family of the list — reductions over j and over i, K·v,
// K·M, v·K, M·K, softmax_sum — for several formulas and both value types, against independent
// dense references at every budget (peak ≤ budget), plus what stays in the translation unit.
// tests/precompiled/check_objects.cmake checks that this file's object defines none of them.
#include "../reference.hpp"

#include <string>

using namespace ref;

static_assert(memsafe::precompiled_linked, "this test is built against memsafe::precompiled");

namespace {
using PF = memsafe::detail::pairwise<memsafe::formula::sqdist, float, memsafe::dyn, memsafe::dyn, memsafe::dyn>;
static_assert(memsafe::precompiled_expr<memsafe::detail::reduce_expr<memsafe::red::argkmin, PF>>);
static_assert(memsafe::precompiled_expr<memsafe::detail::reduce_expr<memsafe::red::argkmin, memsafe::detail::transpose_expr<PF>>>);
// Static extents and maps are not in the list.
using PS = memsafe::detail::pairwise<memsafe::formula::sqdist, float, memsafe::dyn, memsafe::dyn, 3>;
static_assert(!memsafe::precompiled_expr<memsafe::detail::reduce_expr<memsafe::red::argkmin, PS>>);

/// The expression type is in the list and explain says the library runs it.
template <class X>
void expect_precompiled(const X& x) {
  static_assert(memsafe::precompiled_expr<X>, "expected an expression memsafe::precompiled holds");
  CHECK(memsafe::explain(x).find("compiled:     in memsafe::precompiled") != std::string::npos);
}

/// k nearest (or farthest) per row of a dense reference, ties by the lower index.
template <class T>
void expect_topk(const memsafe::result<T>& r, const std::vector<double>& K, std::size_t n, std::size_t m,
                 std::size_t k, bool largest, const char* what) {
  INFO(what);
  REQUIRE(r.indices.size() == n * k);
  for (std::size_t i = 0; i < n; ++i) {
    auto want = row_sorted(K, m, i, largest);
    for (std::size_t q = 0; q < k; ++q) CHECK(r.indices[i * k + q] == want[q].i);
  }
}
}  // namespace

TEST_SUITE("precompiled") {
TEST_CASE_TEMPLATE("selections over j and over i come from the library and are exact", T, float, double) {
  // Small integers: every distance is exact in T, so the ranking is the reference's.
  const std::size_t n = 157, m = 263, d = 5, k = 7;
  auto x = data(n, d, 301, true), y = data(m, d, 302, true);
  auto xT = cast<T>(x), yT = cast<T>(y);
  auto X = memsafe::points(xT.data(), n, d), Y = memsafe::points(yT.data(), m, d);
  const auto Ksq = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  const auto Kl1 = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return l1(a, b, dd); });
  const auto Kdot = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return dotp(a, b, dd); });

  auto knn = memsafe::argkmin(memsafe::sqdist(X, Y), k);
  expect_precompiled(knn);
  auto first = eval_all(knn);
  for (const auto& r : first) {
    expect_topk(r, Ksq, n, m, k, false, "argkmin sqdist");
    CHECK(identical(r.values, first.front().values));
  }
  auto far = memsafe::argkmax(memsafe::dot(X, Y), k);
  expect_precompiled(far);
  for (const auto& r : eval_all(far)) expect_topk(r, Kdot, n, m, k, true, "argkmax dot");
  // Over i: the k nearest x for every y.
  auto knn_i = memsafe::argkmin(memsafe::l1(X, Y), k, memsafe::over_i);
  expect_precompiled(knn_i);
  const auto Kl1t = transpose(Kl1, n, m);
  for (const auto& r : eval_all(knn_i)) expect_topk(r, Kl1t, m, n, k, false, "argkmin l1 over i");
  auto mn = memsafe::min(memsafe::sqdist(X, Y));
  expect_precompiled(mn);
  auto am = memsafe::argmax(memsafe::l1(X, Y), memsafe::over_i);
  expect_precompiled(am);
  for (const auto& r : eval_all(mn))
    for (std::size_t i = 0; i < n; ++i) CHECK(double(r.values[i]) == row_sorted(Ksq, m, i, false)[0].v);
  for (const auto& r : eval_all(am))
    for (std::size_t j = 0; j < m; ++j) CHECK(r.indices[j] == row_sorted(Kl1t, n, j, true)[0].i);
}

TEST_CASE_TEMPLATE("kernel sums and products come from the library", T, float, double) {
  const std::size_t n = 141, m = 219, d = 3, c = 3;
  auto x = data(n, d, 311), y = data(m, d, 312), v = data(m, 1, 313), u = data(n, 1, 314), M = data(c, n, 315);
  auto V = data(m, 2, 316);
  auto xT = cast<T>(x), yT = cast<T>(y), vT = cast<T>(v), uT = cast<T>(u), MT = cast<T>(M), VT = cast<T>(V);
  auto xd = seen<T>(x), yd = seen<T>(y), vd = seen<T>(v), ud = seen<T>(u), Md = seen<T>(M), Vd = seen<T>(V);
  auto X = memsafe::points(xT.data(), n, d), Y = memsafe::points(yT.data(), m, d);
  const double ls = 0.8, var = 1.3;

  // K·v (RBF).
  const auto Krbf = dense(xd, yd, n, m, d, [&](const double* a, const double* b, std::size_t dd) {
    return var * std::exp(-0.5 * sq(a, b, dd) / (ls * ls));
  });
  auto kv = memsafe::rbf(X, Y, ls, var) * memsafe::vec(vT.data(), m);
  expect_precompiled(kv);
  {
    const auto [want, scale] = matmul(Krbf, vd, n, m, 1);
    for (const auto& r : eval_all(kv)) expect_close(r.values, want, scale, "rbf * v");
  }
  // vᵀ·K (Matérn 3/2 with ARD lengthscales: the same expression type as a scalar lengthscale).
  const std::vector<T> ard = {T(0.7), T(1.1), T(0.9)};
  const std::vector<double> ardd = seen<T>(std::vector<double>{0.7, 1.1, 0.9});
  const auto Km32 = dense(xd, yd, n, m, d, [&](const double* a, const double* b, std::size_t dd) {
    const double rr = std::sqrt(3.0 * sq(a, b, dd, ardd.data()));
    return var * (1 + rr) * std::exp(-rr);
  });
  auto vk = memsafe::vec(uT.data(), n) * memsafe::matern32(X, Y, memsafe::ard(ard.data(), d), var);
  expect_precompiled(vk);
  {
    const auto [want, scale] = matmul(ud, Km32, 1, n, m);
    for (const auto& r : eval_all(vk)) expect_close(r.values, want, scale, "u * matern32 (ARD)");
  }
  // M·K (c×n times n×m) and K·Mᵀ-shaped K·M (n×m times m×c) with the cosine and RQ formulas.
  const auto Kcos = dense(xd, yd, n, m, d, [](const double* a, const double* b, std::size_t dd) { return cosd(a, b, dd); });
  auto mk = memsafe::matrix(MT.data(), c, n) * memsafe::cosine(X, Y);
  expect_precompiled(mk);
  {
    const auto [want, scale] = matmul(Md, Kcos, c, n, m);
    for (const auto& r : eval_all(mk)) expect_close(r.values, want, scale, "M * cosine");
  }
  // Σ_j of a kernel, over j and over i (sum of RBF rows and columns).
  auto rs = memsafe::sum(memsafe::rbf(X, Y, ls, var));
  auto cs = memsafe::sum(memsafe::rbf(X, Y, ls, var), memsafe::over_i);
  expect_precompiled(rs);
  expect_precompiled(cs);
  {
    const std::vector<double> ones_m(m, 1.0), ones_n(n, 1.0);
    const auto [wr, sr] = matmul(Krbf, ones_m, n, m, 1);
    const auto [wc, sc] = matmul(ones_n, Krbf, 1, n, m);
    for (const auto& r : eval_all(rs)) expect_close(r.values, wr, sr, "sum rbf");
    for (const auto& r : eval_all(cs)) expect_close(r.values, wc, sc, "sum rbf over i");
  }
  // logsumexp_j of x·y and softmax_sum(x·y, V).
  const auto Kdot = dense(xd, yd, n, m, d, [](const double* a, const double* b, std::size_t dd) { return dotp(a, b, dd); });
  auto lse = memsafe::logsumexp(memsafe::dot(X, Y));
  auto att = memsafe::softmax_sum(memsafe::dot(X, Y), memsafe::matrix(VT.data(), m, 2));
  expect_precompiled(lse);
  expect_precompiled(att);
  std::vector<double> wl(n), wa(n * 2), sl(n), sa(n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    double mx = -1e300;
    for (std::size_t j = 0; j < m; ++j) mx = std::max(mx, Kdot[i * m + j]);
    double s = 0, a0 = 0, a1 = 0;
    for (std::size_t j = 0; j < m; ++j) {
      const double w = std::exp(Kdot[i * m + j] - mx);
      s += w;
      a0 += w * Vd[j * 2];
      a1 += w * Vd[j * 2 + 1];
    }
    wl[i] = mx + std::log(s);
    sl[i] = 1 + std::fabs(wl[i]);
    wa[i * 2] = a0 / s;
    wa[i * 2 + 1] = a1 / s;
    sa[i * 2] = sa[i * 2 + 1] = 4;
  }
  for (const auto& r : eval_all(lse)) expect_close(r.values, wl, sl, "logsumexp dot");
  for (const auto& r : eval_all(att)) expect_close(r.values, wa, sa, "softmax_sum dot");
}

TEST_CASE("expressions outside the list are compiled here, and say so") {
  const std::size_t n = 40, m = 50;
  auto x = data(n, 3, 321, true), y = data(m, 3, 322, true);
  auto xT = cast<float>(x), yT = cast<float>(y);
  auto Xs = memsafe::points<3>(xT.data(), n);  // static dimension: a different expression type
  auto Y = memsafe::points(yT.data(), m, 3);
  auto e = memsafe::argkmin(memsafe::sqdist(Xs, memsafe::points<3>(yT.data(), m)), 3);
  static_assert(!memsafe::precompiled_expr<decltype(e)>);
  CHECK(memsafe::explain(e).find("in this translation unit (not in memsafe::precompiled)") != std::string::npos);
  // A map of a formula is not in the list either; its answer is still the reference's.
  auto X = memsafe::points(xT.data(), n, 3);
  auto mapped = memsafe::argkmin(memsafe::sqdist(X, Y) * 2.0f, 3);
  static_assert(!memsafe::precompiled_expr<decltype(mapped)>);
  const auto K = dense(x, y, n, m, 3, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  expect_topk(memsafe::eval(e, memsafe::budget_bytes(1 << 16)), K, n, m, 3, false, "static extents");
  expect_topk(memsafe::eval(mapped, memsafe::budget_bytes(1 << 16)), K, n, m, 3, false, "mapped");
}
}
