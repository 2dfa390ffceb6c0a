// Deterministic synthetic data and precision selection for the examples.
//
//   auto X = normal_matrix<float>(n, d, seed, /*stream=*/0);   // n*d values ~ N(0,1)
//   auto v = normal_matrix<float>(n, 1, seed, /*stream=*/1);
//
// The engine is std::mt19937_64 seeded with std::seed_seq{seed_lo, seed_hi, stream},
// drawing std::normal_distribution<double> and rounding to T, so f32 and f64 runs
// with the same seed see the same numbers (up to rounding) and different streams
// are independent.  (std::normal_distribution is implementation-defined, so the
// exact values are reproducible for a given standard library, here libstdc++.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace memsafe_examples {

/// $MEMSAFE_DATA_DIR/<sub> if that variable is set and non-empty, otherwise
/// MEMSAFE_DEFAULT_DATA_DIR/<sub> (a compile-time macro set by the build), otherwise
/// "../shared/data/<sub>" relative to the working directory.
inline std::string default_data_subdir(const char* sub) {
  if (const char* env = std::getenv("MEMSAFE_DATA_DIR"); env != nullptr && *env != '\0')
    return std::string(env) + "/" + sub;
#ifdef MEMSAFE_DEFAULT_DATA_DIR
  return std::string(MEMSAFE_DEFAULT_DATA_DIR) + "/" + sub;
#else
  return std::string("../shared/data/") + sub;
#endif
}

inline std::mt19937_64 make_engine(std::uint64_t seed, std::uint64_t stream) {
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)};
  return std::mt19937_64(seq);
}

// n x d row-major array of N(0,1) draws.
template <class T>
std::vector<T> normal_matrix(std::size_t n, std::size_t d, std::uint64_t seed, std::uint64_t stream = 0) {
  static_assert(std::is_floating_point_v<T>);
  std::mt19937_64 eng = make_engine(seed, stream);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<T> out(n * d);
  for (auto& x : out) x = static_cast<T>(dist(eng));
  return out;
}

enum class precision { f32, f64 };

inline precision parse_precision(std::string_view s) {
  if (s == "f32" || s == "float") return precision::f32;
  if (s == "f64" || s == "double") return precision::f64;
  throw std::invalid_argument("precision must be f32 or f64, not '" + std::string(s) + "'");
}

inline const char* precision_name(precision p) { return p == precision::f32 ? "f32" : "f64"; }

template <class T>
constexpr const char* precision_name() {
  return std::is_same_v<T, float> ? "f32" : "f64";
}

template <class T>
struct type_tag {
  using type = T;
};

// Calls f(type_tag<float>{}) or f(type_tag<double>{}) and returns its result.
template <class F>
decltype(auto) dispatch_precision(precision p, F&& f) {
  if (p == precision::f32) return f(type_tag<float>{});
  return f(type_tag<double>{});
}

}  // namespace memsafe_examples
