// attention — one multi-head attention layer, forward and backward, under a memory budget.
//
//   attention --B 1 --H 8 --T 4096 --d 64 --causal --budget 64MiB --threads 2 --check 4
//
// Q, K, V are N(0,1) draws from --seed, either as three [B, H, T, d] arrays (--layout bhtd) or as
// one fused [B, T, 3, H, d] projection output viewed in place (--layout bthd: no copies). The
// forward is softmax_sum(dot(Q, K) / sqrt(d) [+ bias] [+ causal], V[, dropout]), written the naive way and
// evaluated by memsafe as the online-softmax reduction (the T×T scores never exist); the backward
// takes an N(0,1) dO and returns dQ, dK, dV (and, with --bias, the gradient of the [1, H, T, T]
// bias, summed over the batch), recomputing the scores from the stored logsumexp. Each is run
// --repeat times; one JSON line reports min and median seconds, the plan, peak temporaries, peak
// RSS and (with --check R) the largest error of R random query rows (O, lse, dQ, dBias) and R
// random keys (dK, dV) against a naive dense computation in double. See examples/README.md.
#include <memsafe/attention.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <random>
#include <stdexcept>
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
  std::size_t B = 1, H = 8, T = 1024, d = 64, repeat = 3;
  bool causal = false, fused = false, forward_only = false, bias = false;
  double dropout = 0;
  std::string dump;
  mx::run_options run;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class T>
int run(const config& c) {
  const std::size_t B = c.B, H = c.H, Tn = c.T, d = c.d;
  const std::size_t n = B * H * Tn * d;
  // inputs: one fused [B, T, 3, H, d] buffer, or Q, K, V back to back as [3][B, H, T, d]
  const std::vector<T> in = mx::normal_matrix<T>(3 * n, 1, c.run.seed, 0);
  const std::vector<T> dOv = mx::normal_matrix<T>(n, 1, c.run.seed, 1);
  const T* base = in.data();
  auto view = [&](std::size_t which) {
    return c.fused ? memsafe::heads_bthd(base + which * H * d, B, Tn, H, d, 3 * H * d)
                   : memsafe::heads(base + which * n, B, H, Tn, d);
  };
  const auto Q = view(0), K = view(1), V = view(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto scores = scale * memsafe::dot(Q, K);
  // --bias: a learned-position-bias stand-in, N(0, 1)/2 of shape [1, H, T, T] (shared by the batch);
  // the backward then returns its gradient too, summed over the batch
  const std::size_t nb = c.bias ? H * Tn * Tn : 0;
  std::vector<T> bias(nb), dBias(nb);
  if (c.bias) {
    const std::vector<T> z = mx::normal_matrix<T>(nb, 1, c.run.seed, 2);
    for (std::size_t e = 0; e < nb; ++e) bias[e] = T(0.5) * z[e];
    scores = scores + memsafe::heads(static_cast<const T*>(bias.data()), 1, H, Tn, Tn);
  }
  if (c.causal) scores = scores + memsafe::causal;
  const memsafe::dropout_spec drop = memsafe::dropout(c.dropout, c.run.seed);
  const auto A = memsafe::softmax_sum(scores, V, drop);

  std::vector<T> O(n), lse(B * H * Tn), dQ(n), dK(n), dV(n);
  const auto Ov = memsafe::heads(O.data(), B, H, Tn, d);
  const memsafe::options opts = c.run.eval_options();
  const auto forward = [&](const memsafe::options& o) { return memsafe::eval_into(A, Ov, lse.data(), o); };
  const auto backward = [&](const memsafe::options& o) {
    const auto dOh = memsafe::heads(dOv.data(), B, H, Tn, d);
    const auto dQh = memsafe::heads(dQ.data(), B, H, Tn, d), dKh = memsafe::heads(dK.data(), B, H, Tn, d),
               dVh = memsafe::heads(dV.data(), B, H, Tn, d);
    return c.bias ? memsafe::attention_backward(A, Ov, lse.data(), dOh, dQh, dKh, dVh,
                                                memsafe::heads(dBias.data(), 1, H, Tn, Tn), o)
                  : memsafe::attention_backward(A, Ov, lse.data(), dOh, dQh, dKh, dVh, o);
  };
  // --explain: the expression, the kernels and the plans of the forward and the backward (stderr).
  if (c.run.explain) std::fprintf(stderr, "%s", memsafe::explain(A, opts).c_str());
  // Before any work, every pass's minimum (the backward needs more than the forward): a budget too
  // small fails at once with the smallest budget that runs both, not after the forward ran.
  const memsafe::attention_minimums mins = memsafe::attention_minimum_bytes(A);
  std::vector<mx::step_minimum> steps{{"the forward", mins.forward}};
  if (!c.forward_only) steps.push_back({c.bias ? "the backward (with dBias)" : "the backward", mins.backward});
  mx::require_budget("attention", *opts.budget, steps);

  std::vector<double> tf, tb;
  memsafe::eval_stats sf, sb;
  for (std::size_t r = 0; r < c.repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    sf = forward(opts);
    tf.push_back(seconds_since(t0));
  }
  if (!c.forward_only)
    for (std::size_t r = 0; r < c.repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      sb = backward(opts);
      tb.push_back(seconds_since(t0));
    }
  const std::size_t peak_rss = mx::max_rss_bytes();
  if (!c.dump.empty()) {  // raw native-endian T arrays: q, k, v, dO ([B, H, T, d]), O, lse, dQ, dK, dV
    auto write = [&](const char* name, const T* p, std::size_t count, bool strided_input = false) {
      std::vector<T> tmp;
      if (strided_input) {  // the inputs as contiguous [B, H, T, d]
        tmp.resize(n);
        const auto X = name[0] == 'q' ? Q : (name[0] == 'k' ? K : V);
        for (std::size_t b = 0; b < B; ++b)
          for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < Tn; ++i)
              for (std::size_t k = 0; k < d; ++k) tmp[((b * H + h) * Tn + i) * d + k] = X(b, h, i, k);
        p = tmp.data();
      }
      const std::string path = c.dump + "/" + name + ".bin";
      std::FILE* f = std::fopen(path.c_str(), "wb");
      if (!f || std::fwrite(p, sizeof(T), count, f) != count) throw std::runtime_error("cannot write " + path);
      std::fclose(f);
    };
    write("q", nullptr, n, true);
    write("k", nullptr, n, true);
    write("v", nullptr, n, true);
    write("dO", dOv.data(), n);
    write("O", O.data(), n);
    write("lse", lse.data(), B * H * Tn);
    if (!c.forward_only) {
      write("dQ", dQ.data(), n);
      write("dK", dK.data(), n);
      write("dV", dV.data(), n);
    }
  }

  // --check: R random (b, h, i) rows and R random (b, h, j) keys against naive dense code in double.
  double err_fwd = 0, err_bwd = 0;
  std::size_t checked = 0;
  if (c.run.check > 0) {
    std::mt19937_64 eng = mx::make_engine(c.run.seed, 7);
    const double ninf = -std::numeric_limits<double>::infinity();
    auto sc = [&](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
      if (c.causal && j > i) return ninf;
      double s = 0;
      for (std::size_t k = 0; k < d; ++k) s += double(Q(b, h, i, k)) * double(K(b, h, j, k));
      return scale * s + (c.bias ? double(bias[(h * Tn + i) * Tn + j]) : 0.0);
    };
    auto rel = [](double got, double ref, double mag) { return std::fabs(got - ref) / (1.0 + mag); };
    // the dropout's factor on weight (b, h, i, j): 1/(1 − p) or 0 (1 without dropout)
    auto z = [&](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
      return c.dropout == 0 ? 1.0 : memsafe::dropout_keeps(drop, b, h, i, j) ? 1.0 / (1.0 - c.dropout) : 0.0;
    };
    for (std::size_t q = 0; q < c.run.check; ++q, ++checked) {
      const std::size_t b = eng() % B, h = eng() % H, i = eng() % Tn;
      const std::size_t row = (b * H + h) * Tn;
      // every row's lse of this head (needed for the dK, dV of one key)
      std::vector<double> L(Tn), D(Tn);
      for (std::size_t r = 0; r < Tn; ++r) {
        double m = ninf, l = 0;
        for (std::size_t j = 0; j < Tn; ++j) m = std::max(m, sc(b, h, r, j));
        for (std::size_t j = 0; j < Tn; ++j) l += std::exp(sc(b, h, r, j) - m);
        L[r] = m + std::log(l);
      }
      // row i: O, lse, dQ
      std::vector<double> o(d, 0.0), dq(d, 0.0);
      for (std::size_t j = 0; j < Tn; ++j) {
        const double p = std::exp(sc(b, h, i, j) - L[i]) * z(b, h, i, j);
        for (std::size_t k = 0; k < d; ++k) o[k] += p * double(V(b, h, j, k));
      }
      double mag = 0;
      for (double x : o) mag = std::max(mag, std::fabs(x));
      err_fwd = std::max(err_fwd, rel(lse[row + i], L[i], std::fabs(L[i])));
      for (std::size_t k = 0; k < d; ++k) err_fwd = std::max(err_fwd, rel(O[(row + i) * d + k], o[k], mag));
      if (c.forward_only) continue;
      for (std::size_t r = 0; r < Tn; ++r) {
        // D_r = Σ_j P_rj Z_rj (dO_r · V_j)
        double s = 0;
        for (std::size_t j = 0; j < Tn; ++j) {
          const double p = std::exp(sc(b, h, r, j) - L[r]) * z(b, h, r, j);
          if (p == 0) continue;
          double dp = 0;
          for (std::size_t k = 0; k < d; ++k) dp += double(dOv[(row + r) * d + k]) * double(V(b, h, j, k));
          s += p * dp;
        }
        D[r] = s;
      }
      for (std::size_t j = 0; j < Tn; ++j) {
        const double p = std::exp(sc(b, h, i, j) - L[i]);
        double dp = 0;
        for (std::size_t k = 0; k < d; ++k) dp += double(dOv[(row + i) * d + k]) * double(V(b, h, j, k));
        for (std::size_t k = 0; k < d; ++k) dq[k] += scale * p * (z(b, h, i, j) * dp - D[i]) * double(K(b, h, j, k));
      }
      // key j = i: dK, dV
      const std::size_t j = i;
      std::vector<double> dk(d, 0.0), dv(d, 0.0);
      for (std::size_t r = 0; r < Tn; ++r) {
        const double p = std::exp(sc(b, h, r, j) - L[r]);
        if (p == 0) continue;
        double dp = 0;
        for (std::size_t k = 0; k < d; ++k) dp += double(dOv[(row + r) * d + k]) * double(V(b, h, j, k));
        const double zr = z(b, h, r, j);
        for (std::size_t k = 0; k < d; ++k) {
          dv[k] += p * zr * double(dOv[(row + r) * d + k]);
          dk[k] += scale * p * (zr * dp - D[r]) * double(Q(b, h, r, k));
        }
      }
      double mq = 0, mk = 0, mv = 0;
      for (std::size_t k = 0; k < d; ++k) {
        mq = std::max(mq, std::fabs(dq[k]));
        mk = std::max(mk, std::fabs(dk[k]));
        mv = std::max(mv, std::fabs(dv[k]));
      }
      for (std::size_t k = 0; k < d; ++k) {
        err_bwd = std::max(err_bwd, rel(dQ[(row + i) * d + k], dq[k], mq));
        err_bwd = std::max(err_bwd, rel(dK[(row + j) * d + k], dk[k], mk));
        err_bwd = std::max(err_bwd, rel(dV[(row + j) * d + k], dv[k], mv));
      }
      if (c.bias) {  // dBias[h, i, :] = Σ_b dS_b[i, :] (the bias is shared by the batch)
        std::vector<double> db(Tn, 0.0);
        for (std::size_t bb = 0; bb < B; ++bb) {
          const std::size_t rb = (bb * H + h) * Tn;
          std::vector<double> s(Tn), dp(Tn, 0.0);
          double m = ninf, l = 0, Di = 0;
          for (std::size_t jj = 0; jj < Tn; ++jj) m = std::max(m, s[jj] = sc(bb, h, i, jj));
          for (std::size_t jj = 0; jj < Tn; ++jj) l += std::exp(s[jj] - m);
          for (std::size_t jj = 0; jj < Tn; ++jj) {
            s[jj] = std::exp(s[jj] - m) / l;  // P
            for (std::size_t k = 0; k < d; ++k) dp[jj] += double(dOv[(rb + i) * d + k]) * double(V(bb, h, jj, k));
            dp[jj] *= z(bb, h, i, jj);
            Di += s[jj] * dp[jj];
          }
          for (std::size_t jj = 0; jj < Tn; ++jj) db[jj] += s[jj] * (dp[jj] - Di);
        }
        double mb = 0;
        for (double x : db) mb = std::max(mb, std::fabs(x));
        for (std::size_t jj = 0; jj < Tn; ++jj)
          err_bwd = std::max(err_bwd, rel(dBias[(h * Tn + i) * Tn + jj], db[jj], mb));
      }
    }
  }
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  const bool pass = !(err_fwd > tol) && !(err_bwd > tol) && std::isfinite(err_fwd) && std::isfinite(err_bwd);

  mx::json_line j;
  j.add("example", "attention")
      .add("B", B)
      .add("H", H)
      .add("T", Tn)
      .add("d", d)
      .add("causal", c.causal)
      .add("bias", c.bias ? "[1, H, T, T]" : "none")
      .add("dropout", c.dropout)
      .add("layout", c.fused ? "bthd" : "bhtd")
      .add("precision", mx::precision_name<T>())
      .add("budget_bytes", sf.budget_bytes)
      .add("threads", sf.threads)
      .add("tile_rows", sf.tile_rows)
      .add("tile_cols", sf.tile_cols)
      .add("isa", sf.plan.isa)
      .add("repeat", c.repeat)
      .add("forward_seconds_min", *std::min_element(tf.begin(), tf.end()))
      .add("forward_seconds_median", median(tf))
      .add("forward_peak_temp_bytes", sf.peak_temp_bytes)
      .add("forward_min_budget_bytes", sf.min_budget_bytes)
      .add("forward_tiles", sf.num_tiles);
  if (!c.forward_only)
    j.add("backward_seconds_min", *std::min_element(tb.begin(), tb.end()))
        .add("backward_seconds_median", median(tb))
        .add("backward_peak_temp_bytes", sb.peak_temp_bytes)
        .add("backward_min_budget_bytes", sb.min_budget_bytes)
        .add("backward_tile_rows", sb.tile_rows)
        .add("backward_threads", sb.threads)
        .add("backward_schedule", sb.plan.reduction);
  j.add("peak_temp_bytes", std::max(sf.peak_temp_bytes, sb.peak_temp_bytes))
      .add("dense_scores_bytes", static_cast<double>(B) * H * Tn * Tn * sizeof(T))
      .add("input_bytes", (3 * n + nb) * sizeof(T))
      .add("max_rss_bytes", peak_rss)
      .add("check_rows", checked);
  if (checked) j.add("check_max_err_forward", err_fwd);
  if (checked && !c.forward_only) j.add("check_max_err_backward", err_bwd);
  j.add("check", checked ? (pass ? "pass" : "fail") : "skipped");
  // outputs O, lse, dO, dQ, dK, dV (and the bias and its gradient) are caller memory: count them with the inputs
  const auto rss =
      mx::make_rss_limit(c.run.rss_slack, (3 * n + 5 * n + B * H * Tn + 2 * nb) * sizeof(T), sf.budget_bytes);
  return rss.finish(j, peak_rss, pass);
}

}  // namespace

int main(int argc, char** argv) {
  mx::cli args("attention", "One multi-head attention layer (forward + backward) under a memory budget.");
  args.option("B", "1", "batch size")
      .option("H", "8", "heads")
      .option("T", "1024", "sequence length")
      .option("d", "64", "head dimension")
      .option("repeat", "3", "timed runs of the forward and of the backward (min and median reported)")
      .option("layout", "bhtd", "bhtd: three [B, H, T, d] arrays; bthd: one fused [B, T, 3, H, d] buffer viewed in place")
      .option("precision", "f32", "f32|f64")
      .flag("causal", "causal mask")
      .flag("bias", "add a bias of shape [1, H, T, T] (N(0, 1)/2, shared by the batch); the backward returns its gradient")
      .option("dropout", "0", "dropout probability on the attention weights (the mask drawn from --seed)")
      .flag("forward-only", "skip the backward")
      .option("dump", "", "write the inputs and outputs as raw arrays into this folder (q, k, v, dO, O, lse, dQ, dK, dV .bin)");
  mx::add_run_options(args, "random seed for Q, K, V, dO and the checked rows",
                      "verify this many random query rows and keys against naive dense code in double");
  args.parse(argc, argv);

  config c;
  c.B = args.get_uint("B");
  c.H = args.get_uint("H");
  c.T = args.get_uint("T");
  c.d = args.get_uint("d");
  c.repeat = args.get_uint("repeat");
  c.causal = args.get_flag("causal");
  c.bias = args.get_flag("bias");
  c.dropout = args.get_double("dropout");
  if (!(c.dropout >= 0 && c.dropout < 1)) args.fail("--dropout must be in [0, 1)");
  c.forward_only = args.get_flag("forward-only");
  c.dump = args.get_string("dump");
  c.fused = args.get_choice("layout", {"bhtd", "bthd"}) == "bthd";
  const std::string prec = args.get_choice("precision", {"f32", "f64"});
  c.run = mx::read_run_options(args);
  if (c.B == 0 || c.H == 0 || c.T == 0 || c.d == 0) args.fail("--B, --H, --T and --d must be positive");
  if (c.repeat == 0) args.fail("--repeat must be positive");
  if ((c.bias || c.dropout > 0) && !c.dump.empty())
    args.fail("--dump writes no bias or dropout mask (bench/attention_vs_torch.py compares plain attention): use it "
              "without --bias and --dropout");

  try {
    return mx::dispatch_precision(mx::parse_precision(prec), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return run<T>(c);
    });
  } catch (const std::exception& e) {
    return mx::print_json_failure(e);
  }
}
