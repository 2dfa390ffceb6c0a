// kernel_matvec — y = K v for an n×n kernel matrix K = k(X, X) that is never formed.
//
//   kernel_matvec --n 100000 --d 3 --kernel matern32 --budget 64MiB --check 20
//
// X (n×d) and v (n) are N(0,1) draws from --seed.  The product is evaluated by
// memsafe within --budget bytes of temporaries and timed; one JSON line reports
// the plan, the time, the memory and (with --check R) the largest relative error
// of R random output rows against an independent direct sum in double.
// See examples/README.md for every option and field.
#include <memsafe/memsafe.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/data.hpp"
#include "common/json.hpp"
#include "common/rss.hpp"
#include "common/run.hpp"

namespace {

namespace mx = memsafe_examples;

struct config {
  std::size_t n = 0, d = 0;
  std::string kernel;
  double lengthscale = 1, variance = 1, alpha = 1;
  mx::run_options run;
};

// Reference kernel value from the Euclidean distance r (or, for linear, the dot
// product), written independently of the library's formulas.
struct reference_kernel {
  std::string name;
  double ls, var, alpha;

  double operator()(const double* x, const double* y, std::size_t d) const {
    if (name == "linear") {
      double s = 0;
      for (std::size_t k = 0; k < d; ++k) s += x[k] * y[k];
      return var * s;
    }
    double r2 = 0;
    for (std::size_t k = 0; k < d; ++k) {
      double t = x[k] - y[k];
      r2 += t * t;
    }
    double r = std::sqrt(r2);
    if (name == "rbf") return var * std::exp(-r2 / (2 * ls * ls));
    if (name == "matern12") return var * std::exp(-r / ls);
    if (name == "matern32") {
      double a = std::sqrt(3.0) * r / ls;
      return var * (1 + a) * std::exp(-a);
    }
    if (name == "matern52") {
      double a = std::sqrt(5.0) * r / ls;
      return var * (1 + a + 5 * r2 / (3 * ls * ls)) * std::exp(-a);
    }
    if (name == "rq") return var * std::pow(1 + r2 / (2 * alpha * ls * ls), -alpha);
    return std::nan("");
  }
};

// R distinct rows of [0, n), uniformly at random (Floyd's algorithm), in increasing order.
std::vector<std::size_t> sample_rows(std::size_t n, std::size_t r, std::uint64_t seed) {
  r = std::min(r, n);
  std::mt19937_64 eng = mx::make_engine(seed, 0xC0FFEE);
  std::set<std::size_t> chosen;
  for (std::size_t j = n - r; j < n; ++j) {
    std::size_t t = std::uniform_int_distribution<std::size_t>(0, j)(eng);
    if (!chosen.insert(t).second) chosen.insert(j);
  }
  return {chosen.begin(), chosen.end()};
}

template <class T>
int run(const config& c) {
  const std::size_t n = c.n, d = c.d;
  const std::vector<T> X = mx::normal_matrix<T>(n, d, c.run.seed, 0);
  const std::vector<T> v = mx::normal_matrix<T>(n, 1, c.run.seed, 1);

  auto Xv = memsafe::points(X.data(), n, d);
  auto vv = memsafe::vec(v.data(), n);
  const memsafe::options opts = c.run.eval_options();

  auto timed_eval = [&](const auto& K) { return mx::timed_eval(K * vv, opts, c.run.explain); };
  auto evaluated = [&] {
    if (c.kernel == "rbf") return timed_eval(memsafe::rbf(Xv, Xv, c.lengthscale, c.variance));
    if (c.kernel == "matern12") return timed_eval(memsafe::matern12(Xv, Xv, c.lengthscale, c.variance));
    if (c.kernel == "matern32") return timed_eval(memsafe::matern32(Xv, Xv, c.lengthscale, c.variance));
    if (c.kernel == "matern52") return timed_eval(memsafe::matern52(Xv, Xv, c.lengthscale, c.variance));
    if (c.kernel == "rq") return timed_eval(memsafe::rq(Xv, Xv, c.lengthscale, c.variance, c.alpha));
    return timed_eval(memsafe::linear(Xv, Xv, c.variance));
  }();
  auto& result = evaluated.first;
  const double seconds = evaluated.second;
  const std::size_t peak_rss = mx::max_rss_bytes();  // before the check allocates anything

  if (result.rows != n || result.cols != 1 || result.values.size() != n) {
    mx::print_json_error("memsafe returned a " + std::to_string(result.rows) + "x" + std::to_string(result.cols) +
                         " result with " + std::to_string(result.values.size()) + " values for an " +
                         std::to_string(n) + "x1 product");
    return 1;
  }

  // --check: Σ_j k(x_i, x_j) v_j in double with compensated summation.
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-9;
  const std::vector<std::size_t> rows = sample_rows(n, c.run.check, c.run.seed);
  double max_rel = 0;
  bool pass = true;
  std::size_t failures = 0;
  if (!rows.empty()) {
    reference_kernel kern{c.kernel, c.lengthscale, c.variance, c.alpha};
    std::vector<double> xi(d), xj(d);
    for (std::size_t i : rows) {
      for (std::size_t k = 0; k < d; ++k) xi[k] = static_cast<double>(X[i * d + k]);
      double sum = 0, comp = 0, abs_sum = 0;
      for (std::size_t j = 0; j < n; ++j) {
        for (std::size_t k = 0; k < d; ++k) xj[k] = static_cast<double>(X[j * d + k]);
        double term = kern(xi.data(), xj.data(), d) * static_cast<double>(v[j]);
        double t = sum + term;  // Neumaier summation
        comp += std::fabs(sum) >= std::fabs(term) ? (sum - t) + term : (term - t) + sum;
        sum = t;
        abs_sum += std::fabs(term);
      }
      const double ref = sum + comp;
      const double got = static_cast<double>(result.values[i]);
      const double err = std::fabs(got - ref);
      double rel = abs_sum > 0 ? err / abs_sum : err;
      if (std::isnan(rel)) rel = INFINITY;
      if (!(rel <= tol)) {
        if (++failures <= 10)
          std::fprintf(stderr,
                       "kernel_matvec: check failed at row %zu: memsafe %.17g, reference %.17g, "
                       "|error| / sum_j |k_ij v_j| = %.3g > %.1g\n",
                       i, got, ref, rel, tol);
        pass = false;
      }
      max_rel = std::max(max_rel, rel);
    }
  }

  const auto& st = result.stats;
  mx::json_line j;
  j.add("example", "kernel_matvec")
      .add("n", n)
      .add("d", d)
      .add("kernel", c.kernel)
      .add("precision", mx::precision_name<T>())
      .add("lengthscale", c.lengthscale)
      .add("variance", c.variance);
  if (c.kernel == "rq") j.add("alpha", c.alpha);
  mx::add_eval_stats(j, st, seconds)
      .add("pairs_per_second", static_cast<double>(n) * static_cast<double>(n) / seconds)
      .add("dense_matrix_bytes", n * n * sizeof(T))
      .add("input_bytes", (n * d + n) * sizeof(T))
      .add("max_rss_bytes", peak_rss)
      .add("check_rows", rows.size());
  if (rows.empty())
    j.add_null("check_max_rel_err");
  else
    j.add("check_max_rel_err", max_rel);
  j.add("check", rows.empty() ? "skipped" : (pass ? "pass" : "fail"));
  const auto rss = mx::make_rss_limit(c.run.rss_slack, (n * d + n) * sizeof(T), st.budget_bytes);
  return rss.finish(j, peak_rss, pass);
}

}  // namespace

int main(int argc, char** argv) {
  mx::cli args("kernel_matvec", "y = K v with K = k(X, X) (n x n, never formed) under a memory budget.");
  args.option("n", "10000", "number of points")
      .option("d", "3", "dimension of each point")
      .option("kernel", "rbf", "rbf|matern12|matern32|matern52|rq|linear")
      .option("lengthscale", "1", "kernel lengthscale (not used by linear)")
      .option("variance", "1", "kernel variance")
      .option("alpha", "1", "rational-quadratic shape (rq only)")
      .option("precision", "f64", "f32|f64");
  mx::add_run_options(args, "random seed for X, v and the checked rows", "verify this many random output rows against a direct double sum");
  args.parse(argc, argv);

  config c;
  c.n = args.get_uint("n");
  c.d = args.get_uint("d");
  c.kernel = args.get_choice("kernel", {"rbf", "matern12", "matern32", "matern52", "rq", "linear"});
  c.lengthscale = args.get_double("lengthscale");
  c.variance = args.get_double("variance");
  c.alpha = args.get_double("alpha");
  const std::string prec = args.get_choice("precision", {"f32", "f64"});
  c.run = mx::read_run_options(args);
  if (c.n == 0) args.fail("--n must be positive");
  if (c.d == 0) args.fail("--d must be positive");
  if (c.n > (std::size_t{1} << 30)) args.fail("--n is too large");

  try {
    return mx::dispatch_precision(mx::parse_precision(prec), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return run<T>(c);
    });
  } catch (const std::exception& e) {
    return mx::print_json_failure(e);
  }
}
