// sgpr_bound — the SGPR collapsed evidence lower bound (Titsias 2009) and test predictions on a UCI
// regression data set, written the naive way with memsafe lazy expressions: nothing n×m is formed.
//
//   sgpr_bound --dataset kin40k --split 0 --m 1000 --kernel rbf --budget 64MiB --check
//
// With L = chol(Kuu + jitter·I), A = L⁻¹Kuf/σ, B = AAᵀ + I, LB = chol(B), c = LB⁻¹Ay/σ
// (σ² = --noise, the noise variance), as GPflow's SGPR computes it:
//   bound = −n/2·log 2π − Σ log diag(LB) − n/2·log σ² − yᵀy/(2σ²) + cᵀc/2 − tr(Kff)/(2σ²) + tr(AAᵀ)/2
// memsafe evaluates the three n-sized pieces within --budget: Kuu = dense(k(Z, Z)),
// Kuf·Kufᵀ = eval(Kuf * transpose(Kuf)) (a lazy × lazy product, m×m) and Kuf·y (a lazy matvec);
// then AAᵀ = L⁻¹(Kuf·Kufᵀ)L⁻ᵀ/σ² and the rest are m×m dense algebra (memsafe::linalg).
// Predictions (GPflow's SGPR.predict_f): mean = K*u·w with w = L⁻ᵀ·LB⁻ᵀ·c (a lazy matvec), and
// var_f = k(x*, x*) − ‖L⁻¹ku*‖² + ‖LB⁻¹L⁻¹ku*‖², with ku* evaluated for batches of at most m test
// points (an m×batch block, never test_n×m). RMSE and NLPD are in the original target units.
// See examples/README.md for every option and field.
#include <memsafe/gp.hpp>      // memsafe::gp (the --check of the whole training set)
#include <memsafe/linalg.hpp>  // memsafe::linalg: an #error unless linked to memsafe::lapack

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/cli.hpp"
#include "common/json.hpp"
#include "common/rss.hpp"
#include "common/run.hpp"
#include "common/uci.hpp"

namespace {

namespace mx = memsafe_examples;
namespace la = memsafe::linalg;

constexpr double two_pi = 6.283185307179586476925286766559;

struct hyper {
  std::string kernel;
  double lengthscale = 1, variance = 1, noise = 0.1, jitter = 1e-6;
};

struct config {
  std::string data_dir, dataset;
  std::size_t split = 0, m = 1000, check_n = 0;
  std::uint64_t seed = 0;
  bool check = false;
  mx::run_options run;  // --budget, --threads, --rss-slack, --explain
  hyper h;
};

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// Every memsafe evaluation goes through here: the largest peak of temporaries, the count, --explain.
struct evaluator {
  memsafe::options opts;
  bool explain = false;
  int initial_blas_threads = 1;
  std::size_t peak = 0, planned = 0, evaluations = 0;
  bool within_budget = true;

  template <class X>
  void into(const char* what, const X& expr, double* out) {
    if (explain) std::fprintf(stderr, "--- %s\n%s\n", what, memsafe::explain(expr, opts).c_str());
    const memsafe::eval_stats st = memsafe::eval_into(expr, out, nullptr, opts);
    peak = std::max(peak, st.peak_temp_bytes);
    planned = std::max(planned, st.planned_temp_bytes);
    within_budget = within_budget && st.peak_temp_bytes <= st.budget_bytes;
    ++evaluations;
    // memsafe keeps OpenBLAS to one thread inside its workers; with an OpenBLAS that has only the
    // process-wide setting (< 0.3.27) that stays set afterwards, so give the dense algebra below
    // its threads back (linalg/fortran.hpp, docs/design.md).
    if (la::blas_threads() != initial_blas_threads) la::set_blas_threads(initial_blas_threads);
  }
};

/// What the bound leaves for prediction.
struct sgpr_fit {
  std::size_t n = 0, m = 0;
  std::vector<double> L;   // chol(Kuu + jitter·I), m×m lower
  std::vector<double> LB;  // chol(AAᵀ + I), m×m lower
  std::vector<double> c;   // LB⁻¹ A y / σ
  double bound = 0;
  double seconds_kuu = 0, seconds_product = 0, seconds_matvec = 0, seconds_linalg = 0;
};

/// The bound from its pieces (GPflow's SGPR.elbo), shared by both implementations.
double collapsed_bound(std::size_t n, double noise, double yty, double ctc, double sum_log_diag_LB, double trace_kff,
                       double trace_aat) {
  const double nd = static_cast<double>(n);
  return -0.5 * nd * std::log(two_pi) - sum_log_diag_LB - 0.5 * nd * std::log(noise) - 0.5 * yty / noise +
         0.5 * ctc - 0.5 * trace_kff / noise + 0.5 * trace_aat;
}

double sum_log_diag(const std::vector<double>& L, std::size_t m) {
  double s = 0;
  for (std::size_t i = 0; i < m; ++i) s += std::log(L[i * m + i]);
  return s;
}

/// The memsafe path. `kern(P, Q)` builds the lazy kernel matrix of two point sets.
template <class Kern>
sgpr_fit fit_memsafe(const Kern& kern, const std::vector<double>& X, const std::vector<double>& y, std::size_t n,
                     const std::vector<double>& Z, std::size_t m, std::size_t d, const hyper& h, evaluator& ev) {
  sgpr_fit f;
  f.n = n;
  f.m = m;
  const double sigma2 = h.noise;
  auto Xv = memsafe::points(X.data(), n, d);
  auto Zv = memsafe::points(Z.data(), m, d);
  auto yv = memsafe::vec(y.data(), n);

  // Kuu + jitter·I, then L = chol(·) in place.
  auto t0 = clock_type::now();
  f.L.resize(m * m);
  // The jitter is a diagonal term: no dense identity exists, the tiles add it on the diagonal.
  ev.into("Kuu + jitter*I", memsafe::dense(kern(Zv, Zv) + h.jitter * memsafe::identity(m)), f.L.data());
  f.seconds_kuu = since(t0);

  // Kuf·Kufᵀ (m×m): the n-sized contraction runs tiled; Kuf (m×n) is never formed.
  t0 = clock_type::now();
  auto Kuf = kern(Zv, Xv);
  std::vector<double> aat(m * m);  // Kuf·Kufᵀ → AAᵀ → B → LB, in place
  ev.into("Kuf*Kuf^T", Kuf * memsafe::transpose(Kuf), aat.data());
  f.seconds_product = since(t0);

  // Kuf·y (m)
  t0 = clock_type::now();
  f.c.resize(m);
  ev.into("Kuf*y", Kuf * yv, f.c.data());
  f.seconds_matvec = since(t0);

  t0 = clock_type::now();
  auto Lv = memsafe::matrix(static_cast<const double*>(f.L.data()), m, m);
  la::cholesky(memsafe::matrix(f.L.data(), m, m));
  // AAᵀ = L⁻¹ (Kuf Kufᵀ) L⁻ᵀ / σ²: P ← L⁻¹P, then the transposed view solves (L⁻¹(L⁻¹P)ᵀ)ᵀ = L⁻¹PL⁻ᵀ.
  auto P = memsafe::matrix(aat.data(), m, m);
  la::solve_lower(Lv, P);
  la::solve_lower(Lv, P.t());
  double trace_aat = 0;
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j <= i; ++j) {  // cholesky reads the lower triangle only
      aat[i * m + j] /= sigma2;
      if (i == j) {
        trace_aat += aat[i * m + i];
        aat[i * m + i] += 1.0;  // B = AAᵀ + I
      }
    }
  la::cholesky(P);  // LB
  f.LB = std::move(aat);
  // c = LB⁻¹ A y / σ = LB⁻¹ L⁻¹ (Kuf y) / σ²
  auto cv = memsafe::vec(f.c.data(), m);
  la::solve_lower(Lv, cv);
  for (auto& v : f.c) v /= sigma2;
  la::solve_lower(memsafe::matrix(static_cast<const double*>(f.LB.data()), m, m), cv);
  const double yty = std::inner_product(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n), y.begin(), 0.0);
  const double ctc = std::inner_product(f.c.begin(), f.c.end(), f.c.begin(), 0.0);
  // tr(Kff): rule stationary_diagonal reads n·variance without evaluating a single pair.
  double trace_kff = 0;
  ev.into("trace(Kff)", memsafe::trace(kern(Xv, Xv)), &trace_kff);
  f.bound = collapsed_bound(n, sigma2, yty, ctc, sum_log_diag(f.LB, m), trace_kff, trace_aat);
  f.seconds_linalg = since(t0);
  return f;
}

/// Predictive mean and latent variance at the test points (GPflow SGPR.predict_f, full_cov=False).
template <class Kern>
void predict(const Kern& kern, const sgpr_fit& f, const std::vector<double>& Xs, std::size_t ns,
             const std::vector<double>& Z, std::size_t d, evaluator& ev, std::vector<double>& mean,
             std::vector<double>& var) {
  const std::size_t m = f.m;
  auto Zv = memsafe::points(Z.data(), m, d);
  auto Lv = memsafe::matrix(f.L.data(), m, m);
  auto LBv = memsafe::matrix(f.LB.data(), m, m);
  // w = L⁻ᵀ LB⁻ᵀ c, so mean = K*u (Kuu + Kuf Kfu/σ²)⁻¹ Kuf y / σ² = K*u w.
  std::vector<double> w = f.c;
  la::solve_lower(LBv, memsafe::vec(w.data(), m), true);
  la::solve_lower(Lv, memsafe::vec(w.data(), m), true);
  mean.assign(ns, 0);
  var.assign(ns, 0);
  if (ns == 0) return;
  ev.into("K*u*w", kern(memsafe::points(Xs.data(), ns, d), Zv) * memsafe::vec(static_cast<const double*>(w.data()), m),
          mean.data());
  // var_f = k** − ‖L⁻¹ku*‖² + ‖LB⁻¹L⁻¹ku*‖², for batches of at most m test points.
  const std::size_t batch = std::min(ns, std::max<std::size_t>(m, 1));
  std::vector<double> kb(m * batch);
  for (std::size_t s0 = 0; s0 < ns; s0 += batch) {
    const std::size_t nb = std::min(batch, ns - s0);
    ev.into("Ku*", memsafe::dense(kern(Zv, memsafe::points(Xs.data() + s0 * d, nb, d))), kb.data());
    auto K = memsafe::matrix(kb.data(), m, nb);
    la::solve_lower(Lv, K);
    std::vector<double> q1(nb, 0), q2(nb, 0);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < nb; ++j) q1[j] += kb[i * nb + j] * kb[i * nb + j];
    la::solve_lower(LBv, K);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < nb; ++j) q2[j] += kb[i * nb + j] * kb[i * nb + j];
    // k(x*, x*): diag of the lazy test kernel (the variance, by rule stationary_diagonal).
    auto Xb = memsafe::points(Xs.data() + s0 * d, nb, d);
    ev.into("diag(K**)", memsafe::diag(kern(Xb, Xb)), var.data() + s0);
    for (std::size_t j = 0; j < nb; ++j) var[s0 + j] += q2[j] - q1[j];
  }
}

// ---- every evaluation's minimum, before any work ----------------------------------------------------

/// The smallest plan (bytes) of each lazy evaluation fit_memsafe makes on the first n points of X,
/// named as it names them (`suffix` appended): the same expressions, planned (memsafe::plan_for at an
/// unlimited budget reports the smallest plan's bytes; nothing is evaluated). Keep in step with
/// fit_memsafe.
template <class Kern>
void fit_minima(const Kern& kern, const double* X, const double* y, std::size_t n, const std::vector<double>& Z,
                std::size_t m, std::size_t d, const hyper& h, const std::string& suffix,
                std::vector<mx::step_minimum>& steps) {
  const memsafe::options unbounded{memsafe::unlimited, 1};
  auto Xv = memsafe::points(X, n, d);
  auto Zv = memsafe::points(Z.data(), m, d);
  auto Kuf = kern(Zv, Xv);
  steps.push_back({"Kuu + jitter*I" + suffix,
                   memsafe::plan_for(memsafe::dense(kern(Zv, Zv) + h.jitter * memsafe::identity(m)), unbounded).min_bytes});
  steps.push_back({"Kuf*Kuf^T" + suffix, memsafe::plan_for(Kuf * memsafe::transpose(Kuf), unbounded).min_bytes});
  steps.push_back({"Kuf*y" + suffix, memsafe::plan_for(Kuf * memsafe::vec(y, n), unbounded).min_bytes});
  steps.push_back({"trace(Kff)" + suffix, memsafe::plan_for(memsafe::trace(kern(Xv, Xv)), unbounded).min_bytes});
}

/// The same for predict's evaluations at ns test points (its batches of at most m points, and the
/// last, shorter one). Keep in step with predict.
template <class Kern>
void predict_minima(const Kern& kern, const std::vector<double>& Xs, std::size_t ns, const std::vector<double>& Z,
                    std::size_t m, std::size_t d, std::vector<mx::step_minimum>& steps) {
  if (ns == 0) return;
  const memsafe::options unbounded{memsafe::unlimited, 1};
  auto Zv = memsafe::points(Z.data(), m, d);
  // Z's first m values stand for w: the planner reads no values
  steps.push_back({"K*u*w", memsafe::plan_for(kern(memsafe::points(Xs.data(), ns, d), Zv) * memsafe::vec(Z.data(), m),
                                              unbounded).min_bytes});
  const std::size_t batch = std::min(ns, std::max<std::size_t>(m, 1));
  std::size_t ku = 0, kss = 0;
  for (const std::size_t nb : {batch, ns % batch}) {
    if (nb == 0) continue;
    auto Xb = memsafe::points(Xs.data(), nb, d);
    ku = std::max(ku, memsafe::plan_for(memsafe::dense(kern(Zv, Xb)), unbounded).min_bytes);
    kss = std::max(kss, memsafe::plan_for(memsafe::diag(kern(Xb, Xb)), unbounded).min_bytes);
  }
  steps.push_back({"Ku*", ku});
  steps.push_back({"diag(K**)", kss});
}

/// The points of --check's dense part: the first `want` training points (0: all n), at most as many
/// as keep Kuf (m × points doubles) within 2 GiB; `note` says so when that cap applies.
std::size_t dense_check_points(std::size_t want, std::size_t n, std::size_t m, std::string& note) {
  constexpr std::size_t dense_limit = std::size_t{2} << 30;
  const std::size_t fit_n = std::max<std::size_t>(1, dense_limit / (m * sizeof(double)));
  std::size_t check_n = want ? std::min(want, n) : n;
  if (check_n > fit_n) {
    check_n = fit_n;
    note = "dense check on the first " + std::to_string(check_n) + " training points: Kuf for all " +
           std::to_string(n) + " would exceed 2 GiB";
  }
  return check_n;
}

// ---- the independent dense reference (--check) ---------------------------------------------------

/// k(x, y) from r = ‖x − y‖, written independently of memsafe's formulas.
struct reference_kernel {
  hyper h;
  double operator()(const double* x, const double* y, std::size_t d) const {
    double r2 = 0;
    for (std::size_t k = 0; k < d; ++k) r2 += (x[k] - y[k]) * (x[k] - y[k]);
    if (h.kernel == "rbf") return h.variance * std::exp(-0.5 * r2 / (h.lengthscale * h.lengthscale));
    const double a = std::sqrt(3.0 * r2) / h.lengthscale;  // matern32
    return h.variance * (1.0 + a) * std::exp(-a);
  }
};

/// The bound with Kuf (m×n) formed explicitly by plain loops, A = L⁻¹Kuf/σ formed explicitly and
/// AAᵀ taken by SYRK: O(n·m) memory, a different order of operations from the memsafe path. The
/// dense factorisations and solves use memsafe::linalg (tests/test_linalg.cpp checks those against
/// naive loops).
double bound_dense(const std::vector<double>& X, const std::vector<double>& y, std::size_t n,
                   const std::vector<double>& Z, std::size_t m, std::size_t d, const hyper& h) {
  const reference_kernel k{h};
  const double sigma = std::sqrt(h.noise);
  std::vector<double> Kuu(m * m), A(m * n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < m; ++j) Kuu[i * m + j] = k(&Z[i * d], &Z[j * d], d) + (i == j ? h.jitter : 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) A[i * n + j] = k(&Z[i * d], &X[j * d], d);
  la::cholesky(memsafe::matrix(Kuu.data(), m, m));
  auto L = memsafe::matrix(static_cast<const double*>(Kuu.data()), m, m);
  la::solve_lower(L, memsafe::matrix(A.data(), m, n));  // L⁻¹ Kuf
  for (auto& a : A) a /= sigma;                          // A = L⁻¹ Kuf / σ
  std::vector<double> B(m * m);
  la::syrk(1.0, memsafe::matrix(static_cast<const double*>(A.data()), m, n), false, 0.0, memsafe::matrix(B.data(), m, m));
  double trace_aat = 0;
  for (std::size_t i = 0; i < m; ++i) {
    trace_aat += B[i * m + i];
    B[i * m + i] += 1.0;
  }
  la::cholesky(memsafe::matrix(B.data(), m, m));
  std::vector<double> c(m, 0);  // A y / σ
  for (std::size_t i = 0; i < m; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < n; ++j) s += A[i * n + j] * y[j];
    c[i] = s / sigma;
  }
  la::solve_lower(memsafe::matrix(static_cast<const double*>(B.data()), m, m), memsafe::vec(c.data(), m));
  double yty = 0, ctc = 0, trace_kff = 0;
  for (std::size_t j = 0; j < n; ++j) {
    yty += y[j] * y[j];
    trace_kff += k(&X[j * d], &X[j * d], d);
  }
  for (double v : c) ctc += v * v;
  return collapsed_bound(n, h.noise, yty, ctc, sum_log_diag(B, m), trace_kff, trace_aat);
}

template <class Kern>
int run(const config& cfg, const Kern& kern) {
  const auto t_start = clock_type::now();
  auto t0 = clock_type::now();
  const mx::uci_dataset ds = mx::load_uci(cfg.data_dir, cfg.dataset);
  const mx::uci_split sp = mx::make_split(ds, cfg.split);
  const std::size_t n = sp.n_train, ns = sp.n_test, d = sp.d;
  if (cfg.m > n)
    throw std::runtime_error("--m " + std::to_string(cfg.m) + " is larger than the " + std::to_string(n) +
                             " training points");
  const std::size_t m = cfg.m;
  // Inducing points: the first m training points after a Fisher–Yates shuffle driven by
  // std::mt19937_64(--seed) (j = engine() mod (i + 1): reproducible on every standard library).
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 eng(cfg.seed);
  for (std::size_t i = n; i-- > 1;) std::swap(order[i], order[static_cast<std::size_t>(eng() % (i + 1))]);
  std::vector<double> Z(m * d);
  for (std::size_t a = 0; a < m; ++a)
    std::copy_n(&sp.X_train[order[a] * d], d, &Z[a * d]);
  const double seconds_load = since(t0);

  evaluator ev;
  ev.opts = cfg.run.eval_options();
  ev.explain = cfg.run.explain;
  ev.initial_blas_threads = la::blas_threads();

  // Before any work, every evaluation's minimum (--check's gp::sgpr needs more than the lazy
  // evaluations): a budget too small fails at once with the smallest budget that runs them all, not
  // after the first steps ran.
  std::string check_note;
  const std::size_t check_n = cfg.check ? dense_check_points(cfg.check_n, n, m, check_note) : 0;
  {
    std::vector<mx::step_minimum> steps;
    fit_minima(kern, sp.X_train.data(), sp.y_train.data(), n, Z, m, d, cfg.h, "", steps);
    predict_minima(kern, sp.X_test, ns, Z, m, d, steps);
    if (cfg.check) {
      // gp::predict's minimum, (d + 2 + m) doubles, is below gp::sgpr's (sgpr.hpp)
      steps.push_back({"gp::sgpr (--check)", memsafe::gp::sgpr_minimum_bytes(m, d, false)});
      if (check_n < n)
        fit_minima(kern, sp.X_train.data(), sp.y_train.data(), check_n, Z, m, d, cfg.h, " (--check, first points)",
                   steps);
    }
    mx::require_budget("sgpr_bound", *ev.opts.budget, steps);
  }

  const sgpr_fit fit = fit_memsafe(kern, sp.X_train, sp.y_train, n, Z, m, d, cfg.h, ev);

  t0 = clock_type::now();
  std::vector<double> mean, var;
  predict(kern, fit, sp.X_test, ns, Z, d, ev, mean, var);
  double se = 0, nlpd = 0;
  for (std::size_t j = 0; j < ns; ++j) {
    const double y = sp.y_test[j] * sp.y_std + sp.y_mean;  // original units
    const double mu = mean[j] * sp.y_std + sp.y_mean;
    const double v = (var[j] + cfg.h.noise) * sp.y_std * sp.y_std;
    se += (y - mu) * (y - mu);
    nlpd += 0.5 * std::log(two_pi * v) + 0.5 * (y - mu) * (y - mu) / v;
  }
  const double rmse = ns ? std::sqrt(se / static_cast<double>(ns)) : std::nan("");
  nlpd = ns ? nlpd / static_cast<double>(ns) : std::nan("");
  const double seconds_predict = since(t0);
  const std::size_t peak_rss = mx::max_rss_bytes();  // before the check allocates anything

  // --check, two parts. (1) The whole training set: the bound and the test predictions again by
  // memsafe::gp (direct kernel loops on chunks of Kuf + SYRK, a different code path and order of
  // operations from the lazy expressions above), within the same budget. (2) The bound by the
  // independent dense implementation on the first check_n training points (file order; 0 = all of
  // them when Kuf, m×check_n doubles, fits in 2 GiB, else the largest prefix that does).
  bool check_pass = true;
  double check_memsafe = 0, check_dense = 0, check_rel = 0, seconds_check = 0;
  double check_gp_bound = 0, check_gp_rel = 0, check_mean_rel = 0, check_var_rel = 0;
  if (cfg.check) {
    t0 = clock_type::now();
    namespace gp = memsafe::gp;
    gp::hyperparameters gh;
    gh.kind = gp::parse_kernel(cfg.h.kernel);
    gh.variance = cfg.h.variance;
    gh.lengthscales.assign(d, cfg.h.lengthscale);
    gh.noise = cfg.h.noise;
    gh.jitter = cfg.h.jitter;
    const auto g = gp::sgpr({sp.X_train.data(), sp.y_train.data(), n, d}, {Z.data(), m, d}, gh,
                            {.budget = *ev.opts.budget, .threads = cfg.run.threads});
    ev.peak = std::max(ev.peak, g.stats.peak_temp_bytes);
    ev.within_budget = ev.within_budget && g.stats.peak_temp_bytes <= g.stats.budget_bytes;
    check_gp_bound = g.bound;
    check_gp_rel = std::fabs(fit.bound - g.bound) / std::max(std::fabs(g.bound), 1e-300);
    std::vector<double> gmean(ns), gvar(ns);
    const auto pst = gp::predict(g.posterior, sp.X_test.data(), ns, gmean.data(), gvar.data(), *ev.opts.budget,
                                 cfg.run.threads);
    ev.peak = std::max(ev.peak, pst.peak_temp_bytes);
    ev.within_budget = ev.within_budget && pst.peak_temp_bytes <= pst.budget_bytes;
    // max-norm relative differences of the latent mean and variance over the test set
    double em = 0, sm = 0, evv = 0, sv = 0;
    for (std::size_t q = 0; q < ns; ++q) {
      em = std::max(em, std::fabs(mean[q] - gmean[q]));
      sm = std::max(sm, std::fabs(gmean[q]));
      evv = std::max(evv, std::fabs(var[q] - gvar[q]));
      sv = std::max(sv, std::fabs(gvar[q]));
    }
    check_mean_rel = sm > 0 ? em / sm : em;
    check_var_rel = sv > 0 ? evv / sv : evv;
    // cond(Kuu) reaches ~1e8 at m = 10^4 with this jitter; forming Kuf·Kufᵀ before whitening loses
    // that much (docs/design.md): 1e-8 on the bound and 1e-6 on the predictions leave room for it.
    if (!(check_gp_rel <= 1e-8) || !(check_mean_rel <= 1e-6) || !(check_var_rel <= 1e-6)) {
      std::fprintf(stderr, "sgpr_bound: check failed against memsafe::gp on all %zu training points: bound %.17g vs %.17g "
                           "(relative %.3g, limit 1e-8), predictive mean %.3g and variance %.3g (limit 1e-6)\n",
                   n, fit.bound, g.bound, check_gp_rel, check_mean_rel, check_var_rel);
      check_pass = false;
    }

    const std::vector<double> Xc(sp.X_train.begin(), sp.X_train.begin() + static_cast<std::ptrdiff_t>(check_n * d));
    const std::vector<double> yc(sp.y_train.begin(), sp.y_train.begin() + static_cast<std::ptrdiff_t>(check_n));
    check_memsafe = check_n == n ? fit.bound : fit_memsafe(kern, Xc, yc, check_n, Z, m, d, cfg.h, ev).bound;
    check_dense = bound_dense(Xc, yc, check_n, Z, m, d, cfg.h);
    check_rel = std::fabs(check_memsafe - check_dense) / std::max(std::fabs(check_dense), 1e-300);
    if (!(check_rel <= 1e-8)) {
      std::fprintf(stderr, "sgpr_bound: check failed: memsafe bound %.17g, dense bound %.17g, relative difference %.3g > 1e-8\n",
                   check_memsafe, check_dense, check_rel);
      check_pass = false;
    }
    if (!ev.within_budget) {
      std::fprintf(stderr, "sgpr_bound: check failed: peak temporaries %zu bytes exceed the budget\n", ev.peak);
      check_pass = false;
    }
    seconds_check = since(t0);
  }

  // Caller-owned memory (not temporaries): the data set and its split, Z, two m×m matrices, the
  // m×batch block of the variance and the predictions. BLAS buffers are not counted anywhere.
  const std::size_t batch = std::min(ns, std::max<std::size_t>(m, 1));
  const std::size_t input_bytes = sizeof(double) * (ds.X.size() + ds.y.size() + sp.X_train.size() + sp.y_train.size() +
                                                    sp.X_test.size() + sp.y_test.size() + Z.size() + 2 * m * m +
                                                    m * batch + 3 * ns + 2 * m) +
                                  ds.test_mask.size() + n * sizeof(std::size_t);
  const auto rss = mx::make_rss_limit(cfg.run.rss_slack, input_bytes, *ev.opts.budget);

  mx::json_line j;
  j.add("example", "sgpr_bound")
      .add("dataset", cfg.dataset)
      .add("split", cfg.split)
      .add("n_train", n)
      .add("n_test", ns)
      .add("d", d)
      .add("m", m)
      .add("kernel", cfg.h.kernel)
      .add("lengthscale", cfg.h.lengthscale)
      .add("variance", cfg.h.variance)
      .add("noise", cfg.h.noise)
      .add("jitter", cfg.h.jitter)
      .add("bound", fit.bound)
      .add("bound_per_point", fit.bound / static_cast<double>(n))
      .add("rmse", rmse)
      .add("nlpd", nlpd)
      .add("y_std", sp.y_std)
      .add("peak_temp_bytes", ev.peak)
      .add("planned_temp_bytes", ev.planned)
      .add("budget_bytes", *ev.opts.budget)
      .add("evaluations", ev.evaluations)
      .add("threads", memsafe::plan::resolve_threads(cfg.run.threads))
      .add("blas_threads", ev.initial_blas_threads)
      .add("blas_core", la::blas_core())
      .add("seconds_load", seconds_load)
      .add("seconds_kuu", fit.seconds_kuu)
      .add("seconds_product", fit.seconds_product)
      .add("seconds_matvec", fit.seconds_matvec)
      .add("seconds_linalg", fit.seconds_linalg)
      .add("seconds_predict", seconds_predict)
      .add("seconds_check", seconds_check)
      .add("seconds_total", since(t_start))
      .add("input_bytes", input_bytes)
      .add("max_rss_bytes", peak_rss);
  if (cfg.check) {
    j.add("check_n", check_n)
        .add("check_bound_memsafe", check_memsafe)
        .add("check_bound_dense", check_dense)
        .add("check_rel_diff", check_rel)
        .add("check_gp_bound", check_gp_bound)
        .add("check_gp_rel_diff", check_gp_rel)
        .add("check_mean_rel_diff", check_mean_rel)
        .add("check_var_rel_diff", check_var_rel);
    if (!check_note.empty()) j.add("check_note", check_note);
  }
  j.add("check", !cfg.check ? "skipped" : (check_pass ? "pass" : "fail"));
  return rss.finish(j, peak_rss, check_pass);
}

}  // namespace

int main(int argc, char** argv) {
  mx::cli args("sgpr_bound",
               "SGPR collapsed bound and test RMSE/NLPD on a UCI data set, with Kuf (m x n) never formed.");
  mx::add_uci_options(args)
      .option("m", "1000", "number of inducing points")
      .option("kernel", "rbf", "rbf|matern32")
      .option("lengthscale", "2", "kernel lengthscale (standardised inputs)")
      .option("variance", "1", "kernel variance (standardised target)")
      .option("noise", "0.1", "noise variance sigma^2 (standardised target)")
      .option("jitter", "1e-6", "added to the diagonal of Kuu")
      .option("seed", "0", "seed of the shuffle that picks the inducing points")
      .flag("check", "also compute the bound and predictions with memsafe::gp (whole training set) and the bound with an independent dense implementation")
      .option("check-n", "0", "points of the dense --check (the first training points; 0 = all that fit 2 GiB of Kuf)");
  mx::add_explain_option(mx::add_eval_options(args));  // the budget applies to every memsafe evaluation
  args.parse(argc, argv);
  if (const std::string note = la::blas_core_note(); !note.empty()) std::fprintf(stderr, "%s\n", note.c_str());

  config cfg;
  cfg.data_dir = args.get_string("data-dir");
  cfg.dataset = args.get_string("dataset");
  cfg.split = args.get_uint("split");
  cfg.m = args.get_uint("m");
  cfg.h.kernel = args.get_choice("kernel", {"rbf", "matern32"});
  cfg.h.lengthscale = args.get_double("lengthscale");
  cfg.h.variance = args.get_double("variance");
  cfg.h.noise = args.get_double("noise");
  cfg.h.jitter = args.get_double("jitter");
  cfg.run = mx::read_eval_options(args);
  cfg.seed = args.get_uint("seed");
  cfg.check = args.get_flag("check");
  cfg.check_n = args.get_uint("check-n");
  if (cfg.m == 0) args.fail("--m must be positive");
  if (!(cfg.h.lengthscale > 0)) args.fail("--lengthscale must be positive");
  if (!(cfg.h.variance > 0)) args.fail("--variance must be positive");
  if (!(cfg.h.noise > 0)) args.fail("--noise must be positive");
  if (!(cfg.h.jitter >= 0)) args.fail("--jitter must not be negative");

  try {
    const hyper h = cfg.h;
    if (h.kernel == "rbf")
      return run(cfg, [h](const auto& P, const auto& Q) { return memsafe::rbf(P, Q, h.lengthscale, h.variance); });
    return run(cfg, [h](const auto& P, const auto& Q) { return memsafe::matern32(P, Q, h.lengthscale, h.variance); });
  } catch (const std::exception& e) {
    return mx::print_json_failure(e);
  }
}
