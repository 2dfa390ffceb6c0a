// tests/sweep.hpp — every reduction of one lazy matrix against the dense reference, at budgets
// from the minimum to unlimited, asserting peak ≤ budget and budget independence.
#pragma once
#include "reference.hpp"

namespace ref {

struct sweep_data {
  std::size_t n = 37, m = 131, d = 5;
  std::vector<double> x, y, v, u, M, L, V;
  explicit sweep_data(bool integer, std::size_t n_ = 37, std::size_t m_ = 131, std::size_t d_ = 5)
      : n(n_), m(m_), d(d_) {
    x = data(n, d, 11, integer);
    y = data(m, d, 12, integer);
    v = data(m, 1, 13);
    u = data(n, 1, 14);
    M = data(m, 3, 15);
    L = data(2, n, 16);
    V = data(m, 4, 17);
  }
};

/// Check top-k style results (values and indices, k per row) against the dense reference.
template <class T>
void check_ranked(const memsafe::result<T>& r, const std::vector<double>& K, std::size_t n, std::size_t m, std::size_t k,
                  bool largest, bool exact_indices, const std::string& what) {
  REQUIRE(r.rows == n);
  REQUIRE(r.cols == k);
  double typical = 0;
  for (double a : K) typical = std::max(typical, std::fabs(a));
  int bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto s = row_sorted(K, m, i, largest);
    for (std::size_t p = 0; p < k; ++p) {
      const std::int64_t j = r.index(i, p);
      const bool in_range = j >= 0 && std::size_t(j) < m;
      const double want = s[p].v, at = in_range ? K[i * m + std::size_t(j)] : NAN;
      const double t = tol<T>() * (typical + 1e-300);
      const bool ok = in_range && std::fabs(at - want) <= t && std::fabs(double(r(i, p)) - want) <= t &&
                      (!exact_indices || j == s[p].i);
      if (!ok && bad++ < 5)
        FAIL_CHECK(what << ": row " << i << " rank " << p << ": got index " << j << " value " << double(r(i, p))
                        << ", reference index " << s[p].i << " value " << want);
    }
  }
  CHECK(bad == 0);
}

template <class T, class Build>
void sweep(const char* name, Build build, const entry_fn& f, bool integer = false) {
  sweep_data D(integer);
  const std::size_t n = D.n, m = D.m, d = D.d;
  auto xT = cast<T>(D.x), yT = cast<T>(D.y), vT = cast<T>(D.v), uT = cast<T>(D.u), MT = cast<T>(D.M), LT = cast<T>(D.L),
       VT = cast<T>(D.V);
  auto xd = seen<T>(D.x), yd = seen<T>(D.y), vd = seen<T>(D.v), ud = seen<T>(D.u), Md = seen<T>(D.M), Ld = seen<T>(D.L),
       Vd = seen<T>(D.V);
  auto X = memsafe::points(on_device(xT), n, d);
  auto Y = memsafe::points(on_device(yT), m, d);
  auto K = build(X, Y);
  const auto Kr = dense(xd, yd, n, m, d, f);
  const auto Kt = transpose(Kr, n, m);
  const bool exact = integer || std::is_same_v<T, double>;
  const std::string tag = std::string(name) + (std::is_same_v<T, float> ? " f32" : " f64");
  double typical = 0;
  for (double a : Kr) typical = std::max(typical, std::fabs(a));

  // Generic "matrix times dense" reference: out[i][c] = Σ_j A[i][j] B[j][c].
  auto mm = [](const std::vector<double>& A, std::size_t r, std::size_t inner, const std::vector<double>& B,
               std::size_t c, std::vector<double>& out, std::vector<double>& scale) {
    out.assign(r * c, 0);
    scale.assign(r * c, 0);
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t j = 0; j < inner; ++j)
        for (std::size_t q = 0; q < c; ++q) {
          out[i * c + q] += A[i * inner + j] * B[j * c + q];
          scale[i * c + q] += std::fabs(A[i * inner + j] * B[j * c + q]);
        }
  };
  auto check_all_close = [&](auto&& rs, const std::vector<double>& want, const std::vector<double>& scale, const char* what) {
    for (const auto& r : rs) expect_close(r.values, want, scale, tag + " " + what);
  };
  auto check_identical = [&](auto&& rs, const char* what) {
    for (const auto& r : rs) {
      INFO(tag << " " << what << " differs between budgets");
      CHECK(identical(r.values, rs[0].values));
      CHECK(r.indices == rs[0].indices);
    }
  };

  SUBCASE("dense") {
    std::vector<double> scale(Kr.size(), typical);
    check_all_close(eval_all(memsafe::dense(K)), Kr, scale, "dense");
    check_all_close(eval_all(memsafe::dense(memsafe::transpose(K))), Kt, scale, "dense transpose");
  }
  SUBCASE("sums and products") {
    std::vector<double> want, scale;
    std::vector<double> ones_m(m, 1.0), ones_n(n, 1.0);
    mm(Kr, n, m, ones_m, 1, want, scale);
    check_all_close(eval_all(memsafe::sum(K)), want, scale, "sum over j");
    mm(Kt, m, n, ones_n, 1, want, scale);
    check_all_close(eval_all(memsafe::sum(K, memsafe::over_i)), want, scale, "sum over i");
    mm(Kr, n, m, vd, 1, want, scale);
    check_all_close(eval_all(K * memsafe::vec(on_device(vT), m)), want, scale, "K*v");
    mm(Kr, n, m, Md, 3, want, scale);
    check_all_close(eval_all(K * memsafe::matrix(on_device(MT), m, 3)), want, scale, "K*M");
    mm(Kt, m, n, ud, 1, want, scale);
    check_all_close(eval_all(memsafe::vec(on_device(uT), n) * K), want, scale, "v*K");
    // L (2×n) · K (n×m) = (Kᵀ Lᵀ)ᵀ
    std::vector<double> Lt = transpose(Ld, 2, n), w2, s2;
    mm(Kt, m, n, Lt, 2, w2, s2);
    check_all_close(eval_all(memsafe::matrix(on_device(LT), 2, n) * K), transpose(w2, m, 2), transpose(s2, m, 2), "M*K");
  }
  SUBCASE("min max arg top-k") {
    auto mins = eval_all(memsafe::min(K));
    auto maxs = eval_all(memsafe::max(K));
    auto amin = eval_all(memsafe::argmin(K));
    auto amax = eval_all(memsafe::argmax(K));
    auto kmin = eval_all(memsafe::argkmin(K, 5));
    auto kmax = eval_all(memsafe::argkmax(K, 7));
    auto kmin_i = eval_all(memsafe::argkmin(K, 3, memsafe::over_i));
    for (auto* rs : {&mins, &maxs, &amin, &amax, &kmin, &kmax, &kmin_i}) check_identical(*rs, "ranked");
    check_ranked(amin[0], Kr, n, m, 1, false, exact, tag + " argmin");
    check_ranked(amax[0], Kr, n, m, 1, true, exact, tag + " argmax");
    check_ranked(kmin[0], Kr, n, m, 5, false, exact, tag + " argkmin");
    check_ranked(kmax[0], Kr, n, m, 7, true, exact, tag + " argkmax");
    check_ranked(kmin_i[0], Kt, m, n, 3, false, exact, tag + " argkmin over i");
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(mins[0].values[i] == amin[0].values[i]);
      CHECK(maxs[0].values[i] == amax[0].values[i]);
    }
    // k = m: the whole row, sorted.
    auto all = run(memsafe::argkmin(K, m), run_opts{memsafe::unlimited, 2});
    check_ranked(all, Kr, n, m, m, false, exact, tag + " argkmin k=m");
  }
  SUBCASE("logsumexp and softmax_sum") {
    std::vector<double> want(n), scale(n), sw(n * 4), ss(n * 4, 0);
    for (std::size_t i = 0; i < n; ++i) {
      double mx = -INFINITY;
      for (std::size_t j = 0; j < m; ++j) mx = std::max(mx, Kr[i * m + j]);
      double s = 0;
      for (std::size_t j = 0; j < m; ++j) s += std::exp(Kr[i * m + j] - mx);
      want[i] = mx + std::log(s);
      scale[i] = 1 + std::fabs(want[i]);
      for (std::size_t q = 0; q < 4; ++q) {
        double a = 0;
        for (std::size_t j = 0; j < m; ++j) a += std::exp(Kr[i * m + j] - mx) * Vd[j * 4 + q];
        sw[i * 4 + q] = a / s;
        double mxv = 0;
        for (std::size_t j = 0; j < m; ++j) mxv = std::max(mxv, std::fabs(Vd[j * 4 + q]));
        ss[i * 4 + q] = mxv;
      }
    }
    check_all_close(eval_all(memsafe::logsumexp(K)), want, scale, "logsumexp");
    check_all_close(eval_all(memsafe::softmax_sum(K, memsafe::matrix(on_device(VT), m, 4))), sw, ss, "softmax_sum");
  }
}

}  // namespace ref
