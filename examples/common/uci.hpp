// UCI regression data sets as gzip-compressed CSV, read with zlib (link with -lz).
//
//   auto dir = memsafe_examples::default_uci_dir();            // or --data-dir
//   auto ds  = memsafe_examples::load_uci(dir, "kin40k");
//   auto sp  = memsafe_examples::make_split(ds, /*split=*/0);   // train/test, standardised
//
// Layout of <dir>/<name>/:
//   data.csv.gz       N rows, comma-separated numbers, no header; the target is the LAST column.
//   test_mask.csv.gz  N rows × S columns of 0/1; column s marks the test points of split s.
// Every problem (missing file, a field that is not a number, ragged rows, a mask that does not
// match the data) throws std::runtime_error naming the file and line.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "cli.hpp"
#include "data.hpp"

namespace memsafe_examples {

/// The UCI folder under the shared data folder (see default_data_subdir).
inline std::string default_uci_dir() { return default_data_subdir("uci"); }

/// Declare the UCI examples' data options: --data-dir, --dataset and --split.
inline cli& add_uci_options(cli& args) {
  return args.option("data-dir", default_uci_dir(), "folder holding <dataset>/data.csv.gz and test_mask.csv.gz")
      .option("dataset", "kin40k", "data set name (a folder of --data-dir)")
      .option("split", "0", "train/test split: column of test_mask.csv.gz");
}

/// A numeric table: rows × cols, row-major, in double.
struct csv_table {
  std::vector<double> values;
  std::size_t rows = 0, cols = 0;
};

namespace detail {

struct uci_gz_closer {
  void operator()(gzFile f) const noexcept {
    if (f != nullptr) gzclose(f);
  }
};

[[noreturn]] inline void csv_fail(const std::string& path, std::size_t line, const std::string& what) {
  throw std::runtime_error("CSV file " + path + (line ? ", line " + std::to_string(line) : std::string()) + ": " +
                           what);
}

/// Parses one line of comma-separated numbers (spaces around fields allowed) into `out`.
inline std::size_t csv_parse_line(std::string_view s, std::vector<double>& out, const std::string& path,
                                  std::size_t line) {
  std::size_t count = 0, pos = 0;
  while (true) {
    std::size_t end = s.find(',', pos);
    std::string_view f = s.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    while (!f.empty() && (f.front() == ' ' || f.front() == '\t')) f.remove_prefix(1);
    while (!f.empty() && (f.back() == ' ' || f.back() == '\t')) f.remove_suffix(1);
    if (!f.empty() && f.front() == '+') f.remove_prefix(1);
    double v = 0;
    auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    if (f.empty() || ec != std::errc() || p != f.data() + f.size())
      csv_fail(path, line, "field " + std::to_string(count + 1) + " '" + std::string(f) + "' is not a number");
    if (!std::isfinite(v))  // from_chars reads nan and inf, which would reach the data unnoticed
      csv_fail(path, line, "field " + std::to_string(count + 1) + " '" + std::string(f) + "' is not a finite number");
    out.push_back(v);
    ++count;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return count;
}

}  // namespace detail

/// Reads a gzip-compressed (or plain: zlib reads both) CSV of numbers; blank lines are skipped.
inline csv_table load_csv_gz(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::runtime_error("UCI file not found: " + path +
                             " (pass --data-dir DIR pointing at the folder holding <dataset>/data.csv.gz,"
                             " or set MEMSAFE_DATA_DIR to the folder containing uci/)");
  std::unique_ptr<std::remove_pointer_t<gzFile>, detail::uci_gz_closer> f(gzopen(path.c_str(), "rb"));
  if (!f) detail::csv_fail(path, 0, "cannot open");
  gzbuffer(f.get(), 1u << 17);

  csv_table t;
  std::string line;
  std::size_t lineno = 0;
  char buf[1 << 14];
  bool eof = false;
  while (!eof) {
    line.clear();
    // One line, however long: gzgets stops at a newline or when the buffer is full.
    while (true) {
      if (gzgets(f.get(), buf, sizeof buf) == nullptr) {
        int errnum = 0;
        const char* msg = gzerror(f.get(), &errnum);
        if (errnum != Z_OK && errnum != Z_STREAM_END)
          detail::csv_fail(path, lineno + 1, std::string("corrupt gzip data (") + (msg ? msg : "zlib error") + ")");
        eof = true;
        break;
      }
      line += buf;
      if (!line.empty() && line.back() == '\n') break;
    }
    if (eof && line.empty()) break;
    ++lineno;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::size_t c = detail::csv_parse_line(line, t.values, path, lineno);
    if (t.rows == 0)
      t.cols = c;
    else if (c != t.cols)
      detail::csv_fail(path, lineno, std::to_string(c) + " fields, but the first row has " + std::to_string(t.cols));
    ++t.rows;
  }
  if (t.rows == 0) detail::csv_fail(path, 0, "no data");
  return t;
}

/// A UCI regression data set: inputs X (n×d), target y (n), test masks (n×splits, 0/1).
struct uci_dataset {
  std::string name;
  std::size_t n = 0, d = 0, splits = 0;
  std::vector<double> X, y;
  std::vector<std::uint8_t> test_mask;
};

inline uci_dataset load_uci(const std::string& dir, const std::string& name) {
  const auto base = std::filesystem::path(dir) / name;
  const std::string data_path = (base / "data.csv.gz").string(), mask_path = (base / "test_mask.csv.gz").string();
  csv_table data = load_csv_gz(data_path);
  if (data.cols < 2) detail::csv_fail(data_path, 0, "needs at least one input column and the target column");
  csv_table mask = load_csv_gz(mask_path);
  if (mask.rows != data.rows)
    detail::csv_fail(mask_path, 0, std::to_string(mask.rows) + " rows, but " + data_path + " has " +
                                       std::to_string(data.rows));
  uci_dataset ds;
  ds.name = name;
  ds.n = data.rows;
  ds.d = data.cols - 1;
  ds.splits = mask.cols;
  ds.X.resize(ds.n * ds.d);
  ds.y.resize(ds.n);
  for (std::size_t i = 0; i < ds.n; ++i) {
    for (std::size_t k = 0; k < ds.d; ++k) ds.X[i * ds.d + k] = data.values[i * data.cols + k];
    ds.y[i] = data.values[i * data.cols + ds.d];
  }
  ds.test_mask.resize(mask.values.size());
  for (std::size_t q = 0; q < mask.values.size(); ++q) {
    const double v = mask.values[q];
    if (v != 0.0 && v != 1.0)
      detail::csv_fail(mask_path, q / mask.cols + 1, "mask values must be 0 or 1, got " + std::to_string(v));
    ds.test_mask[q] = static_cast<std::uint8_t>(v);
  }
  return ds;
}

/// One train/test split, standardised with the training split's mean and (population) standard
/// deviation, per input column and for the target. A constant column gets std 1.
struct uci_split {
  std::size_t n_train = 0, n_test = 0, d = 0;
  std::vector<double> X_train, y_train, X_test, y_test;  // standardised
  std::vector<double> x_mean, x_std;
  double y_mean = 0, y_std = 1;
};

inline uci_split make_split(const uci_dataset& ds, std::size_t split) {
  if (split >= ds.splits)
    throw std::runtime_error("split " + std::to_string(split) + " does not exist: " + ds.name + " has " +
                             std::to_string(ds.splits) + " splits");
  uci_split s;
  s.d = ds.d;
  for (std::size_t i = 0; i < ds.n; ++i) {
    const bool test = ds.test_mask[i * ds.splits + split] != 0;
    auto& X = test ? s.X_test : s.X_train;
    auto& y = test ? s.y_test : s.y_train;
    X.insert(X.end(), ds.X.begin() + static_cast<std::ptrdiff_t>(i * ds.d),
             ds.X.begin() + static_cast<std::ptrdiff_t>((i + 1) * ds.d));
    y.push_back(ds.y[i]);
  }
  s.n_train = s.y_train.size();
  s.n_test = s.y_test.size();
  if (s.n_train < 2) throw std::runtime_error(ds.name + " split " + std::to_string(split) + " has fewer than 2 training points");
  // Each column's mean and standard deviation in units of its largest |value| a (mean/a and std/a
  // lie in [−1, 1] and [0, 1]), and standardised as (v/a − mean/a)/(std/a): in plain double, values
  // above ≈ 1.3e154 overflowed the squares (std inf: every input standardised to 0, silently) and
  // two near 1.8e308 the mean (NaN, then blamed on the data).
  struct column {
    double a = 1, mu = 0, sd = 0;  // scale, mean/a, std/a (0: a constant column, std 1)
    double mean() const { return mu * a; }
    double std_dev() const { return sd > 0 ? sd * a : 1.0; }
    double standardised(double v) const { return sd > 0 ? (v / a - mu) / sd : v - mean(); }
  };
  const auto stats = [&](const std::vector<double>& v, std::size_t stride, std::size_t k) {
    column c;
    double big = 0;
    for (std::size_t i = 0; i < s.n_train; ++i) big = std::max(big, std::fabs(v[i * stride + k]));
    if (big > 0) c.a = big;
    const double nt = static_cast<double>(s.n_train);
    for (std::size_t i = 0; i < s.n_train; ++i) c.mu += v[i * stride + k] / c.a;
    c.mu /= nt;
    double var = 0;
    for (std::size_t i = 0; i < s.n_train; ++i) {
      const double t = v[i * stride + k] / c.a - c.mu;
      var += t * t;
    }
    c.sd = std::sqrt(var / nt);
    return c;
  };
  std::vector<column> xc(ds.d);
  s.x_mean.assign(ds.d, 0);
  s.x_std.assign(ds.d, 0);
  for (std::size_t k = 0; k < ds.d; ++k) {
    xc[k] = stats(s.X_train, ds.d, k);
    s.x_mean[k] = xc[k].mean();
    s.x_std[k] = xc[k].std_dev();  // may be inf (a spread above 1.8e308): only reported
  }
  const column yc = stats(s.y_train, 1, 0);
  s.y_mean = yc.mean();
  s.y_std = yc.std_dev();
  // Predictions are reported in the target's units, their variances scaled by y_std².
  if (!std::isfinite(s.y_std * s.y_std)) {
    char sd[32];
    std::snprintf(sd, sizeof sd, "%.3g", s.y_std);
    throw std::runtime_error(ds.name + " split " + std::to_string(split) + ": the training targets' standard deviation (" +
                             sd + ") squared is beyond a double: rescale the targets");
  }
  auto standardise = [&](std::vector<double>& X, std::vector<double>& y) {
    for (std::size_t i = 0; i < y.size(); ++i) {
      for (std::size_t k = 0; k < ds.d; ++k) X[i * ds.d + k] = xc[k].standardised(X[i * ds.d + k]);
      y[i] = yc.standardised(y[i]);
    }
  };
  standardise(s.X_train, s.y_train);
  standardise(s.X_test, s.y_test);
  return s;
}

}  // namespace memsafe_examples
