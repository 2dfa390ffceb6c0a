// memsafe/core/error.hpp — the exceptions memsafe throws.
#pragma once
#include <cstddef>
#include <cstdio>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "config.hpp"

namespace memsafe {

/// Base of every memsafe exception but out_of_memory (below).
struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Extents that do not fit together (X's d vs Y's d, v's length vs the matrix, …).
struct shape_error : error {
  using error::error;
};

/// Invalid values: k out of range, non-positive lengthscale, null data, bad budget text.
struct argument_error : error {
  using error::error;
};

/// The budget cannot hold the smallest workable plan. Thrown before anything is allocated.
struct budget_error : error {
  std::size_t budget_bytes = 0;
  std::size_t minimum_bytes = 0;
  budget_error(const std::string& what, std::size_t budget, std::size_t minimum)
      : error(what), budget_bytes(budget), minimum_bytes(minimum) {}
};

/// Memory that the plan fits in could not be had from the system: eval's result (the caller's
/// memory, outside the budget), or a temporary within a budget larger than the machine can give.
/// A std::bad_alloc, as every out-of-memory is, whose what() says what was asked for and what to do;
/// not a memsafe::error (an exception that were both would make `catch (const std::exception&)`
/// ambiguous, and match nothing). Thrown after planning, before any work.
struct out_of_memory : std::bad_alloc {
  std::size_t bytes = 0;  ///< what could not be allocated
  out_of_memory(const std::string& what, std::size_t b) : bytes(b), what_(what) {}
  const char* what() const noexcept override { return what_.what(); }

 private:
  std::runtime_error what_;  // its copies share the text and cannot throw
};

namespace detail {

/// One piece of a message for detail::cat: text as it is, or a number written as std::to_string
/// writes it (decimal integers; "%f" for floating point of moderate magnitude, "%.6g" for the
/// rest). Built in place in cat's braced list.
class msg_piece {
 public:
  msg_piece(const char* s) : v_(s) {}
  msg_piece(std::string_view s) : v_(s) {}
  msg_piece(const std::string& s) : v_(s) {}
  template <class I>
    requires std::is_integral_v<I> && (!std::is_same_v<I, bool>) && (!std::is_same_v<I, char>)
  msg_piece(I i) {
    if constexpr (std::is_signed_v<I>) set(static_cast<long long>(i));
    else set_unsigned(static_cast<unsigned long long>(i), false);
  }
  /// "%f" (std::to_string's format) where it shows the value's leading digits: 0, ±∞, NaN and
  /// 1e-4 ≤ |x| < 1e16; else "%.6g" — "%f" would write 1e-9 as 0.000000 (a misleading "got
  /// -0.000000" for a tiny negative parameter) and 1e300 as 301 digits.
  msg_piece(double x) {
    const double a = x < 0 ? -x : x;
    const bool fixed = x != x || a == 0 || a > 1.7976931348623157e308 || (a >= 1e-4 && a < 1e16);
    const int n = std::snprintf(buf_, sizeof buf_, fixed ? "%f" : "%.6g", x);
    v_ = {static_cast<const char*>(buf_), static_cast<std::size_t>(n)};
  }
  msg_piece(const msg_piece&) = delete;
  msg_piece& operator=(const msg_piece&) = delete;
  std::string_view view() const { return v_; }

 private:
  void set(long long i) {
    set_unsigned(i < 0 ? 0ull - static_cast<unsigned long long>(i) : static_cast<unsigned long long>(i), i < 0);
  }
  void set_unsigned(unsigned long long u, bool minus) {
    char* e = buf_ + sizeof buf_;
    char* b = e;
    do *--b = static_cast<char>('0' + u % 10);
    while (u /= 10);
    if (minus) *--b = '-';
    v_ = {static_cast<const char*>(b), static_cast<std::size_t>(e - b)};
  }
  // v_ is always made from a `const char*`: std::string_view's constructors from a `char*` and a
  // length include C++20's (iterator, sentinel) template, whose constraint check on `char*` (the
  // contiguous_iterator machinery) is ≈ 58 M compiler instructions (g++ 12) the first time a
  // translation unit needs it.
  char buf_[32];  // "%f" below 1e16 (17 digits, the point and six decimals), or "%.6g"
  std::string_view v_;
};

/// The pieces of one message: `cat(msg{"memsafe: ", what, ": ", n, " rows"})`. Spelled with its
/// type, not as a bare braced list: nvcc's front end writes a bare `f({…})` inside a template
/// back out as `f(({…}))`, which the host compiler reads as a GNU statement expression.
using msg = std::initializer_list<msg_piece>;

/// The pieces one after the other: what the library's messages are built with. One out-of-line
/// function instead of a chain of std::string operator+ at every message: each such chain was
/// ≈ 40 million compiler instructions (g++ 12 -O2) in every translation unit that compiled it.
[[gnu::noinline]] MEMSAFE_COLD inline std::string cat(msg parts) {
  std::size_t n = 0;
  for (const msg_piece& p : parts) n += p.view().size();
  std::string s(n, '\0');
  char* out = s.data();
  for (const msg_piece& p : parts) {
    std::char_traits<char>::copy(out, p.view().data(), p.view().size());
    out += p.view().size();
  }
  return s;
}

}  // namespace detail

}  // namespace memsafe
