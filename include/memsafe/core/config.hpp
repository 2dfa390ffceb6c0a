// memsafe/core/config.hpp — basic types shared by every stage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

// -ffast-math (and -Ofast, -fassociative-math, -ffinite-math-only) lets the compiler fold away the
// rounding steps of memsafe's exp and log ((v + 2^52·1.5) − 2^52·1.5 becomes v) and its NaN and
// infinity tests: built with -ffast-math, an RBF K·v came out 4 % off, silently, and gp::sgpr found
// a valid Kuu not positive definite. So such a build stops here. -fno-math-errno and
// -ffp-contract=fast are safe (the project's own builds use the first).
#if !defined(__CUDA_ARCH__) && (defined(__FAST_MATH__) || defined(__ASSOCIATIVE_MATH__) || \
                                (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__))
#error "memsafe cannot be compiled with -ffast-math, -Ofast, -fassociative-math or -ffinite-math-only: they fold away the rounding steps of its exp/log and its NaN/infinity checks, which gives wrong results. Build the files that include memsafe without them (e.g. add -fno-fast-math); -fno-math-errno and -ffp-contract=fast are safe."
#endif

// C++20 (concepts, designated initialisers, std::span) and exceptions (every error is an exception
// that the caller can catch; there is no error-code mode): said here rather than by the first
// construct that needs them.
#if !defined(__CUDA_ARCH__) && __cplusplus < 202002L
#error "memsafe needs C++20: compile with -std=c++20 (or later)"
#endif
#if !defined(__CUDA_ARCH__) && !defined(__cpp_exceptions)
#error "memsafe reports every error as a C++ exception: it cannot be compiled with -fno-exceptions"
#endif

#ifndef MEMSAFE_HD
#if defined(__CUDACC__)
#define MEMSAFE_HD __host__ __device__
#else
#define MEMSAFE_HD
#endif
#endif

/// Run once per evaluation, never in a loop over tiles (planners, stats, descriptions): GCC and
/// Clang optimise it for size and lay it out apart from the hot code, which also costs less
/// compile time (docs/design.md, "Compile time").
#ifndef MEMSAFE_COLD
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define MEMSAFE_COLD [[gnu::cold]]
#else
#define MEMSAFE_COLD
#endif
#endif

namespace memsafe {

/// Marker for an extent known only at run time.
inline constexpr std::size_t dyn = std::numeric_limits<std::size_t>::max();

/// Index type of results (argmin, top-k): always 64-bit, never a float.
using index_t = std::int64_t;

/// Floating-point types the library evaluates.
template <class T>
concept real = std::is_same_v<std::remove_cv_t<T>, float> || std::is_same_v<std::remove_cv_t<T>, double>;

namespace detail {
template <class...>
inline constexpr bool always_false = false;

/// η_T, the absolute term every screen adds to its threshold, for gradual underflow (the proof:
/// backend/host/select.hpp, "Underflow"; the host's screens and the CUDA screen's margin in
/// backend/cuda/kernels_screen.cuh): 2⁻¹⁰⁰ for float, 2⁻¹⁰⁰⁰ for double.
template <class T>
MEMSAFE_HD constexpr double screen_eta() {
  return sizeof(T) == 4 ? 0x1p-100 : 0x1p-1000;
}
}  // namespace detail

}  // namespace memsafe
