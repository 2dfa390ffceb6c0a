// memsafe/backend/cuda/plan.cuh — options, device resources, kernel paths, and the byte models and
// layout searches of the GPU backend (row jobs and lazy × lazy products); no allocation, no launch.
#pragma once
#include <algorithm>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/budget.hpp"
#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "device_expr.cuh"
#include "kernels_fold.cuh"
#include "runtime.cuh"

namespace memsafe::cuda {

/// Options of a device evaluation.
struct options {
  std::optional<std::size_t> budget;  ///< bytes of device + pinned temporaries; unset: MEMSAFE_BUDGET, then default
  cudaStream_t stream = nullptr;      ///< the work is ordered on this stream (null: an internal stream)
  bool allow_tf32 = false;            ///< let cuBLAS use TF32 tensor cores for FP32 GEMM tiles
  bool synchronize = true;            ///< wait for the stream before returning (false: device outputs only)
};

/// What a plan depends on about the device: queried once per evaluation from the current device
/// (device_resources::current()), or given to plan_for to plan for a device that is not present.
struct device_resources {
  int sms = 0;                   ///< streaming multiprocessors (the column splits fill 4 blocks per SM)
  std::size_t memory_bytes = 0;  ///< global memory of the device (reported; the budget bounds the plan)

  /// The current device's resources; cuda_error when there is no usable device.
  static device_resources current();
};

namespace detail {
/// cuda_error naming what was asked for, when no device answers.
[[noreturn]] inline void no_device(cudaError_t e) {
  (void)cudaGetLastError();
  throw cuda_error(std::string("memsafe::cuda: no usable CUDA device (") + cudaGetErrorString(e) +
                       "); to plan for a device that is not present, pass memsafe::cuda::device_resources{sms, "
                       "memory_bytes} to memsafe::cuda::plan_for",
                   int(e));
}
}  // namespace detail

inline device_resources device_resources::current() {
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) detail::no_device(e);
  // Properties of each device ordinal are read once per process.
  static std::mutex mu;
  static std::vector<std::optional<device_resources>> known;
  const std::lock_guard<std::mutex> lock(mu);
  if (known.size() <= std::size_t(dev)) known.resize(std::size_t(dev) + 1);
  if (!known[std::size_t(dev)]) {
    device_resources r;
    if (const cudaError_t e = cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess)
      detail::no_device(e);
    cudaDeviceProp prop{};
    if (const cudaError_t e = cudaGetDeviceProperties(&prop, dev); e != cudaSuccess) detail::no_device(e);
    r.memory_bytes = prop.totalGlobalMem;
    known[std::size_t(dev)] = r;
  }
  return *known[std::size_t(dev)];
}

namespace detail {

using jobs::rows_lowering;

enum class kernel_path { fused, tile_fold, tile_topk, tile_matmul, tile_softmax, tile_dense, product };
inline const char* path_name(kernel_path p) {
  switch (p) {
    case kernel_path::fused: return "fused pairwise map-reduce (no tile)";
    case kernel_path::tile_fold: return "tile, then per-row fold";
    case kernel_path::tile_topk: return "tile, then top-k merge by block radix sort";
    case kernel_path::tile_matmul: return "tile, then cuBLAS GEMM accumulation";
    case kernel_path::tile_softmax: return "tile, online softmax, cuBLAS GEMM accumulation";
    case kernel_path::tile_dense: return "tiles stored to the output";
    default: return "lazy x lazy: tiles of both factors, cuBLAS GEMM accumulation";
  }
}

inline constexpr int fused_tj = 128;                ///< points of Y per shared-memory tile (= threads)
inline constexpr std::size_t fused_max_d = 64;      ///< coordinates held in registers
inline constexpr int fused_max_k = 16;              ///< top-k kept in registers
inline constexpr std::size_t topk_max_k = 2048;     ///< top-k by block sort (capacity 4096)

inline std::size_t rnd(std::size_t b) { return device_accountant::round(b); }
inline std::size_t cdiv(std::size_t a, std::size_t b) { return (a + b - 1) / b; }
/// Bytes of a feeder of `slots` blocks of rows × cols (device + pinned; none for device data).
inline std::size_t feeder_bytes(bool host, int slots, std::size_t rows, std::size_t cols, std::size_t tsize) {
  if (!host || rows * cols == 0) return 0;
  return std::size_t(slots) * 2 * rnd(rows * cols * tsize);
}

// ---- classification of the reduction --------------------------------------------------------------

/// The reduction tags (lower/job.hpp) the device implements: all of them.
template <class R, class T>
inline constexpr bool red_known =
    std::is_same_v<R, red::sum> || std::is_same_v<R, red::min> || std::is_same_v<R, red::max> ||
    std::is_same_v<R, red::argmin> || std::is_same_v<R, red::argmax> || std::is_same_v<R, red::argkmin> ||
    std::is_same_v<R, red::argkmax> || std::is_same_v<R, red::logsumexp> || std::is_same_v<R, red::matmul<T>> ||
    std::is_same_v<R, red::softmax_sum<T>> || std::is_same_v<R, red::dense>;

/// Columns of the output per row, and the dense column operand (v, M or V) if any.
template <class R, class T>
std::size_t out_cols(const R& r, std::size_t m) {
  if constexpr (requires { r.k; }) return r.k;
  else if constexpr (requires { r.rhs; }) return r.rhs.cols();
  else if constexpr (requires { r.values; }) return r.values.cols();
  else if constexpr (std::is_same_v<R, red::dense>) return m;
  else return 1;
}
template <class R, class T>
matrix_view<const T> column_operand(const R& r) {
  if constexpr (requires { r.rhs; }) return r.rhs;
  else if constexpr (requires { r.values; }) return r.values;
  else return {nullptr, 0, 0};
}

// ---- row jobs: byte model and layout search --------------------------------------------------------

/// Everything the byte model needs about one evaluation.
struct job_shape {
  std::size_t n = 0, m = 0, d = 0, c = 1, k = 0, tsize = 4, state_bytes = 8;
  bool x_host = false, y_host = false, rhs_host = false, out_host = false, ard = false, gemm = false;
  bool with_index = false;
  std::size_t rhs_cols = 0;
  kernel_path path = kernel_path::fused;
  int rows_per_thread = 1;
  int sms = 0;  ///< from device_resources
};

struct layout {
  std::size_t ti = 0, tj = 0;
  int splits = 1;
  std::size_t bytes = 0;
};

/// Exact bytes of device and pinned temporaries for a layout (each allocation rounded to 256).
inline std::size_t layout_bytes(const job_shape& s, std::size_t ti, std::size_t tj, int S) {
  const std::size_t T = s.tsize;
  std::size_t b = 0;
  if (s.ard) b += rnd(s.d * T);
  b += feeder_bytes(s.x_host, 1, ti, s.d, T);
  b += feeder_bytes(s.y_host, 2, tj, s.d, T);
  if (s.rhs_cols) b += feeder_bytes(s.rhs_host, 2, tj, s.rhs_cols, T);
  const bool tile = s.path != kernel_path::fused;
  const bool uses_blas = s.gemm || s.path == kernel_path::tile_matmul || s.path == kernel_path::tile_softmax;
  if (uses_blas) b += rnd(blas::workspace_bytes);
  if (tile && !(s.path == kernel_path::tile_dense && !s.out_host)) b += rnd(ti * tj * T);
  if (tile && s.gemm) b += rnd(ti * T) + rnd(tj * T);
  switch (s.path) {
    case kernel_path::fused:
    case kernel_path::tile_fold: b += rnd(ti * std::size_t(S) * s.state_bytes); break;
    case kernel_path::tile_topk: b += rnd(ti * s.k * sizeof(rank_key)); break;
    case kernel_path::tile_matmul: b += rnd(ti * s.c * T); break;
    case kernel_path::tile_softmax: b += rnd(ti * s.c * T) + rnd(ti * sizeof(kernels::softmax_state)); break;
    default: break;
  }
  // Host outputs: each row block's results are staged on the device and in pinned memory.
  if (s.out_host) {
    const std::size_t per_row = s.path == kernel_path::tile_dense ? tj * T : s.c * (T + (s.with_index ? 8 : 0));
    if (s.path == kernel_path::tile_dense) b += rnd(ti * per_row);  // pinned copy of the tile
    else b += 2 * (rnd(ti * s.c * T) + (s.with_index ? rnd(ti * s.c * 8) : 0));
  }
  return b;
}

/// Column splits: enough thread blocks to fill the GPU (4 per SM), no more than the column tiles.
inline int splits_for(const job_shape& s, std::size_t ti, std::size_t tj) {
  if (s.path != kernel_path::fused && s.path != kernel_path::tile_fold) return 1;
  const std::size_t rows_per_block = s.path == kernel_path::fused ? fused_tj * s.rows_per_thread : 8;
  const std::size_t groups = cdiv(std::max<std::size_t>(ti, 1), rows_per_block);
  const std::size_t want = cdiv(std::size_t(4) * s.sms, groups);
  const std::size_t most = std::max<std::size_t>(1, cdiv(std::max<std::size_t>(tj, 1), fused_tj));
  return int(std::clamp<std::size_t>(want, 1, std::min<std::size_t>(most, 1024)));
}

/// Candidate extents: the full extent, then halvings down to `lo` (and `lo` itself).
inline std::vector<std::size_t> halvings(std::size_t full, std::size_t cap, std::size_t lo) {
  std::vector<std::size_t> v;
  std::size_t x = std::max<std::size_t>(1, std::min(full, cap));
  while (true) {
    v.push_back(x);
    if (x <= lo) break;
    x = std::max(lo, (x + 1) / 2);
  }
  return v;
}

/// The largest row block, then the largest column chunk, that fit the budget; budget_error otherwise.
inline layout plan_layout(const job_shape& s, std::size_t budget, const std::string& what) {
  const bool tile = s.path != kernel_path::fused;
  // Tiles: at most 64 Ki rows per block and 64 Ki columns per chunk (the launch grid's limits);
  // chunks of Y only matter when Y (or the column operand) is streamed or a tile is written.
  const bool chunked = tile || s.y_host || (s.rhs_cols && s.rhs_host);
  const std::size_t ti_cap = tile ? (std::size_t(1) << 16) : (std::size_t(1) << 26);
  const auto tis = halvings(s.n, ti_cap, 1);
  const auto tjs = chunked ? halvings(s.m, std::size_t(1) << 16, std::min<std::size_t>(s.m, 64))
                           : std::vector<std::size_t>{std::max<std::size_t>(s.m, 1)};
  // Preference order: the largest row block, then the largest column chunk, with the column splits
  // that fill the GPU before one split; the first that fits (plan::best_fit, constant score).
  std::vector<layout> cands;
  for (std::size_t ti : tis)
    for (std::size_t tj : tjs) {
      const int S = splits_for(s, ti, tj);
      for (int sp : {S, 1}) cands.push_back({ti, tj, sp, 0});
    }
  const auto bytes = [&](const layout& c) { return layout_bytes(s, c.ti, c.tj, c.splits); };
  if (const std::size_t k = plan::best_fit(cands, budget, bytes, [](const layout&) { return 0; }); k != plan::npos) {
    layout L = cands[k];
    L.bytes = bytes(L);
    return L;
  }
  const std::size_t minimum = layout_bytes(s, 1, tjs.back(), 1);
  plan::too_small(what + " on the GPU", budget, minimum);
}

// ---- lazy × lazy: byte model and tile search -------------------------------------------------------

/// Everything the product's byte model needs: C (P × Q) = A (P × N) · B (N × Q).
struct product_shape {
  std::size_t P = 0, N = 0, Q = 0, d1 = 0, d2 = 0, tsize = 4;
  bool out_host = false, ga = false, gb = false, ard = false;
  bool hosts[4] = {false, false, false, false};  ///< A's X, A's Y, B's X, B's Y streamed from the host
};

struct product_layout {
  std::size_t tp = 0, tq = 0, tt = 0;
  std::size_t bytes = 0, min_bytes = 0;
};

/// Exact bytes of device and pinned temporaries for output blocks tp × tq and inner chunks tt.
inline std::size_t product_bytes(const product_shape& s, std::size_t tp, std::size_t tq, std::size_t tt) {
  const std::size_t T = s.tsize;
  std::size_t bt = rnd(blas::workspace_bytes) + rnd(tp * tt * T) + rnd(tt * tq * T);
  if (s.out_host) bt += 2 * rnd(tp * tq * T);  // device accumulator + pinned staging
  if (s.ga) bt += rnd(tp * T) + rnd(tt * T);
  if (s.gb) bt += rnd(tt * T) + rnd(tq * T);
  if (s.ard) bt += rnd(s.d1 * T) + rnd(s.d2 * T);
  bt += feeder_bytes(s.hosts[0], 1, tp, s.d1, T) + feeder_bytes(s.hosts[1], 1, tt, s.d1, T) +
        feeder_bytes(s.hosts[2], 1, tt, s.d2, T) + feeder_bytes(s.hosts[3], 1, tq, s.d2, T);
  return bt;
}

/// Output blocks shrunk together (tp, tq), the largest inner chunk that fits for each; budget_error otherwise.
inline product_layout plan_product(const product_shape& s, std::size_t budget, const std::string& what) {
  const auto tps = halvings(s.P, std::size_t(1) << 14, 1), tqs = halvings(s.Q, std::size_t(1) << 14, 1),
             tts = halvings(s.N, std::size_t(1) << 14, std::min<std::size_t>(s.N, 64));
  product_layout L;
  L.min_bytes = product_bytes(s, 1, 1, tts.back());
  // Preference order: output blocks shrunk together (tp, tq), for each the largest inner chunk;
  // the first that fits (plan::best_fit, constant score).
  std::vector<product_layout> cands;
  for (std::size_t i = 0; i < std::max(tps.size(), tqs.size()); ++i)
    for (std::size_t ttc : tts)
      cands.push_back({tps[std::min(i, tps.size() - 1)], tqs[std::min(i, tqs.size() - 1)], ttc, 0, 0});
  const std::size_t k = plan::best_fit(
      cands, budget, [&](const product_layout& c) { return product_bytes(s, c.tp, c.tq, c.tt); },
      [](const product_layout&) { return 0; });
  if (k != plan::npos) L.tp = cands[k].tp, L.tq = cands[k].tq, L.tt = cands[k].tt;
  if (!L.tp) plan::too_small(what + " on the GPU", budget, L.min_bytes);
  L.bytes = product_bytes(s, L.tp, L.tq, L.tt);
  return L;
}

}  // namespace detail
}  // namespace memsafe::cuda
