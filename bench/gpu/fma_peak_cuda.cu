// fma_peak_cuda — the GPU's FP32 peak: computed from the device's attributes (SMs × FP32 lanes per
// SM × 2 flops × the peak clock) and measured with a kernel in which every thread runs independent
// chains of fmaf, enough resident warps and chains to hide the FMA latency, for about half a
// second per launch (best of 5). Prints one JSON line. The GPU "% of peak" of docs/benchmarks.md
// divides by the measured number ("fp32_gflops"); "theoretical_fp32_gflops" is the data-sheet-style
// one (the clock attribute is the boost clock, which a long FMA run need not sustain).
//   fma_peak_cuda [device]      (default 0)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr int chains = 8;
constexpr int threads_per_block = 256;

__global__ void fma_chains(float* sink, long long iters, float b, float c) {
  float a[chains];
#pragma unroll
  for (int i = 0; i < chains; ++i) a[i] = 1e-3f * static_cast<float>(threadIdx.x + i);
#pragma unroll 8
  for (long long t = 0; t < iters; ++t) {
#pragma unroll
    for (int i = 0; i < chains; ++i) a[i] = fmaf(a[i], b, c);
  }
  float s = 0;
#pragma unroll
  for (int i = 0; i < chains; ++i) s += a[i];
  if (s == 12345.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps every chain alive
}

// FP32 lanes per SM by compute capability (CUDA C Programming Guide, "Arithmetic Instructions");
// 0 when unknown.
int fp32_lanes_per_sm(int major, int minor) {
  if (major == 6) return minor == 0 ? 64 : 128;
  if (major == 7 || (major == 8 && minor == 0)) return 64;
  if (major == 5 || major >= 8) return 128;
  return 0;
}

void print_unavailable(const std::string& why) {
  std::printf("{\"bench\": \"fma_peak_cuda\", \"status\": \"unavailable\", \"message\": \"%s\"}\n", why.c_str());
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("{\"bench\": \"fma_peak_cuda\", \"status\": \"error\", \"message\": \"%s: %s\"}\n", what,
              cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const int dev = argc > 1 ? std::atoi(argv[1]) : 0;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    print_unavailable("no usable CUDA device");
    return 0;
  }
  if (dev < 0 || dev >= count) {
    print_unavailable("no device " + std::to_string(dev));
    return 0;
  }
  cudaDeviceProp p{};
  int clock_khz = 0;
  if (!ok(cudaSetDevice(dev), "cudaSetDevice") || !ok(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties") ||
      !ok(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev), "cudaDeviceGetAttribute"))
    return 1;
  const int lanes = fp32_lanes_per_sm(p.major, p.minor);
  const double theoretical = double(p.multiProcessorCount) * lanes * 2.0 * clock_khz * 1e3 / 1e9;

  const int blocks = p.multiProcessorCount * std::max(1, p.maxThreadsPerMultiProcessor / threads_per_block);
  float* sink = nullptr;
  cudaEvent_t e0, e1;
  if (!ok(cudaMalloc(&sink, sizeof(float) * blocks * threads_per_block), "cudaMalloc") ||
      !ok(cudaEventCreate(&e0), "cudaEventCreate") || !ok(cudaEventCreate(&e1), "cudaEventCreate"))
    return 1;
  auto launch = [&](long long iters) -> double {  // seconds
    cudaEventRecord(e0);
    fma_chains<<<blocks, threads_per_block>>>(sink, iters, 0.9999f, 1e-4f);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms / 1e3;
  };
  long long iters = 1 << 14;
  double s = launch(iters);  // warm-up and calibration: aim at about 0.5 s per launch
  while (s < 0.05 && iters < (1LL << 40)) {
    iters *= 4;
    s = launch(iters);
  }
  iters = std::max<long long>(1, static_cast<long long>(static_cast<double>(iters) * 0.5 / s));
  if (!ok(cudaGetLastError(), "fma_chains")) return 1;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t = launch(iters);
    const double flops = double(blocks) * threads_per_block * double(iters) * chains * 2.0;
    best = std::max(best, flops / t / 1e9);
  }
  if (!ok(cudaGetLastError(), "fma_chains")) return 1;
  char theo[32] = "null";  // unknown lanes per SM: no theoretical peak
  if (lanes > 0) std::snprintf(theo, sizeof theo, "%.1f", theoretical);
  std::printf("{\"bench\": \"fma_peak_cuda\", \"status\": \"ok\", \"device\": \"%s\", \"compute_capability\": \"%d.%d\", "
              "\"sm_count\": %d, \"clock_mhz\": %.0f, \"fp32_lanes_per_sm\": %d, \"theoretical_fp32_gflops\": %s, "
              "\"fp32_gflops\": %.1f, \"blocks\": %d, \"threads_per_block\": %d, \"chains\": %d, \"iters\": %lld}\n",
              p.name, p.major, p.minor, p.multiProcessorCount, clock_khz / 1e3, lanes, theo, best, blocks,
              threads_per_block, chains, iters);
  cudaFree(sink);
  return 0;
}
