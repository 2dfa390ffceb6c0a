// knn — the k nearest database points of every query, without the m×n distance matrix.
//
//   knn --data random --n 100000 --m 1000 --d 3 --k 10 --metric l2 --check 20
//   knn --data mnist --metric cosine --precision f32 --budget 64MiB --check 50
//
// l2: argkmin(sqdist(Q, X), k); l1: argkmin(l1(Q, X), k); cosine: argkmin(cosine(Q, X), k);
// ip: argkmax(dot(Q, X), k).  The search is evaluated by memsafe within --budget bytes
// of temporaries and timed; one JSON line reports the plan, the time, the memory and
// (with --check R) the result of verifying R queries against a direct scan in double.
// See examples/README.md for every option, the check's tie tolerance, and the fields.
#include <memsafe/memsafe.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "common/cli.hpp"
#include "common/data.hpp"
#include "common/json.hpp"
#include "common/knn_data.hpp"
#include "common/mnist.hpp"
#include "common/rss.hpp"
#include "common/run.hpp"

namespace {

namespace mx = memsafe_examples;

struct config {
  std::string data, metric, data_dir, form;
  std::size_t n = 0, m = 0, d = 0, k = 0;
  bool n_given = false, m_given = false;
  mx::run_options run;
};

template <class T>
using dataset = mx::knn_data<T>;

template <class T>
dataset<T> make_data(const config& c) {
  return mx::load_knn_data<T>(c.data, c.n, c.m, c.d, c.n_given, c.m_given, c.run.seed, c.data_dir);
}

// ---- independent reference for --check ------------------------------------------------------
//
// Every metric is turned into a key to MINIMISE: l2 -> ‖q−x‖², l1 -> Σ|q_k−x_k|,
// cosine -> 1 − q·x/(‖q‖‖x‖) (similarity 0 when either norm is 0), ip -> −q·x.
// memsafe's values are mapped the same way (ip: key = −value).

template <class T>
double ref_key(const std::string& metric, const double* q, const T* xt, std::size_t d) {
  auto x = [xt](std::size_t t) { return static_cast<double>(xt[t]); };
  double s = 0;
  if (metric == "l2") {
    for (std::size_t t = 0; t < d; ++t) s += (q[t] - x(t)) * (q[t] - x(t));
    return s;
  }
  if (metric == "l1") {
    for (std::size_t t = 0; t < d; ++t) s += std::fabs(q[t] - x(t));
    return s;
  }
  double qq = 0, xx = 0;
  for (std::size_t t = 0; t < d; ++t) {
    s += q[t] * x(t);
    qq += q[t] * q[t];
    xx += x(t) * x(t);
  }
  if (metric == "ip") return -s;
  if (qq == 0 || xx == 0) return 1.0;  // cosine with a zero vector: similarity 0
  return 1.0 - s / (std::sqrt(qq) * std::sqrt(xx));
}

template <class T>
struct checker {
  const config& c;
  const dataset<T>& ds;
  std::size_t k;
  double tol_rel;
  // Database statistics used for the magnitude of the rounding error.
  double mean_sqnorm = 0, mean_l1norm = 0, max_norm = 0;

  checker(const config& cfg, const dataset<T>& data, std::size_t kk)
      : c(cfg), ds(data), k(kk), tol_rel(std::is_same_v<T, float> ? 1e-5 : 1e-12) {
    for (std::size_t j = 0; j < ds.n; ++j) {
      double sq = 0, a = 0;
      for (std::size_t t = 0; t < ds.d; ++t) {
        double x = static_cast<double>(ds.X[j * ds.d + t]);
        sq += x * x;
        a += std::fabs(x);
      }
      mean_sqnorm += sq;
      mean_l1norm += a;
      max_norm = std::max(max_norm, std::sqrt(sq));
    }
    mean_sqnorm /= static_cast<double>(ds.n);
    mean_l1norm /= static_cast<double>(ds.n);
  }

  // Size of the quantities whose rounding decides the computed distance of query q.
  double magnitude(const std::vector<double>& q) const {
    double sq = 0, a = 0;
    for (double v : q) {
      sq += v * v;
      a += std::fabs(v);
    }
    if (c.metric == "l2") return sq + mean_sqnorm;        // ‖q‖² + mean ‖x‖²
    if (c.metric == "l1") return a + mean_l1norm;         // ‖q‖₁ + mean ‖x‖₁
    if (c.metric == "ip") return std::sqrt(sq) * max_norm;  // ‖q‖ · max ‖x‖
    return 1.0;                                           // cosine
  }

  // Verifies query i; returns an empty string on success, otherwise why it failed.
  std::string check_query(std::size_t i, const std::vector<T>& values, const std::vector<std::int64_t>& indices,
                          std::vector<double>& keys) const {
    const std::size_t n = ds.n, d = ds.d;
    std::vector<double> q(d);
    for (std::size_t t = 0; t < d; ++t) q[t] = static_cast<double>(ds.Q[i * d + t]);
    keys.resize(n);
    // Reference top-k by (key, index) through a bounded max-heap.
    std::priority_queue<std::pair<double, std::size_t>> heap;
    for (std::size_t j = 0; j < n; ++j) {
      keys[j] = ref_key(c.metric, q.data(), ds.X.data() + j * d, d);
      std::pair<double, std::size_t> e{keys[j], j};
      if (heap.size() < k) heap.push(e);
      else if (e < heap.top()) {
        heap.pop();
        heap.push(e);
      }
    }
    std::vector<std::size_t> ref(k);
    for (std::size_t t = k; t-- > 0;) {
      ref[t] = heap.top().second;
      heap.pop();
    }
    const double kth = keys[ref[k - 1]];
    const double tol = tol_rel * std::max(std::fabs(kth), magnitude(q));
    const double sign = c.metric == "ip" ? -1.0 : 1.0;

    auto fmt = [](double v) {
      char b[40];
      std::snprintf(b, sizeof b, "%.9g", v);
      return std::string(b);
    };
    std::vector<std::size_t> got(k);
    double prev_key = -INFINITY;
    for (std::size_t t = 0; t < k; ++t) {
      const std::int64_t idx = indices[i * k + t];
      if (idx < 0 || static_cast<std::uint64_t>(idx) >= n)
        return "position " + std::to_string(t) + " holds index " + std::to_string(idx) + ", outside [0, " +
               std::to_string(n) + ")";
      got[t] = static_cast<std::size_t>(idx);
      const double key = sign * static_cast<double>(values[i * k + t]);
      if (!(key >= prev_key))
        return "values are not sorted best first at position " + std::to_string(t) + " (" +
               fmt(sign * prev_key) + " then " + fmt(sign * key) + ")";
      prev_key = key;
      if (!(std::fabs(key - keys[got[t]]) <= tol))
        return "value " + fmt(sign * key) + " at position " + std::to_string(t) + " for index " +
               std::to_string(idx) + " differs from the reference " + fmt(sign * keys[got[t]]) + " by more than " +
               fmt(tol);
    }
    std::vector<std::size_t> got_sorted = got, ref_sorted = ref;
    std::sort(got_sorted.begin(), got_sorted.end());
    std::sort(ref_sorted.begin(), ref_sorted.end());
    if (std::adjacent_find(got_sorted.begin(), got_sorted.end()) != got_sorted.end())
      return "the returned indices contain a duplicate";
    // Returned but not in the reference top-k: must tie with the k-th reference key.
    for (std::size_t j : got)
      if (!std::binary_search(ref_sorted.begin(), ref_sorted.end(), j) && !(keys[j] <= kth + tol))
        return "returned index " + std::to_string(j) + " (reference value " + fmt(sign * keys[j]) +
               ") is not among the reference top-" + std::to_string(k) + " (k-th value " + fmt(sign * kth) +
               ", tolerance " + fmt(tol) + ")";
    // In the reference top-k but not returned: must also be a tie with the k-th key.
    for (std::size_t j : ref)
      if (!std::binary_search(got_sorted.begin(), got_sorted.end(), j) && !(keys[j] >= kth - tol))
        return "missed index " + std::to_string(j) + " (reference value " + fmt(sign * keys[j]) +
               ") which is clearly within the top-" + std::to_string(k) + " (k-th value " + fmt(sign * kth) +
               ", tolerance " + fmt(tol) + ")";
    return {};
  }
};

template <class T>
int run(const config& c) {
  const dataset<T> ds = make_data<T>(c);
  const std::size_t n = ds.n, m = ds.m, d = ds.d, k = c.k;
  if (k > n)
    throw std::runtime_error("--k " + std::to_string(k) + " exceeds the database size n = " + std::to_string(n));

  auto Xv = memsafe::points(ds.X.data(), n, d);
  auto Qv = memsafe::points(ds.Q.data(), m, d);
  const memsafe::options opts = c.run.eval_options();

  auto timed_eval = [&](const auto& expr) { return mx::timed_eval(expr, opts, c.run.explain); };
  auto evaluated = [&] {
    if (c.form == "naive")  // NumPy style: ((Q[:, None, :] - X[None, :, :])**2).sum(-1), rewritten by memsafe
      return timed_eval(memsafe::argkmin(memsafe::sum<2>(memsafe::square(memsafe::unsqueeze<1>(Qv) - memsafe::unsqueeze<0>(Xv))), k));
    if (c.metric == "l2") return timed_eval(memsafe::argkmin(memsafe::sqdist(Qv, Xv), k));
    if (c.metric == "l1") return timed_eval(memsafe::argkmin(memsafe::l1(Qv, Xv), k));
    if (c.metric == "cosine") return timed_eval(memsafe::argkmin(memsafe::cosine(Qv, Xv), k));
    return timed_eval(memsafe::argkmax(memsafe::dot(Qv, Xv), k));
  }();
  auto& result = evaluated.first;
  const double seconds = evaluated.second;
  const std::size_t peak_rss = mx::max_rss_bytes();  // before the check allocates anything

  if (result.rows != m || result.cols != k || result.values.size() != m * k || result.indices.size() != m * k) {
    mx::print_json_error("memsafe returned a " + std::to_string(result.rows) + "x" + std::to_string(result.cols) +
                         " result with " + std::to_string(result.values.size()) + " values and " +
                         std::to_string(result.indices.size()) + " indices for " + std::to_string(m) +
                         " queries and k = " + std::to_string(k));
    return 1;
  }

  // --check R: R queries evenly spaced over [0, m).
  const std::size_t r = std::min(c.run.check, m);
  std::size_t mismatches = 0;
  if (r > 0) {
    checker<T> chk(c, ds, k);
    std::vector<double> keys;
    for (std::size_t t = 0; t < r; ++t) {
      const std::size_t i = t * m / r;
      std::string why = chk.check_query(i, result.values, result.indices, keys);
      if (!why.empty()) {
        if (++mismatches <= 10) std::fprintf(stderr, "knn: check failed for query %zu: %s\n", i, why.c_str());
      }
    }
    if (mismatches > 10) std::fprintf(stderr, "knn: ... %zu failed queries in all\n", mismatches);
  }

  const auto& st = result.stats;
  mx::json_line j;
  j.add("example", "knn")
      .add("data", c.data)
      .add("n", n)
      .add("m", m)
      .add("d", d)
      .add("k", k)
      .add("metric", c.metric)
      .add("form", c.form)
      .add("precision", mx::precision_name<T>());
  mx::add_eval_stats(j, st, seconds)
      .add("queries_per_second", static_cast<double>(m) / seconds)
      .add("dense_matrix_bytes", m * n * sizeof(T))
      .add("input_bytes", (n + m) * d * sizeof(T))
      .add("max_rss_bytes", peak_rss)
      .add("check_queries", r)
      .add("check_mismatches", mismatches)
      .add("check", r == 0 ? "skipped" : (mismatches == 0 ? "pass" : "fail"));
  const auto rss = mx::make_rss_limit(c.run.rss_slack, (n + m) * d * sizeof(T), st.budget_bytes);
  return rss.finish(j, peak_rss, mismatches == 0);
}

}  // namespace

int main(int argc, char** argv) {
  mx::cli args("knn", "k nearest neighbours of m queries among n points under a memory budget.");
  args.option("data", "random", "random|mnist (mnist: database = 60000 training images, queries = 10000 test images)")
      .option("n", "100000", "database size (mnist: limits the training images used)")
      .option("m", "1000", "number of queries (mnist: limits the test images used)")
      .option("d", "3", "dimension (random only; mnist has 784)")
      .option("k", "10", "neighbours per query")
      .option("metric", "l2", "l2|l1|cosine|ip (ip = largest inner product)")
      .option("precision", "f32", "f32|f64")
      .option("form", "pairwise", "pairwise|naive (naive: l2 written as the n x m x d broadcast, rewritten by memsafe)");
  mx::add_run_options(args, "random seed for random data", "verify this many queries (evenly spaced) against a direct scan in double")
      .option("data-dir", "", "folder holding the MNIST IDX .gz files (default: $MEMSAFE_DATA_DIR/mnist, "
                              "else the build's shared data folder)");
  args.parse(argc, argv);

  config c;
  c.data = args.get_choice("data", {"random", "mnist"});
  c.n = args.get_uint("n");
  c.m = args.get_uint("m");
  c.d = args.get_uint("d");
  c.k = args.get_uint("k");
  c.n_given = args.given("n");
  c.m_given = args.given("m");
  c.metric = args.get_choice("metric", {"l2", "l1", "cosine", "ip"});
  c.form = args.get_choice("form", {"pairwise", "naive"});
  if (c.form == "naive" && c.metric != "l2") args.fail("--form naive writes the l2 distance: use --metric l2");
  const std::string prec = args.get_choice("precision", {"f32", "f64"});
  c.run = mx::read_run_options(args);
  c.data_dir = args.get_string("data-dir", mx::default_mnist_dir());
  if (c.k == 0) args.fail("--k must be positive");
  if (c.n == 0) args.fail("--n must be positive");
  if (c.m == 0) args.fail("--m must be positive");
  if (c.data == "random") {
    if (c.d == 0) args.fail("--d must be positive");
    if (c.n > (std::size_t{1} << 32) || c.m > (std::size_t{1} << 32)) args.fail("--n / --m too large");
    if (c.m > (std::size_t{1} << 60) / c.n) args.fail("--n x --m is too large");
    if (c.k > c.n) args.fail("--k must not exceed --n");
  } else if (args.given("d")) {
    std::fprintf(stderr, "knn: note: --d is ignored with --data mnist (d = 784)\n");
  }

  try {
    return mx::dispatch_precision(mx::parse_precision(prec), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return run<T>(c);
    });
  } catch (const std::exception& e) {
    return mx::print_json_failure(e);
  }
}
