// What memsafe_bench (bench/memsafe_bench.cpp) and memsafe_bench_cuda (bench/gpu/memsafe_bench_cuda.cu)
// share: the subcommand check, the CPU probe, the timing and size fields of the JSON line, --dump
// files, byte-count options and the end of main. Plain C++20 (no CUDA): it compiles with g++ and nvcc.
#pragma once

#include <memsafe/core/budget.hpp>  // memsafe::parse_bytes

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// Relative paths, so that a plain `nvcc -Iinclude bench/gpu/memsafe_bench_cuda.cu` finds them too.
#include "../examples/common/cli.hpp"
#include "../examples/common/json.hpp"

namespace memsafe_bench_common {

// --dump writes the answer's first min(rows, dump_rows_max) rows.
inline constexpr std::size_t dump_rows_max = 2000;

// ---- command line ----------------------------------------------------------------------------------

// argv[1] must be knn or matvec. Otherwise prints the usage (on stdout for --help / -h) and returns
// the exit status main should return: 0 for help, 2 for anything else.
inline std::optional<int> reject_subcommand(int argc, char** argv, void (*print_usage)(std::FILE*)) {
  if (argc >= 2 && (std::string(argv[1]) == "knn" || std::string(argv[1]) == "matvec")) return std::nullopt;
  const bool help = argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h");
  print_usage(help ? stdout : stderr);
  return help ? 0 : 2;
}

// matvec's own options: n, d, lengthscale.
inline void add_matvec_options(memsafe_examples::cli& args) {
  args.option("n", "10000", "number of points (K is n x n)")
      .option("d", "3", "dimension")
      .option("lengthscale", "1", "RBF lengthscale");
}

// The byte count of option --name (e.g. 64MiB); a malformed one is a command-line error whose message
// gives `examples` ("64MiB, 1GiB or 4096").
inline std::size_t parse_size_option(const memsafe_examples::cli& args, const char* name, const char* examples) {
  const std::string text = args.get_string(name);
  try {
    return memsafe::parse_bytes(text);
  } catch (const std::exception&) {
    args.fail(std::string("--") + name + " expects a byte count such as " + examples + ", not '" + text + "'");
  }
}

// ---- the JSON line ---------------------------------------------------------------------------------

// "model name" of the first processor in /proc/cpuinfo.
inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    const auto first = v.find_first_not_of(" \t");
    return first == std::string::npos ? std::string() : v.substr(first);
  }
  return "unknown";
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// n, m, d, k of a row (its std::optional members of those names), those that are set.
template <class Row>
void add_sizes(memsafe_examples::json_line& j, const Row& r) {
  if (r.n) j.add("n", *r.n);
  if (r.m) j.add("m", *r.m);
  if (r.d) j.add("d", *r.d);
  if (r.k) j.add("k", *r.k);
}

// min_s, median_s and times_s of non-empty `times`; returns the median.
inline double add_times(memsafe_examples::json_line& j, const std::vector<double>& times) {
  const double med = median_of(times);
  j.add("min_s", *std::min_element(times.begin(), times.end())).add("median_s", med).add_array("times_s", times);
  return med;
}

// qps_median (knn) and pairs_per_s from the median time, when n and m are known.
inline void add_rates(memsafe_examples::json_line& j, const std::string& bench, std::optional<std::size_t> n,
                      std::optional<std::size_t> m, double median_s) {
  if (!n || !m) return;
  if (bench == "knn") j.add("qps_median", static_cast<double>(*m) / median_s);
  j.add("pairs_per_s", static_cast<double>(*n) * static_cast<double>(*m) / median_s);
}

// The plan fields of a memsafe row from memsafe::eval_stats `st`; `peak` is the largest
// peak_temp_bytes over the calls.
template <class Row, class Stats>
void record_plan(Row& r, const Stats& st, std::size_t peak) {
  r.budget_bytes = st.budget_bytes;
  r.peak_temp_bytes = peak;
  r.min_budget_bytes = st.min_budget_bytes;
  r.tile_rows = st.tile_rows;
  r.tile_cols = st.tile_cols;
}

// A row that did not run: its status and message, and no times.
template <class Row>
void fail_row(Row& r, std::string status, std::string message) {
  r.status = std::move(status);
  r.message = std::move(message);
  r.times.clear();
}

// The end of main: print_row() writes the JSON line; returns the exit status (1 for status "error").
// Printing itself failing (e.g. bad_alloc under a tight ulimit -v) prints a minimal error line.
template <class Print>
int print_and_exit(const char* program, const std::string& status, Print&& print_row) {
  try {
    print_row();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: cannot print the result: %s\n", program, e.what());
    std::fputs("{\"status\": \"error\", \"message\": \"cannot print the result\"}\n", stdout);
    return 1;
  }
  return status == "error" ? 1 : 0;
}

// ---- binary files ----------------------------------------------------------------------------------

// `bytes` bytes to `path`, created or truncated; a failure throws std::runtime_error with `context`
// ("--dump: " or empty) in front of its message.
inline void write_binary(const std::string& path, const void* data, std::size_t bytes, std::string_view context = {}) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error(std::string(context) + "cannot open " + path + " for writing");
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) throw std::runtime_error(std::string(context) + "writing " + path + " failed");
}

// --dump of a knn answer: the first min(m, dump_rows_max) rows of k indices, as int64.
template <class Index>
void dump_indices(const std::string& path, const Index* indices, std::size_t m, std::size_t k,
                  std::string_view context = {}) {
  static_assert(sizeof(Index) == sizeof(std::int64_t), "--dump writes the indices as int64");
  write_binary(path, indices, std::min(m, dump_rows_max) * k * sizeof(std::int64_t), context);
}

// --dump of a matvec answer: the first min(y.size(), dump_rows_max) entries of y, as float64.
template <class T>
void dump_values(const std::string& path, const std::vector<T>& y, std::string_view context = {}) {
  const std::size_t rows = std::min(y.size(), dump_rows_max);
  const std::vector<double> out(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(rows));
  write_binary(path, out.data(), rows * sizeof(double), context);
}

}  // namespace memsafe_bench_common
