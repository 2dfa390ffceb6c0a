// exact_gp — the exact GP posterior on a UCI regression set, solved by preconditioned conjugate
// gradients whose every product with K is a budgeted lazy kernel product (<memsafe/gp.hpp>,
// gp::exact_solve): the n×n kernel matrix is never formed.
//
//   exact_gp --dataset kin40k --split 0 --kernel matern32 --variance 3.97
//            --lengthscales 16.8,15.9,8.4,9.7,9.2,7.4,7.4,10.2 --noise 0.0439 --budget 64MiB --threads 2
//
// Data: loaded and standardised exactly as sgpr_train does (the training split's mean and standard
// deviation; examples/common/uci.hpp). --max-train N / --max-test N keep the first N points of the
// split (after standardisation with the whole split's statistics). Hyperparameters are fixed (given
// on the command line, e.g. those sgpr_train learnt); zero prior mean on the standardised target.
// RMSE and NLPD are in the target's original units. NLPD needs predictive variances, which cost a
// CG solve per batch of 16 test points: they are computed for the first --var-points test points
// only (default 0: no NLPD in the JSON line).
// --check: on the first --check-n training points, α from exact_solve (tolerance 1e-10) against a
// dense Cholesky solve of K + σ²I (LAPACK POTRF on a matrix formed here from independent kernel
// formulas), and the predictive means at the first 200 test points; exit status 1 on a mismatch.
// Output: one JSON line on stdout.
#include <malloc.h>

#include <memsafe/gp.hpp>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/json.hpp"
#include "common/rss.hpp"
#include "common/run.hpp"
#include "common/uci.hpp"

namespace {

namespace mx = memsafe_examples;
namespace gp = memsafe::gp;

constexpr double two_pi = 6.283185307179586476925286766559;
using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// --lengthscales "a,b,c" → {a, b, c}: every comma-separated item a positive finite number (no
/// empty item: "2," and "2,,3" are refused). Throws std::invalid_argument saying what is wrong.
std::vector<double> parse_lengthscales(const std::string& s) {
  std::vector<double> v;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    double x = 0;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
    if (item.empty())
      throw std::invalid_argument("--lengthscales: an empty value in '" + s + "' (give one number, or d numbers "
                                  "separated by commas)");
    if (ec != std::errc() || p != item.data() + item.size() || !std::isfinite(x) || !(x > 0))
      throw std::invalid_argument("--lengthscales: '" + item + "' is not a positive finite number");
    v.push_back(x);
    if (comma == std::string::npos) return v;
    start = comma + 1;
  }
}

/// The lengthscales for d inputs: one value → d copies; otherwise exactly d values.
std::vector<double> lengthscales_for(std::vector<double> v, std::size_t d) {
  if (v.size() == 1) v.assign(d, v[0]);
  if (v.size() != d)
    throw std::runtime_error("--lengthscales: " + std::to_string(v.size()) + " values for d = " + std::to_string(d) +
                             " (give one value or one per input)");
  return v;
}

/// The smallest plan (bytes) of the means' product k(X*, X)·α, the one budgeted kernel product
/// gp::exact_predict_mean evaluates: the same kernel from memsafe's lazy builders, ARD lengthscales.
std::size_t mean_minimum_bytes(const gp::hyperparameters& h, const double* Xs, std::size_t ns, const gp::data_view& D) {
  const auto A = memsafe::points(Xs, ns, D.d);
  const auto B = memsafe::points(D.X, D.n, D.d);
  const auto ls = memsafe::ard(h.lengthscales.data(), D.d);
  const auto alpha = memsafe::vec(D.y, D.n);  // stands for α: the planner reads no values
  const memsafe::options unbounded{memsafe::unlimited, 1};
  switch (h.kind) {
    case gp::kernel::rbf: return memsafe::plan_for(memsafe::rbf(A, B, ls, h.variance) * alpha, unbounded).min_bytes;
    case gp::kernel::matern12:
      return memsafe::plan_for(memsafe::matern12(A, B, ls, h.variance) * alpha, unbounded).min_bytes;
    case gp::kernel::matern32:
      return memsafe::plan_for(memsafe::matern32(A, B, ls, h.variance) * alpha, unbounded).min_bytes;
    case gp::kernel::matern52: break;
  }
  return memsafe::plan_for(memsafe::matern52(A, B, ls, h.variance) * alpha, unbounded).min_bytes;
}

/// Kernel value written independently of the library (from r = the scaled Euclidean distance).
double ref_kernel(gp::kernel k, const double* a, const double* b, std::size_t d, const std::vector<double>& ell,
                  double s2) {
  double r2 = 0;
  for (std::size_t q = 0; q < d; ++q) {
    const double u = (a[q] - b[q]) / ell[q];
    r2 += u * u;
  }
  const double r = std::sqrt(r2);
  switch (k) {
    case gp::kernel::rbf: return s2 * std::exp(-0.5 * r2);
    case gp::kernel::matern12: return s2 * std::exp(-r);
    case gp::kernel::matern32: return s2 * (1 + std::sqrt(3.0) * r) * std::exp(-std::sqrt(3.0) * r);
    case gp::kernel::matern52: return s2 * (1 + std::sqrt(5.0) * r + 5.0 * r2 / 3.0) * std::exp(-std::sqrt(5.0) * r);
  }
  return std::nan("");
}

struct check_result {
  bool pass = true;
  std::size_t n = 0, ns = 0, iterations = 0;
  double alpha_rel = 0, mean_rel = 0, seconds_dense = 0, seconds_cg = 0;
};

/// --check's sizes: its first n training points and first ns test points.
struct check_sizes {
  std::size_t n = 0, ns = 0;
};
check_sizes check_sizes_for(const mx::uci_split& sp, std::size_t check_n) {
  return {std::min(check_n, sp.n_train), std::min<std::size_t>(200, sp.n_test)};
}

/// The options of --check's solve (tolerance 1e-10) and means.
gp::exact_options check_options(std::size_t n, std::size_t rank, std::size_t budget, unsigned threads) {
  gp::exact_options o;
  o.budget = budget;
  o.threads = threads;
  o.tolerance = 1e-10;
  o.preconditioner_rank = std::min(rank, n);
  return o;
}

/// --check (see the file comment).
check_result run_check(const mx::uci_split& sp, const gp::hyperparameters& h, std::size_t check_n, std::size_t rank,
                       std::size_t budget, unsigned threads) {
  namespace la = memsafe::linalg;
  check_result c;
  const std::size_t d = sp.d;
  const auto [n, ns] = check_sizes_for(sp, check_n);
  c.n = n;
  c.ns = ns;
  auto t0 = clock_type::now();
  std::vector<double> L(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j)
      L[i * n + j] = L[j * n + i] = ref_kernel(h.kind, &sp.X_train[i * d], &sp.X_train[j * d], d, h.lengthscales,
                                               h.variance) + (i == j ? h.noise : 0.0);
  la::cholesky(memsafe::matrix(L.data(), n, n));
  std::vector<double> want(sp.y_train.begin(), sp.y_train.begin() + static_cast<std::ptrdiff_t>(n));
  la::solve_lower(memsafe::matrix(static_cast<const double*>(L.data()), n, n), memsafe::vec(want.data(), n));
  la::solve_lower(memsafe::matrix(static_cast<const double*>(L.data()), n, n), memsafe::vec(want.data(), n), true);
  std::vector<double> want_mean(ns, 0.0);
  for (std::size_t s = 0; s < ns; ++s)
    for (std::size_t i = 0; i < n; ++i)
      want_mean[s] += ref_kernel(h.kind, &sp.X_test[s * d], &sp.X_train[i * d], d, h.lengthscales, h.variance) * want[i];
  c.seconds_dense = since(t0);

  t0 = clock_type::now();
  const gp::data_view D{sp.X_train.data(), sp.y_train.data(), n, d};
  const gp::exact_options o = check_options(n, rank, budget, threads);
  const auto r = gp::exact_solve(D, h, o);
  std::vector<double> mean(ns);
  gp::exact_predict_mean(D, r.alpha.data(), 1, h, {sp.X_test.data(), ns, d}, mean.data(), o);
  c.seconds_cg = since(t0);
  c.iterations = r.iterations;
  double e = 0, s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    e += (r.alpha[i] - want[i]) * (r.alpha[i] - want[i]);
    s += want[i] * want[i];
  }
  c.alpha_rel = s > 0 ? std::sqrt(e / s) : std::sqrt(e);  // a constant target: α = 0, the error absolute
  double em = 0, sm = 0;
  for (std::size_t q = 0; q < ns; ++q) {
    em = std::max(em, std::fabs(mean[q] - want_mean[q]));
    sm = std::max(sm, std::fabs(want_mean[q]));
  }
  c.mean_rel = sm > 0 ? em / sm : em;
  // CG to a relative residual of 1e-10 leaves an error of at most cond(K + σ²I)·1e-10 in α.
  c.pass = r.converged && c.alpha_rel <= 1e-6 && c.mean_rel <= 1e-8;
  if (!c.pass)
    std::fprintf(stderr, "exact_gp --check: FAIL on n = %zu: converged %d, alpha relative error %.3g (limit 1e-6), "
                         "mean relative error %.3g (limit 1e-8)\n", n, int(r.converged), c.alpha_rel, c.mean_rel);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  // As in sgpr_train: a fixed mmap threshold returns every freed temporary above 1 MiB to the system.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mx::cli args("exact_gp", "The exact GP posterior mean by preconditioned CG over budgeted kernel products.");
  mx::add_uci_options(args)
      .option("kernel", "matern32", "rbf|matern12|matern32|matern52 (ARD)")
      .option("variance", "1", "kernel variance σ_f² (standardised target)")
      .option("lengthscales", "1", "ARD lengthscales: one value, or d comma-separated values (standardised inputs)")
      .option("noise", "0.1", "noise variance σ² (standardised target)")
      .option("tol", "0.01", "CG stops a column at relative residual ‖r‖/‖y‖ <= tol (GPyTorch's eval default 0.01)")
      .option("max-iters", "1000", "CG iterations at most")
      .option("min-iters", "0", "CG iterations at least (GPyTorch: 10)")
      .option("rank", "100", "rank of the pivoted-Cholesky preconditioner (0: plain CG)")
      .option("max-train", "0", "use only the first N training points (0: all)")
      .option("max-test", "0", "use only the first N test points (0: all)")
      .option("var-points", "0", "predictive variances (and NLPD) for the first N test points (one CG solve per 16)")
      .option("check-n", "1000", "--check: training points of the dense comparison")
      .flag("no-cache", "recompute every kernel value in every product (no kernel cache in the budget's free part)")
      .flag("check", "compare alpha and predictions with a dense Cholesky solve on the first --check-n points");
  mx::add_eval_options(args);  // no --explain: the GP calls offer no explain or plan to print
  args.parse(argc, argv);

  const mx::run_options run = mx::read_eval_options(args);
  gp::hyperparameters h;
  std::size_t budget = 0;
  try {
    h.kind = gp::parse_kernel(args.get_string("kernel"));
    budget = memsafe::parse_bytes(run.budget_text);
  } catch (const std::exception& e) {
    args.fail(e.what());
  }
  h.variance = args.get_double("variance");
  h.noise = args.get_double("noise");
  gp::exact_options o;
  o.budget = budget;
  o.threads = run.threads;
  o.tolerance = args.get_double("tol");
  o.max_iterations = args.get_uint("max-iters");
  o.min_iterations = args.get_uint("min-iters");
  if (o.min_iterations > o.max_iterations) args.fail("--min-iters must not exceed --max-iters");
  o.preconditioner_rank = args.get_uint("rank");
  o.cache = !args.get_flag("no-cache");
  const std::string dataset = args.get_string("dataset");
  const std::size_t split = args.get_uint("split");
  const bool check = args.get_flag("check");
  const std::size_t check_n = args.get_uint("check-n");
  if (check_n == 0) args.fail("--check-n must be positive");
  std::vector<double> lengthscales;  // the list as given; its count is checked against d after loading
  try {
    lengthscales = parse_lengthscales(args.get_string("lengthscales"));
  } catch (const std::exception& e) {
    args.fail(e.what());
  }

  try {
    const auto t_start = clock_type::now();
    auto t0 = clock_type::now();
    const mx::uci_dataset ds = mx::load_uci(args.get_string("data-dir"), dataset);
    mx::uci_split sp = mx::make_split(ds, split);
    const std::size_t d = sp.d;
    if (const std::size_t mt = args.get_uint("max-train"); mt > 0 && mt < sp.n_train) {
      sp.n_train = mt;
      sp.X_train.resize(mt * d);
      sp.y_train.resize(mt);
    }
    if (const std::size_t mt = args.get_uint("max-test"); mt > 0 && mt < sp.n_test) {
      sp.n_test = mt;
      sp.X_test.resize(mt * d);
      sp.y_test.resize(mt);
    }
    const std::size_t n = sp.n_train, ns = sp.n_test;
    h.lengthscales = lengthscales_for(lengthscales, d);
    const double seconds_load = since(t0);
    const gp::data_view D{sp.X_train.data(), sp.y_train.data(), n, d};
    const std::size_t nv = std::min<std::size_t>(args.get_uint("var-points"), ns);
    std::vector<double> var(nv);

    // Before any work, every step's minimum (the variances need more than the solve): a budget too
    // small fails at once with the smallest budget that runs them all, not after the solve ran.
    std::vector<mx::step_minimum> steps{{"gp::exact_solve", gp::exact_minimum_bytes(D, 1, h, o)}};
    if (ns > 0) steps.push_back({"gp::exact_predict_mean", mean_minimum_bytes(h, sp.X_test.data(), ns, D)});
    if (nv > 0)
      steps.push_back({"gp::exact_predict_variance", gp::exact_predict_variance_minimum_bytes(D, h, nv, o)});
    if (check) {
      const auto [cn, cns] = check_sizes_for(sp, check_n);
      const gp::data_view Dc{sp.X_train.data(), sp.y_train.data(), cn, d};
      steps.push_back({"the --check solve",
                       gp::exact_minimum_bytes(Dc, 1, h, check_options(cn, o.preconditioner_rank, budget, run.threads))});
      if (cns > 0) steps.push_back({"the --check means", mean_minimum_bytes(h, sp.X_test.data(), cns, Dc)});
    }
    const std::size_t minimum_bytes = mx::require_budget("exact_gp", budget, steps);

    // The solve.
    const std::clock_t cpu0 = std::clock();
    t0 = clock_type::now();
    const gp::exact_result r = gp::exact_solve(D, h, o);
    const double seconds_solve = since(t0);
    if (!r.converged)
      std::fprintf(stderr, "exact_gp: CG did not converge: relative residual %.3g after %zu iterations (tol %g)%s\n",
                   r.residual[0], r.iterations, o.tolerance, r.breakdown ? " (breakdown)" : "");

    // Predictive means (all test points) and variances (the first --var-points).
    t0 = clock_type::now();
    std::vector<double> mean(ns);
    const auto pm = gp::exact_predict_mean(D, r.alpha.data(), 1, h, {sp.X_test.data(), ns, d}, mean.data(), o);
    const double seconds_mean = since(t0);
    const double cpu_seconds = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;  // solve + means
    gp::exact_predict_stats pv;
    double seconds_var = 0;
    if (nv > 0) {
      t0 = clock_type::now();
      pv = gp::exact_predict_variance(D, h, {sp.X_test.data(), nv, d}, var.data(), o);
      seconds_var = since(t0);
    }
    double se = 0, lp = 0;
    for (std::size_t q = 0; q < ns; ++q) {
      const double yv = sp.y_test[q] * sp.y_std + sp.y_mean;
      const double mu = mean[q] * sp.y_std + sp.y_mean;
      se += (yv - mu) * (yv - mu);
      if (q < nv) {
        const double v = (var[q] + h.noise) * sp.y_std * sp.y_std;
        lp += 0.5 * std::log(two_pi * v) + 0.5 * (yv - mu) * (yv - mu) / v;
      }
    }
    const double rmse = ns ? std::sqrt(se / static_cast<double>(ns)) : std::nan("");
    const std::size_t peak_temp = std::max({r.stats.peak_temp_bytes, pm.peak_temp_bytes, pv.peak_temp_bytes});
    const std::size_t peak_rss = mx::max_rss_bytes();  // before --check allocates its dense matrix

    check_result chk;
    if (check) chk = run_check(sp, h, check_n, o.preconditioner_rank, budget, run.threads);

    // Caller-owned memory: the data set and its split, α, the means and variances.
    const std::size_t input_bytes =
        sizeof(double) * (ds.X.size() + ds.y.size() + sp.X_train.capacity() + sp.y_train.capacity() +
                          sp.X_test.capacity() + sp.y_test.capacity() + r.alpha.size() + ns + nv) +
        ds.test_mask.size();
    const auto rss = mx::make_rss_limit(run.rss_slack, input_bytes, budget);

    mx::json_line j;
    j.add("example", "exact_gp")
        .add("dataset", dataset)
        .add("split", split)
        .add("n", n)
        .add("n_test", ns)
        .add("d", d)
        .add("kernel", gp::kernel_name(h.kind))
        .add("variance", h.variance)
        .add_array("lengthscales", h.lengthscales)
        .add("noise", h.noise)
        .add("tolerance", o.tolerance)
        .add("max_iterations", o.max_iterations)
        .add("rank", o.preconditioner_rank)
        .add("rank_built", r.stats.preconditioner_rank)
        .add("preconditioner_trace_error", r.stats.preconditioner_trace_error)
        .add("iterations", r.iterations)
        .add("converged", r.converged)
        .add("residual", r.residual[0]);
    if (!r.true_residual.empty()) j.add("true_residual", r.true_residual[0]);
    j.add("rmse", rmse)
        .add("y_std", sp.y_std);
    if (nv > 0)
      j.add("nlpd", lp / static_cast<double>(nv))
          .add("nlpd_points", nv)
          .add("variance_iterations_max", pv.iterations)
          .add("variance_converged", pv.converged);
    j.add("seconds_load", seconds_load)
        .add("seconds_preconditioner", r.stats.seconds_preconditioner)
        .add("seconds_cg", r.stats.seconds_cg)
        .add("seconds_solve", seconds_solve)
        .add("seconds_per_iteration", r.iterations ? r.stats.seconds_cg / static_cast<double>(r.iterations) : 0.0)
        .add("seconds_matvec", r.stats.seconds_matvec)
        .add("cache_rows", r.stats.cache_rows)
        .add("cache_bytes", r.stats.cache_bytes)
        .add("cache_fraction", r.stats.cache_fraction)
        .add("seconds_cache", r.stats.seconds_cache)
        .add("matvecs", r.stats.matvecs)
        .add("seconds_mean", seconds_mean)
        .add("cpu_seconds", cpu_seconds)
        .add("seconds_variance", seconds_var)
        .add("seconds_total", since(t_start))
        .add("peak_temp_bytes", peak_temp)
        .add("solver_bytes", r.stats.solver_bytes)
        .add("matvec_peak_bytes", r.stats.matvec_peak_bytes)
        .add("minimum_bytes", minimum_bytes)
        .add("budget_bytes", budget)
        .add("threads", r.stats.threads)
        .add("isa", r.stats.matvec_isa)
        .add("input_bytes", input_bytes)
        .add("max_rss_bytes", peak_rss);
    rss.add_to(j, peak_rss);
    if (check)
      j.add("check_n", chk.n)
          .add("check_test_points", chk.ns)
          .add("check_alpha_rel", chk.alpha_rel)
          .add("check_mean_rel", chk.mean_rel)
          .add("check_iterations", chk.iterations)
          .add("check", chk.pass ? "pass" : "fail");
    j.print();
    return rss.pass(peak_rss) && (!check || chk.pass) ? 0 : 1;
  } catch (const std::exception& e) {
    return mx::print_json_failure(e);
  }
}
