// Fused kernel sums on the host (backend/host/sum_driver.hpp, sum_kernel.inc): row sums, K·v, K·M,
// v·K, logsumexp and softmax_sum over the pairwise formulas they serve, on every instruction set
// this CPU runs (forced with MEMSAFE_ISA; the others are skipped with a message), against the
// portable tile path (MEMSAFE_KERNELS=reference) and an independent naive loop in double, at
// several budgets (peak ≤ budget; the result does not depend on the budget).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memsafe/memsafe.hpp>
#include <optional>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "reference.hpp"

namespace {

namespace host = memsafe::host;

using ref::scoped_env;

bool fused_sum(const memsafe::tile_plan& p) { return p.reduction.find("fused: formula evaluated") != std::string::npos; }

std::vector<host::isa> fused_isas() {
  std::vector<host::isa> v;
  for (host::isa i : {host::isa::avx512, host::isa::avx2})
    if (host::isa_compiled & host::cpu_isas() & host::isa_bit(i)) v.push_back(i);
  return v;
}

void report_skipped() {
  for (host::isa i : {host::isa::avx512, host::isa::avx2})
    if (!(host::isa_compiled & host::cpu_isas() & host::isa_bit(i)))
      MESSAGE("skipped: the " << std::string(host::isa_name(i)) << " fused sums (this CPU and build run: "
                              << host::isa_list(host::isa_compiled & host::cpu_isas()) << ")");
}

/// |got − want| ≤ tol·scale elementwise; NaN where the other is NaN, ±inf where the other is.
template <class T>
void close_to(const std::vector<T>& got, const std::vector<double>& want, const std::vector<double>& scale,
              const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  const double tol = std::is_same_v<T, float> ? 2e-4 : 1e-10;
  for (std::size_t q = 0; q < got.size(); ++q) {
    const double g = double(got[q]), w = want[q];
    INFO(what << " at " << q << ": got " << g << ", want " << w);
    if (std::isnan(w) || std::isinf(w)) {
      CHECK(((std::isnan(g) && std::isnan(w)) || g == w));
    } else {
      CHECK(std::fabs(g - w) <= tol * (scale[q] + 1e-30));
    }
  }
}

/// One expression: the fused result on every instruction set this CPU runs, at several budgets,
/// against the reference path's and a naive one (want/scale: the naive result and its error scale).
template <class X>
void check_fused(const X& x, const std::vector<double>& want, const std::vector<double>& scale, const std::string& what,
                 bool expect_fused = true) {
  using T = typename X::value_type;
  INFO(what);
  scoped_env unset("MEMSAFE_ISA", nullptr);
  std::vector<T> refv;
  {
    scoped_env e("MEMSAFE_KERNELS", "reference");
    const auto r = memsafe::eval(x, memsafe::options{memsafe::unlimited, 1});
    CHECK_FALSE(fused_sum(r.stats.plan));
    CHECK(r.stats.plan.isa == "portable");
    refv = r.values;
  }
  close_to(refv, want, scale, what + " (reference path vs naive)");
  std::vector<double> refd(refv.begin(), refv.end());
  for (host::isa i : fused_isas()) {
    INFO("MEMSAFE_ISA=" << std::string(host::isa_name(i)));
    scoped_env force("MEMSAFE_ISA", host::isa_name(i));
    const auto p = memsafe::plan_for(x);
    CHECK(p.isa == host::isa_name(i));
    CHECK(fused_sum(p) == expect_fused);
    std::vector<T> first;
    const std::size_t fmin = ref::fused_min_budget(x);
    CHECK((fmin > 0) == expect_fused);
    for (const auto& r : ref::eval_all(x)) {
      // Below the fused kernels' minimum (a panel of right-hand rows per thread: many columns) the
      // tile loop runs; the answer is the same within rounding.
      const bool f = ref::ran_fused(r, fmin);
      CHECK(fused_sum(r.stats.plan) == f);
      if (f || !expect_fused) CHECK(r.stats.plan.isa == host::isa_name(i));
      CHECK(r.stats.peak_temp_bytes == r.stats.plan.planned_bytes);  // the byte model is exact
      close_to(r.values, want, scale, what + " vs naive");
      close_to(r.values, refd, scale, what + " vs reference path");
      if (first.empty()) first = r.values;
      // Budget independence: tiles and threads only reorder the double sums; the rows' values stay
      // within rounding of each other.
      close_to(r.values, std::vector<double>(first.begin(), first.end()), scale, what + " vs the first budget");
    }
  }
}

using kfn = std::function<double(const double*, const double*, std::size_t)>;

/// The formulas, in double, with the parameters the expressions below use.
struct formula_case {
  std::string name;
  kfn k;
};
std::vector<formula_case> formulas(double ls) {
  auto r2 = [ls](const double* a, const double* b, std::size_t d) { return ref::sq(a, b, d) / (ls * ls); };
  return {
      {"rbf", [=](const double* a, const double* b, std::size_t d) { return 1.5 * std::exp(-0.5 * r2(a, b, d)); }},
      {"matern12", [=](const double* a, const double* b, std::size_t d) { return std::exp(-std::sqrt(r2(a, b, d))); }},
      {"matern32",
       [=](const double* a, const double* b, std::size_t d) {
         const double s = std::sqrt(3 * r2(a, b, d));
         return (1 + s) * std::exp(-s);
       }},
      {"matern52",
       [=](const double* a, const double* b, std::size_t d) {
         const double q = 5 * r2(a, b, d), s = std::sqrt(q);
         return (1 + s + q / 3) * std::exp(-s);
       }},
      {"rq", [=](const double* a, const double* b, std::size_t d) { return std::pow(1 + r2(a, b, d) / 3.0, -1.5); }},
      {"linear", [](const double* a, const double* b, std::size_t d) { return 0.5 * ref::dotp(a, b, d); }},
      {"negsqdist", [](const double* a, const double* b, std::size_t d) { return -ref::sq(a, b, d); }},
      {"l1", [](const double* a, const double* b, std::size_t d) { return ref::l1(a, b, d); }},
  };
}

/// Calls f(lazy, index) for each formula of `formulas`, in the same order (index: an integral_constant).
template <class XV, class F>
void each_formula(const XV& X, const XV& Y, double ls, F&& f) {
  using std::integral_constant;
  f(memsafe::rbf(X, Y, ls, 1.5), integral_constant<int, 0>{});
  f(memsafe::matern12(X, Y, ls), integral_constant<int, 1>{});
  f(memsafe::matern32(X, Y, ls), integral_constant<int, 2>{});
  f(memsafe::matern52(X, Y, ls), integral_constant<int, 3>{});
  f(memsafe::rq(X, Y, ls, 1.0, 1.5), integral_constant<int, 4>{});
  f(memsafe::linear(X, Y, 0.5), integral_constant<int, 5>{});
  f(-memsafe::sqdist(X, Y), integral_constant<int, 6>{});
  f(memsafe::l1(X, Y), integral_constant<int, 7>{});
}

/// Naive reductions of a dense n×m matrix K (row-major, double).
struct naive {
  std::vector<double> want, scale;
};
naive row_sums(const std::vector<double>& K, std::size_t n, std::size_t m) {
  naive r{std::vector<double>(n, 0), std::vector<double>(n, 0)};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      r.want[i] += K[i * m + j];
      r.scale[i] += std::fabs(K[i * m + j]);
    }
  return r;
}
naive times(const std::vector<double>& K, std::size_t n, std::size_t m, const std::vector<double>& M, std::size_t c) {
  naive r{std::vector<double>(n * c, 0), std::vector<double>(n * c, 0)};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t q = 0; q < c; ++q) {
        r.want[i * c + q] += K[i * m + j] * M[j * c + q];
        r.scale[i * c + q] += std::fabs(K[i * m + j] * M[j * c + q]);
      }
  return r;
}
naive lse(const std::vector<double>& K, std::size_t n, std::size_t m) {
  naive r{std::vector<double>(n), std::vector<double>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < m; ++j) mx = std::max(mx, K[i * m + j]);
    double s = 0;
    for (std::size_t j = 0; j < m; ++j) s += std::exp(K[i * m + j] - mx);
    r.want[i] = mx + std::log(s);
    r.scale[i] = 1 + std::fabs(mx) + std::fabs(r.want[i]);
  }
  return r;
}
naive softmax(const std::vector<double>& K, std::size_t n, std::size_t m, const std::vector<double>& V, std::size_t c) {
  naive r{std::vector<double>(n * c, 0), std::vector<double>(n * c, 0)};
  for (std::size_t i = 0; i < n; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < m; ++j) mx = std::max(mx, K[i * m + j]);
    double s = 0;
    for (std::size_t j = 0; j < m; ++j) s += std::exp(K[i * m + j] - mx);
    for (std::size_t j = 0; j < m; ++j) {
      const double w = std::exp(K[i * m + j] - mx) / s;
      for (std::size_t q = 0; q < c; ++q) {
        r.want[i * c + q] += w * V[j * c + q];
        r.scale[i * c + q] += std::fabs(w * V[j * c + q]) * (1 + std::fabs(mx));
      }
    }
  }
  return r;
}

/// Every formula × reduction in f32; in f64 every formula for K·v and logsumexp, and rbf and −sqdist
/// (the exp and the elementwise-op leaves) for the others (fewer instantiations: compile time).
template <class T>
void all_sums(std::size_t n, std::size_t m, std::size_t d) {
  const double ls = std::sqrt(double(d));
  auto xd = ref::data(n, d, 11 + unsigned(d)), yd = ref::data(m, d, 13 + unsigned(d));
  auto vd = ref::data(m, 1, 17), Md = ref::data(m, 3, 19), ud = ref::data(n, 1, 23);
  auto x = ref::cast<T>(xd), y = ref::cast<T>(yd), v = ref::cast<T>(vd), M = ref::cast<T>(Md), u = ref::cast<T>(ud);
  const auto xs = ref::seen<T>(xd), ys = ref::seen<T>(yd), vs = ref::seen<T>(vd), Ms = ref::seen<T>(Md),
             us = ref::seen<T>(ud);
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto fs = formulas(ls);
  std::size_t f = 0;
  const std::string tag = std::string(sizeof(T) == 4 ? " f32" : " f64") + " n=" + std::to_string(n) +
                          " m=" + std::to_string(m) + " d=" + std::to_string(d);
  each_formula(X, Y, ls, [&](const auto& K, auto which) {
    const auto& fc = fs[f++];
    const auto Kd = ref::dense(xs, ys, n, m, d, fc.k);
    const auto kv = times(Kd, n, m, vs, 1);
    check_fused(K * memsafe::vec(v.data(), m), kv.want, kv.scale, "K·v " + fc.name + tag);
    const auto ls_ = lse(Kd, n, m);
    check_fused(memsafe::logsumexp(K), ls_.want, ls_.scale, "logsumexp " + fc.name + tag);
    constexpr bool all = std::is_same_v<T, float>;
    if constexpr (all || which() == 0 || which() == 6) {
      const auto rs = row_sums(Kd, n, m);
      check_fused(memsafe::sum(K), rs.want, rs.scale, "sum " + fc.name + tag);
      const auto km = times(Kd, n, m, Ms, 3);
      check_fused(K * memsafe::matrix(M.data(), m, 3), km.want, km.scale, "K·M " + fc.name + tag);
      const auto uk = times(ref::transpose(Kd, n, m), m, n, us, 1);
      check_fused(memsafe::vec(u.data(), n) * K, uk.want, uk.scale, "v·K " + fc.name + tag);
      const auto sm = softmax(Kd, n, m, Ms, 3);
      check_fused(memsafe::softmax_sum(K, memsafe::matrix(M.data(), m, 3)), sm.want, sm.scale,
                  "softmax_sum " + fc.name + tag);
    }
  });
}

}  // namespace

TEST_CASE("fused sums: every formula × reduction against the reference path and a naive loop, f32 and f64") {
  report_skipped();
  for (std::size_t d : {1, 3, 17, 100}) {
    all_sums<float>(37, 45, d);
    all_sums<double>(37, 45, d);
  }
  all_sums<float>(9, 301, 3);  // several column tiles at the small budgets
  all_sums<double>(70, 5, 2);  // one partial panel per row
}

namespace {

/// K·M and softmax_sum with c columns against the naive loop and the reference path (check_fused):
/// c chosen to run each part of the many-column kernels' fold_cols — two registers of columns at a
/// time, one register left over, padding columns — on either register width (4 or 8 doubles).
template <class T>
void many_columns(std::size_t n, std::size_t m, std::size_t d, std::size_t c) {
  auto xd = ref::data(n, d, 43), yd = ref::data(m, d, 47), Md = ref::data(m, c, 53);
  auto x = ref::cast<T>(xd), y = ref::cast<T>(yd), M = ref::cast<T>(Md);
  const auto xs = ref::seen<T>(xd), ys = ref::seen<T>(yd), Ms = ref::seen<T>(Md);
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const double ls = std::sqrt(double(d));
  const auto Kd = ref::dense(xs, ys, n, m, d, formulas(ls)[0].k);
  const std::string tag = std::string(sizeof(T) == 4 ? " f32" : " f64") + " c=" + std::to_string(c);
  const auto km = times(Kd, n, m, Ms, c);
  check_fused(memsafe::rbf(X, Y, ls, 1.5) * memsafe::matrix(M.data(), m, c), km.want, km.scale, "K·M rbf" + tag);
  const auto sm = softmax(Kd, n, m, Ms, c);
  check_fused(memsafe::softmax_sum(memsafe::rbf(X, Y, ls, 1.5), memsafe::matrix(M.data(), m, c)), sm.want, sm.scale,
              "softmax_sum rbf" + tag);
}

}  // namespace

TEST_CASE("fused sums: K·M and softmax_sum with 2 to fsum_max_cols columns") {
  report_skipped();
  for (std::size_t c : {2, 5, 11, 16, 40}) many_columns<float>(13, 70, 3, c);
  for (std::size_t c : {7, 13}) many_columns<double>(9, 37, 2, c);
  many_columns<float>(6, 21, 5, host::fsum_max_cols);  // the most columns a fused sum takes
}

TEST_CASE("fused sums: below the fused kernels' minimum the tile loop runs, and the minimum is the smaller one") {
  // K·M with many columns: the fused kernels hold a panel of right-hand rows in double per thread,
  // so their smallest plan is far above the tile loop's (one row of sums). A budget between the two
  // runs the tile loop — within the budget, with the same answer — rather than being refused.
  report_skipped();
  const std::size_t n = 9, m = 40, d = 3, c = host::fsum_max_cols;
  const auto x = ref::cast<float>(ref::data(n, d, 21)), y = ref::cast<float>(ref::data(m, d, 22)),
             M = ref::cast<float>(ref::data(m, c, 23));
  const std::vector<double> xd(x.begin(), x.end()), yd(y.begin(), y.end());
  const auto e = memsafe::rbf(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d), 0.9) *
                 memsafe::matrix(M.data(), m, c);
  std::vector<double> want(n * c, 0.0), scale(n * c, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      const double k = std::exp(-0.5 * ref::sq(&xd[i * d], &yd[j * d], d) / 0.81);
      for (std::size_t q = 0; q < c; ++q) {
        want[i * c + q] += k * double(M[j * c + q]);
        scale[i * c + q] += std::fabs(k * double(M[j * c + q]));
      }
    }
  scoped_env unset("MEMSAFE_ISA", nullptr);
  std::size_t tile_min;
  {
    scoped_env e2("MEMSAFE_KERNELS", "reference");
    tile_min = memsafe::plan_for(e, memsafe::options{memsafe::unlimited, 1}).min_bytes;
  }
  for (host::isa i : fused_isas()) {
    INFO("MEMSAFE_ISA=" << std::string(host::isa_name(i)));
    scoped_env force("MEMSAFE_ISA", host::isa_name(i));
    const auto big = memsafe::plan_for(e, memsafe::options{memsafe::unlimited, 1});
    REQUIRE(big.fused);
    CHECK(big.min_bytes == tile_min);  // the call's minimum: the tile loop's, the smaller
    CHECK(big.fused_min_bytes > 4 * tile_min);
    CHECK(memsafe::explain(e, memsafe::options{memsafe::unlimited, 1}).find("the fused kernels from") != std::string::npos);
    // Budgets from the minimum up, doubling: the tile loop below the fused minimum, the fused
    // kernels from there on, never refused, within the budget, the same answer.
    bool saw_tile = false, saw_fused = false;
    for (std::size_t b = tile_min; b <= std::size_t{1} << 24; b *= 2) {
      CAPTURE(b);
      const auto r = memsafe::eval(e, memsafe::options{b, 1});
      CHECK(r.stats.peak_temp_bytes <= b);
      CHECK(r.stats.min_budget_bytes == tile_min);
      // The tile loop below the fused kernels' minimum, the fused kernels from there on.
      const bool f = ref::ran_fused(r, big.fused_min_bytes);
      CHECK(fused_sum(r.stats.plan) == f);
      if (f) CHECK(r.stats.plan.isa == host::isa_name(i));
      saw_fused |= f;
      saw_tile |= !f;
      close_to(r.values, want, scale, "K·M, " + std::to_string(c) + " columns, budget " + std::to_string(b));
    }
    CHECK(saw_tile);
    CHECK(saw_fused);
    // One byte under the minimum is refused, naming it.
    try {
      (void)memsafe::eval(e, memsafe::options{tile_min - 1, 1});
      FAIL("a budget of minimum − 1 ran");
    } catch (const memsafe::budget_error& er) {
      CHECK(er.minimum_bytes == tile_min);
    }
  }
}

TEST_CASE("fused sums: K·M with more than fsum_max_cols columns, cosine and other leaves keep the tile path") {
  constexpr std::size_t cmax = host::fsum_max_cols;
  std::vector<float> x = ref::cast<float>(ref::data(20, 4, 3)), y = ref::cast<float>(ref::data(30, 4, 4));
  std::vector<float> M = ref::cast<float>(ref::data(30, cmax + 1, 5));
  auto X = memsafe::points(x.data(), 20, 4), Y = memsafe::points(y.data(), 30, 4);
  scoped_env unset("MEMSAFE_ISA", nullptr);
  const bool simd = !fused_isas().empty();
  CHECK_FALSE(fused_sum(memsafe::plan_for(memsafe::rbf(X, Y) * memsafe::matrix(M.data(), 30, cmax + 1))));
  CHECK(fused_sum(memsafe::plan_for(memsafe::rbf(X, Y) * memsafe::matrix(M.data(), 30, cmax))) == simd);
  CHECK_FALSE(fused_sum(memsafe::plan_for(memsafe::sum(memsafe::cosine(X, Y)))));
  CHECK_FALSE(fused_sum(memsafe::plan_for(memsafe::sum(memsafe::rbf(X, Y) + memsafe::l1(X, Y)))));
  CHECK_FALSE(fused_sum(memsafe::plan_for(memsafe::min(memsafe::rbf(X, Y)))));
  for (host::isa i : fused_isas()) {
    scoped_env force("MEMSAFE_ISA", host::isa_name(i));
    const auto p = memsafe::plan_for(memsafe::rbf(X, Y) * memsafe::matrix(M.data(), 30, 16));
    CHECK(p.isa == host::isa_name(i));
    CHECK(memsafe::explain(memsafe::rbf(X, Y) * memsafe::matrix(M.data(), 30, 16)).find(
              std::string("isa:          ") + host::isa_name(i)) != std::string::npos);
  }
  {
    scoped_env force("MEMSAFE_ISA", "portable");
    const auto p = memsafe::plan_for(memsafe::rbf(X, Y) * memsafe::matrix(M.data(), 30, 16));
    CHECK_FALSE(fused_sum(p));
    CHECK(p.isa == "portable");
  }
}

TEST_CASE("fused sums: NaN and ±inf inputs behave as on the reference path") {
  report_skipped();
  const std::size_t n = 23, m = 41, d = 3;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto xd = ref::data(n, d, 31), yd = ref::data(m, d, 37);
  xd[2 * d + 1] = nan;   // row 2: NaN
  xd[5 * d + 0] = inf;   // row 5: +inf coordinate (sqdist +inf: rbf 0, −sqdist −inf)
  yd[7 * d + 2] = -inf;  // column 7: −inf coordinate (sqdist +inf in every row; dot ±inf, or NaN in row 5)
  xd[11 * d + 2] = -inf;  // row 11: −inf coordinate (its dot with column 7: +inf or −inf)
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto x = ref::cast<T>(xd), y = ref::cast<T>(yd);
    auto v = ref::cast<T>(ref::data(m, 2, 41));
    auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
    // Compare with the reference path only: NaN / inf positions must agree exactly, numbers closely.
    auto same = [&](const auto& expr, const std::string& what) {
      INFO(what << (sizeof(T) == 4 ? " f32" : " f64"));
      scoped_env unset("MEMSAFE_ISA", nullptr);
      std::vector<T> want;
      {
        scoped_env e("MEMSAFE_KERNELS", "reference");
        want = memsafe::eval(expr, memsafe::options{memsafe::unlimited, 1}).values;
      }
      for (host::isa i : fused_isas()) {
        scoped_env force("MEMSAFE_ISA", host::isa_name(i));
        const std::size_t fmin = ref::fused_min_budget(expr);
        CHECK(fmin > 0);
        for (const auto& r : ref::eval_all(expr)) {
          CHECK(fused_sum(r.stats.plan) == ref::ran_fused(r, fmin));  // the tile loop below the fused minimum
          REQUIRE(r.values.size() == want.size());
          for (std::size_t q = 0; q < want.size(); ++q) {
            INFO("at " << q << ": got " << r.values[q] << ", want " << want[q]);
            const double g = r.values[q], w = want[q];
            if (std::isnan(w) || std::isinf(w)) CHECK(((std::isnan(g) && std::isnan(w)) || g == w));
            else CHECK(std::fabs(g - w) <= 1e-3 * (1 + std::fabs(w)));
          }
        }
      }
    };
    same(memsafe::rbf(X, Y) * memsafe::vec(v.data(), m), "rbf K·v");
    same(memsafe::sum(memsafe::matern32(X, Y)), "matern32 sum");
    same(memsafe::logsumexp(-memsafe::sqdist(X, Y)), "logsumexp −sqdist");
    same(memsafe::logsumexp(memsafe::dot(X, Y)), "logsumexp dot");
    same(memsafe::softmax_sum(-memsafe::sqdist(X, Y), memsafe::matrix(v.data(), m, 2)), "softmax_sum −sqdist");
    same(memsafe::softmax_sum(memsafe::dot(X, Y), memsafe::matrix(v.data(), m, 2)), "softmax_sum dot");
  };
  run(float{});
  run(double{});
}

namespace {

bool symmetric_sum(const memsafe::tile_plan& p) { return p.symmetric && p.reduction.find("symmetric") != std::string::npos; }

/// k(X, X)·v and the row sums of k(X, X) for every formula: the symmetric form (each pair once)
/// against the naive loop and the reference path at every budget and on every instruction set
/// (check_fused), its plan at an ample budget, and the plain form (MEMSAFE_SYMMETRIC=off).
template <class T>
void symmetric_sums(std::size_t n, std::size_t d) {
  const double ls = std::sqrt(double(d));
  auto xd = ref::data(n, d, 29 + unsigned(d)), vd = ref::data(n, 1, 31);
  auto x = ref::cast<T>(xd), v = ref::cast<T>(vd);
  const auto xs = ref::seen<T>(xd), vs = ref::seen<T>(vd);
  auto X = memsafe::points(x.data(), n, d);
  const auto fs = formulas(ls);
  std::size_t f = 0;
  const std::string tag = std::string(sizeof(T) == 4 ? " f32" : " f64") + " n=" + std::to_string(n) +
                          " d=" + std::to_string(d);
  scoped_env unset("MEMSAFE_ISA", nullptr);
  const bool simd = !fused_isas().empty();
  each_formula(X, X, ls, [&](const auto& K, auto which) {
    const auto& fc = fs[f++];
    const auto Kd = ref::dense(xs, xs, n, n, d, fc.k);
    const auto kv = times(Kd, n, n, vs, 1);
    const auto Kv = K * memsafe::vec(v.data(), n);
    check_fused(Kv, kv.want, kv.scale, "symmetric K·v " + fc.name + tag);
    const auto p = memsafe::plan_for(Kv, memsafe::options{memsafe::unlimited, 2});
    INFO("K·v " << fc.name << tag);
    if (n >= 8) CHECK(symmetric_sum(p) == simd);  // fewer rows than two groups of 4: the plain form may run
    if (p.symmetric) CHECK(memsafe::explain(Kv, memsafe::options{memsafe::unlimited, 2}).find("symmetric") != std::string::npos);
    {  // deterministic for a thread count: the same bits twice
      const auto a = memsafe::eval(Kv, memsafe::options{memsafe::unlimited, 2}).values;
      const auto b = memsafe::eval(Kv, memsafe::options{memsafe::unlimited, 2}).values;
      CHECK(a == b);
    }
    {
      scoped_env off("MEMSAFE_SYMMETRIC", "off");
      const auto q = memsafe::plan_for(Kv, memsafe::options{memsafe::unlimited, 2});
      CHECK_FALSE(q.symmetric);
      CHECK(fused_sum(q) == simd);
      close_to(memsafe::eval(Kv).values, kv.want, kv.scale, "K·v " + fc.name + tag + " MEMSAFE_SYMMETRIC=off");
    }
    if constexpr (std::is_same_v<T, float> || which() == 0) {
      const auto rs = row_sums(Kd, n, n);
      check_fused(memsafe::sum(K), rs.want, rs.scale, "symmetric sum " + fc.name + tag);
      // (K + σ²I)·v: the diagonal term is added after the symmetric sum.
      auto kd = kv;
      for (std::size_t i = 0; i < n; ++i) kd.want[i] += 0.25 * vs[i], kd.scale[i] += 0.25 * std::fabs(vs[i]);
      check_fused((K + 0.25 * memsafe::identity(n)) * memsafe::vec(v.data(), n), kd.want, kd.scale,
                  "symmetric (K + σ²I)·v " + fc.name + tag);
      // v·K is the row job of the transposed leaf, k(X, X) again: symmetric too.
      const auto uk = times(ref::transpose(Kd, n, n), n, n, vs, 1);
      check_fused(memsafe::vec(v.data(), n) * K, uk.want, uk.scale, "symmetric v·K " + fc.name + tag);
      if (n >= 8)
        CHECK(symmetric_sum(memsafe::plan_for(memsafe::vec(v.data(), n) * K, memsafe::options{memsafe::unlimited, 2})) ==
              simd);
    }
  });
}

}  // namespace

TEST_CASE("fused sums: k(X, X)·v and row sums of k(X, X) take each pair once (symmetric form)") {
  report_skipped();
  for (std::size_t n : {1, 2, 5, 37, 301}) symmetric_sums<float>(n, 3);
  for (std::size_t n : {1, 37, 301}) symmetric_sums<double>(n, 17);
  symmetric_sums<double>(530, 2);  // several row blocks of 256 (the largest row tile)
}

TEST_CASE("fused sums: the symmetric form needs the same view on both sides and one column") {
  scoped_env unset("MEMSAFE_ISA", nullptr);
  if (fused_isas().empty()) {
    MESSAGE("skipped: no fused sums in this build");
    return;
  }
  const std::size_t n = 40, d = 3;
  std::vector<float> x = ref::cast<float>(ref::data(n, d, 3)), y = x, v = ref::cast<float>(ref::data(n, 2, 4));
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), n, d);
  const memsafe::options o{memsafe::unlimited, 2};
  CHECK(symmetric_sum(memsafe::plan_for(memsafe::rbf(X, X) * memsafe::vec(v.data(), n), o)));
  // Equal values in another buffer, a prefix view of the same buffer, two columns, logsumexp: the plain form.
  CHECK_FALSE(memsafe::plan_for(memsafe::rbf(X, Y) * memsafe::vec(v.data(), n), o).symmetric);
  auto Xp = memsafe::points(x.data(), n - 1, d);
  CHECK_FALSE(memsafe::plan_for(memsafe::rbf(Xp, X) * memsafe::vec(v.data(), n), o).symmetric);
  CHECK_FALSE(memsafe::plan_for(memsafe::rbf(X, X) * memsafe::matrix(v.data(), n, 2), o).symmetric);
  CHECK_FALSE(memsafe::plan_for(memsafe::logsumexp(memsafe::rbf(X, X)), o).symmetric);
  // Below the symmetric form's bytes the plain form runs, and the minimum is the plain form's.
  const auto Kv = memsafe::rbf(X, X) * memsafe::vec(v.data(), n);
  const auto mn = memsafe::plan_for(Kv, memsafe::options{memsafe::unlimited, 1}).min_bytes;
  const auto at_min = memsafe::plan_for(Kv, memsafe::options{mn, 1});
  CHECK_FALSE(at_min.symmetric);
  CHECK(at_min.min_bytes == mn);
  // NaN and ±inf: the same positions as the reference path (a NaN point spoils every row; a
  // padded last row group must not fold its padding down the columns).
  auto xn = x;
  xn[7 * d + 1] = std::numeric_limits<float>::quiet_NaN();
  auto vi = v;
  vi[38] = std::numeric_limits<float>::infinity();  // row 38 is in the last, partial group of 4
  auto Xn = memsafe::points(xn.data(), n, d);
  for (const auto* vp : {&v, &vi}) {
    for (const bool nanx : {false, true}) {
      const auto Kn = memsafe::rbf(nanx ? Xn : X, nanx ? Xn : X) * memsafe::vec(vp->data(), n);
      std::vector<float> want;
      {
        scoped_env e("MEMSAFE_KERNELS", "reference");
        want = memsafe::eval(Kn, memsafe::options{memsafe::unlimited, 1}).values;
      }
      const auto r = memsafe::eval(Kn, o);
      CHECK(r.stats.plan.symmetric);
      for (std::size_t i = 0; i < n; ++i) {
        INFO("row " << i << " nan x " << nanx << ": got " << r.values[i] << ", want " << want[i]);
        if (std::isnan(want[i]) || std::isinf(want[i])) CHECK(((std::isnan(r.values[i]) && std::isnan(want[i])) || r.values[i] == want[i]));
        else CHECK(std::fabs(r.values[i] - want[i]) <= 1e-4f * (1 + std::fabs(want[i])));
      }
    }
  }
}

TEST_CASE_TEMPLATE("tile path: rows_times_matrix gives row_times_matrix's sums bit for bit", T, float, double) {
  // The tile path's K·M / softmax_sum product (monoids.hpp): four rows and a block of 8, 4, 2 or
  // (float) 1 columns at a time must add every term in row_times_matrix's order, so its sums are
  // the same doubles.
  const std::size_t n = 37;
  const auto rowsd = ref::data(4, n, 61), Md = ref::data(n, 40, 67);
  const auto rv = ref::cast<T>(rowsd), Mv = ref::cast<T>(Md);
  for (std::size_t nr = 1; nr <= 4; ++nr)
    for (std::size_t c : {1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 15, 17, 20})  // every mix of the 8-, 4-, 2- and (f32) 1-column blocks
      for (std::size_t cs : {1, 2}) {
        INFO("rows " << nr << ", columns " << c << ", column stride " << cs);
        const std::size_t rs = 40;  // M's row stride: c·cs ≤ 40 columns of the 40 held
        std::vector<double> want(4 * c), got(4 * c);
        for (std::size_t q = 0; q < 4 * c; ++q) want[q] = got[q] = 0.25 * double(q % 7) - 0.5;  // earlier tiles' sums
        const T* rows[4];
        double* accs[4];
        for (std::size_t r = 0; r < nr; ++r) {
          rows[r] = rv.data() + r * n;
          accs[r] = got.data() + r * c;
          host::row_times_matrix(rows[r], n, Mv.data(), rs, cs, c, want.data() + r * c);
        }
        host::rows_times_matrix(rows, accs, nr, n, Mv.data(), rs, cs, c);
        CHECK(got == want);
      }
}
