// exp_peak — the machine's vector exp throughput with memsafe's exp (core/math.hpp), the ceiling of
// every fused kernel sum whose formula takes one exp per pair (rbf, matern, logsumexp, softmax_sum).
// For each instruction set this CPU runs (the host kernels' own: avx512, avx2, portable = the
// translation unit's target), every thread maps exp over an L1-resident array of 4096 values in
// [−20, 0] in 64-byte panels, as sum_kernel.inc evaluates a formula, and adds the results up (so
// nothing is optimised away), for about half a second; best of 3. Prints one JSON line per
// (instruction set, type): threads, G exp/s.
//   exp_peak [threads]      (default: all cores)
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memsafe/memsafe.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t N = 4096;

/// Σ exp(x) over n values, `reps` times: the map runs panel by panel (W = 64 bytes of T) into
/// per-lane accumulators, like the fused sums' kernel.
#define MEMSAFE_EXP_RUN                                                            \
  template <class T>                                                             \
  double exp_run(const T* x, std::size_t n, long reps) {                          \
    constexpr std::size_t W = 64 / sizeof(T);                                     \
    T acc[W] = {};                                                               \
    for (long r = 0; r < reps; ++r)                                              \
      for (std::size_t j = 0; j < n; j += W) {                                    \
        T e[W];                                                                  \
        for (std::size_t w = 0; w < W; ++w) e[w] = memsafe::math::exp(x[j + w]); \
        for (std::size_t w = 0; w < W; ++w) acc[w] += e[w];                       \
      }                                                                          \
    double s = 0;                                                                \
    for (std::size_t w = 0; w < W; ++w) s += acc[w];                              \
    return s;                                                                    \
  }

namespace portable {
MEMSAFE_EXP_RUN
}
#if defined(MEMSAFE_SIMD_DISPATCH)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
MEMSAFE_EXP_RUN
}
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
namespace avx512 {
MEMSAFE_EXP_RUN
}
#pragma GCC pop_options
#endif

template <class T>
double run(memsafe::host::isa i, const T* x, long reps) {
#if defined(MEMSAFE_SIMD_DISPATCH)
  if (i == memsafe::host::isa::avx512) return avx512::exp_run(x, N, reps);
  if (i == memsafe::host::isa::avx2) return avx2::exp_run(x, N, reps);
#endif
  (void)i;
  return portable::exp_run(x, N, reps);
}

template <class T>
void measure(memsafe::host::isa i, unsigned threads, const char* type) {
  std::vector<T> x(N);
  for (std::size_t j = 0; j < N; ++j) x[j] = T(-20.0 * double(j) / double(N));
  // Calibrate to about half a second on one thread.
  long reps = 16;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    volatile double s = run(i, x.data(), reps);
    (void)s;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 0.1) break;
    reps *= 2;
  }
  reps *= 5;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> sink(threads);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back([&, t] { sink[t] = run(i, x.data(), reps); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double g = double(threads) * double(reps) * double(N) / s / 1e9;
    if (g > best) best = g;
    if (sink[0] == 12345.0) std::puts("");  // keep the results alive
  }
  std::printf("{\"bench\": \"exp_peak\", \"isa\": \"%s\", \"type\": \"%s\", \"threads\": %u, \"gexp_per_s\": %.3f}\n",
              memsafe::host::isa_name(i), type, threads, best);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned hc = std::thread::hardware_concurrency();
  const unsigned threads = argc > 1 ? unsigned(std::atoi(argv[1])) : (hc ? hc : 1);
  const unsigned have = memsafe::host::isa_compiled & memsafe::host::cpu_isas();
  for (memsafe::host::isa i : memsafe::host::isa_all) {
    if (!(have & memsafe::host::isa_bit(i))) continue;
    measure<float>(i, threads, "f32");
    measure<double>(i, threads, "f64");
  }
}
