// memsafe/core/clock.hpp — a monotonic clock for the stats' seconds, without <chrono>.
//
// POSIX clock_gettime where there is one: under C++20 libstdc++ 12's <chrono> includes <sstream>
// (its formatting of durations), ≈ 0.1 s of parsing in every translation unit that includes it
// (docs/design.md, "Compile time"). Elsewhere std::chrono::steady_clock.
#pragma once
#if __has_include(<time.h>)
#include <time.h>
#endif
#if !defined(CLOCK_MONOTONIC)
#include <chrono>
#endif

namespace memsafe::detail {

/// Seconds on a monotonic clock (differences only).
inline double monotonic_seconds() {
#if defined(CLOCK_MONOTONIC)
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
#else
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
#endif
}

}  // namespace memsafe::detail
