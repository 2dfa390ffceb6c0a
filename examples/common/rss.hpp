// Resident-set-size probes (Linux).
//   max_rss_bytes():     peak RSS of this process so far (getrusage ru_maxrss, KiB -> bytes)
//   current_rss_bytes(): RSS now (/proc/self/statm, resident pages x page size);
//                        0 if /proc is unavailable.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <memsafe/core/budget.hpp>

namespace memsafe_examples {

inline std::size_t max_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<std::size_t>(ru.ru_maxrss) * 1024u;  // Linux reports KiB
}

inline std::size_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size_pages = 0, resident_pages = 0;
  int got = std::fscanf(f, "%lu %lu", &size_pages, &resident_pages);
  std::fclose(f);
  if (got != 2) return 0;
  long page = sysconf(_SC_PAGESIZE);
  return static_cast<std::size_t>(resident_pages) * static_cast<std::size_t>(page > 0 ? page : 4096);
}

}  // namespace memsafe_examples

namespace memsafe_examples {
/// The memory contract seen from outside: with `--rss-slack S`, the process's peak resident
/// memory must stay at or below inputs + budget + S (S covers the program itself, libc and
/// outputs; S = 0 is accepted, a strict limit).
struct rss_limit {
  bool enabled = false;
  std::size_t limit = 0;
  bool pass(std::size_t max_rss) const { return !enabled || max_rss <= limit; }
  const char* verdict(std::size_t max_rss) const { return !enabled ? "skipped" : (pass(max_rss) ? "pass" : "fail"); }
  /// The JSON line's fields: rss_limit_bytes (when enabled) and rss_check.
  template <class Json>
  void add_to(Json& j, std::size_t max_rss) const {
    if (enabled) j.add("rss_limit_bytes", limit);
    j.add("rss_check", verdict(max_rss));
  }
  /// An example's last step: the RSS fields added, the JSON line printed, and its exit status
  /// (0 only when its own check `pass`ed and the RSS stayed within the limit).
  template <class Json>
  int finish(Json& j, std::size_t max_rss, bool pass) const {
    add_to(j, max_rss);
    j.print();
    return pass && this->pass(max_rss) ? 0 : 1;
  }
};

/// The bytes of an --rss-slack: memsafe::parse_bytes's forms ("40MiB", "100 MB", "4096",
/// "unlimited"), and also zero ("0", "0MiB", …), a strict limit: peak RSS ≤ inputs + budget.
/// Throws memsafe::argument_error with a message about the slack.
inline std::size_t parse_slack_bytes(const std::string& text) {
  return memsafe::detail::parse_byte_count(text, "the slack", true);
}

inline rss_limit make_rss_limit(const std::string& slack_text, std::size_t input_bytes, std::size_t budget_bytes) {
  rss_limit r;
  if (slack_text.empty()) return r;
  r.enabled = true;
  // saturating: an unlimited budget (or slack) is SIZE_MAX, and bounds nothing
  const std::size_t slack = parse_slack_bytes(slack_text);
  if (__builtin_add_overflow(input_bytes, budget_bytes, &r.limit) || __builtin_add_overflow(r.limit, slack, &r.limit))
    r.limit = SIZE_MAX;
  return r;
}
}  // namespace memsafe_examples
