// fma_peak — the machine's measured FP32 FMA peak: every thread runs independent chains of
// 512-bit (AVX-512) or 256-bit (AVX2) fused multiply-adds, enough of them to hide the FMA latency,
// for about a second. Prints one JSON line: threads, vector width, GFLOP/s (2 flops per FMA lane).
// The "% of peak" of the kNN benchmark divides by this number (docs/benchmarks.md).
//   fma_peak [threads]      (default: all cores)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

#if defined(__AVX512F__)
constexpr int lanes = 16;
using vec = __m512;
inline vec set1(float v) { return _mm512_set1_ps(v); }
inline vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float first(vec a) { return _mm512_cvtss_f32(a); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int lanes = 8;
using vec = __m256;
inline vec set1(float v) { return _mm256_set1_ps(v); }
inline vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float first(vec a) { return _mm256_cvtss_f32(a); }
#else
constexpr int lanes = 1;
using vec = float;
inline vec set1(float v) { return v; }
inline vec fma(vec a, vec b, vec c) { return a * b + c; }
inline float first(vec a) { return a; }
#endif

constexpr int chains = 12;  // ≥ latency (4) × FMA ports (2), with room to spare

float run(long iters) {
  vec a[chains];
  for (int i = 0; i < chains; ++i) a[i] = set1(0.001f * float(i));
  const vec b = set1(0.9999f), c = set1(1e-4f);
  for (long t = 0; t < iters; ++t) {
#pragma GCC unroll 12
    for (int i = 0; i < chains; ++i) a[i] = fma(a[i], b, c);
  }
  float s = 0;
  for (int i = 0; i < chains; ++i) s += first(a[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned hc = std::thread::hardware_concurrency();
  const unsigned threads = argc > 1 ? unsigned(std::atoi(argv[1])) : (hc ? hc : 1);
  const long iters = 100000000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> sink(threads);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back([&, t] { sink[t] = run(iters); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double gflops = double(threads) * double(iters) * chains * lanes * 2 / s / 1e9;
    if (gflops > best) best = gflops;
    if (sink[0] == 12345.f) std::puts("");  // keep the results alive
  }
  std::printf("{\"bench\": \"fma_peak\", \"threads\": %u, \"lanes\": %d, \"fp32_gflops\": %.1f}\n", threads, lanes, best);
}
