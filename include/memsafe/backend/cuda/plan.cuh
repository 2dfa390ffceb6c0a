// memsafe/backend/cuda/plan.cuh — what every device plan shares: the options, the device's
// resources, the kernel paths, where planning takes a job's data to live (residency), the reduction
// tags mapped to device monoids (with_dmon) and the helpers of the byte models. The row jobs' and
// the products' byte models and searches are in rows_plan.cuh and product_plan.cuh; planning
// allocates nothing and launches nothing.
#pragma once
#include <algorithm>
#include <climits>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/budget.hpp"
#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "runtime.cuh"

namespace memsafe::cuda {

/// Options of a device evaluation.
struct options {
  std::optional<std::size_t> budget = std::nullopt;  ///< bytes of device + pinned temporaries; unset: MEMSAFE_BUDGET, then default
  cudaStream_t stream = nullptr;      ///< the work is ordered on this stream (null: an internal stream that first waits for the default stream)
  bool allow_tf32 = false;            ///< let cuBLAS use TF32 tensor cores for FP32 GEMM tiles
  bool screen_tf32 = true;            ///< TF32 for a screen's GEMM only (results unchanged: exact re-evaluation)
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

/// Where planning takes a job's data (points, dense operand, outputs) to live.
enum class residency {
  queried,       ///< each pointer's memory space as the runtime reports it (eval_into: a device is present)
  host_outputs,  ///< outputs in host memory (eval's result, allocated once the plan fits), inputs queried
  assumed,       ///< outputs in host memory, inputs on the device, nothing asked (plan_for: no device needed)
};
/// Whether a pointer of the job is host memory: an output, or an input (points, dense operand).
inline bool output_on_host(const void* p, residency where) {
  return where != residency::queried || space_of(p) == memory_space::host;
}
inline bool input_on_host(const void* p, residency where) {
  return where != residency::assumed && p && space_of(p) == memory_space::host;
}

inline constexpr int fused_tj = 128;                ///< points of Y per shared-memory tile (= threads)
inline constexpr std::size_t fused_max_d = 64;      ///< coordinates held in registers
inline constexpr int fused_max_k = 16;              ///< top-k kept in registers
inline constexpr std::size_t topk_max_k = 2048;     ///< top-k by block sort (capacity 4096)

/// argument_error text of a dense operand cuBLAS cannot read (neither unit row nor column stride).
inline constexpr const char* operand_stride_message =
    "memsafe::cuda: the dense operand of a product must be row- or column-contiguous on the device (unit row or "
    "column stride, rows or columns that do not overlap, a leading dimension within a 32-bit int)";

inline std::size_t rnd(std::size_t b) { return device_accountant::round(b); }
inline std::size_t cdiv(std::size_t a, std::size_t b) { return (a + b - 1) / b; }
/// Bytes of a feeder of `slots` blocks of rows × cols (device + pinned; none for device data).
inline std::size_t feeder_bytes(bool host, int slots, std::size_t rows, std::size_t cols, std::size_t tsize) {
  if (!host || rows * cols == 0) return 0;
  return std::size_t(slots) * 2 * rnd(rows * cols * tsize);
}
/// Candidate extents: the full extent, then halvings down to `lo` (and `lo` itself); never below 1
/// (an empty extent has the one candidate 1).
inline std::vector<std::size_t> halvings(std::size_t full, std::size_t cap, std::size_t lo) {
  std::vector<std::size_t> v;
  std::size_t x = std::max<std::size_t>(1, std::min(full, cap));
  while (true) {
    v.push_back(x);
    if (x <= std::max<std::size_t>(lo, 1)) break;
    x = std::max(lo, (x + 1) / 2);
  }
  return v;
}

// ---- the reduction tags (lower/job.hpp) on the device ----------------------------------------------

/// The reduction tags the device implements: all of them.
template <class R, class T>
inline constexpr bool red_known =
    std::is_same_v<R, red::sum> || std::is_same_v<R, red::min> || std::is_same_v<R, red::max> ||
    std::is_same_v<R, red::argmin> || std::is_same_v<R, red::argmax> || std::is_same_v<R, red::argkmin> ||
    std::is_same_v<R, red::argkmax> || std::is_same_v<R, red::logsumexp> || std::is_same_v<R, red::matmul<T>> ||
    std::is_same_v<R, red::softmax_sum<T>> || std::is_same_v<R, red::dense>;
/// The reductions that report indices (as reduce_expr::has_indices).
template <class R>
inline constexpr bool red_indexed = std::is_same_v<R, red::argmin> || std::is_same_v<R, red::argmax> ||
                                    std::is_same_v<R, red::argkmin> || std::is_same_v<R, red::argkmax>;

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

/// Call f with the device monoid of a foldable reduction tag (nothing for the others, nor for
/// top-k above the register capacity).
template <class T, class R, class Fn>
void with_dmon(const R& r, Fn&& f) {
  if constexpr (std::is_same_v<R, red::sum>) f(dmon_sum<T>{});
  else if constexpr (std::is_same_v<R, red::logsumexp>) f(dmon_logsumexp<T>{});
  else if constexpr (std::is_same_v<R, red::min>) f(dmon_best<T, false, false>{});
  else if constexpr (std::is_same_v<R, red::max>) f(dmon_best<T, true, false>{});
  else if constexpr (std::is_same_v<R, red::argmin>) f(dmon_best<T, false, true>{});
  else if constexpr (std::is_same_v<R, red::argmax>) f(dmon_best<T, true, true>{});
  else if constexpr (std::is_same_v<R, red::matmul<T>>) f(dmon_matvec<T>{});
  else if constexpr (requires { r.k; }) {
    constexpr bool Max = std::is_same_v<R, red::argkmax>;
    if (r.k <= 4) f(dmon_topk<T, Max, 4>{int(r.k)});
    else if (r.k <= std::size_t(fused_max_k)) f(dmon_topk<T, Max, fused_max_k>{int(r.k)});
  }
}

/// cuBLAS takes its extents and leading dimensions as 32-bit ints.
inline bool fits_blas_int(std::size_t v) { return v <= std::size_t(INT_MAX); }

/// How cuBLAS reads a dense rows × cols matrix with strides (rs, cs): row-major (cs = 1) as the
/// column-major transpose with ld = rs, column-major (rs = 1) as itself (`transposed`) with ld = cs.
/// cuBLAS wants ld ≥ the extent it spans (rows that overlap, as a stride of 0 makes, are refused)
/// and a 32-bit int; a single row or column is read with any stride along its length-1 direction.
/// None when neither layout fits.
struct blas_matrix {
  bool transposed;
  int ld;
};
inline std::optional<blas_matrix> blas_layout(std::size_t rows, std::size_t cols, std::size_t rs, std::size_t cs) {
  if (cs == 1 && (rs >= cols || rows <= 1)) {
    const std::size_t ld = std::max<std::size_t>({rs, cols, 1});
    if (fits_blas_int(ld)) return blas_matrix{false, int(ld)};
  }
  if (rs == 1 && (cs >= rows || cols <= 1)) {
    const std::size_t ld = std::max<std::size_t>({cs, rows, 1});
    if (fits_blas_int(ld)) return blas_matrix{true, int(ld)};
  }
  return std::nullopt;
}

/// Whether cuBLAS X·Yᵀ can give a tile of this leaf: a dot-based formula (dot, cosine, or the
/// squared distance's ‖x‖² + ‖y‖² − 2x·y), no ARD, d ≥ 32, and points cuBLAS can read in place:
/// unit column stride and a row stride of at least d that fits its ints (sliding windows, a row
/// stride of 0 or one past INT_MAX go to the semiring kernels instead).
template <class Leaf>
bool gemm_eligible(const Leaf& leaf) {
  using F = typename Leaf::formula_type;
  const bool dotlike = F::base != base_kind::l1;
  const std::size_t d = leaf.dim();
  const auto in_place = [d](const auto& v) {
    const auto b = blas_layout(v.rows(), d, v.row_stride(), v.col_stride());
    return b && !b->transposed;
  };
  return dotlike && leaf.params.kind == per_dim_kind::none && d >= 32 && in_place(leaf.x) && in_place(leaf.y);
}

/// Whether a cuBLAS tile of this leaf holds its values (reductions other than selections): dot and
/// cosine. A squared distance from cuBLAS is only a screen (kernels_screen.cuh): its values come
/// from the semiring kernel.
template <class Leaf>
bool gemm_values(const Leaf& leaf) {
  return Leaf::formula_type::base != base_kind::sqeuclid && gemm_eligible(leaf);
}

/// The reductions that select (rank entries and keep the best): the only ones a screened tile serves.
template <class R>
inline constexpr bool red_selects = std::is_same_v<R, red::min> || std::is_same_v<R, red::max> ||
                                    std::is_same_v<R, red::argmin> || std::is_same_v<R, red::argmax> ||
                                    std::is_same_v<R, red::argkmin> || std::is_same_v<R, red::argkmax>;

/// Whether a selection over E may screen with a cuBLAS tile and re-evaluate: E is a bare pairwise
/// leaf of a squared-distance or cosine formula (its finalise is monotone in the base value).
template <class E>
inline constexpr bool screen_capable = false;
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
inline constexpr bool screen_capable<pairwise<F, T, RX, RY, D>> =
    F::base == base_kind::sqeuclid || F::base == base_kind::cosine;

/// Query rows per thread of the fused kernel with DB coordinates in registers: more when the
/// coordinates and the state are small (reuse of each y load).
template <int DB, class DMon>
constexpr int fused_rows_per_thread() {
  constexpr std::size_t sb = sizeof(typename DMon::state);
  if (sb > 64) return 1;
  if constexpr (DB <= 4 && tile_partial_sums<DMon>) {
    // K·v in float at d ≤ 4: 8 rows per thread (measured on an H100 at n = 10⁵: 6 % fewer
    // instructions per pair than 4 — the y loads and loop control are shared by more rows — and
    // 7 % faster; 95 registers instead of 48, so it wants the many splits of fused_split_target).
    if (sizeof(decltype(std::declval<const DMon&>().weight(std::int64_t(0)))) == 4) return 8;
  }
  return DB <= 4 ? 4 : DB <= 16 ? 2 : 1;
}
/// Thread blocks per SM that the fused path's column splits aim at. A sum's partial states are one
/// number per row and split, so its splits are many: short blocks, spread evenly over the SMs to
/// the end (measured on an H100, K·v f32 d = 3 with 8 rows per thread: 128 per SM against 4 took
/// 367 against 415 ms at n = 10⁶, where 4 per SM left 977 long blocks, 7 or 8 per SM, and 4.4
/// against 4.8 ms at n = 10⁵).
/// A selection's split keeps its own top-k list, which starts empty and admits its first entries
/// again: 16 per SM ran 1.09–1.18× slower than 4 at n = 10⁶ and 2× slower at n = 10⁴ (kNN L2,
/// m = 10⁴, k = 10), so selections keep 4.
template <class DMon>
constexpr int fused_split_target() {
  return warp_selection<DMon> ? 4 : 128;
}
/// Query rows per thread block of the fused path: fused_rows_kernel's threads × rows per thread,
/// or the fused selection kernel's warps × rows per warp.
template <class DMon>
int fused_rows_per_block(std::size_t d) {
  if constexpr (warp_selection<DMon>) return fsel_block_rows;
  else
    return fused_tj * (d <= 4    ? fused_rows_per_thread<4, DMon>()
                       : d <= 16 ? fused_rows_per_thread<16, DMon>()
                                 : fused_rows_per_thread<64, DMon>());
}

}  // namespace detail
}  // namespace memsafe::cuda
