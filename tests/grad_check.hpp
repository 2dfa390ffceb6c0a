// tests/grad_check.hpp — checking vector–Jacobian products against central finite differences of
// the forward evaluation (f64), at budgets from the minimum to unlimited.
#pragma once
#include <memsafe/grad.hpp>

#include "reference.hpp"

namespace gradcheck {

/// A problem: points X (n×d), Y (m×d), the formula parameters θ (read through pointers, so a
/// finite difference perturbs them in place), the dense operand (m×c, or whatever the reduction
/// reads) and the upstream gradient (filled to the output's shape).
struct problem {
  std::size_t n = 9, m = 7, d = 3, c = 2;
  std::vector<double> x, y, th, op, up;
  problem(std::size_t n_, std::size_t m_, std::size_t d_, std::vector<double> theta, std::size_t op_size,
          unsigned seed = 1)
      : n(n_), m(m_), d(d_), th(std::move(theta)) {
    x = ref::data(n, d, seed + 10);
    y = ref::data(m, d, seed + 20);
    op = ref::data(op_size, 1, seed + 30);
  }
};

/// Which gradients to check.
struct want {
  bool x = true, y = true, params = true, operand = false, same = false;  ///< same: Y is X's view
};

/// max |a − b| / max |b| (the max-norm relative error; 0 for two zero vectors).
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0, s = 0;
  for (std::size_t q = 0; q < a.size(); ++q) {
    e = std::max(e, std::fabs(a[q] - b[q]));
    s = std::max(s, std::fabs(b[q]));
  }
  if (s == 0) return e;
  return e / s;
}
template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}
/// The parameter gradients of every leaf, concatenated as lengthscale(s), variance(s), alpha.
template <class T>
std::vector<double> flat_params(const memsafe::gradients<T>& g) {
  std::vector<double> r;
  for (const auto& p : g.params) {
    for (T v : p.lengthscale) r.push_back(double(v));
    for (T v : p.variance) r.push_back(double(v));
    for (T v : p.alpha) r.push_back(double(v));
  }
  return r;
}

/// ∂L/∂v[q] for each q by the 4th-order central difference of L (v perturbed in place).
template <class L>
std::vector<double> fd(std::vector<double>& v, L&& loss) {
  std::vector<double> g(v.size());
  for (std::size_t q = 0; q < v.size(); ++q) {
    const double s = v[q], h = 1e-3 * std::max(1.0, std::fabs(s));
    v[q] = s + 2 * h;
    const double a2 = loss();
    v[q] = s + h;
    const double a1 = loss();
    v[q] = s - h;
    const double b1 = loss();
    v[q] = s - 2 * h;
    const double b2 = loss();
    v[q] = s;
    g[q] = (-a2 + 8 * a1 - 8 * b1 + b2) / (12 * h);
  }
  return g;
}

/// Check grad(vjp(red(make(X, Y, θ), op), upstream, wrt(...))) against finite differences of
/// L = <upstream, eval(red(...))> at several budgets (peak ≤ budget, results budget-independent),
/// and that a budget below the minimum is a budget_error naming it.
template <class Make, class Red>
void check(const std::string& what, problem& P, Make&& make, Red&& red, want w = {}) {
  CAPTURE(what);
  auto X = memsafe::points(static_cast<const double*>(P.x.data()), P.n, P.d);
  auto Y = w.same ? X : memsafe::points(static_cast<const double*>(P.y.data()), P.m, P.d);
  auto build = [&] { return red(make(X, Y, P.th), static_cast<const double*>(P.op.data())); };
  const auto x0 = build();
  const std::size_t rows = x0.rows(), cols = x0.cols();
  if (P.up.size() != rows * cols) P.up = ref::data(rows * cols, 1, 77);
  auto loss = [&] {
    const auto r = memsafe::eval(build(), memsafe::options{memsafe::unlimited, 1});
    double s = 0;
    for (std::size_t q = 0; q < r.values.size(); ++q) s += P.up[q] * r.values[q];
    return s;
  };
  auto upstream_of = [&] { return memsafe::matrix(static_cast<const double*>(P.up.data()), rows, cols); };
  memsafe::wrt_set<double> ws;
  if (w.x) ws.points.push_back(X);
  if (w.y && !w.same) ws.points.push_back(Y);
  ws.params = w.params;
  ws.operand = w.operand;
  auto bw = [&] {
    if (cols == 1) return memsafe::vjp(build(), memsafe::vec(static_cast<const double*>(P.up.data()), rows), ws);
    return memsafe::vjp(build(), upstream_of(), ws);
  };
  // finite differences
  std::vector<std::vector<double>> want_pts;
  if (w.x) want_pts.push_back(fd(P.x, loss));
  if (w.y && !w.same) want_pts.push_back(fd(P.y, loss));
  const std::vector<double> want_par = w.params ? fd(P.th, loss) : std::vector<double>{};
  const std::vector<double> want_op = w.operand ? fd(P.op, loss) : std::vector<double>{};

  const std::size_t mn = memsafe::plan_for(bw(), memsafe::options{memsafe::unlimited, 1}).min_bytes;
  REQUIRE(mn > 0);
  struct run {
    std::size_t budget;
    unsigned threads;
  };
  const std::vector<run> runs = {{memsafe::unlimited, 1}, {mn, 1}, {mn + mn / 2 + 97, 2}, {mn * 5, 3}, {mn * 40, 2},
                                 {memsafe::unlimited, 3}};
  std::vector<std::vector<double>> first;
  for (const auto& o : runs) {
    CAPTURE(o.budget);
    CAPTURE(o.threads);
    const auto g = memsafe::grad(bw(), memsafe::options{o.budget, o.threads});
    CHECK(g.stats.peak_temp_bytes <= o.budget);
    CHECK(g.stats.peak_temp_bytes <= g.stats.planned_temp_bytes);
    CHECK(g.stats.min_budget_bytes == mn);
    std::vector<std::vector<double>> got;
    for (std::size_t k = 0; k < want_pts.size(); ++k) got.push_back(as_double(g.points[k]));
    if (w.params) got.push_back(flat_params(g));
    if (w.operand) got.push_back(as_double(g.operand));
    // against finite differences
    std::size_t k = 0;
    for (; k < want_pts.size(); ++k) {
      INFO("points #" << k << " relative error " << rel_err(got[k], want_pts[k]));
      CHECK(rel_err(got[k], want_pts[k]) <= 1e-6);
      for (double v : got[k]) CHECK(std::isfinite(v));
    }
    if (w.params) {
      REQUIRE(got[k].size() == want_par.size());
      INFO("params relative error " << rel_err(got[k], want_par));
      CHECK(rel_err(got[k], want_par) <= 1e-6);
      ++k;
    }
    if (w.operand) {
      REQUIRE(got[k].size() == want_op.size());
      INFO("operand relative error " << rel_err(got[k], want_op));
      CHECK(rel_err(got[k], want_op) <= 1e-6);
      CHECK(g.operand_rows * g.operand_cols == want_op.size());
    }
    // budget independence (rounding only)
    if (first.empty()) {
      first = got;
    } else {
      for (std::size_t q = 0; q < got.size(); ++q) {
        INFO("budget dependence of output #" << q << ": " << rel_err(got[q], first[q]));
        CHECK(rel_err(got[q], first[q]) <= 1e-12);
      }
    }
  }
  // below the minimum: budget_error naming it, before any work
  for (std::size_t b : {mn - 1, mn / 2}) {
    bool threw = false;
    try {
      (void)memsafe::grad(bw(), memsafe::budget_bytes(b));
    } catch (const memsafe::budget_error& e) {
      threw = true;
      CHECK(e.minimum_bytes == mn);
      CHECK(std::string(e.what()).find(std::to_string(mn)) != std::string::npos);
    }
    CHECK(threw);
    CHECK_THROWS_AS(memsafe::plan_for(bw(), memsafe::budget_bytes(b)), memsafe::budget_error);
  }
}

}  // namespace gradcheck
