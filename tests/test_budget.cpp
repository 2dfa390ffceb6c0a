// Budgets: parsing, literals, precedence (call > MEMSAFE_BUDGET > default), budget_error before
// any allocation, and peak temporaries within the budget across a range of budgets.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#include <algorithm>

#include <memsafe/memsafe.hpp>

namespace {

using namespace memsafe::literals;

/// Sets (or unsets) MEMSAFE_BUDGET for the lifetime of the guard, then restores the old value.
class budget_env {
 public:
  explicit budget_env(const char* value) {
    if (const char* e = std::getenv("MEMSAFE_BUDGET")) old_ = std::string(e);
    if (value)
      ::setenv("MEMSAFE_BUDGET", value, 1);
    else
      ::unsetenv("MEMSAFE_BUDGET");
  }
  budget_env(const budget_env&) = delete;
  budget_env& operator=(const budget_env&) = delete;
  ~budget_env() {
    if (old_)
      ::setenv("MEMSAFE_BUDGET", old_->c_str(), 1);
    else
      ::unsetenv("MEMSAFE_BUDGET");
  }

 private:
  std::optional<std::string> old_;
};

std::vector<double> random_points(std::size_t n, std::size_t d, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n * d);
  for (auto& x : v) x = u(g);
  return v;
}

/// Checks that parse_bytes(text) throws argument_error whose message quotes the text.
void check_parse_error(const std::string& text) {
  CAPTURE(text);
  bool threw = false;
  try {
    (void)memsafe::parse_bytes(text);
  } catch (const memsafe::argument_error& e) {
    threw = true;
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("\"" + text + "\"") != std::string::npos);
  }
  CHECK(threw);
}

/// Budgets from `lo` to `hi` (both included): both ends, their neighbours and ~30 steps between.
std::vector<std::size_t> budgets_between(std::size_t lo, std::size_t hi) {
  std::vector<std::size_t> b{lo, lo + 1, lo + 63, lo + 64};
  const std::size_t steps = 30;
  for (std::size_t s = 1; s < steps; ++s) b.push_back(lo + (hi - lo) * s / steps);
  b.push_back(hi - 1);
  b.push_back(hi);
  return b;
}

}  // namespace

TEST_SUITE("budget") {

TEST_CASE("budget: parse_bytes accepts decimal and binary units") {
  using memsafe::parse_bytes;
  CHECK(parse_bytes("512MiB") == 536870912u);
  CHECK(parse_bytes("1GB") == 1000000000u);
  CHECK(parse_bytes("100MB") == 100000000u);
  CHECK(parse_bytes("64 MiB") == 67108864u);
  CHECK(parse_bytes(" 64MiB ") == 67108864u);
  CHECK(parse_bytes("1.5GiB") == 1610612736u);
  CHECK(parse_bytes("0.5KiB") == 512u);
  CHECK(parse_bytes("4096") == 4096u);
  CHECK(parse_bytes("4096B") == 4096u);
  CHECK(parse_bytes("4096b") == 4096u);
  CHECK(parse_bytes("1kB") == 1000u);
  CHECK(parse_bytes("1KB") == 1000u);
  CHECK(parse_bytes("1KiB") == 1024u);
  CHECK(parse_bytes("2TB") == 2000000000000u);
  CHECK(parse_bytes("1TiB") == (std::size_t{1} << 40));
  CHECK(parse_bytes("1") == 1u);
}

TEST_CASE("budget: the byte-count grammar with zero allowed (the examples' --rss-slack)") {
  using memsafe::detail::parse_byte_count;
  CHECK(parse_byte_count("0", "the slack", true) == 0u);
  CHECK(parse_byte_count(" 0 MiB", "the slack", true) == 0u);
  CHECK(parse_byte_count("0.0e3", "the slack", true) == 0u);
  CHECK(parse_byte_count("40MiB", "the slack", true) == 40u << 20);
  for (const char* bad : {"0.5", "0.3KB-", "-1", "", "40MiBs"}) {
    CAPTURE(bad);
    try {
      (void)parse_byte_count(bad, "the slack", true);
      FAIL("no argument_error");
    } catch (const memsafe::argument_error& e) {
      CHECK(std::string(e.what()).find(std::string("cannot parse the slack \"") + bad + "\"") != std::string::npos);
    }
  }
  CHECK_THROWS_WITH_AS((void)parse_byte_count("0.5", "the slack", true), doctest::Contains("more than 0 but less than 1 byte"),
                       memsafe::argument_error);
  CHECK_THROWS_WITH_AS((void)memsafe::parse_bytes("0"), doctest::Contains("a budget must be at least 1 byte"),
                       memsafe::argument_error);
}

TEST_CASE("budget: parse_bytes takes exponents and decimal fractions exactly") {
  using memsafe::parse_bytes;
  CHECK(parse_bytes("1e9") == 1000000000u);
  CHECK(parse_bytes("2.5E6") == 2500000u);
  CHECK(parse_bytes("1e+3") == 1000u);
  CHECK(parse_bytes("1e3MiB") == std::size_t{1000} << 20);
  CHECK(parse_bytes("5e-1KiB") == 512u);
  CHECK(parse_bytes(".5KiB") == 512u);
  CHECK(parse_bytes("1.7KiB") == 1740u);  // 1740.8 bytes, rounded down
  CHECK(parse_bytes("1e19") == 10000000000000000000u);
  // rounded down exactly at any size: a snap to the nearest whole number within 1e-15 of it turned
  // these fractions of .9997 or so into the next byte above ~10^13 bytes
  CHECK(parse_bytes("69756877.243MiB") == 73145387311955u);
  CHECK(parse_bytes("85396705.43118MiB") == 89544935794204u);
  CHECK(parse_bytes("78533421.9974e-3GiB") == 84324619780449u);
  CHECK(parse_bytes("30696312e-1GiB") == 3295991403695308u);  // 3069631.2 GiB = …308.8 B
  CHECK(parse_bytes("1.8446744073709551615e19") == 18446744073709551615u);
  // every decimal with three places times a decimal unit is a whole number of bytes: no
  // 0.99999… rounded down to 0 ("0.001KB" was refused as 0 bytes, "1.001KB" read as 1000)
  for (std::size_t i = 1; i < 20000; i += 7) {
    const std::string t = std::to_string(i / 1000) + "." + std::to_string(1000 + i % 1000).substr(1);
    CAPTURE(t);
    CHECK(parse_bytes(t + "KB") == i);
    CHECK(parse_bytes(t + "MB") == i * 1000u);
    CHECK(parse_bytes(t + "GB") == i * 1000000u);
  }
  for (const char* bad : {"1e", "1e-", "1ex", "e3", ".", "1e3.5", "1e21", "1e99999999", ".e5", "1e+-3", "1e5e5"})
    check_parse_error(bad);
  // the words and units are folded to lower case by the ASCII rule, not the C locale's tolower
  CHECK(parse_bytes("\t2 MiB\n") == 2u << 20);
  CHECK(parse_bytes("1E3kb") == 1000000u);
}

TEST_CASE("budget: parse_bytes units are case-insensitive") {
  using memsafe::parse_bytes;
  CHECK(parse_bytes("512mib") == 536870912u);
  CHECK(parse_bytes("512MIB") == 536870912u);
  CHECK(parse_bytes("512mIb") == 536870912u);
  CHECK(parse_bytes("1gb") == 1000000000u);
  CHECK(parse_bytes("1Gb") == 1000000000u);
  CHECK(parse_bytes("100mb") == 100000000u);
  CHECK(parse_bytes("1kib") == 1024u);
  CHECK(parse_bytes("1KIB") == 1024u);
  CHECK(parse_bytes("1kb") == 1000u);
  CHECK(parse_bytes("1gib") == 1073741824u);
}

TEST_CASE("budget: parse_bytes unlimited") {
  using memsafe::parse_bytes;
  CHECK(parse_bytes("unlimited") == memsafe::unlimited);
  CHECK(parse_bytes("UNLIMITED") == memsafe::unlimited);
  CHECK(parse_bytes("Unlimited") == memsafe::unlimited);
  CHECK(parse_bytes("inf") == memsafe::unlimited);
  CHECK(parse_bytes("none") == memsafe::unlimited);
  // More than 2^64 − 1 bytes is an error that says how to ask for no limit (never a silent
  // "unlimited", never a wrapped small number).
  CHECK_THROWS_WITH_AS((void)parse_bytes("100000000TiB"), doctest::Contains("unlimited"), memsafe::argument_error);
}

TEST_CASE("budget: parse_bytes rejects malformed text and quotes it") {
  for (const char* bad : {"", "abc", "12XB", "-5MB", "1..2MB", "0", "0MB", "MB", "   ", "12 X", "1.2.3", "5 bits"})
    check_parse_error(bad);
  // more than 64 characters besides blanks: refused, the whole text quoted; blanks do not count
  check_parse_error(std::string(100, '1') + "MiB");
  CHECK(memsafe::parse_bytes(std::string(200, ' ') + "64" + std::string(100, '\t') + "MiB") == std::size_t{64} << 20);
  CHECK(memsafe::parse_bytes(std::string(61, '0') + "1MB") == 1000000u);  // 64 characters exactly
  CHECK_THROWS_AS((void)memsafe::parse_bytes("12XB"), memsafe::error);
  CHECK_THROWS_AS((void)memsafe::parse_bytes("12XB"), std::runtime_error);
}

TEST_CASE("budget: byte literals") {
  static_assert(64_MiB == std::size_t{64} << 20);
  static_assert(1_KiB == 1024);
  static_assert(3_GiB == std::size_t{3} << 30);
  static_assert(5_KB == 5000);
  static_assert(7_MB == 7000000);
  static_assert(2_GB == 2000000000);
  static_assert(memsafe::budget<64_MiB>::bytes == 67108864);
  CHECK(memsafe::parse_bytes("64MiB") == 64_MiB);
  CHECK(memsafe::parse_bytes("5kB") == 5_KB);
  CHECK(memsafe::default_budget_bytes == 256_MiB);
}

TEST_CASE("budget: default budget when MEMSAFE_BUDGET is unset or empty or blank") {
  const auto x = random_points(20, 3, 1), y = random_points(30, 3, 2);
  const auto e = memsafe::sum(memsafe::sqdist(memsafe::points(x.data(), 20, 3), memsafe::points(y.data(), 30, 3)));
  {
    budget_env env(nullptr);
    auto r = memsafe::eval(e);
    CHECK(r.stats.budget_bytes == memsafe::default_budget_bytes);
    CHECK(memsafe::plan_for(e).budget == memsafe::default_budget_bytes);
  }
  {
    budget_env env("");
    CHECK(memsafe::eval(e).stats.budget_bytes == memsafe::default_budget_bytes);
  }
  {
    budget_env env(" \t ");  // spaces only: unset too
    CHECK(memsafe::eval(e).stats.budget_bytes == memsafe::default_budget_bytes);
  }
  {
    budget_env env(" 1MiB\n");  // surrounding spaces ignored
    CHECK(memsafe::eval(e).stats.budget_bytes == (std::size_t{1} << 20));
  }
}

TEST_CASE("budget: MEMSAFE_BUDGET is used by eval without a budget") {
  const auto x = random_points(20, 3, 3), y = random_points(30, 3, 4);
  const auto X = memsafe::points(x.data(), 20, 3), Y = memsafe::points(y.data(), 30, 3);
  const auto e = memsafe::sum(memsafe::sqdist(X, Y));
  {
    budget_env env("3MiB");
    CHECK(memsafe::eval(e).stats.budget_bytes == 3_MiB);
    CHECK(memsafe::eval(e, memsafe::options{}).stats.budget_bytes == 3_MiB);
    CHECK(memsafe::eval(e, memsafe::options{.budget = std::nullopt, .threads = 1}).stats.budget_bytes == 3_MiB);
    CHECK(memsafe::plan_for(e).budget == 3_MiB);
    // Every evaluable kind reads it.
    const auto v = random_points(30, 1, 5);
    CHECK(memsafe::eval(memsafe::sqdist(X, Y) * memsafe::vec(v.data(), 30)).stats.budget_bytes == 3_MiB);
    CHECK(memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, Y), 3)).stats.budget_bytes == 3_MiB);
    CHECK(memsafe::eval(memsafe::sqdist(X, Y) * memsafe::transpose(memsafe::sqdist(X, Y))).stats.budget_bytes == 3_MiB);
  }
  {
    budget_env env("100 MB");
    CHECK(memsafe::eval(e).stats.budget_bytes == 100_MB);
  }
  {
    budget_env env("unlimited");
    CHECK(memsafe::eval(e).stats.budget_bytes == memsafe::unlimited);
  }
}

TEST_CASE("budget: a call budget overrides MEMSAFE_BUDGET") {
  const auto x = random_points(20, 3, 6), y = random_points(30, 3, 7);
  const auto e = memsafe::sum(memsafe::sqdist(memsafe::points(x.data(), 20, 3), memsafe::points(y.data(), 30, 3)));
  budget_env env("3MiB");
  CHECK(memsafe::eval<memsafe::budget<5_MiB>>(e).stats.budget_bytes == 5_MiB);
  CHECK(memsafe::eval(e, memsafe::budget_bytes(7_MiB)).stats.budget_bytes == 7_MiB);
  CHECK(memsafe::eval(e, memsafe::options{.budget = 9_MiB}).stats.budget_bytes == 9_MiB);
  CHECK(memsafe::eval(e, memsafe::options{.budget = 11_MiB, .threads = 1}).stats.budget_bytes == 11_MiB);
  CHECK(memsafe::plan_for(e, memsafe::budget_bytes(13_MiB)).budget == 13_MiB);
  CHECK(memsafe::plan_for(e, memsafe::options{.budget = 15_MiB}).budget == 15_MiB);
  // A smaller call budget wins as well (not only a larger one).
  CHECK(memsafe::eval(e, memsafe::budget_bytes(1_MiB)).stats.budget_bytes == 1_MiB);
  std::vector<double> out(20);
  CHECK(memsafe::eval_into(e, out.data(), nullptr, memsafe::options{.budget = 2_MiB}).budget_bytes == 2_MiB);
  CHECK(memsafe::eval_into(e, out.data(), nullptr).budget_bytes == 3_MiB);
}

// budget_bytes converts to options (and to every options aggregate with an optional budget), not to
// a number: a call that takes options takes budget_bytes(n), with every other field at its default.
static_assert(std::is_convertible_v<memsafe::budget_bytes, memsafe::options>);
static_assert(!std::is_convertible_v<memsafe::budget_bytes, std::size_t>);
static_assert(!std::is_convertible_v<std::size_t, memsafe::budget_bytes>);

TEST_CASE("budget: eval_into, plan_for and explain take the budget as options, budget_bytes or a template parameter") {
  const std::size_t n = 40, m = 70;
  const auto x = random_points(n, 3, 10), y = random_points(m, 3, 11);
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, 3), memsafe::points(y.data(), m, 3)), 3);
  budget_env env("3MiB");
  const memsafe::options converted = memsafe::budget_bytes(5_MiB);
  CHECK(converted.budget == 5_MiB);
  CHECK(converted.threads == memsafe::options{}.threads);
  const auto want = memsafe::eval(e, memsafe::budget_bytes(5_MiB));
  std::vector<double> v(n * 3);
  std::vector<memsafe::index_t> ix(n * 3);
  CHECK(memsafe::eval_into(e, v.data(), ix.data(), memsafe::budget_bytes(5_MiB)).budget_bytes == 5_MiB);
  CHECK(v == want.values);
  CHECK(ix == want.indices);
  std::fill(ix.begin(), ix.end(), -1);
  CHECK(memsafe::eval_into<memsafe::budget<7_MiB>>(e, v.data(), ix.data()).budget_bytes == 7_MiB);
  CHECK(ix == want.indices);
  CHECK(memsafe::plan_for<memsafe::budget<9_MiB>>(e).budget == 9_MiB);
  CHECK(memsafe::plan_for(e, memsafe::budget_bytes(11_MiB)).budget == 11_MiB);
  // explain says the same whichever way the budget came, and names that budget, not MEMSAFE_BUDGET's.
  const std::string shown = memsafe::explain(e, memsafe::options{.budget = 1_MiB});
  CHECK(shown.find("budget 1 MiB") != std::string::npos);
  CHECK(memsafe::explain(e, memsafe::budget_bytes(1_MiB)) == shown);
  CHECK(memsafe::explain<memsafe::budget<1_MiB>>(e) == shown);
  CHECK(memsafe::explain(e).find("budget 3 MiB") != std::string::npos);
  // Too small, the template form is refused as the others are.
  CHECK_THROWS_AS((void)memsafe::plan_for<memsafe::budget<64>>(e), memsafe::budget_error);
  CHECK(memsafe::explain<memsafe::budget<64>>(e).find("does not fit") != std::string::npos);
}

TEST_CASE("budget: malformed MEMSAFE_BUDGET is an argument_error at eval") {
  const auto x = random_points(20, 3, 8), y = random_points(30, 3, 9);
  const auto e = memsafe::sum(memsafe::sqdist(memsafe::points(x.data(), 20, 3), memsafe::points(y.data(), 30, 3)));
  for (const char* bad : {"12XB", "abc", "-5MB", "1..2MB", "0"}) {
    CAPTURE(bad);
    budget_env env(bad);
    bool threw = false;
    try {
      (void)memsafe::eval(e);
    } catch (const memsafe::argument_error& ex) {
      threw = true;
      CHECK(std::string(ex.what()).find(std::string("\"") + bad + "\"") != std::string::npos);
    }
    CHECK(threw);
    CHECK_THROWS_AS((void)memsafe::plan_for(e), memsafe::argument_error);
    std::vector<double> out(20);
    CHECK_THROWS_AS((void)memsafe::eval_into(e, out.data(), nullptr), memsafe::argument_error);
    // Not consulted when the call gives a budget.
    CHECK(memsafe::eval(e, memsafe::budget_bytes(4_MiB)).stats.budget_bytes == 4_MiB);
    CHECK(memsafe::eval<memsafe::budget<4_MiB>>(e).stats.budget_bytes == 4_MiB);
  }
}

TEST_CASE("budget: a zero run-time budget is an argument_error") {
  const auto x = random_points(4, 3, 10);
  const auto X = memsafe::points(x.data(), 4, 3);
  const auto e = memsafe::sum(memsafe::sqdist(X, X));
  CHECK_THROWS_AS((void)memsafe::eval(e, memsafe::budget_bytes(0)), memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::eval(e, memsafe::options{.budget = 0}), memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::plan_for(e, memsafe::budget_bytes(0)), memsafe::argument_error);
}

TEST_CASE("budget: budget_error below the minimum is thrown by the planner") {
  const std::size_t n = 41, m = 67, d = 3;
  const auto x = random_points(n, d, 11), y = random_points(m, d, 12), v = random_points(m, 1, 13);
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);

  auto check_expr = [&](const auto& e, const char* label) {
    CAPTURE(label);
    const std::size_t min = memsafe::plan_for(e, memsafe::budget_bytes(memsafe::unlimited)).min_bytes;
    REQUIRE(min > 1);
    for (std::size_t b : {std::size_t{1}, min / 2, min - 1}) {
      CAPTURE(b);
      for (int via_eval = 0; via_eval < 2; ++via_eval) {
        CAPTURE(via_eval);
        bool threw = false;
        try {
          if (via_eval)
            (void)memsafe::eval(e, memsafe::budget_bytes(b));
          else
            (void)memsafe::plan_for(e, memsafe::budget_bytes(b));
        } catch (const memsafe::budget_error& ex) {
          threw = true;
          const std::string what = ex.what();
          CAPTURE(what);
          CHECK(ex.minimum_bytes == min);
          CHECK(ex.budget_bytes == b);
          CHECK(what.find(std::to_string(min)) != std::string::npos);
          // Thrown by the planner (before the accountant exists), not by the accountant refusing
          // an allocation part-way.
          CHECK(what.find("smallest workable plan") != std::string::npos);
          CHECK(what.find("internal accounting") == std::string::npos);
        }
        CHECK(threw);
      }
    }
    // Exactly the minimum works, within it.
    auto r = memsafe::eval(e, memsafe::budget_bytes(min));
    CHECK(r.stats.peak_temp_bytes <= min);
    CHECK(r.stats.peak_temp_bytes > 0);
    CHECK(r.stats.min_budget_bytes == min);
    CHECK(r.stats.budget_bytes == min);
    CHECK(r.stats.threads == 1);
    auto p = memsafe::plan_for(e, memsafe::budget_bytes(min));
    CHECK(p.min_bytes == min);
    CHECK(p.planned_bytes <= min);
  };
  check_expr(memsafe::argkmin(memsafe::sqdist(X, Y), 7), "argkmin");
  check_expr(memsafe::sum(memsafe::rbf(X, Y, 0.7, 1.3)), "sum rbf");
  check_expr(memsafe::logsumexp(-memsafe::sqdist(X, Y) + memsafe::l1(X, Y)), "logsumexp binary");
  check_expr(memsafe::sqdist(X, Y) * memsafe::vec(v.data(), m), "K*v");
  check_expr(memsafe::sqdist(X, Y) * memsafe::transpose(memsafe::sqdist(X, Y)), "A*B");
  check_expr(memsafe::argmin(memsafe::sqdist(X, Y), memsafe::over_i), "argmin over_i");
}

TEST_CASE("budget: compile-time budget below the minimum throws budget_error") {
  const auto x = random_points(41, 3, 14);
  const auto X = memsafe::points(x.data(), 41, 3);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, X), 7);
  CHECK_THROWS_AS((void)memsafe::eval<memsafe::budget<1>>(e), memsafe::budget_error);
  CHECK_THROWS_AS((void)memsafe::eval<memsafe::budget<64>>(e), memsafe::budget_error);
  auto r = memsafe::eval<memsafe::budget<1_MiB>>(e);
  CHECK(r.stats.budget_bytes == 1_MiB);
  CHECK(r.stats.peak_temp_bytes <= 1_MiB);
}

TEST_CASE("budget: MEMSAFE_BUDGET below the minimum throws budget_error") {
  const auto x = random_points(41, 3, 15);
  const auto X = memsafe::points(x.data(), 41, 3);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, X), 7);
  budget_env env("100B");
  CHECK_THROWS_AS((void)memsafe::eval(e), memsafe::budget_error);
}

TEST_CASE("budget: argkmin peak within budget and identical results across budgets") {
  const std::size_t n = 41, m = 67, d = 3, k = 7;
  const auto x = random_points(n, d, 21), y = random_points(m, d, 22);
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)), k);
  const auto ref = memsafe::eval(e, memsafe::budget_bytes(memsafe::unlimited));
  REQUIRE(ref.rows == n);
  REQUIRE(ref.cols == k);
  // Sanity against brute force: indices of the k smallest, ascending.
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t q = 1; q < k; ++q) CHECK(ref(i, q - 1) <= ref(i, q));
  const std::size_t min = memsafe::plan_for(e, memsafe::budget_bytes(memsafe::unlimited)).min_bytes;
  std::size_t distinct_tilings = 0, last_tile = 0;
  for (std::size_t b : budgets_between(min, 4 * min))
    for (unsigned threads : {0u, 1u, 2u}) {
      CAPTURE(b);
      CAPTURE(threads);
      auto r = memsafe::eval(e, memsafe::options{.budget = b, .threads = threads});
      CHECK(r.stats.peak_temp_bytes <= b);
      CHECK(r.stats.planned_temp_bytes <= b);
      CHECK(r.stats.peak_temp_bytes <= r.stats.planned_temp_bytes);
      CHECK(r.values == ref.values);
      CHECK(r.indices == ref.indices);
      const std::size_t tile = r.stats.tile_rows * 100000 + r.stats.tile_cols;
      if (tile != last_tile) ++distinct_tilings, last_tile = tile;
    }
  CHECK(distinct_tilings > 3);  // the range really exercises different tilings
}

TEST_CASE("budget: sum of rbf peak within budget and stable across budgets") {
  const std::size_t n = 41, m = 67, d = 3;
  const auto x = random_points(n, d, 31), y = random_points(m, d, 32);
  const auto e = memsafe::sum(memsafe::rbf(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d), 0.7, 1.3));
  const auto ref = memsafe::eval(e, memsafe::budget_bytes(memsafe::unlimited));
  REQUIRE(ref.rows == n);
  // Sanity against brute force.
  for (std::size_t i = 0; i < n; ++i) {
    long double s = 0;
    for (std::size_t j = 0; j < m; ++j) {
      long double r2 = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const long double t = x[i * d + c] - y[j * d + c];
        r2 += t * t;
      }
      s += 1.3L * std::exp(-0.5L * r2 / (0.7L * 0.7L));
    }
    CHECK(std::abs(ref[i] - double(s)) <= 1e-12 * std::abs(double(s)));
  }
  const std::size_t min = memsafe::plan_for(e, memsafe::budget_bytes(memsafe::unlimited)).min_bytes;
  for (std::size_t b : budgets_between(min, 4 * min))
    for (unsigned threads : {0u, 1u, 2u}) {
      CAPTURE(b);
      CAPTURE(threads);
      auto r = memsafe::eval(e, memsafe::options{.budget = b, .threads = threads});
      CHECK(r.stats.peak_temp_bytes <= b);
      CHECK(r.stats.planned_temp_bytes <= b);
      REQUIRE(r.values.size() == n);
      for (std::size_t i = 0; i < n; ++i) CHECK(std::abs(r[i] - ref[i]) <= 1e-12 * std::abs(ref[i]));
    }
}

}  // TEST_SUITE("budget")

namespace {
/// The process's peak resident set (VmHWM) in bytes since reset_peak_rss(), or nullopt where
/// /proc cannot tell (not Linux).
void reset_peak_rss() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);  // 5: reset the peak resident set size to the current one
    std::fclose(f);
  }
}
std::optional<std::size_t> peak_rss() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return std::nullopt;
  char line[256];
  std::optional<std::size_t> kb;
  while (std::fgets(line, sizeof line, f))
    if (std::string(line).rfind("VmHWM:", 0) == 0) kb = std::strtoull(line + 6, nullptr, 10);
  std::fclose(f);
  if (!kb) return std::nullopt;
  return *kb * 1024;
}
}  // namespace

TEST_CASE("budget: a batch of many slices takes no memory per slice beyond its result") {
  // Each slice was lowered and planned up front and all were held at once, outside the budget:
  // ≈ 0.8 KB per slice (2^20 slices of one point took 0.8 GB of RSS at a 1 MiB budget).
  const std::size_t B = std::size_t{1} << 17;
  std::vector<double> x(B), y = {0.25};
  for (std::size_t b = 0; b < B; ++b) x[b] = double(b % 1000) / 1000;
  const std::size_t dx[3] = {B, 1, 1}, dy[3] = {1, 1, 1};
  const auto X = memsafe::tensor(x.data(), dx), Y = memsafe::tensor(y.data(), dy);
  const auto D = memsafe::sum<3>(memsafe::square(memsafe::unsqueeze<2>(X) - memsafe::unsqueeze<1>(Y)));
  std::vector<double> out(B, -1.0);
  reset_peak_rss();
  const auto before = peak_rss();
  const auto st = memsafe::eval_into(memsafe::sum(D), out.data(), nullptr, memsafe::options{.budget = 1 << 20});
  const auto after = peak_rss();
  CHECK(st.peak_temp_bytes <= st.budget_bytes);
  for (std::size_t b = 0; b < B; ++b) REQUIRE(out[b] == (x[b] - 0.25) * (x[b] - 0.25));
  if (before && after) {
    MESSAGE("peak RSS grew by " << (*after - *before) / 1024 << " KiB over " << B << " slices");
    CHECK(*after - *before < (std::size_t{16} << 20));  // held per slice, it was ≈ 100 MiB
  } else {
    MESSAGE("no /proc/self/status here: the batch's resident memory is not checked");
  }
  // 2^40 slices of no rows: an empty result at once (each slice was lowered: std::bad_alloc)
  const std::size_t e1[4] = {std::size_t{1} << 20, std::size_t{1} << 20, 0, 3}, e2[4] = {1, 1, 4, 3};
  const auto E1 = memsafe::tensor(x.data(), e1), E2 = memsafe::tensor(x.data(), e2);
  const auto DE = memsafe::sum<4>(memsafe::square(memsafe::unsqueeze<3>(E1) - memsafe::unsqueeze<2>(E2)));
  CHECK(memsafe::eval(memsafe::argkmin(DE, 1), memsafe::budget_bytes(1 << 20)).rows == 0);
  CHECK(memsafe::eval(memsafe::sum(DE), memsafe::budget_bytes(1 << 20)).rows == 0);
  CHECK(memsafe::explain(memsafe::sum(DE), memsafe::options{.budget = 1 << 20}).find("batch of 1099511627776 x") !=
        std::string::npos);
}
