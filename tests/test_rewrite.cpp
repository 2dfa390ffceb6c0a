// Rewrite rules: type-level results (static_assert), numeric equality with the unrewritten form
// and with naive references, and the accountant proving the big temporaries never exist.
#include "reference.hpp"

using namespace ref;
namespace ms = memsafe;
namespace md = memsafe::detail;  // the node types the rules match (implementation types)

namespace {
using X2 = ms::matrix_view<const double>;
using L1 = md::tleaf<double, 2, 1, ms::dyn>;  // X[:, None, :]
using L0 = md::tleaf<double, 2, 0, ms::dyn>;  // Y[None, :, :]
template <class E>
using rw = ms::rewrite::normalized_t<E>;
using sqd = md::pairwise<ms::formula::sqdist, double, ms::dyn, ms::dyn, ms::dyn>;

// broadcast_sqdist: each squaring form and both operand orders become guarded sqdist.
using Dif = md::tzip<ms::op::sub, L1, L0>;
static_assert(std::is_same_v<rw<md::tsum<2, md::tmap<ms::op::square, Dif>>>,
                             md::guarded<sqd, md::tsum<2, md::tmap<ms::op::square, Dif>>>>);
static_assert(std::is_same_v<typename rw<md::tsum<2, md::tmap<ms::op::pow_scalar<double>, Dif>>>::fast_type, sqd>);
static_assert(std::is_same_v<typename rw<md::tsum<2, md::tzip<ms::op::mul, Dif, Dif>>>::fast_type, sqd>);
static_assert(std::is_same_v<typename rw<md::tsum<2, md::tmap<ms::op::square, md::tzip<ms::op::add, L0, L1>>>>::fast_type,
                             sqd>);
// Look-alikes are left as written.
using SqDif = md::tmap<ms::op::square, Dif>;
static_assert(std::is_same_v<rw<md::tsum<0, SqDif>>, md::tsum<0, SqDif>>);                          // other axis
static_assert(std::is_same_v<rw<md::tsum<2, md::tmap<ms::op::abs, Dif>>>, md::tsum<2, md::tmap<ms::op::abs, Dif>>>);  // |·|
using Mixed = md::tzip<ms::op::mul, Dif, md::tzip<ms::op::add, L1, L0>>;
static_assert(std::is_same_v<rw<md::tsum<2, Mixed>>, md::tsum<2, Mixed>>);                          // different factors
using NotBroadcast = md::tzip<ms::op::sub, L1, L1>;
static_assert(std::is_same_v<rw<md::tsum<2, md::tmap<ms::op::square, NotBroadcast>>>,
                             md::tsum<2, md::tmap<ms::op::square, NotBroadcast>>>);
// constant_fold (the exact folds only) and double_transpose.
using K = md::pairwise<ms::formula::rbf, double, ms::dyn, ms::dyn, ms::dyn>;
using M = ms::op::mul_scalar<double>;
// (E·a)·b and (E + a) + b stay as written (folding changes entries where a·b or a + b overflows).
static_assert(std::is_same_v<rw<md::unary_expr<M, md::unary_expr<M, K>>>, md::unary_expr<M, md::unary_expr<M, K>>>);
static_assert(std::is_same_v<rw<md::unary_expr<ms::op::add_scalar<double>, md::unary_expr<ms::op::add_scalar<double>, K>>>,
                             md::unary_expr<ms::op::add_scalar<double>, md::unary_expr<ms::op::add_scalar<double>, K>>>);
static_assert(std::is_same_v<rw<md::unary_expr<M, md::unary_expr<ms::op::neg, K>>>, md::unary_expr<M, K>>);  // (−E)·a
static_assert(std::is_same_v<rw<md::unary_expr<ms::op::neg, md::unary_expr<ms::op::neg, K>>>, K>);
static_assert(std::is_same_v<rw<md::transpose_expr<md::transpose_expr<K>>>, K>);
// transpose_pushdown: F(X, Y)ᵀ → F(Y, X) and op(E)ᵀ → op(Eᵀ); no transpose node is left.
static_assert(std::is_same_v<rw<md::transpose_expr<K>>, K>);
static_assert(std::is_same_v<rw<md::transpose_expr<md::unary_expr<M, K>>>, md::unary_expr<M, K>>);
// diag_plus survives normalisation around the rewritten child.
static_assert(std::is_same_v<rw<md::diag_plus<md::transpose_expr<K>, md::scalar_diagonal>>,
                             md::diag_plus<K, md::scalar_diagonal>>);

// scalar_hoist / diag_in_product (rewrite/linear.hpp): scalar maps and diagonal terms at the top
// are split off; with nothing to split the type is unchanged; the guarded form keeps the original.
using Dv = ms::op::div_scalar<double>;
using Ng = ms::op::neg;
static_assert(std::is_same_v<ms::rewrite::split_linear_t<true, md::unary_expr<M, md::unary_expr<Dv, K>>>, K>);
static_assert(std::is_same_v<ms::rewrite::split_linear_t<true, md::unary_expr<Ng, md::diag_plus<K, md::scalar_diagonal>>>, K>);
static_assert(std::is_same_v<ms::rewrite::split_linear_t<false, md::diag_plus<K, md::scalar_diagonal>>,
                             md::diag_plus<K, md::scalar_diagonal>>);  // products of two lazy factors: scalars only
static_assert(std::is_same_v<ms::rewrite::split_linear_t<true, md::unary_expr<ms::op::exp, K>>, md::unary_expr<ms::op::exp, K>>);
static_assert(std::is_same_v<decltype(ms::rewrite::split_linear_guarded<true>(
                                 std::declval<const md::unary_expr<M, K>&>(),
                                 std::declval<ms::rewrite::linear_post<double>&>(), std::declval<const X2&>(),
                                 std::declval<ms::rewrite::rule_log&>(), "sum")),
                             md::guarded<K, md::unary_expr<M, K>>>);
// stationary_diagonal / diagonal_of_map / diagonal_of_sum (rewrite/diagonal.hpp).
template <class E>
using dg = ms::rewrite::diagonal_t<E>;
using Cos = md::pairwise<ms::formula::cosine, double, ms::dyn, ms::dyn, ms::dyn>;
static_assert(std::is_same_v<dg<K>, md::guarded<ms::rewrite::diag_constant<double>, ms::rewrite::diag_entries<K>>>);
static_assert(std::is_same_v<dg<sqd>, md::guarded<ms::rewrite::diag_constant<double>, ms::rewrite::diag_entries<sqd>>>);
static_assert(std::is_same_v<dg<Cos>, ms::rewrite::diag_entries<Cos>>);  // no rule knows cos(x, x)
static_assert(std::is_same_v<dg<md::unary_expr<M, Cos>>, ms::rewrite::diag_map<M, ms::rewrite::diag_entries<Cos>>>);
static_assert(std::is_same_v<dg<md::diag_plus<Cos, md::scalar_diagonal>>,
                             ms::rewrite::diag_add<ms::rewrite::diag_entries<Cos>, md::scalar_diagonal>>);
// symmetric_product (rewrite/symmetric.hpp): only leaves of one formula are candidates.
static_assert(ms::rewrite::symmetric_candidate<K, K>);
static_assert(ms::rewrite::symmetric_candidate<md::guarded<K, md::unary_expr<M, K>>, K>);
static_assert(!ms::rewrite::symmetric_candidate<K, sqd>);
static_assert(!ms::rewrite::symmetric_candidate<md::unary_expr<ms::op::exp, K>, K>);
// chain_order (rewrite/chain.hpp): factor kinds from the types, the order from the extents.
static_assert(ms::rewrite::factor_kind<md::dense_factor<double>> == 0);
static_assert(ms::rewrite::factor_kind<K> == 1);
static_assert(ms::rewrite::factor_kind<md::pinned<K>> == 2);
/// The root split of a chain of three factors with the given kinds and extents p×q·q×r·r×s.
constexpr std::size_t chain3_root(std::array<int, 3> kinds, std::array<std::size_t, 4> dims, double budget) {
  ms::rewrite::chain_order<3> o;
  o.dims = dims;
  o.kind = kinds;
  for (std::size_t i = 0; i < 3; ++i) o.cost[i] = kinds[i] == 1 ? 29.0 : 0.0;
  o.solve(budget);
  return o.split[0 * 3 + 2];
}
// A·B·v (dense, 1000×1000 each, v 1000×1): A(Bv) (split after A), never (AB)v.
static_assert(chain3_root({0, 0, 0}, {1000, 1000, 1000, 1}, 1e12) == 0);
// vᵀ·A·B: (vᵀA)B.
static_assert(chain3_root({0, 0, 0}, {1, 1000, 1000, 1000}, 1e12) == 1);
// K·Kᵀ·v with lazy K (n×m, m×n): K(Kᵀv); the n×n intermediate of (KKᵀ)v is never cheaper.
static_assert(chain3_root({1, 1, 0}, {2000, 50, 2000, 1}, 1e12) == 0);
// A budget that holds no 1000×1000 intermediate still gets the order whose intermediate is a vector.
static_assert(chain3_root({0, 0, 0}, {1000, 1000, 1000, 1}, 8.0 * 1000) == 0);
static_assert([] {
  ms::rewrite::chain_order<3> o;
  o.dims = {1000, 1000, 1000, 1};
  o.solve(1e12);
  return o.flops[2] == 2.0 * 1000 * 1000 * 1 * 2 && o.peak[2] == 8.0 * 1000 &&  // two matvecs; one vector held
         o.left_to_right() == 2.0 * 1000 * 1000 * 1000 + 2.0 * 1000 * 1000;
}());

/// Naive n×m reference of Σ_k f(x_ik, y_jk).
template <class F>
std::vector<double> naive_pairs(const std::vector<double>& x, const std::vector<double>& y, std::size_t n,
                                std::size_t m, std::size_t d, F f) {
  std::vector<double> r(n * m);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < d; ++k) s += f(x[i * d + k], y[j * d + k]);
      r[i * m + j] = s;
    }
  return r;
}
std::vector<double> abs_scale(const std::vector<double>& v) {
  std::vector<double> s(v.size());
  for (std::size_t q = 0; q < v.size(); ++q) s[q] = std::fabs(v[q]) + 1;
  return s;
}
}  // namespace

TEST_SUITE("rewrite") {
TEST_CASE("broadcast distance forms equal the pairwise distance and never allocate n x m x d") {
  const std::size_t n = 157, m = 203, d = 5;
  auto x = data(n, d, 1), y = data(m, d, 2);
  auto X = ms::points(x.data(), n, d);
  auto Y = ms::points(y.data(), m, d);
  auto Xb = ms::unsqueeze<1>(X);
  auto Yb = ms::unsqueeze<0>(Y);
  auto want = naive_pairs(x, y, n, m, d, [](double a, double b) { return (a - b) * (a - b); });
  auto plus = naive_pairs(x, y, n, m, d, [](double a, double b) { return (a + b) * (a + b); });
  auto check = [&](const auto& D, const std::vector<double>& w, const char* what) {
    for (const auto& r : eval_all(ms::dense(D))) expect_close(r.values, w, abs_scale(w), what);
    // kNN on the naive form: exact indices, identical to the pairwise form.
    auto a = ms::eval(ms::argkmin(D, 7), ms::budget_bytes(64 * 1024));
    CHECK(a.stats.peak_temp_bytes <= 64 * 1024);
    CHECK(a.stats.peak_temp_bytes < n * m * d * sizeof(double) / 10);
    CHECK(a.stats.temp_allocations <= a.stats.threads);  // one workspace per thread, nothing else
    return a;
  };
  auto ref_knn = ms::eval(ms::argkmin(ms::sqdist(X, Y), 7));
  auto a1 = check(ms::sum<2>(ms::square(Xb - Yb)), want, "square(X-Y)");
  auto a2 = check(ms::sum<2>(ms::pow(Yb - Xb, 2)), want, "pow(Y-X,2)");
  auto dd = Xb - Yb;
  auto a3 = check(ms::sum<2>(dd * dd), want, "(X-Y)*(X-Y)");
  CHECK(a1.indices == ref_knn.indices);
  CHECK(a2.indices == ref_knn.indices);
  CHECK(a3.indices == ref_knn.indices);
  check(ms::sum<2>(ms::square(Xb + Yb)), plus, "square(X+Y)");
  auto ex = ms::explain(ms::argkmin(ms::sum<2>(ms::square(Xb - Yb)), 7));
  CHECK(ex.find("as written:") != std::string::npos);
  CHECK(ex.find("as rewritten: argkmin(sqdist(X[") != std::string::npos);
  CHECK(ex.find("broadcast_sqdist: sum<2>") != std::string::npos);
  // The transposed naive form reduces over i.
  auto tr = ms::eval(ms::argmin(ms::sum<2>(ms::square(Xb - Yb)), ms::over_i));
  auto trw = ms::eval(ms::argmin(ms::sqdist(Y, X)));
  CHECK(tr.indices == trw.indices);
}

TEST_CASE("broadcast look-alikes evaluate as written and match naive references") {
  const std::size_t n = 31, m = 44, d = 3;
  auto x = data(n, d, 3), y = data(m, d, 4);
  auto X = ms::points(x.data(), n, d);
  auto Y = ms::points(y.data(), m, d);
  auto Xb = ms::unsqueeze<1>(X);
  auto Yb = ms::unsqueeze<0>(Y);
  auto cube = naive_pairs(x, y, n, m, d, [](double a, double b) { return (a - b) * (a - b) * (a - b); });
  for (const auto& r : eval_all(ms::dense(ms::sum<2>(ms::pow(Xb - Yb, 3))))) expect_close(r.values, cube, abs_scale(cube), "cube");
  auto ex = ms::explain(ms::sum(ms::sum<2>(ms::pow(Xb - Yb, 3))));
  CHECK(ex.find("not applied (the exponent is not 2)") != std::string::npos);
  auto mixed = naive_pairs(x, y, n, m, d, [](double a, double b) { return (a - b) * (a + b); });
  auto rm = ms::eval(ms::dense(ms::sum<2>((Xb - Yb) * (Xb + Yb))));
  expect_close(rm.values, mixed, abs_scale(mixed), "(X-Y)*(X+Y)");
  // Same type, different tensors: (X−Y)·(X−Z) must not be taken for a square.
  auto z = data(m, d, 5);
  auto Zb = ms::unsqueeze<0>(ms::points(z.data(), m, d));
  std::vector<double> xyz(n * m, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t k = 0; k < d; ++k) xyz[i * m + j] += (x[i * d + k] - y[j * d + k]) * (x[i * d + k] - z[j * d + k]);
  auto rz = ms::eval(ms::dense(ms::sum<2>((Xb - Yb) * (Xb - Zb))));
  expect_close(rz.values, xyz, abs_scale(xyz), "(X-Y)*(X-Z)");
  // Sum over axis 0 (over i): an m×d result.
  std::vector<double> ax0(m * d, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t k = 0; k < d; ++k) ax0[j * d + k] += (x[i * d + k] - y[j * d + k]) * (x[i * d + k] - y[j * d + k]);
  auto r0 = ms::eval(ms::dense(ms::sum<0>(ms::square(Xb - Yb))));
  CHECK(r0.rows == m);
  CHECK(r0.cols == d);
  expect_close(r0.values, ax0, abs_scale(ax0), "sum<0>");
  // Broadcasting over the features (X has one coordinate): evaluated as written.
  auto x1 = data(n, 1, 6);
  auto X1b = ms::unsqueeze<1>(ms::points(x1.data(), n, 1));
  auto f1 = naive_pairs(x1, y, n, m, 1, [](double, double) { return 0.0; });
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < d; ++k) s += (x1[i] - y[j * d + k]) * (x1[i] - y[j * d + k]);
      f1[i * m + j] = s;
    }
  auto rf = ms::eval(ms::dense(ms::sum<2>(ms::square(X1b - Yb))));
  expect_close(rf.values, f1, abs_scale(f1), "feature broadcast");
  CHECK(ms::explain(ms::dense(ms::sum<2>(ms::square(X1b - Yb)))).find("feature extents differ") != std::string::npos);
  // Shapes that cannot broadcast are a clear error.
  auto w = data(m, 4, 7);
  auto Wb = ms::unsqueeze<0>(ms::points(w.data(), m, 4));
  CHECK_THROWS_AS((void)(Xb - Wb), ms::shape_error);
}

TEST_CASE("batched broadcast distance equals per-batch pairwise kNN") {
  const std::size_t B = 3, n = 40, m = 57, d = 4, k = 5;
  auto x = data(B * n, d, 8), y = data(B * m, d, 9);
  auto XB = ms::tensor(x.data(), {B, n, d});
  auto YB = ms::tensor(y.data(), {B, m, d});
  auto D = ms::sum<3>(ms::square(ms::unsqueeze<2>(XB) - ms::unsqueeze<1>(YB)));
  auto r = ms::eval(ms::argkmin(D, k), ms::budget_bytes(32 * 1024));
  CHECK(r.rows == B * n);
  CHECK(r.stats.peak_temp_bytes <= 32 * 1024);
  for (std::size_t b = 0; b < B; ++b) {
    auto one = ms::eval(ms::argkmin(ms::sqdist(ms::points(x.data() + b * n * d, n, d), ms::points(y.data() + b * m * d, m, d)), k));
    CHECK(std::equal(one.indices.begin(), one.indices.end(), r.indices.begin() + b * n * k));
  }
  CHECK(ms::explain(ms::argkmin(D, k)).find("batch of 3") != std::string::npos);
}

TEST_CASE("diagonal terms never form a dense identity and work inside products") {
  const std::size_t n = 120, d = 3;
  auto x = data(n, d, 10), v = data(n, 1, 11), dv = data(n, 1, 12);
  for (auto& a : dv) a = std::fabs(a);
  auto X = ms::points(x.data(), n, d);
  auto Kr = dense(x, x, n, n, d, [](const double* a, const double* b, std::size_t dd) {
    return 1.5 * std::exp(-0.5 * sq(a, b, dd) / 0.64);
  });
  auto K = ms::rbf(X, X, 0.8, 1.5);
  const double s2 = 0.3;
  std::vector<double> want(n, 0), wantd(n, 0), scale(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      want[i] += Kr[i * n + j] * v[j];
      scale[i] += std::fabs(Kr[i * n + j] * v[j]);
    }
    wantd[i] = want[i] + dv[i] * v[i];
    want[i] += s2 * v[i];
    scale[i] += std::fabs(v[i]) * 2;
  }
  auto e = (K + s2 * ms::identity(n)) * ms::vec(v.data(), n);
  for (const auto& r : eval_all(e)) expect_close(r.values, want, scale, "(K + s2 I) v");
  auto small = ms::eval(e, ms::budget_bytes(16 * 1024));  // far below one n×n matrix (115 kB)
  CHECK(small.stats.peak_temp_bytes <= 16 * 1024);
  expect_close(small.values, want, scale, "(K + s2 I) v small budget");
  CHECK(ms::explain(e).find("diag_in_product") != std::string::npos);
  auto ed = (K + ms::diag(ms::vec(static_cast<const double*>(dv.data()), n))) * ms::vec(v.data(), n);
  expect_close(ms::eval(ed).values, wantd, scale, "(K + diag) v");
  // The tile path (no product rule): dense(K + s2 I) has s2 added on the diagonal only.
  auto dk = ms::eval(ms::dense(K + s2 * ms::identity(n)), ms::budget_bytes(8 * 1024));
  for (std::size_t i = 0; i < n; i += 7)
    for (std::size_t j = 0; j < n; j += 5)
      CHECK(dk(i, j) == doctest::Approx(Kr[i * n + j] + (i == j ? s2 : 0.0)).epsilon(1e-12));
  // Stationary diagonal: no pairs, no temporaries.
  auto t = ms::eval(ms::trace(K + s2 * ms::identity(n)));
  CHECK(t[0] == doctest::Approx(n * (1.5 + s2)).epsilon(1e-14));
  CHECK(t.stats.temp_allocations == 0);
  CHECK(ms::explain(ms::trace(K)).find("stationary_diagonal") != std::string::npos);
  auto dg = ms::eval(ms::diag(ms::exp(-ms::sqdist(X, X))));
  for (std::size_t i = 0; i < n; ++i) CHECK(dg[i] == 1.0);
  // A non-stationary kernel evaluates its diagonal entries one by one.
  auto lin = ms::eval(ms::diag(ms::linear(X, X, 2.0)), ms::budget_bytes(4096));
  for (std::size_t i = 0; i < n; ++i) CHECK(lin[i] == doctest::Approx(2.0 * dotp(&x[i * d], &x[i * d], d)));
  CHECK_THROWS_AS((void)(ms::rbf(X, ms::points(x.data(), n - 1, d)) + ms::identity(n - 1)), ms::shape_error);
}

TEST_CASE("scalar factors are hoisted out of sums and products") {
  const std::size_t n = 90, m = 70, d = 4;
  auto x = data(n, d, 13), y = data(m, d, 14), v = data(m, 1, 15);
  auto X = ms::points(x.data(), n, d);
  auto Y = ms::points(y.data(), m, d);
  auto K = ms::rbf(X, Y, 1.1, 0.7);
  auto base = ms::eval(ms::sum(K));
  auto scaled = ms::eval(ms::sum(3.0 * (K * 2.0)));
  for (std::size_t i = 0; i < n; ++i) CHECK(scaled[i] == doctest::Approx(6.0 * base[i]).epsilon(1e-13));
  auto ex = ms::explain(ms::sum(3.0 * (K * 2.0)));
  CHECK(ex.find("constant_fold") == std::string::npos);  // both factors are hoisted into the double accumulator
  CHECK(ex.find("scalar_hoist: sum(c*E)") != std::string::npos);
  CHECK(ex.find("not applied") == std::string::npos);
  auto kv = ms::eval(K * ms::vec(v.data(), m));
  auto nkv = ms::eval((-K / 4.0) * ms::vec(v.data(), m));
  for (std::size_t i = 0; i < n; ++i) CHECK(nkv[i] == doctest::Approx(-kv[i] / 4.0).epsilon(1e-13));
  CHECK(ms::explain((-K / 4.0) * ms::vec(v.data(), m)).find("not applied") == std::string::npos);
  // factors in opposite directions are applied to each entry as written: the same values here
  auto mixed = ms::eval(ms::sum(3.0 * (K * 0.5)));
  for (std::size_t i = 0; i < n; ++i) CHECK(mixed[i] == doctest::Approx(1.5 * base[i]).epsilon(1e-13));
  CHECK(ms::explain(ms::sum(3.0 * (K * 0.5))).find("not applied") != std::string::npos);
  CHECK(ms::explain(ms::sum((K / 0.5) / 4.0)).find("not applied") != std::string::npos);
  CHECK(ms::explain(ms::sum((K / 0.5) * 4.0)).find("not applied") == std::string::npos);
}

TEST_CASE("scalar_hoist keeps nested factors in opposite directions as written: an entry may overflow between them") {
  // Found by probing: sum((E·1e200)·1e-200) hoisted both factors (scale 1) and gave ΣE = 5e120
  // where every entry is inf as written.
  const std::vector<double> x{0.0}, y{1e60, 2e60}, v{1, 1};
  const auto X = ms::points(x.data(), 1, 1), Y = ms::points(y.data(), 2, 1);
  const auto E = (ms::sqdist(X, Y) * 1e200) * 1e-200;
  const auto o = ms::budget_bytes(1 << 20);
  const auto dense = ms::eval(ms::dense(E), o);
  CHECK(std::isinf(dense.values[0]));
  CHECK(std::isinf(dense.values[1]));
  CHECK(std::isinf(ms::eval(ms::sum(E), o).values[0]));
  CHECK(std::isinf(ms::eval(ms::sum(ms::sqdist(X, Y) / 1e-200 / 1e200), o).values[0]));
  CHECK(std::isinf(ms::eval(E * ms::vec(v.data(), 2), o).values[0]));
  CHECK(ms::explain(ms::sum(E), o).find("not applied") != std::string::npos);
  // underflow between them: (E·1e-200)·1e200 is 0 entry by entry as written (1e-130·1e-200)
  const std::vector<double> ys{1e-65};
  const auto Ys = ms::points(ys.data(), 1, 1);
  CHECK(ms::eval(ms::sum((ms::sqdist(X, Ys) * 1e-200) * 1e200), o).values[0] == 0.0);
  // lazy × lazy: (A·1e200)·(A·1e-200)ᵀ is inf as written (A·1e200 overflows)
  const auto P = ms::eval((ms::sqdist(X, Y) * 1e200) * ms::transpose(ms::sqdist(X, Y) * 1e-200), o);
  CHECK(std::isinf(P.values[0]));
  // factors one way are still hoisted, with the values as written
  const auto s = ms::eval(ms::sum((ms::sqdist(X, Y) * 0.5) * 0.25), o);
  CHECK(s.values[0] == doctest::Approx((1e120 + 4e120) / 8).epsilon(1e-15));
  CHECK(ms::explain(ms::sum((ms::sqdist(X, Y) * 0.5) * 0.25), o).find("not applied") == std::string::npos);
}

TEST_CASE("nested scalar factors and offsets are applied as written, with IEEE results") {
  // Three distinct points: sqdist(X, X) has an exact-zero diagonal and entries 1, 4 and 1 off it.
  const std::vector<double> x = {0, 0, 1, 0, 0, 2};
  const std::vector<float> xf(x.begin(), x.end());
  auto X = ms::points(x.data(), 3, 2);
  auto Xf = ms::points(xf.data(), 3, 2);
  auto D = ms::sqdist(X, X);
  auto Df = ms::sqdist(Xf, Xf);
  const double inf = std::numeric_limits<double>::infinity();
  // (D·1e200)·1e200: 0 on the diagonal (0·1e200·1e200), +inf off it; folding 1e200·1e200 = inf
  // first would give 0·inf = NaN on the diagonal.
  const auto big = ms::eval(ms::dense((D * 1e200) * 1e200));
  const auto bigf = ms::eval(ms::dense((Df * 1e20) * 1e20));  // 1e40 overflows float
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      CHECK(big.values[i * 3 + j] == (i == j ? 0.0 : inf));
      CHECK(bigf.values[i * 3 + j] == (i == j ? 0.0f : std::numeric_limits<float>::infinity()));
    }
  // A sum whose hoisted scale overflows is evaluated entry by entry as written: 0 + inf + inf.
  const auto rows = ms::eval(ms::sum((D * 1e200) * 1e200));
  for (std::size_t i = 0; i < 3; ++i) CHECK(rows[i] == inf);
  // (D·1e-200)·1e-200 underflows to 0 off the diagonal, as written (not D·0).
  const auto tiny = ms::eval(ms::dense((D * 1e-200) * 1e-200));
  for (double v : tiny.values) CHECK(v == 0.0);
  // (D + 1e308) + (−1e308): D is absorbed by 1e308, so every entry is 0; folding the offsets
  // first would give D back.
  const auto off = ms::eval(ms::dense((D + 1e308) + (-1e308)));
  for (double v : off.values) CHECK(v == 0.0);
  // The exact folds still fire.
  CHECK(ms::explain(ms::dense((-D) * 2.0)).find("constant_fold: (-E)*a -> E*(-a)") != std::string::npos);
  CHECK(ms::explain(ms::dense((D * 2.0) * 3.0)).find("constant_fold") == std::string::npos);
}

TEST_CASE("explain names what was written: the same points twice, a vector, one tile") {
  const std::size_t n = 12, m = 9, d = 3;
  auto x = data(n, d, 31), y = data(m, d, 32), v = data(n, 1, 33), M = data(n, 2, 34);
  auto X = ms::points(x.data(), n, d);
  auto Y = ms::points(y.data(), m, d);
  const std::string kv = ms::explain(ms::rbf(X, X, 1.0, 1.0) * ms::vec(v.data(), n));
  CHECK(kv.find("as written:   rbf(X[12×3], X[12×3]) * v[12]\n") != std::string::npos);
  const std::string km = ms::explain(ms::rbf(X, X, 1.0, 1.0) * ms::matrix(M.data(), n, 2));
  CHECK(km.find("as written:   rbf(X[12×3], X[12×3]) * M[12×2]\n") != std::string::npos);
  // other points, or the same memory read with another layout, are a second operand
  CHECK(ms::explain(ms::argmin(ms::sqdist(X, Y))).find("sqdist(X[12×3], Y[9×3])") != std::string::npos);
  auto Xhead = ms::points(x.data(), n - 1, d);
  CHECK(ms::explain(ms::argmin(ms::sqdist(X, Xhead))).find("sqdist(X[12×3], Y[11×3])") != std::string::npos);
  CHECK(ms::explain(ms::argmin(ms::sqdist(X, Y))).find("(1 tile: 1 row block x 1 column block)") != std::string::npos);
  const std::size_t least = ms::plan_for(ms::argmin(ms::sqdist(X, Y))).min_bytes;
  CHECK(ms::explain(ms::argmin(ms::sqdist(X, Y)), ms::options{.budget = least, .threads = 1})
            .find(" row blocks x ") != std::string::npos);
}

TEST_CASE("explain's as-rewritten line keeps the reduction and the terms the rules split off") {
  const std::size_t n = 12, m = 9, d = 3;
  auto x = data(n, d, 35), y = data(m, d, 36), v = data(n, 1, 37), M = data(m, 2, 38), V = data(m, 4, 39);
  auto X = ms::points(x.data(), n, d);
  auto Y = ms::points(y.data(), m, d);
  const auto rewritten = [](const std::string& shown) {
    const auto at = shown.find("as rewritten: ");
    REQUIRE(at != std::string::npos);
    return shown.substr(at + 14, shown.find('\n', at) - at - 14);
  };
  const std::string K = "rbf(X[12×3], X[12×3])";
  CHECK(rewritten(ms::explain((2.0 * ms::rbf(X, X, 1.0, 1.0) + 0.5 * ms::identity(n)) * ms::vec(v.data(), n))) ==
        "2.000000 * (" + K + " * v[12]) + 0.500000·I[12] * v[12]");
  CHECK(rewritten(ms::explain(ms::sum(ms::rbf(X, X, 1.0, 1.0) + ms::diag(ms::vec(v.data(), n))))) ==
        "sum(" + K + ") + sum(diag(v[12]))");
  CHECK(rewritten(ms::explain(ms::argkmin(ms::sum<2>(ms::square(ms::unsqueeze<1>(X) - ms::unsqueeze<0>(Y))), 3))) ==
        "argkmin(sqdist(X[12×3], Y[9×3]), k=3)");
  CHECK(rewritten(ms::explain(ms::min(ms::sqdist(X, Y), ms::over_i))) == "min(sqdist(X[9×3], Y[12×3]))");
  CHECK(rewritten(ms::explain(ms::rbf(X, Y, 1.0, 1.0) * ms::matrix(M.data(), m, 2))) ==
        "rbf(X[12×3], Y[9×3]) * M[9×2]");
  CHECK(rewritten(ms::explain(ms::softmax_sum(ms::dot(X, Y), ms::matrix(V.data(), m, 4)))) ==
        "softmax_sum(dot(X[12×3], Y[9×3]), V[9×4])");
  CHECK(rewritten(ms::explain(ms::dense(ms::sqdist(X, Y)))) == "dense(sqdist(X[12×3], Y[9×3]))");
  // a dense factor on the left is shown as written, and its product as evaluated: (Kᵀ Mᵀ)ᵀ
  auto L = data(2, n, 40);
  const std::string mk = ms::explain(ms::matrix(L.data(), 2, n) * ms::rbf(X, Y, 1.0, 1.0));
  CHECK(mk.find("as written:   M[2×12] * rbf(X[12×3], Y[9×3])\n") != std::string::npos);
  CHECK(rewritten(mk) == "(rbf(X[9×3], Y[12×3]) * M[12×2])ᵀ");
  const std::string vk = ms::explain(ms::vec(v.data(), n) * ms::rbf(X, Y, 1.0, 1.0));
  CHECK(vk.find("as written:   v[12] * rbf(X[12×3], Y[9×3])\n") != std::string::npos);
  CHECK(rewritten(vk) == "rbf(X[9×3], Y[12×3]) * v[12]");
}

TEST_CASE("matrix chains take the cheapest order and never form K K^T") {
  auto a = data(40, 20, 16), b = data(20, 30, 17), c = data(30, 10, 18), e = data(10, 30, 19);
  auto A = ms::matrix(a.data(), 40, 20);
  auto B = ms::matrix(b.data(), 20, 30);
  auto C = ms::matrix(c.data(), 30, 10);
  auto E = ms::matrix(e.data(), 10, 30);
  auto ch = A * B * C * E;
  auto p = ms::plan_for(ch);
  CHECK(p.expression == "((M[40×20] (M[20×30] M[30×10])) M[10×30])");  // the textbook optimum (26000 mults)
  std::vector<double> want(40 * 30, 0), scale(40 * 30, 0);
  for (std::size_t i = 0; i < 40; ++i)
    for (std::size_t j = 0; j < 30; ++j)
      for (std::size_t k = 0; k < 20; ++k)
        for (std::size_t l = 0; l < 30; ++l)
          for (std::size_t q = 0; q < 10; ++q) {
            const double t = a[i * 20 + k] * b[k * 30 + l] * c[l * 10 + q] * e[q * 30 + j];
            want[i * 30 + j] += t;
            scale[i * 30 + j] += std::fabs(t);
          }
  for (const auto& r : eval_all(ch)) expect_close(r.values, want, scale, "A*B*C*E");
  // (A B) v → A (B v)
  auto v = data(30, 1, 20);
  CHECK(ms::plan_for(A * B * ms::vec(v.data(), 30)).expression == "(M[40×20] (M[20×30] M[30×1]))");

  const std::size_t n = 600, d = 3;
  auto x = data(n, d, 21), w = data(n, 1, 22);
  auto X = ms::points(x.data(), n, d);
  auto K = ms::rbf(X, X, 1.0, 1.0);
  auto W = ms::vec(w.data(), n);
  auto kkv = (K * ms::transpose(K)) * W;  // written naively: K Kᵀ first
  CHECK(ms::plan_for(kkv).expression.find("(transpose(") != std::string::npos);  // K (Kᵀ v)
  auto r1 = ms::eval(kkv, ms::budget_bytes(64 * 1024));
  CHECK(r1.stats.peak_temp_bytes <= 64 * 1024);
  CHECK(r1.stats.peak_temp_bytes < n * n * sizeof(double));
  auto r2 = ms::eval(K * (ms::transpose(K) * W), ms::budget_bytes(64 * 1024));
  auto kw = ms::eval(K * W);
  auto kkw = ms::eval(K * ms::vec(kw.values.data(), n));
  std::vector<double> sc(n);
  for (std::size_t i = 0; i < n; ++i) sc[i] = std::fabs(kkw[i]) + 1;
  expect_close(r1.values, kkw.values, sc, "(K K^T) v");
  expect_close(r2.values, kkw.values, sc, "K (K^T v)");
  // pin() forces K Kᵀ first: that needs an n×n temporary, so a small budget is a clear error.
  auto pinned = ms::pin(K * ms::transpose(K)) * W;
  CHECK_THROWS_AS(ms::eval(pinned, ms::budget_bytes(64 * 1024)), ms::budget_error);
  auto rp = ms::eval(pinned, ms::budget_bytes(8 << 20));
  expect_close(rp.values, kkw.values, sc, "pin(K K^T) v");
  CHECK(rp.stats.peak_temp_bytes >= n * n * sizeof(double));
  CHECK(rp.stats.peak_temp_bytes <= (8u << 20));
  CHECK_THROWS_AS((void)(A * C), ms::shape_error);
}

TEST_CASE("quadratic forms v K w and pinned K M, M K equal naive sums at every budget") {
  // v·K·w runs vᵀ (K w): a 1×n by n×1 dense step. With BLAS linked, DGEMM refused the 1×n view's
  // leading dimension (1 < n) and the form came back 0.
  const std::size_t n = 60, m = 90, d = 3;
  auto x = data(n, d, 41), y = data(m, d, 42), v = data(n, 1, 43), w = data(m, 1, 44), M = data(m, 4, 45),
       B = data(4, 2, 46);
  auto X = ms::points(x.data(), n, d), Y = ms::points(y.data(), m, d);
  auto K = ms::rbf(X, Y, 0.9, 1.2);
  auto Kd = ms::eval(ms::dense(K));
  double q = 0, qs = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) q += v[i] * Kd[i * m + j] * w[j], qs += std::fabs(v[i] * Kd[i * m + j] * w[j]);
  std::vector<double> kmb(n * 2, 0.0), kmbs(n * 2, 0.0), mtk(4 * n, 0.0), mtks(4 * n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t c = 0; c < 4; ++c)
        for (std::size_t e = 0; e < 2; ++e) {
          kmb[i * 2 + e] += Kd[i * m + j] * M[j * 4 + c] * B[c * 2 + e];
          kmbs[i * 2 + e] += std::fabs(Kd[i * m + j] * M[j * 4 + c] * B[c * 2 + e]);
        }
  // Mᵀ as a 4×n matrix times K(X, X') (n×m, here X' = X so that Mᵀ (4×n) meets K's rows)
  auto Kxx = ms::rbf(X, X, 0.9, 1.2);
  auto Kxxd = ms::eval(ms::dense(Kxx));
  auto Mt = data(4, n, 47);
  for (std::size_t c = 0; c < 4; ++c)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) mtk[c * n + j] += Mt[c * n + i] * Kxxd[i * n + j], mtks[c * n + j] += std::fabs(Mt[c * n + i] * Kxxd[i * n + j]);
  for (std::size_t budget : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{8} << 20}) {
    CAPTURE(budget);
    const auto r = ms::eval(ms::vec(v.data(), n) * K * ms::vec(w.data(), m), ms::budget_bytes(budget));
    REQUIRE(r.values.size() == 1);
    CHECK(std::fabs(r.values[0] - q) <= 1e-12 * qs);
    CHECK(r.stats.peak_temp_bytes <= budget);
    const auto p = ms::eval(ms::pin(K * ms::matrix(M.data(), m, 4)) * ms::matrix(B.data(), 4, 2), ms::budget_bytes(budget));
    expect_close(p.values, kmb, kmbs, "pin(K M) B");
    CHECK(p.stats.peak_temp_bytes <= budget);
    const auto t = ms::eval(ms::pin(ms::matrix(Mt.data(), 4, n) * Kxx) * ms::vec(w.data(), n), ms::budget_bytes(budget));
    std::vector<double> want(4, 0.0), ws(4, 0.0);
    for (std::size_t c = 0; c < 4; ++c)
      for (std::size_t j = 0; j < n; ++j) want[c] += mtk[c * n + j] * w[j], ws[c] += mtks[c * n + j] * std::fabs(w[j]);
    expect_close(t.values, want, ws, "pin(M K) w");
  }
}

TEST_CASE("a chain runs in its planned minimum and an intermediate is checked by the diag_in_product guard") {
  const std::size_t n = 300, d = 3;
  auto x = data(n, d, 31), w = data(n, 1, 32), v = data(n, 1, 33);
  auto X = ms::points(x.data(), n, d);
  auto K = ms::rbf(X, X, 0.8, 1.1);
  auto W = ms::vec(w.data(), n);
  auto V = ms::vec(v.data(), n);
  auto ch = (K + ms::diag(V)) * (ms::transpose(K) * W);
  // The planned minimum is what the walk over the steps needs: it runs there, not one byte lower.
  const std::size_t minimum = ms::plan_for(ch, ms::budget_bytes(1 << 20)).min_bytes;
  auto at_min = ms::eval(ch, ms::budget_bytes(minimum));
  CHECK(at_min.stats.peak_temp_bytes <= minimum);
  try {
    (void)ms::eval(ch, ms::budget_bytes(minimum - 1));
    FAIL("expected a budget_error");
  } catch (const ms::budget_error& e) {
    CHECK(e.minimum_bytes == minimum);
  }
  // The same as evaluating the two products one after the other (the intermediate Kᵀw bound into
  // the step exactly as a caller's vector would be).
  auto ktw = ms::eval(ms::transpose(K) * W);
  auto two = ms::eval((K + ms::diag(V)) * ms::vec(ktw.values.data(), n));
  std::vector<double> sc(n);
  for (std::size_t i = 0; i < n; ++i) sc[i] = std::fabs(two[i]) + 1;
  expect_close(at_min.values, two.values, sc, "(K + D) (K^T w) at the chain's minimum");
  CHECK(ms::explain(ch).find("diag_in_product") != std::string::npos);
  // An infinite entry in the intermediate: the split (K + D)·M → K·M + D·M is not exact, the guard
  // of the step keeps the original form, as it does for a caller's vector with that entry.
  w[7] = std::numeric_limits<double>::infinity();
  auto inf_chain = ms::eval(ch);
  auto ktw_inf = ms::eval(ms::transpose(K) * W);
  auto two_inf = ms::eval((K + ms::diag(V)) * ms::vec(ktw_inf.values.data(), n));
  REQUIRE(inf_chain.values.size() == two_inf.values.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double a = inf_chain.values[i], b = two_inf.values[i];
    CHECK(((std::isnan(a) && std::isnan(b)) || a == b));
  }
  bool kept = false;
  for (const auto& r : inf_chain.stats.plan.rules) kept = kept || r.find("not applied") != std::string::npos;
  CHECK(kept);
}

/// Inputs of the long-chain tests: points x (n×d) and y (m×d), dense a (n×c), b (c×n), cm (m×n), v (n).
struct chain_inputs {
  std::vector<double> x, y, a, b, cm, v;
  chain_inputs(std::size_t n, std::size_t m, std::size_t c, std::size_t d, unsigned seed)
      : x(data(n, d, seed)), y(data(m, d, seed + 1)), a(data(n, c, seed + 2)), b(data(c, n, seed + 3)),
        cm(data(m, n, seed + 4)), v(data(n, 1, seed + 5)) {}
};

TEST_CASE("each step of a chain is lowered once and for its own operands") {
  // The steps are kept per kind of step (lower/chain.hpp): every (i, s, j) must have its own slot,
  // lowered over its own extents, and the same slot when it is asked for again.
  const std::size_t n = 12, m = 9, c = 4, d = 2;
  const chain_inputs in(n, m, c, d, 71);
  const auto &a = in.a, &b = in.b, &cm = in.cm, &v = in.v;
  auto X = ms::points(in.x.data(), n, d), Y = ms::points(in.y.data(), m, d);
  auto K = ms::rbf(X, X, 0.7, 1.0);
  auto Kxy = ms::matern32(X, Y, 0.8, 1.0);
  auto ch = K * ms::matrix(a.data(), n, c) * ms::matrix(b.data(), c, n) * Kxy * ms::pin(ms::matrix(cm.data(), m, n) * K) *
            ms::vec(v.data(), n);
  ms::rewrite::rule_log log;
  auto job = ms::jobs::lower(ch, static_cast<double*>(nullptr), nullptr, log);
  using Job = decltype(job);
  static_assert(Job::N == 6);
  auto extents = [](const auto& e) -> std::pair<std::size_t, std::size_t> {
    if constexpr (requires { e.job.a.rows(); e.job.b.cols(); }) return {e.job.a.rows(), e.job.b.cols()};  // dense·dense
    else return {e.x.rows(), e.x.cols()};
  };
  std::vector<const void*> entries;
  for (std::size_t i = 0; i < Job::N; ++i)
    for (std::size_t s = i; s < Job::N; ++s)
      for (std::size_t j = s; j < Job::N; ++j) {
        if (s == j && !(i == 4 && j == 4)) continue;  // a product, or the pinned factor 4 alone
        const ms::jobs::chain_step st{i, s, j};
        CAPTURE(i);
        CAPTURE(s);
        CAPTURE(j);
        const void* first = nullptr;
        const void* again = nullptr;
        std::pair<std::size_t, std::size_t> ext{};
        ms::jobs::visit_step<Job>(st, [&](auto kind) {
          auto& e = ms::jobs::lower_step<decltype(kind)>(job, st);
          first = &e;
          ext = extents(e);
        });
        ms::jobs::visit_step<Job>(st, [&](auto kind) { again = &ms::jobs::lower_step<decltype(kind)>(job, st); });
        REQUIRE(first != nullptr);
        CHECK(again == first);
        CHECK(ext.first == job.ord.dims[i]);
        CHECK(ext.second == job.ord.dims[j + 1]);
        entries.push_back(first);
      }
  CHECK(entries.size() == 36);  // 35 products (i ≤ s < j) and the pinned factor
  std::sort(entries.begin(), entries.end());
  CHECK(std::adjacent_find(entries.begin(), entries.end()) == entries.end());
}

TEST_CASE("a chain of 16 factors with a pinned one equals the naive product at every budget and at its minimum") {
  // Past the 8 factors whose orders are all walked: the planner weighs the fewest-flops and the
  // leanest orders. The steps' code is instantiated per kind of step (lower/chain.hpp), so such a
  // chain compiles in seconds.
  const std::size_t n = 30, m = 20, d = 2, c = 5;
  const chain_inputs in(n, m, c, d, 61);
  const auto &a = in.a, &b = in.b, &cm = in.cm, &v = in.v;
  auto X = ms::points(in.x.data(), n, d), Y = ms::points(in.y.data(), m, d);
  auto K = ms::rbf(X, X, 0.7, 0.05);
  auto Kxy = ms::matern32(X, Y, 0.8, 0.05);
  auto A = ms::matrix(a.data(), n, c);
  auto B = ms::matrix(b.data(), c, n);
  auto C = ms::matrix(cm.data(), m, n);
  auto V = ms::vec(v.data(), n);
  auto ch = K * A * B * ms::transpose(K) * Kxy * C * ms::pin(K * A) * B * K * A * B * Kxy * C * ms::transpose(K) * K * V;
  static_assert(std::tuple_size_v<decltype(ch.f)> == 16);
  // The reference: the dense factors applied to v from the right, with |·| for the tolerance.
  const auto kd = ms::eval(ms::dense(K)).values, kxyd = ms::eval(ms::dense(Kxy)).values;
  std::vector<double> kt(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) kt[i * n + j] = kd[j * n + i];
  std::vector<double> r = v, s(n);
  for (std::size_t i = 0; i < n; ++i) s[i] = std::fabs(v[i]);
  auto apply = [&](const std::vector<double>& M, std::size_t rows, std::size_t cols) {
    REQUIRE(r.size() == cols);
    std::vector<double> r2(rows, 0.0), s2(rows, 0.0);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) r2[i] += M[i * cols + j] * r[j], s2[i] += std::fabs(M[i * cols + j]) * s[j];
    r = std::move(r2);
    s = std::move(s2);
  };
  apply(kd, n, n), apply(kt, n, n), apply(cm, m, n), apply(kxyd, n, m), apply(b, c, n), apply(a, n, c), apply(kd, n, n);
  apply(b, c, n), apply(a, n, c), apply(kd, n, n);  // … B · pin(K A) · …
  apply(cm, m, n), apply(kxyd, n, m), apply(kt, n, n), apply(b, c, n), apply(a, n, c), apply(kd, n, n);
  for (const auto& res : eval_all(ch)) expect_close(res.values, r, s, "16 factors");
  const auto p = ms::plan_for(ch, ms::budget_bytes(1 << 20));
  CHECK(p.reduction.find("matrix chain of 16 factors") != std::string::npos);
  const auto at_min = ms::eval(ch, ms::budget_bytes(p.min_bytes));
  CHECK(at_min.stats.peak_temp_bytes <= p.min_bytes);
  expect_close(at_min.values, r, s, "16 factors at the minimum");
  try {
    (void)ms::eval(ch, ms::budget_bytes(p.min_bytes - 1));
    FAIL("expected a budget_error");
  } catch (const ms::budget_error& e) {
    CHECK(e.minimum_bytes == p.min_bytes);
  }
}

TEST_CASE("symmetric_product computes A A^T from the lower block triangle") {
  const std::size_t mu = 150, n = 700, d = 3;
  auto u = data(mu, d, 23), x = data(n, d, 24);
  auto U = ms::points(u.data(), mu, d);
  auto X = ms::points(x.data(), n, d);
  auto Kuf = ms::matern32(U, X, 0.7, 1.3);
  auto gram = Kuf * ms::transpose(Kuf);
  CHECK(ms::explain(gram).find("symmetric_product") != std::string::npos);
  auto Kr = dense(u, x, mu, n, d, [](const double* a, const double* b, std::size_t dd) {
    const double r = std::sqrt(3.0 * sq(a, b, dd)) / 0.7;
    return 1.3 * (1 + r) * std::exp(-r);
  });
  const auto [want, scale] = matmul(Kr, transpose(Kr, mu, n), mu, n, mu);
  for (const auto& r : eval_all(gram)) {
    expect_close(r.values, want, scale, "Kuf Kuf^T (symmetric)");
    bool sym = true;
    for (std::size_t a = 0; a < mu; ++a)
      for (std::size_t c = 0; c < a; ++c) sym = sym && r(a, c) == r(c, a);
    CHECK(sym);
  }
  // A product of two different lazy matrices is not taken for a Gram matrix.
  auto y = data(n, d, 25);
  auto other = Kuf * ms::transpose(ms::matern32(U, ms::points(y.data(), n, d), 0.7, 1.3));
  CHECK(ms::explain(other).find("symmetric_product") == std::string::npos);
}
}
