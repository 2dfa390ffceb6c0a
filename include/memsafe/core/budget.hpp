// memsafe/core/budget.hpp — budgets: compile-time, run-time, environment.
//
// Precedence (documented in docs/budget.md):
//   1. the budget given to the call: a template parameter `eval<budget<N>>(e)` or a run-time
//      argument `eval(e, budget_bytes(n))` / `options{.budget = n}` (a call takes one, not both);
//   2. the environment variable MEMSAFE_BUDGET ("512MiB", "1GB", "100MB", "4096");
//   3. default_budget_bytes (256 MiB).
#pragma once
#include <cctype>
#include "libm.hpp"
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "config.hpp"
#include "env.hpp"
#include "error.hpp"

namespace memsafe {

/// An unlimited budget (still accounted; never refused).
inline constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

/// Budget when neither the call nor MEMSAFE_BUDGET gives one.
inline constexpr std::size_t default_budget_bytes = std::size_t{256} << 20;

/// Compile-time budget: `memsafe::eval<memsafe::budget<64_MiB>>(expr)`.
template <std::size_t Bytes>
struct budget {
  static_assert(Bytes > 0, "memsafe: a budget must be a positive number of bytes");
  static constexpr std::size_t bytes = Bytes;
};

/// Run-time budget: `memsafe::eval(expr, memsafe::budget_bytes(32 << 20))`. Every call that takes
/// options (memsafe::options, memsafe::cuda::options, gp::sgpr_options, gp::exact_options: an
/// aggregate with a `std::optional<std::size_t> budget`) takes budget_bytes(n) in their place:
/// those options with this budget and every other field at its default.
struct budget_bytes {
  std::size_t bytes;
  constexpr explicit budget_bytes(std::size_t b) : bytes(b) {}
  template <class Options>
    requires std::is_aggregate_v<Options> && std::is_same_v<decltype(Options::budget), std::optional<std::size_t>>
  constexpr operator Options() const {
    Options o{};
    o.budget = bytes;
    return o;
  }
};

namespace detail {
template <class>
struct is_budget : std::false_type {};
template <std::size_t B>
struct is_budget<budget<B>> : std::true_type {};
/// Tag meaning "no compile-time budget given".
struct no_budget {};
}  // namespace detail

namespace literals {
constexpr std::size_t operator""_KiB(unsigned long long v) { return static_cast<std::size_t>(v) << 10; }
constexpr std::size_t operator""_MiB(unsigned long long v) { return static_cast<std::size_t>(v) << 20; }
constexpr std::size_t operator""_GiB(unsigned long long v) { return static_cast<std::size_t>(v) << 30; }
constexpr std::size_t operator""_KB(unsigned long long v) { return static_cast<std::size_t>(v) * 1000u; }
constexpr std::size_t operator""_MB(unsigned long long v) { return static_cast<std::size_t>(v) * 1000000u; }
constexpr std::size_t operator""_GB(unsigned long long v) { return static_cast<std::size_t>(v) * 1000000000u; }
}  // namespace literals

/// Parse "512MiB", "1GB", "100 MB", "1.5GiB", "1e9", "4096", "4096B", "unlimited" (also "inf",
/// "none"). Decimal units (kB/KB, MB, GB, TB) are powers of 1000, binary units (KiB, MiB, GiB,
/// TiB) powers of 1024; units are case-insensitive except that "b" alone is not accepted as bits.
/// A fractional number of bytes is rounded down ("1.7KiB" is 1740 bytes).
/// Throws argument_error naming the text on anything else.
MEMSAFE_COLD inline std::size_t parse_bytes(std::string_view text);

namespace detail {
/// parse_byte_count's refusal: the text quoted, why, and examples.
[[noreturn, gnu::noinline]] MEMSAFE_COLD inline void parse_byte_count_fail(std::string_view text, const char* what,
                                                                          bool allow_zero, const char* why) {
  throw argument_error(detail::cat(detail::msg{"memsafe: cannot parse ", what, " \"", text, "\": ", why,
                                               allow_zero ? " (examples: 40MiB, 100MB, 4096, 0)"
                                                          : " (examples: 512MiB, 1GB, 100MB, 4096)"}));
}

/// parse_bytes's grammar for a byte count that messages call `what`; with `allow_zero`, also an
/// exact zero ("0", "0MiB"; a count between 0 and 1 byte is still refused). Written with plain
/// character loops: every std::string_view member it would call is one more function for each
/// translation unit that calls parse_bytes to compile (docs/design.md, "Compile time").
MEMSAFE_COLD inline std::size_t parse_byte_count(std::string_view text, const char* what, bool allow_zero) {
  const auto fail = [&](const char* why) { parse_byte_count_fail(text, what, allow_zero, why); };
  // the text without its blanks, lower-cased
  char s[64];
  std::size_t len = 0;
  for (char c : text)
    if (!(c == ' ' || (c >= '\t' && c <= '\r'))) {
      if (len == sizeof s) fail("more than 64 characters besides blanks");
      s[len++] = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    }
  // does s[from, len) spell the lower-case word w?
  const auto is = [&](std::size_t from, const char* w) {
    std::size_t i = from;
    for (; i < len && *w; ++i, ++w)
      if (s[i] != *w) return false;
    return i == len && !*w;
  };
  if (len == 0) fail("empty");
  if (is(0, "unlimited") || is(0, "inf") || is(0, "none")) return unlimited;
  const auto digit = [&](std::size_t i) { return i < len && s[i] >= '0' && s[i] <= '9'; };
  std::size_t pos = 0, dots = 0;
  for (; digit(pos) || (pos < len && s[pos] == '.'); ++pos) dots += s[pos] == '.';
  if (pos == 0) fail(s[0] == '-' ? "a negative size" : "no number");
  const std::size_t mantissa = pos;
  // an exponent ("1e9", "2.5E6", "1e+3"): no unit begins with 'e'
  int exp10 = 0, exp_sign = 1;
  if (pos < len && s[pos] == 'e') {
    ++pos;
    if (pos < len && (s[pos] == '+' || s[pos] == '-')) exp_sign = s[pos++] == '-' ? -1 : 1;
    if (!digit(pos)) fail("malformed exponent");
    for (; digit(pos); ++pos) exp10 = exp10 < 100000 ? exp10 * 10 + (s[pos] - '0') : exp10;
  }
  if (dots > 1 || (mantissa == 1 && dots == 1)) fail("malformed number");
  // parsed here, not by strtold: the C locale's decimal point is not the user's business
  long double value = 0, scale = 1;
  bool frac = false;
  for (std::size_t i = 0; i < mantissa; ++i) {
    if (s[i] == '.') frac = true;
    else if (frac) value += (s[i] - '0') * (scale /= 10);
    else value = value * 10 + (s[i] - '0');
  }
  value *= libm::pow(10.0L, static_cast<long double>(exp_sign * exp10));
  struct u { const char* name; long double m; };
  static constexpr u units[] = {{"", 1.0L},          {"b", 1.0L},           {"kb", 1e3L},
                                {"mb", 1e6L},        {"gb", 1e9L},          {"tb", 1e12L},
                                {"kib", 1024.0L},    {"mib", 1048576.0L},   {"gib", 1073741824.0L},
                                {"tib", 1099511627776.0L}};
  long double mult = 0;
  for (const auto& e : units)
    if (is(pos, e.name)) mult = e.m;
  if (mult == 0) fail("unknown unit");
#if defined(__SIZEOF_INT128__) && !defined(__CUDACC__)  // (nvcc: the long double path)
  // Exact where it fits: the mantissa's digits as an integer N (at most 36 significant ones, f of
  // them after the point) times the unit times 10^(exponent − f), rounded down. (The long double
  // product below, snapped to a whole number within 1e-15 of it, swallowed real fractions above
  // ~10^13 bytes: "69756877.243MiB" = …955.97 B became …956.)
  {
    __extension__ typedef unsigned __int128 u128;  // (__extension__: no -Wpedantic warning)
    u128 N = 0, r = 0;
    int sig = 0, f = 0;
    bool after = false, ok = true;
    for (std::size_t i = 0; i < mantissa && ok; ++i) {
      if (s[i] == '.') {
        after = true;
        continue;
      }
      f += after;
      if (N == 0 && s[i] == '0') continue;
      ok = ++sig <= 36;
      N = N * 10 + static_cast<unsigned>(s[i] - '0');
    }
    const int p10 = exp_sign * exp10 - f;
    ok = ok && p10 >= -38 && p10 <= 38 && !__builtin_mul_overflow(N, static_cast<unsigned long long>(mult), &r);
    for (int k = 0; ok && k < p10; ++k) ok = !__builtin_mul_overflow(r, u128{10}, &r);
    if (ok) {
      u128 den = 1;
      for (int k = 0; k < -p10; ++k) den *= 10;  // ≤ 10^38 < 2^127
      r /= den;
      if (allow_zero && N == 0) return 0;
      if (r == 0) fail(allow_zero ? "more than 0 but less than 1 byte" : "a budget must be at least 1 byte");
      if (r > u128{unlimited})
        fail("more bytes than 2^64 − 1; write \"unlimited\" for no limit");
      return static_cast<std::size_t>(r);
    }
  }
#endif
  // Otherwise (more digits, an exponent beyond ±38, or more than 2^128): in long double, rounded
  // down, but a product within rounding error of a whole number is that number ("0.001KB" is 1
  // byte, not 0.99999…).
  const long double exact = value * mult, near = libm::round(exact);
  long double bytes = libm::fabs(exact - near) <= 1e-15L * exact ? near : libm::floor(exact);
  if (allow_zero && exact == 0) return 0;
  if (!(bytes >= 1)) fail(allow_zero ? "more than 0 but less than 1 byte" : "a budget must be at least 1 byte");
  // 2^64 − 1 is `unlimited` itself; anything larger is not a number of bytes this machine can hold
  // (it must not silently become unlimited).
  if (bytes > static_cast<long double>(unlimited)) fail("more bytes than 2^64 − 1; write \"unlimited\" for no limit");
  return static_cast<std::size_t>(bytes);
}
}  // namespace detail

MEMSAFE_COLD inline std::size_t parse_bytes(std::string_view text) {
  return detail::parse_byte_count(text, "budget", false);
}

/// Human-readable byte count: "64 MiB", "1.5 GiB", "123 B".
MEMSAFE_COLD inline std::string format_bytes(std::size_t b) {
  if (b == unlimited) return "unlimited";
  const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  long double v = static_cast<long double>(b);
  int u = 0;
  while (v >= 1024.0L && u < 4) { v /= 1024.0L; ++u; }
  char buf[64];
  if (u == 0 || v == libm::floor(v))
    std::snprintf(buf, sizeof buf, "%.0Lf %s", v, names[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2Lf %s", v, names[u]);
  return u ? detail::cat(detail::msg{buf, " (", b, " B)"}) : std::string(buf);
}

namespace detail {

/// MEMSAFE_BUDGET (core/env.hpp), parsed; nullopt when unset or empty. Throws argument_error when
/// malformed.
inline std::optional<std::size_t> env_budget() {
  const auto e = env::budget();
  if (e.empty()) return std::nullopt;
  return parse_bytes(e);
}

/// True when this translation unit keeps IEEE NaN tests and the order of additions: clang's
/// -fno-honor-nans, and its -fassociative-math (with -fno-signed-zeros -fno-trapping-math, which
/// turn it on), define no macro that config.hpp's #error could test, and under them clang folds
/// memsafe's NaN tests (every min, argmin and k-nearest selection then returned NaN and index −1
/// on clean data) and the rounding steps of its exp/log (an RQ K·v 5 % off). Compiled with the
/// unit's own flags, these two tests fold the same way.
inline bool fp_semantics_ok() {
  volatile double zero = 0.0, x = 2.5;
  const double nan = zero / zero, xv = x;
  return nan != nan && (xv + 0x1.8p52) - 0x1.8p52 == 2.0;
}
[[noreturn]] MEMSAFE_COLD inline void fp_semantics_failed() {
  throw argument_error(
      "memsafe: this translation unit was compiled without IEEE NaN semantics or with reassociation (clang's "
      "-fno-honor-nans, or -fassociative-math with -fno-signed-zeros and -fno-trapping-math): memsafe's NaN tests and "
      "the rounding steps of its exp and log fold away and its results would be wrong. Build the files that include "
      "memsafe without those flags.");
}

/// Resolve the budget of one call following the documented precedence. Every evaluation starts
/// here, so it is also where the floating-point semantics are checked (once per process).
inline std::size_t resolve_budget(std::optional<std::size_t> call_budget) {
  static const bool fp_ok = fp_semantics_ok();
  if (!fp_ok) fp_semantics_failed();
  if (call_budget) {
    if (*call_budget == 0) throw argument_error("memsafe: a budget must be a positive number of bytes");
    return *call_budget;
  }
  if (auto e = env_budget()) return *e;
  return default_budget_bytes;
}

}  // namespace detail
}  // namespace memsafe
