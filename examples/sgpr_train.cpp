// sgpr_train — SGPR (Titsias) trained end to end on a UCI regression set: kernel variance, ARD
// lengthscales, noise variance and the inducing points, by L-BFGS (liblbfgs) on the collapsed bound
// and its gradient from <memsafe/gp.hpp>, with every temporary inside --budget.
//
//   sgpr_train --dataset kin40k --split 0 --m 500 --iters 100 --budget 64MiB --kernel matern32 --threads 2
//
// Data: standardised as sgpr_bound does (the training split's mean and standard deviation).
// Parameters: p = softplus(t) for σ_f² and each ℓ_k, σ² = softplus(t) + 1e-6 (GPflow's defaults);
// the inducing points are optimised as they are. L-BFGS minimises −bound/n (the same minimiser as
// −bound; the scale keeps the line search's first step sensible).
// Inducing points: k-means++ seeding (D² sampling, squared Euclidean distance on the standardised
// inputs) over a subset of min(n, --init-subset) training points picked by a Fisher–Yates shuffle;
// every random draw is std::mt19937_64(--seed) turned into numbers by integer arithmetic only
// (reproducible on every standard library).
// Output: one JSON line on stdout; progress (iteration, bound, gradient norm, seconds) on stderr.
// --bench R: no training; times R bound and R bound+gradient evaluations at the initial point
// (min and median seconds) and reports them in the JSON line.
// Long runs: --time-limit S stops training at the end of an iteration; --save-model F keeps the
// current model in F (save_model's format), which --init-model F starts from (load_model).
// Under MPI: the target sgpr_train_mpi (this file with MEMSAFE_SGPR_TRAIN_MPI, linked with memsafe::mpi)
// runs under mpirun; every rank loads the data set and evaluates the bound and its gradient on its own
// contiguous share of the training rows with memsafe::mpi::sgpr (one allreduce per pass); rank 0's
// bound and gradient are broadcast so that L-BFGS takes the same steps on every rank whatever the
// MPI; rank 0 alone prints.
//   mpirun -np 2 sgpr_train_mpi --dataset kin40k --m 500 --iters 50 --threads 1
#include <lbfgs.h>
#include <malloc.h>

#if defined(MEMSAFE_SGPR_TRAIN_MPI)
#include <memsafe/mpi_gp.hpp>
#else
#include <memsafe/gp.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
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
constexpr double noise_floor = 1e-6;

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// A uniform double in [0, 1) from 53 bits of the engine (no std::uniform_real_distribution: its
/// algorithm differs between standard libraries).
double uniform01(std::mt19937_64& e) { return static_cast<double>(e() >> 11) * 0x1.0p-53; }

/// k-means++ seeding over a seeded subset of the training inputs (see the file comment).
std::vector<double> init_inducing(const std::vector<double>& X, std::size_t n, std::size_t d, std::size_t m,
                                  std::size_t subset, std::uint64_t seed) {
  std::mt19937_64 eng(seed);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = n; i-- > 1;) std::swap(order[i], order[static_cast<std::size_t>(eng() % (i + 1))]);
  const std::size_t s = std::max(m, std::min(n, subset));
  std::vector<double> dist(s, std::numeric_limits<double>::infinity());
  std::vector<double> Z(m * d);
  std::size_t pick = static_cast<std::size_t>(eng() % s);
  for (std::size_t a = 0; a < m; ++a) {
    const double* c = &X[order[pick] * d];
    std::copy_n(c, d, &Z[a * d]);
    double total = 0;
    for (std::size_t q = 0; q < s; ++q) {
      const double* x = &X[order[q] * d];
      double r2 = 0;
      for (std::size_t k = 0; k < d; ++k) r2 += (x[k] - c[k]) * (x[k] - c[k]);
      dist[q] = std::min(dist[q], r2);
      total += dist[q];
    }
    if (a + 1 == m) break;
    if (!(total > 0)) {  // every subset point is already a centre: take the next unused ones in order
      pick = (pick + 1) % s;
      continue;
    }
    double u = uniform01(eng) * total;
    pick = s - 1;
    for (std::size_t q = 0; q < s; ++q) {
      u -= dist[q];
      if (u < 0 && dist[q] > 0) {
        pick = q;
        break;
      }
    }
  }
  return Z;
}

/// The bound (and with o.gradient its gradient) on the whole training set D: gp::sgpr, or under MPI
/// mpi::sgpr with this rank's rows of D, rank 0's bound and gradient broadcast.
gp::sgpr_result sgpr_all(const gp::data_view& D, const gp::inducing_view& I, const gp::hyperparameters& h,
                    const gp::sgpr_options& o) {
#if defined(MEMSAFE_SGPR_TRAIN_MPI)
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::size_t b = D.n * std::size_t(rank) / std::size_t(ranks), e = D.n * std::size_t(rank + 1) / std::size_t(ranks);
  gp::sgpr_result r = memsafe::mpi::sgpr(MPI_COMM_WORLD, {D.X + b * D.d, D.y + b, e - b, D.d}, I, h, o);
  std::vector<double> v{r.bound, r.grad.variance, r.grad.noise};
  v.insert(v.end(), r.grad.lengthscales.begin(), r.grad.lengthscales.end());
  v.insert(v.end(), r.grad.Z.begin(), r.grad.Z.end());
  MPI_Bcast(v.data(), int(v.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  r.bound = v[0];
  if (r.has_gradient) {
    r.grad.variance = v[1];
    r.grad.noise = v[2];
    std::copy(v.begin() + 3, v.begin() + 3 + std::ptrdiff_t(D.d), r.grad.lengthscales.begin());
    std::copy(v.begin() + 3 + std::ptrdiff_t(D.d), v.end(), r.grad.Z.begin());
  }
  return r;
#else
  return gp::sgpr(D, I, h, o);
#endif
}

/// The smallest budget of sgpr_all: gp::sgpr's, or under MPI mpi::sgpr's (room for its buffers too).
std::size_t sgpr_minimum_bytes(std::size_t m, std::size_t d, bool gradient) {
#if defined(MEMSAFE_SGPR_TRAIN_MPI)
  return memsafe::mpi::sgpr_minimum_bytes(m, d, gradient);
#else
  return gp::sgpr_minimum_bytes(m, d, gradient);
#endif
}

/// Rank 0's decision, the same on every rank (a time limit is read on each rank's clock; the ranks
/// must leave L-BFGS at the same iteration). Without MPI: the decision itself.
bool rank0_decides(bool decision) {
#if defined(MEMSAFE_SGPR_TRAIN_MPI)
  int v = decision ? 1 : 0;
  MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return v != 0;
#else
  return decision;
#endif
}

/// A trained model on file (--save-model, --init-model): plain text, every number to 17 significant
/// digits, in the standardised units of its data set and split (which are recorded and checked):
///   memsafe-sgpr-model 1
///   dataset <name> split <s> kernel <name> m <m> d <d>
///   variance <v> noise <σ²> jitter <j>
///   lengthscales <ℓ_1> … <ℓ_d>
///   Z
///   <m rows of d numbers>
struct saved_model {
  std::string dataset;
  std::size_t split = 0, m = 0, d = 0;
  gp::hyperparameters h;
  std::vector<double> Z;
};

/// Write to path + ".tmp", then rename: a run stopped while writing leaves the previous file whole.
void save_model(const std::string& path, const saved_model& s) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw std::runtime_error("--save-model: cannot write " + tmp);
  std::fprintf(f, "memsafe-sgpr-model 1\ndataset %s split %zu kernel %s m %zu d %zu\n", s.dataset.c_str(), s.split,
               gp::kernel_name(s.h.kind), s.m, s.d);
  std::fprintf(f, "variance %.17g noise %.17g jitter %.17g\nlengthscales", s.h.variance, s.h.noise, s.h.jitter);
  for (double l : s.h.lengthscales) std::fprintf(f, " %.17g", l);
  std::fprintf(f, "\nZ\n");
  for (std::size_t a = 0; a < s.m; ++a)
    for (std::size_t k = 0; k < s.d; ++k) std::fprintf(f, "%.17g%c", s.Z[a * s.d + k], k + 1 == s.d ? '\n' : ' ');
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("--save-model: writing " + path + " failed");
}

/// The model in `path`, for the run `want` describes (its dataset, split, kernel, m and d): a file
/// for another run is refused after its header, before its sizes are trusted for any allocation.
saved_model load_model(const std::string& path, const saved_model& want) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--init-model: cannot read " + path);
  const auto bad = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error("--init-model " + path + ": " + what + " (expected the format --save-model writes)");
  };
  std::string w, kernel;
  int version = 0;
  saved_model s;
  if (!(in >> w >> version) || w != "memsafe-sgpr-model" || version != 1) throw bad("not a memsafe-sgpr-model 1 file");
  const auto expect = [&](const char* key) {
    if (!(in >> w) || w != key) throw bad(std::string("missing '") + key + "'");
  };
  // `key`, then its value: a value that does not parse is named here (the failed stream would
  // otherwise make the next key look missing)
  const auto field = [&](const char* key, auto& value) {
    expect(key);
    if (!(in >> value))
      throw bad(std::string("the value of '") + key + "' is missing" +
                (std::is_arithmetic_v<std::remove_reference_t<decltype(value)>> ? " or not a number" : ""));
  };
  field("dataset", s.dataset);
  field("split", s.split);
  field("kernel", kernel);
  field("m", s.m);
  field("d", s.d);
  if (s.m == 0 || s.d == 0) throw bad("m and d must be positive");
  try {
    s.h.kind = gp::parse_kernel(kernel);
  } catch (const std::exception& e) {
    throw bad(e.what());
  }
  const auto what = [](const saved_model& x) {
    return x.dataset + " split " + std::to_string(x.split) + ", " + gp::kernel_name(x.h.kind) + ", m = " +
           std::to_string(x.m) + ", d = " + std::to_string(x.d);
  };
  if (s.dataset != want.dataset || s.split != want.split || s.h.kind != want.h.kind || s.m != want.m || s.d != want.d)
    throw std::runtime_error("--init-model " + path + " holds a model for " + what(s) + "; this run is " + what(want));
  field("variance", s.h.variance);
  field("noise", s.h.noise);
  field("jitter", s.h.jitter);
  expect("lengthscales");
  s.h.lengthscales.resize(s.d);
  for (double& l : s.h.lengthscales) in >> l;
  if (!in) throw bad("'lengthscales' needs d = " + std::to_string(s.d) + " numbers: fewer, or one that is not a number");
  expect("Z");
  s.Z.resize(s.m * s.d);
  for (double& z : s.Z) in >> z;
  if (!in)
    throw bad("'Z' needs m × d = " + std::to_string(s.m) + " × " + std::to_string(s.d) +
              " numbers: truncated, or one that is not a number");
  if (in >> w) throw bad("unexpected '" + w + "' after Z's " + std::to_string(s.m) + " rows");
  bool finite = std::isfinite(s.h.jitter) && s.h.jitter >= 0;
  for (double v : s.Z) finite = finite && std::isfinite(v);
  // noise == the floor: a model trained until softplus(t) fell below half an ulp of the floor.
  const bool positive = s.h.variance > 0 && s.h.noise >= noise_floor &&
                        std::all_of(s.h.lengthscales.begin(), s.h.lengthscales.end(), [](double l) { return l > 0; });
  if (!finite || !positive || !std::isfinite(s.h.variance) || !std::isfinite(s.h.noise))
    throw bad("variance, lengthscales and noise must be positive and finite (noise >= 1e-6), Z and jitter finite");
  return s;
}

/// Whether this process prints and writes files (rank 0 under MPI; always without).
bool writer_rank() {
#if defined(MEMSAFE_SGPR_TRAIN_MPI)
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank == 0;
#else
  return true;
#endif
}

/// The number of MPI ranks (1 without MPI).
std::size_t world_ranks() {
#if defined(MEMSAFE_SGPR_TRAIN_MPI)
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return std::size_t(p);
#else
  return 1;
#endif
}

struct problem {
  const std::vector<double>* X = nullptr;
  const std::vector<double>* y = nullptr;
  std::size_t n = 0, d = 0, m = 0, nvar = 0;
  gp::kernel kind = gp::kernel::rbf;
  double jitter = 1e-6;
  bool train_z = true;
  gp::sgpr_options opts;
  // bookkeeping
  std::size_t evaluations = 0, failures = 0, peak_temp = 0, iterations = 0;
  std::size_t whitened_evaluations = 0;  // evaluations whose sums ran in the whitened order
  std::size_t iteration_offset = 0;  // iterations of the L-BFGS runs before the current restart
  double best_bound = -std::numeric_limits<double>::infinity();
  double seconds_eval = 0;
  double time_limit = 0;  // seconds of training after which L-BFGS stops at the next iteration's end (0: none)
  clock_type::time_point t_start, t_train;
  std::string save_path;  // --save-model: written at the start, after every iteration and at the end
  std::string dataset;
  std::size_t split = 0;
  std::string save_error;  // set when a save from within L-BFGS failed
  std::exception_ptr error;  // an evaluation's error other than a rejected step: rethrown after lbfgs() returns

  /// t (the unconstrained vector) → hyperparameters and Z.
  gp::hyperparameters hyper(const double* t) const {
    gp::hyperparameters h;
    h.kind = kind;
    h.jitter = jitter;
    h.variance = gp::softplus(t[0]);
    h.lengthscales.resize(d);
    for (std::size_t k = 0; k < d; ++k) h.lengthscales[k] = gp::softplus(t[1 + k]);
    h.noise = gp::softplus(t[1 + d]) + noise_floor;
    return h;
  }
  std::size_t z_offset() const { return 2 + d; }

  /// The model at t, to --save-model's file: rank 0 writes, and every rank throws if it failed (so
  /// that under MPI all ranks leave together). Never throws from within L-BFGS (see progress).
  void save(const double* t) const {
    if (save_path.empty()) return;
    std::string err;
    if (writer_rank()) try {
        save_model(save_path, {dataset, split, m, d, hyper(t), std::vector<double>(t + z_offset(), t + z_offset() + m * d)});
      } catch (const std::exception& e) {
        err = e.what();
      }
    if (rank0_decides(!err.empty())) throw std::runtime_error(err.empty() ? "--save-model failed on rank 0" : err);
  }
};

lbfgsfloatval_t evaluate(void* inst, const lbfgsfloatval_t* t, lbfgsfloatval_t* g, const int nv, const lbfgsfloatval_t) {
  auto& P = *static_cast<problem*>(inst);
  std::fill(g, g + nv, 0.0);
  // After an error every evaluation answers at once: the line search fails (or, at the start, the
  // zero gradient ends lbfgs()) without more work, and the error is rethrown once lbfgs() returns.
  if (P.error) return 1e30;
  const auto t0 = clock_type::now();
  ++P.evaluations;
  const auto h = P.hyper(t);
  const double* Z = t + P.z_offset();
  const double scale = 1.0 / static_cast<double>(P.n);
  try {
    const auto r = sgpr_all({P.X->data(), P.y->data(), P.n, P.d}, {Z, P.m, P.d}, h, P.opts);
    P.peak_temp = std::max(P.peak_temp, r.stats.peak_temp_bytes);
    P.whitened_evaluations += r.stats.whitened ? 1 : 0;
    P.best_bound = std::max(P.best_bound, r.bound);
    // f = −bound/n; chain rule through the softplus transforms.
    g[0] = -scale * r.grad.variance * gp::softplus_derivative(t[0]);
    for (std::size_t k = 0; k < P.d; ++k) g[1 + k] = -scale * r.grad.lengthscales[k] * gp::softplus_derivative(t[1 + k]);
    g[1 + P.d] = -scale * r.grad.noise * gp::softplus_derivative(t[1 + P.d]);
    if (P.train_z)
      for (std::size_t q = 0; q < P.m * P.d; ++q) g[P.z_offset() + q] = -scale * r.grad.Z[q];
    P.seconds_eval += since(t0);
    return -scale * r.bound;
  } catch (const memsafe::argument_error& e) {
    // A line-search step into a region where Kuu + jitter·I is not positive definite: report a
    // huge objective so that the line search steps back.
    ++P.failures;
    std::fprintf(stderr, "sgpr_train: evaluation failed (%s); rejecting the step\n", e.what());
    P.seconds_eval += since(t0);
    return 1e30;
  } catch (...) {
    // liblbfgs is C: nothing may throw through it (its buffers would leak, and a build without unwind
    // tables would terminate). A budget error, an allocation refused, an MPI failure: kept for later.
    P.error = std::current_exception();
    P.seconds_eval += since(t0);
    return 1e30;
  }
}

/// progress()'s return values that stop training (liblbfgs returns them unchanged; its own codes are
/// 0, 1, 2 and negative): the time limit passed, or --save-model's file could not be written.
constexpr int time_limit_reached = 1001, save_failed = 1002;

int progress(void* inst, const lbfgsfloatval_t* t, const lbfgsfloatval_t*, const lbfgsfloatval_t fx,
             const lbfgsfloatval_t, const lbfgsfloatval_t gnorm, const lbfgsfloatval_t step, int, int k, int ls) {
  auto& P = *static_cast<problem*>(inst);
  P.iterations = P.iteration_offset + static_cast<std::size_t>(k);
  std::fprintf(stderr, "iter %4zu  bound %.10g  |grad| %.4g  step %.3g  evals %d  %.1f s\n", P.iterations,
               -fx * static_cast<double>(P.n), gnorm * static_cast<double>(P.n), step, ls, since(P.t_start));
  // liblbfgs is C: nothing may throw through it. A failed save stops training; run_main reports it.
  try {
    P.save(t);
  } catch (const std::exception& e) {
    P.save_error = e.what();
    return save_failed;
  }
  const bool timed_out = rank0_decides(P.time_limit > 0 && since(P.t_train) >= P.time_limit);
  // Non-zero stops lbfgs(), which returns this value with t at the iterate just accepted.
  return timed_out ? time_limit_reached : 0;
}

/// A line search that failed: liblbfgs has put t back at the last accepted iterate.
bool line_search_failed(int rc) {
  return rc == LBFGSERR_ROUNDING_ERROR || rc == LBFGSERR_MAXIMUMLINESEARCH || rc == LBFGSERR_MINIMUMSTEP ||
         rc == LBFGSERR_MAXIMUMSTEP || rc == LBFGSERR_WIDTHTOOSMALL || rc == LBFGSERR_INCREASEGRADIENT;
}

std::string lbfgs_status(int rc) {
  switch (rc) {
    case time_limit_reached: return "time_limit";
    case LBFGS_SUCCESS: return "converged";
    case LBFGS_STOP: return "stopped";
    case LBFGS_ALREADY_MINIMIZED: return "already_minimized";
    case LBFGSERR_MAXIMUMITERATION: return "max_iterations";
    case LBFGSERR_ROUNDING_ERROR: return "rounding_error";
    case LBFGSERR_MAXIMUMLINESEARCH: return "max_linesearch";
    case LBFGSERR_MINIMUMSTEP: return "minimum_step";
    case LBFGSERR_MAXIMUMSTEP: return "maximum_step";
    case LBFGSERR_INCREASEGRADIENT: return "increase_gradient";
    case LBFGSERR_WIDTHTOOSMALL: return "width_too_small";
    case LBFGSERR_CANCELED: return "canceled";
    default: return "error_" + std::to_string(rc);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size();
  return k == 0 ? std::nan("") : (k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]));
}

}  // namespace

int run_main(int argc, char** argv) {
  // glibc raises its mmap threshold (up to 32 MiB) each time a large block is freed, after which
  // blocks of the chunk buffers' size come from the heap and stay resident after free: measured on
  // kin40k m = 500 at 64 MiB, peak RSS 195 MB instead of 94 MB. A fixed threshold keeps every
  // temporary above 1 MiB in its own mapping, returned to the system when memsafe frees it.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mx::cli args("sgpr_train", "Train SGPR (hyperparameters and inducing points) by L-BFGS under a memory budget.");
  mx::add_uci_options(args)
      .option("m", "500", "number of inducing points")
      .option("iters", "100", "L-BFGS iterations (at most)")
      .option("kernel", "matern32", "rbf|matern12|matern32|matern52 (ARD)")
      .option("lengthscale", "1", "initial lengthscale of every input (standardised inputs)")
      .option("variance", "1", "initial kernel variance (standardised target)")
      .option("noise", "0.1", "initial noise variance (standardised target)")
      .option("jitter", "1e-6", "fixed jitter on Kuu's diagonal")
      .option("seed", "0", "seed of the inducing-point initialisation")
      .option("init-subset", "20000", "k-means++ seeding runs over this many training points (at most)")
      .option("lbfgs-memory", "10", "L-BFGS history length")
      .option("lbfgs-max-linesearch", "40", "function evaluations one line search may take before it fails")
      .option("lbfgs-restarts", "5", "after a failed line search, restart L-BFGS (empty history) from the last accepted iterate at most this many times")
      .option("save-model", "", "write the model (hyperparameters and Z) to this file at the start, after every iteration and at the end")
      .option("init-model", "", "start from a model --save-model wrote (its hyperparameters, jitter and Z replace the initial values)")
      .option("time-limit", "0", "stop training at the end of the first iteration that ends after this many seconds (0: no limit)")
      .option("bench", "0", "no training: time this many bound and bound+gradient evaluations")
      .flag("fix-z", "keep the inducing points at their initial values")
      .flag("bench-bound-only", "with --bench: time the bound only (no gradient)")
      .flag("dump-gradient", "no training: add the initial Z and the bound's gradient there to the JSON line")
      .flag("whitened", "always accumulate AA^T from L^-1 Kuf chunks (accurate; ~2x the n-sized flops)")
      .flag("gram-first", "always accumulate Kuf Kuf^T first and whiten after (fewer flops; inaccurate when "
                          "eps*cond(Kuu)*variance/noise is large). Default: chosen per evaluation");
  mx::add_eval_options(args);  // no --explain: gp::sgpr and gp::predict offer no explain or plan to print
  args.parse(argc, argv);

  const std::string data_dir = args.get_string("data-dir"), dataset = args.get_string("dataset");
  const std::size_t split = args.get_uint("split"), m = args.get_uint("m"), iters = args.get_uint("iters");
  const std::size_t bench = args.get_uint("bench");
  const mx::run_options run = mx::read_eval_options(args);
  gp::kernel kind{};
  std::size_t budget = 0;
  try {
    kind = gp::parse_kernel(args.get_string("kernel"));
    budget = memsafe::parse_bytes(run.budget_text);
  } catch (const std::exception& e) {
    args.fail(e.what());
  }
  const double ell0 = args.get_double("lengthscale"), var0 = args.get_double("variance"),
               noise0 = args.get_double("noise");
  const double time_limit = args.get_double("time-limit");
  if (m == 0) args.fail("--m must be positive");
  if (!(time_limit >= 0)) args.fail("--time-limit must be a number of seconds >= 0");
  if (args.get_uint("lbfgs-max-linesearch") == 0) args.fail("--lbfgs-max-linesearch must be at least 1");
  if (iters > std::size_t(INT_MAX)) args.fail("--iters must be at most 2147483647");  // liblbfgs counts in int
  const std::size_t lbfgs_memory = args.get_uint("lbfgs-memory");
  if (lbfgs_memory == 0 || lbfgs_memory > 1000) args.fail("--lbfgs-memory must be between 1 and 1000");
  if (!(ell0 > 0) || !(var0 > 0) || !(noise0 > noise_floor)) args.fail("initial values must be positive (noise > 1e-6)");
  const double jitter = args.get_double("jitter");  // finite (get_double refuses inf and nan)
  if (!(jitter >= 0)) args.fail("--jitter must not be negative");
  if (args.get_flag("whitened") && args.get_flag("gram-first")) args.fail("--whitened and --gram-first exclude each other");
  if (const std::string note = memsafe::linalg::blas_core_note(); !note.empty() && writer_rank())
    std::fprintf(stderr, "%s\n", note.c_str());

  try {
    const auto t_start = clock_type::now();
    auto t0 = clock_type::now();
    const mx::uci_dataset ds = mx::load_uci(data_dir, dataset);
    const mx::uci_split sp = mx::make_split(ds, split);
    const std::size_t n = sp.n_train, ns = sp.n_test, d = sp.d;
    if (m > n) throw std::runtime_error("--m " + std::to_string(m) + " is larger than the " + std::to_string(n) + " training points");
    // Before any work (the inducing points' seeding, the first save): the largest minimum of the
    // calls this run makes. The bound with the gradient (training, --dump-gradient, --bench) needs
    // more than without (the final bound); gp::predict's minimum, (d + 2 + m) doubles, is below both.
    {
      const bool gradient = args.get_flag("dump-gradient") || (bench > 0 && !args.get_flag("bench-bound-only")) ||
                            (bench == 0 && iters > 0);
      mx::require_budget("sgpr_train", budget,
                         {{gradient ? "the bound with its gradient" : "the bound", sgpr_minimum_bytes(m, d, gradient)}});
    }
    const double seconds_load = since(t0);
    t0 = clock_type::now();
    const std::string init_path = args.get_string("init-model");
    std::optional<saved_model> init;
    if (!init_path.empty()) {
      saved_model want;
      want.dataset = dataset, want.split = split, want.h.kind = kind, want.m = m, want.d = d;
      init = load_model(init_path, want);
    }
    const std::vector<double> Z0 =
        init ? std::move(init->Z) : init_inducing(sp.X_train, n, d, m, args.get_uint("init-subset"), args.get_uint("seed"));
    const double seconds_init = since(t0);

    problem P;
    P.X = &sp.X_train;
    P.y = &sp.y_train;
    P.n = n;
    P.d = d;
    P.m = m;
    P.kind = kind;
    P.jitter = init ? init->h.jitter : jitter;
    P.train_z = !args.get_flag("fix-z");
    P.time_limit = time_limit;
    P.opts.budget = budget;
    P.opts.gradient = true;
    if (args.get_flag("whitened")) P.opts.whitened = true;
    if (args.get_flag("gram-first")) P.opts.whitened = false;
    P.opts.threads = run.threads;
    P.t_start = t_start;
    P.save_path = args.get_string("save-model");
    P.dataset = dataset;
    P.split = split;
    // Variables: [t_var, t_ell(d), t_noise, Z(m·d)], padded to a multiple of 16 (liblbfgs's rule).
    const std::size_t nvar_used = 2 + d + m * d;
    const std::size_t nvar = (nvar_used + 15) / 16 * 16;
    P.nvar = nvar;
    lbfgsfloatval_t* t = lbfgs_malloc(static_cast<int>(nvar));
    if (!t) throw std::runtime_error("lbfgs_malloc failed");
    const std::unique_ptr<lbfgsfloatval_t, decltype(&lbfgs_free)> t_owner(t, &lbfgs_free);
    std::fill(t, t + nvar, 0.0);
    t[0] = gp::softplus_inverse(init ? init->h.variance : var0);
    for (std::size_t k = 0; k < d; ++k) t[1 + k] = gp::softplus_inverse(init ? init->h.lengthscales[k] : ell0);
    // A loaded noise may sit at the floor itself: start from the smallest positive excess (t ≈ −708),
    // whose noise rounds to the floor again.
    t[1 + d] = gp::softplus_inverse(std::max((init ? init->h.noise : noise0) - noise_floor, std::numeric_limits<double>::min()));
    std::copy(Z0.begin(), Z0.end(), t + P.z_offset());
    const bool dump = args.get_flag("dump-gradient");
    if (!dump && bench == 0) P.save(t);  // the initial model: a path that cannot be written fails here

    mx::json_line j;
    std::string status = "not_run";
    double fx = 0, seconds_train = 0;
    std::vector<std::size_t> restarts;  // the iteration after which each restart began
    bool stopped_by_line_search = false;  // L-BFGS ended early on a failed line search (after any restarts)
    std::string restart_status;       // the failed line searches' statuses, comma-separated
    const std::size_t max_restarts = args.get_uint("lbfgs-restarts");
    std::vector<double> bench_bound, bench_grad, cpu_bound, cpu_grad;
    if (dump) {  // for bench/gp/gpflow_check.py: the gradient at the initial point, in natural parameters
      const auto r = sgpr_all({sp.X_train.data(), sp.y_train.data(), n, d}, {t + P.z_offset(), m, d}, P.hyper(t), P.opts);
      P.peak_temp = std::max(P.peak_temp, r.stats.peak_temp_bytes);
      j.add("init_bound", r.bound)
          .add("grad_variance", r.grad.variance)
          .add_array("grad_lengthscales", r.grad.lengthscales)
          .add("grad_noise", r.grad.noise)
          .add_array("Z_init", Z0)
          .add_array("grad_Z", r.grad.Z)
          .add("init_whitened", r.stats.whitened)
          .add("init_kuu_condition", r.stats.kuu_condition);
    } else if (bench > 0) {
      const bool bound_only = args.get_flag("bench-bound-only");
      const auto h = P.hyper(t);
      for (std::size_t r = 0; r < bench; ++r) {
        auto o = P.opts;
        o.gradient = false;
        auto tb = clock_type::now();
        auto cb = std::clock();
        // rb's m×m factors are released before the gradient call (the RSS then holds one call's).
        auto rb = sgpr_all({sp.X_train.data(), sp.y_train.data(), n, d}, {t + P.z_offset(), m, d}, h, o);
        rb.posterior = gp::sgpr_posterior{};
        bench_bound.push_back(since(tb));
        cpu_bound.push_back(static_cast<double>(std::clock() - cb) / CLOCKS_PER_SEC);
        P.peak_temp = std::max(P.peak_temp, rb.stats.peak_temp_bytes);
        if (bound_only) {
          P.best_bound = rb.bound;
          std::fprintf(stderr, "bench %zu: bound %.10g  %.2f s (chunk %zu)\n", r, rb.bound, bench_bound.back(),
                       rb.stats.chunk_columns);
          continue;
        }
        tb = clock_type::now();
        cb = std::clock();
        const auto rg = sgpr_all({sp.X_train.data(), sp.y_train.data(), n, d}, {t + P.z_offset(), m, d}, h, P.opts);
        bench_grad.push_back(since(tb));
        cpu_grad.push_back(static_cast<double>(std::clock() - cb) / CLOCKS_PER_SEC);
        P.peak_temp = std::max(P.peak_temp, rg.stats.peak_temp_bytes);
        P.best_bound = rg.bound;
        std::fprintf(stderr, "bench %zu: bound %.10g  %.2f s (forward chunk %zu)  bound+gradient %.2f s (forward %.2f, backward %.2f, chunk %zu)\n",
                     r, rb.bound, bench_bound.back(), rb.stats.chunk_columns, bench_grad.back(),
                     rg.stats.seconds_forward, rg.stats.seconds_backward, rg.stats.chunk_columns_backward);
      }
    } else if (iters > 0) {
      lbfgs_parameter_t param;
      lbfgs_parameter_init(&param);
      param.m = static_cast<int>(lbfgs_memory);
      param.epsilon = 1e-8;
      param.max_linesearch = static_cast<int>(std::min<std::size_t>(args.get_uint("lbfgs-max-linesearch"), INT_MAX));
      t0 = clock_type::now();
      P.t_train = t0;
      // A failed line search (liblbfgs's rounding_error and its kin: More–Thuente's interval of
      // uncertainty breaks down where the bound's rounding or a sharp ridge contradicts its
      // gradient; seen once, bike split 1 at m = 5000, iteration 33) ends lbfgs() with t at the last
      // accepted iterate. Training restarts there with an empty history (a steepest-descent first
      // step) for the iterations left, at most --lbfgs-restarts times, and stops when a restart
      // accepts no iteration. Every rank sees the same bound, so all take the same decisions.
      int rc = 0;
      for (;;) {
        P.iteration_offset = P.iterations;
        param.max_iterations = static_cast<int>(iters - P.iterations);
        rc = lbfgs(static_cast<int>(nvar), t, &fx, evaluate, progress, &P, &param);
        if (P.error) std::rethrow_exception(P.error);
        if (!line_search_failed(rc) || P.iterations == P.iteration_offset || P.iterations >= iters ||
            restarts.size() >= max_restarts)
          break;
        restarts.push_back(P.iterations);
        const std::string why = lbfgs_status(rc);
        restart_status += (restart_status.empty() ? "" : ",") + why;
        if (writer_rank())
          std::fprintf(stderr, "sgpr_train: line search failed after iteration %zu (%s); restarting L-BFGS there with an empty history\n",
                       P.iterations, why.c_str());
      }
      seconds_train = since(t0);
      status = lbfgs_status(rc);
      stopped_by_line_search = line_search_failed(rc);
      if (rc == save_failed) throw std::runtime_error(P.save_error);
    }
    if (!dump && bench == 0) P.save(t);  // the model L-BFGS returned (or, with --iters 0, the initial one)

    // Final model: the bound at the parameters L-BFGS returned, and test predictions (skipped
    // after --bench --bench-bound-only: at m = 10^4 they would double the run).
    t0 = clock_type::now();
    const auto h = P.hyper(t);
    const bool skip_final = bench > 0 && args.get_flag("bench-bound-only");
    double final_bound = P.best_bound, rmse = std::nan(""), nlpd = std::nan("");
    bool final_whitened = false;
    double final_condition = std::nan("");
    if (!skip_final) {
      auto o = P.opts;
      o.gradient = false;
      const auto fit = sgpr_all({sp.X_train.data(), sp.y_train.data(), n, d}, {t + P.z_offset(), m, d}, h, o);
      final_whitened = fit.stats.whitened;
      final_condition = fit.stats.kuu_condition;
      final_bound = fit.bound;
      P.peak_temp = std::max(P.peak_temp, fit.stats.peak_temp_bytes);
      std::vector<double> mean(ns), var(ns);
      const auto pst = gp::predict(fit.posterior, sp.X_test.data(), ns, mean.data(), var.data(), budget, run.threads);
      P.peak_temp = std::max(P.peak_temp, pst.peak_temp_bytes);
      double se = 0, lp = 0;
      for (std::size_t q = 0; q < ns; ++q) {
        const double yv = sp.y_test[q] * sp.y_std + sp.y_mean;
        const double mu = mean[q] * sp.y_std + sp.y_mean;
        const double v = (var[q] + h.noise) * sp.y_std * sp.y_std;
        se += (yv - mu) * (yv - mu);
        lp += 0.5 * std::log(two_pi * v) + 0.5 * (yv - mu) * (yv - mu) / v;
      }
      rmse = ns ? std::sqrt(se / static_cast<double>(ns)) : std::nan("");
      nlpd = ns ? lp / static_cast<double>(ns) : std::nan("");
    }
    const double seconds_final = since(t0);
    const std::size_t peak_rss = mx::max_rss_bytes();

    // Caller-owned memory: the data set and its split, the L-BFGS state (2·memory + 6 vectors of
    // nvar), the m×m matrices of one bound+gradient call (L, B→LB, B copy→Ḡuu, B⁻¹→Ḡ₂) and the
    // predictions. BLAS buffers are not counted anywhere.
    const std::size_t input_bytes =
        sizeof(double) * (ds.X.size() + ds.y.size() + sp.X_train.size() + sp.y_train.size() + sp.X_test.size() +
                          sp.y_test.size() + (2 * lbfgs_memory + 8) * nvar +
                          4 * m * m + 2 * ns) +
        ds.test_mask.size() + n * sizeof(std::size_t);
    const auto rss = mx::make_rss_limit(run.rss_slack, input_bytes, budget);

    j.add("example", "sgpr_train")
        .add("ranks", world_ranks())
        .add("dataset", dataset)
        .add("split", split)
        .add("n_train", n)
        .add("n_test", ns)
        .add("d", d)
        .add("m", m)
        .add("kernel", gp::kernel_name(kind))
        .add("order", P.opts.whitened ? (*P.opts.whitened ? "whitened" : "gram-first") : "auto")
        .add("whitened", final_whitened)
        .add("kuu_condition", final_condition)
        .add("whitened_evaluations", P.whitened_evaluations)
        .add("train_z", P.train_z)
        .add("variance", h.variance)
        .add_array("lengthscales", h.lengthscales)
        .add("noise", h.noise)
        .add("jitter", h.jitter)
        .add("bound", final_bound)
        .add("bound_per_point", final_bound / static_cast<double>(n))
        .add("rmse", rmse)
        .add("nlpd", nlpd)
        .add("y_std", sp.y_std)
        .add("lbfgs_status", status)
        .add("lbfgs_restarts", restarts.size())
        .add_array("lbfgs_restart_after", restarts)
        .add("lbfgs_restart_status", restart_status)
        .add("stopped_by_line_search", stopped_by_line_search)
        .add("time_limit_s", P.time_limit)
        .add("init_model", init_path)
        .add("save_model", P.save_path)
        .add("iterations", P.iterations)
        .add("evaluations", P.evaluations)
        .add("failed_evaluations", P.failures)
        .add("peak_temp_bytes", P.peak_temp)
        .add("budget_bytes", budget)
        .add("threads", memsafe::plan::resolve_threads(run.threads))
        .add("blas_threads", memsafe::linalg::blas_threads())
        .add("blas_core", memsafe::linalg::blas_core())
        .add("seconds_load", seconds_load)
        .add("seconds_init_z", seconds_init)
        .add("seconds_train", seconds_train)
        .add("seconds_per_evaluation", P.evaluations ? P.seconds_eval / static_cast<double>(P.evaluations) : 0.0)
        .add("seconds_final", seconds_final)
        .add("seconds_total", since(t_start));
    if (bench > 0) {
      j.add("bench_repeats", bench)
          .add("seconds_bound_min", *std::min_element(bench_bound.begin(), bench_bound.end()))
          .add("seconds_bound_median", median(bench_bound))
          .add("seconds_bound_grad_min", bench_grad.empty() ? std::nan("") : *std::min_element(bench_grad.begin(), bench_grad.end()))
          .add("seconds_bound_grad_median", median(bench_grad))
          .add("cpu_seconds_bound_median", median(cpu_bound))
          .add("cpu_seconds_bound_grad_median", median(cpu_grad));
    }
    j.add("input_bytes", input_bytes).add("max_rss_bytes", peak_rss);
    return rss.finish(j, peak_rss, true);
  } catch (const std::exception& e) {
    return mx::print_json_failure(e);
  }
}

int main(int argc, char** argv) {
#if defined(MEMSAFE_SGPR_TRAIN_MPI)
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // the same run on every rank: rank 0 reports it
    if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)) return 1;
  }
  const int rc = run_main(argc, argv);
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
#else
  return run_main(argc, argv);
#endif
}
