// Tiny command-line parser for the memsafe examples.
//
//   memsafe_examples::cli args("knn", "k-nearest neighbours with a memory budget");
//   args.option("n", "100000", "database size")
//       .flag("verbose", "print more");
//   args.parse(argc, argv);            // exits 2 on a bad command line, 0 after --help
//   auto n = args.get_uint("n");       // the declared default unless --n was given
//   bool explicit_n = args.given("n");
//
// Accepted forms: `--name value`, `--name=value`, `--flag`.  An unknown option
// prints a message and the list of valid options to stderr and exits with status 2;
// a missing value, an unparsable number or a value the program refuses (fail())
// prints a one-line message with a hint to run --help, and exits with status 2.
// `--help` / `-h` prints usage to stdout and exits with status 0.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace memsafe_examples {

class cli {
 public:
  explicit cli(std::string program, std::string summary = {})
      : program_(std::move(program)), summary_(std::move(summary)) {}

  // Declares `--name value`.  `default_value` is used when the option is absent
  // (an empty default means "no default": use given() or a getter's fallback).
  cli& option(std::string name, std::string default_value, std::string help) {
    opts_.push_back({std::move(name), std::move(default_value), std::move(help), false, {}});
    return *this;
  }

  // Declares a boolean `--name` that takes no value.
  cli& flag(std::string name, std::string help) {
    opts_.push_back({std::move(name), {}, std::move(help), true, {}});
    return *this;
  }

  void parse(int argc, char** argv) {
    for (int a = 1; a < argc; ++a) {
      std::string_view arg = argv[a];
      if (arg == "--help" || arg == "-h") {
        std::fputs(usage().c_str(), stdout);
        std::exit(0);
      }
      if (arg.size() < 3 || arg.substr(0, 2) != "--")
        fail("unexpected argument '" + std::string(arg) + "'");
      arg.remove_prefix(2);
      std::optional<std::string_view> inline_value;
      if (auto eq = arg.find('='); eq != std::string_view::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
      entry* e = find(arg);
      if (e == nullptr) fail_listing("unknown option '--" + std::string(arg) + "'");
      if (e->is_flag) {
        if (inline_value) fail("option '--" + e->name + "' takes no value");
        e->value = "1";
      } else if (inline_value) {
        e->value = std::string(*inline_value);
      } else {
        if (a + 1 >= argc) fail("option '--" + e->name + "' needs a value");
        e->value = argv[++a];
      }
    }
  }

  // True if the option was given on the command line.
  bool given(std::string_view name) const { return get_entry(name).value.has_value(); }

  // True if the program declared the option (or flag) `name`.
  bool declared(std::string_view name) const {
    for (const auto& e : opts_)
      if (e.name == name) return true;
    return false;
  }

  bool get_flag(std::string_view name) const {
    const entry& e = get_entry(name);
    return e.is_flag && e.value.has_value();
  }

  std::string get_string(std::string_view name) const { return raw(name); }
  std::string get_string(std::string_view name, std::string fallback) const {
    return given(name) ? raw(name) : std::move(fallback);
  }

  std::int64_t get_int(std::string_view name) const { return to_int(name, raw(name)); }
  std::int64_t get_int(std::string_view name, std::int64_t fallback) const {
    return given(name) ? get_int(name) : fallback;
  }

  std::uint64_t get_uint(std::string_view name) const {
    std::int64_t v = get_int(name);
    if (v < 0) fail("option '--" + std::string(name) + "' must not be negative");
    return static_cast<std::uint64_t>(v);
  }
  std::uint64_t get_uint(std::string_view name, std::uint64_t fallback) const {
    return given(name) ? get_uint(name) : fallback;
  }

  double get_double(std::string_view name) const { return to_double(name, raw(name)); }
  double get_double(std::string_view name, double fallback) const {
    return given(name) ? get_double(name) : fallback;
  }

  // The value, which must be one of `choices`; otherwise exits 2 listing them.
  std::string get_choice(std::string_view name, std::initializer_list<std::string_view> choices) const {
    std::string v = raw(name);
    std::string list;
    for (std::string_view c : choices) {
      if (v == c) return v;
      if (!list.empty()) list += '|';
      list += c;
    }
    fail("option '--" + std::string(name) + "' must be one of " + list + ", not '" + v + "'");
  }

  // Prints "<program>: error: <msg>" and a hint to stderr, exits with status 2.
  [[noreturn]] void fail(const std::string& msg) const {
    std::fprintf(stderr, "%s: error: %s (run '%s --help' for usage)\n", program_.c_str(), msg.c_str(),
                 program_.c_str());
    std::exit(2);
  }

  // Like fail(), but lists every valid option.
  [[noreturn]] void fail_listing(const std::string& msg) const {
    std::fprintf(stderr, "%s: error: %s\nvalid options:\n%s", program_.c_str(), msg.c_str(),
                 option_list().c_str());
    std::exit(2);
  }

  std::string usage() const {
    std::string u = "usage: " + program_ + " [options]\n";
    if (!summary_.empty()) u += summary_ + "\n";
    u += "options:\n" + option_list();
    return u;
  }

 private:
  struct entry {
    std::string name, default_value, help;
    bool is_flag;
    std::optional<std::string> value;
  };

  entry* find(std::string_view name) {
    for (auto& e : opts_)
      if (e.name == name) return &e;
    return nullptr;
  }

  const entry& get_entry(std::string_view name) const {
    for (const auto& e : opts_)
      if (e.name == name) return e;
    // A programming error in the example, not a user error.
    std::fprintf(stderr, "%s: internal error: option '--%.*s' was never declared\n", program_.c_str(),
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }

  std::string raw(std::string_view name) const {
    const entry& e = get_entry(name);
    if (e.value) return *e.value;
    return e.default_value;
  }

  std::int64_t to_int(std::string_view name, const std::string& s) const {
    std::int64_t v = 0;
    const char* first = s.data();
    const char* last = s.data() + s.size();
    if (!s.empty() && s[0] == '+') ++first;
    auto [p, ec] = std::from_chars(first, last, v);
    if (ec == std::errc() && p == last && first != last) return v;
    // Accept integral floating notation such as 1e6.
    double d = 0;
    auto [pd, ecd] = std::from_chars(first, last, d);
    if (ecd == std::errc() && pd == last && first != last && std::isfinite(d) && d == std::floor(d) &&
        std::fabs(d) < 9.0e18)
      return static_cast<std::int64_t>(d);
    fail("option '--" + std::string(name) + "' expects an integer, got '" + s + "'");
  }

  double to_double(std::string_view name, const std::string& s) const {
    double v = 0;
    const char* first = s.data();
    const char* last = s.data() + s.size();
    if (!s.empty() && s[0] == '+') ++first;
    auto [p, ec] = std::from_chars(first, last, v);
    if (ec == std::errc() && p == last && first != last && std::isfinite(v)) return v;
    fail("option '--" + std::string(name) + "' expects a number, got '" + s + "'");
  }

  std::string option_list() const {
    std::string out;
    for (const auto& e : opts_) {
      std::string left = "  --" + e.name + (e.is_flag ? "" : " <value>");
      if (left.size() < 26) left.resize(26, ' ');
      else left += ' ';
      out += left + e.help;
      if (!e.is_flag && !e.default_value.empty()) out += " (default " + e.default_value + ")";
      out += '\n';
    }
    out += "  --help                  print this message\n";
    return out;
  }

  std::string program_, summary_;
  std::vector<entry> opts_;
};

}  // namespace memsafe_examples
