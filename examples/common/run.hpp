// What every memsafe example shares: the evaluation options on the command line (budget, seed,
// check, threads, RSS check, explain), a timed eval, the JSON fields describing the evaluation,
// the check of a multi-step run's budget before any work, and the JSON line of a failure.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <memsafe/memsafe.hpp>

#include "cli.hpp"
#include "json.hpp"
#include "rss.hpp"

namespace memsafe_examples {

struct run_options {
  std::string budget_text, rss_slack;
  std::uint64_t seed = 0;
  std::size_t check = 0;
  unsigned threads = 0;
  bool explain = false;
  memsafe::options eval_options() const { return {memsafe::parse_bytes(budget_text), threads}; }
};

/// Declare how memsafe evaluates: --budget, --threads and --rss-slack.
inline cli& add_eval_options(cli& args) {
  return args.option("budget", "64MiB", "temporary-memory budget, e.g. 64MiB, 1GB, 4096")
      .option("threads", "0", "worker threads (0 = all cores)")
      .option("rss-slack", "", "fail unless peak RSS <= inputs + budget + this (e.g. 40MiB, or 0); empty: no check");
}

/// Declare --explain: only for the programs that read it (run_options::explain) and print
/// memsafe::explain of what they evaluate; elsewhere --explain is an unknown option.
inline cli& add_explain_option(cli& args) {
  return args.flag("explain", "print the expression as written and rewritten, the rules fired and the plan (stderr)");
}

/// Declare the evaluation options, --explain, --seed and a counted --check.
inline cli& add_run_options(cli& args, const char* seed_help, const char* check_help) {
  return add_explain_option(add_eval_options(args.option("seed", "42", seed_help).option("check", "0", check_help)));
}

/// Read what add_eval_options declared (seed and check stay 0).
inline run_options read_eval_options(cli& args) {
  run_options r;
  r.budget_text = args.get_string("budget");
  r.rss_slack = args.get_string("rss-slack");
  // byte counts are command-line errors, found before any work (not after the run's computation)
  const auto check_bytes = [&](const char* name, const std::string& text) {
    try {
      (void)memsafe::parse_bytes(text);
    } catch (const std::exception& e) {
      args.fail("--" + std::string(name) + ": " + e.what());
    }
  };
  check_bytes("budget", r.budget_text);
  if (!r.rss_slack.empty()) {
    try {
      (void)parse_slack_bytes(r.rss_slack);  // 0 allowed: a strict limit
    } catch (const std::exception& e) {
      args.fail(std::string("--rss-slack: ") + e.what());
    }
  }
  r.explain = args.declared("explain") && args.get_flag("explain");
  const std::uint64_t threads = args.get_uint("threads");
  if (threads > 4096) args.fail("--threads must be at most 4096");
  r.threads = static_cast<unsigned>(threads);
  return r;
}

inline run_options read_run_options(cli& args) {
  run_options r = read_eval_options(args);
  r.seed = args.get_uint("seed");
  r.check = args.get_uint("check");
  return r;
}

/// memsafe::eval timed with a steady clock: {result, seconds}. With `explain`, memsafe::explain
/// goes to stderr first (so the JSON line on stdout stays the only stdout output).
template <class X>
auto timed_eval(const X& expr, const memsafe::options& opts, bool explain = false) {
  if (explain) std::fprintf(stderr, "%s", memsafe::explain(expr, opts).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = memsafe::eval(expr, opts);
  const auto t1 = std::chrono::steady_clock::now();
  return std::make_pair(std::move(r), std::chrono::duration<double>(t1 - t0).count());
}

/// budget_bytes, peak_temp_bytes, tile_rows, tile_cols, num_tiles, threads, seconds.
inline json_line& add_eval_stats(json_line& j, const memsafe::eval_stats& st, double seconds) {
  return j.add("budget_bytes", st.budget_bytes)
      .add("peak_temp_bytes", st.peak_temp_bytes)
      .add("tile_rows", st.tile_rows)
      .add("tile_cols", st.tile_cols)
      .add("num_tiles", st.num_tiles)
      .add("threads", st.threads)
      .add("seconds", seconds);
}

/// One step of a run of several budgeted steps, and the smallest budget its plan needs.
struct step_minimum {
  std::string step;
  std::size_t bytes = 0;
};

/// For a run of several budgeted steps one after another, before any of them: the largest of the
/// steps' minimums (the smallest budget with which every step runs). When `budget` is below it,
/// throws a memsafe::budget_error naming that step and that minimum, which print_json_failure
/// prints, so that a budget too small fails at once and not after the earlier steps' work.
inline std::size_t require_budget(const char* program, std::size_t budget, const std::vector<step_minimum>& steps) {
  const auto top = std::max_element(steps.begin(), steps.end(),
                                    [](const step_minimum& a, const step_minimum& b) { return a.bytes < b.bytes; });
  if (top == steps.end()) return 0;
  if (budget >= top->bytes) return top->bytes;
  std::string each;
  for (const auto& s : steps) each += (each.empty() ? "" : ", ") + s.step + " " + std::to_string(s.bytes);
  throw memsafe::budget_error(std::string(program) + ": a budget of " + memsafe::format_bytes(budget) +
                                  " is too small: " + top->step + " needs " + memsafe::format_bytes(top->bytes) +
                                  " of temporaries (each step's minimum in bytes: " + each +
                                  "); use a budget of at least " + std::to_string(top->bytes) + " bytes",
                              budget, top->bytes);
}

/// The JSON line of an example that failed, and its exit status (1): {"error": what} — for a
/// memsafe::budget_error also error_kind "budget", the budget and the minimum that would fit.
inline int print_json_failure(const std::exception& e) {
  if (const auto* b = dynamic_cast<const memsafe::budget_error*>(&e)) {
    json_line{}
        .add("error", e.what())
        .add("error_kind", "budget")
        .add("budget_bytes", b->budget_bytes)
        .add("minimum_bytes", b->minimum_bytes)
        .print();
  } else {
    print_json_error(e.what());
  }
  return 1;
}

}  // namespace memsafe_examples
