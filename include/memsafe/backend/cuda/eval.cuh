// memsafe/backend/cuda/eval.cuh — memsafe::cuda::eval: the same expressions, evaluated on the GPU
// in budget-bounded kernel launches.
//
//   capture and rewrite: shared with the host (row_job / normalize give the rewritten lazy matrix,
//                        the reduction and the hoisted linear terms)
//   plan:                plan_device() picks the kernel path, the row block ti, the column chunk tj
//                        and the column splits S so that every device and pinned temporary fits the
//                        budget; budget_error before any allocation or launch otherwise
//   execute:             row blocks × column chunks of launches on one stream; host-resident inputs
//                        streamed through double-buffered staging; partial states merged per row
//
// Kernel paths (chosen per evaluation, shown by plan_for / explain):
//   fused        sum, min/max/argmin/argmax, logsumexp, top-k with k ≤ 16 and K·v when d ≤ 64:
//                no tile is ever written (fused_rows_kernel)
//   tile_fold    the same reductions at d > 64: a tile (cuBLAS GEMM + epilogue for dot-based
//                formulas, the shared-memory semiring kernel otherwise), then a per-row fold
//   tile_topk    top-k for 16 < k ≤ 2048: tile, then a CUB block radix sort merge per row
//   tile_matmul  K·M (several columns): tile, then cuBLAS GEMM accumulation
//   tile_softmax softmax_sum: tile, online max/sum update, cuBLAS GEMM accumulation
//   tile_dense   dense(E): tiles straight into a device output, or staged to a host one
//   product      lazy × lazy: tiles of both factors, cuBLAS GEMM accumulation per output block
#pragma once
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/budget.hpp"
#include "../../exec/eval.hpp"
#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "kernels.cuh"
#include "runtime.cuh"
#include "staging.cuh"

namespace memsafe::cuda {

/// Options of a device evaluation.
struct options {
  std::optional<std::size_t> budget;  ///< bytes of device + pinned temporaries; unset: MEMSAFE_BUDGET, then default
  cudaStream_t stream = nullptr;      ///< the work is ordered on this stream (null: an internal stream)
  bool allow_tf32 = false;            ///< let cuBLAS use TF32 tensor cores for FP32 GEMM tiles
  bool synchronize = true;            ///< wait for the stream before returning (false: device outputs only)
};

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

namespace detail {

using memsafe::detail::row_job;

inline constexpr int fused_tj = 128;                ///< points of Y per shared-memory tile (= threads)
inline constexpr std::size_t fused_max_d = 64;      ///< coordinates held in registers
inline constexpr int fused_max_k = 16;              ///< top-k kept in registers
inline constexpr std::size_t topk_max_k = 2048;     ///< top-k by block sort (capacity 4096)

inline int sm_count() {
  int dev = 0, sms = 0;
  MEMSAFE_CUDA_CHECK(cudaGetDevice(&dev));
  MEMSAFE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}
inline std::size_t rnd(std::size_t b) { return device_accountant::round(b); }
inline std::size_t cdiv(std::size_t a, std::size_t b) { return (a + b - 1) / b; }
/// Bytes of a feeder of `slots` blocks of rows × cols (device + pinned; none for device data).
inline std::size_t feeder_bytes(bool host, int slots, std::size_t rows, std::size_t cols, std::size_t tsize) {
  if (!host || rows * cols == 0) return 0;
  return std::size_t(slots) * 2 * rnd(rows * cols * tsize);
}

// ---- classification of the reduction --------------------------------------------------------------

template <class M>
struct red_traits {
  static constexpr bool known = false;
};
template <class T>
struct red_traits<exec::sum_monoid<T>> {
  static constexpr bool known = true;
};
template <class T, bool Max, bool WI>
struct red_traits<exec::best_monoid<T, Max, WI>> {
  static constexpr bool known = true;
};
template <class T>
struct red_traits<exec::logsumexp_monoid<T>> {
  static constexpr bool known = true;
};
template <class T, bool Max>
struct red_traits<exec::topk_monoid<T, Max>> {
  static constexpr bool known = true;
};
template <class T>
struct red_traits<exec::matmul_monoid<T>> {
  static constexpr bool known = true;
};
template <class T>
struct red_traits<exec::softmax_sum_monoid<T>> {
  static constexpr bool known = true;
};
template <class T>
struct red_traits<exec::dense_monoid<T>> {
  static constexpr bool known = true;
};

/// Columns of the output per row, and the dense column operand (v, M or V) if any.
template <class Mon, class T>
std::size_t out_cols(const Mon& mon, std::size_t m) {
  if constexpr (requires { mon.k; }) return mon.k;
  else if constexpr (requires { mon.rhs; }) return mon.rhs.cols();
  else if constexpr (requires { mon.values; }) return mon.values.cols();
  else if constexpr (std::is_same_v<Mon, exec::dense_monoid<T>>) return m;
  else return 1;
}
template <class Mon, class T>
matrix_view<const T> column_operand(const Mon& mon) {
  if constexpr (requires { mon.rhs; }) return mon.rhs;
  else if constexpr (requires { mon.values; }) return mon.values;
  else return {nullptr, 0, 0};
}

// ---- planning -----------------------------------------------------------------------------------

/// Everything the byte model needs about one evaluation.
struct job_shape {
  std::size_t n = 0, m = 0, d = 0, c = 1, k = 0, tsize = 4, state_bytes = 8;
  bool x_host = false, y_host = false, rhs_host = false, out_host = false, ard = false, gemm = false;
  bool with_index = false;
  std::size_t rhs_cols = 0;
  kernel_path path = kernel_path::fused;
  int rows_per_thread = 1;
  int sms = 132;
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

inline layout plan_layout(const job_shape& s, std::size_t budget, const std::string& what) {
  const bool tile = s.path != kernel_path::fused;
  // Tiles: at most 64 Ki rows per block and 64 Ki columns per chunk (the launch grid's limits);
  // chunks of Y only matter when Y (or the column operand) is streamed or a tile is written.
  const bool chunked = tile || s.y_host || (s.rhs_cols && s.rhs_host);
  const std::size_t ti_cap = tile ? (std::size_t(1) << 16) : (std::size_t(1) << 26);
  const auto tis = halvings(s.n, ti_cap, 1);
  const auto tjs = chunked ? halvings(s.m, std::size_t(1) << 16, std::min<std::size_t>(s.m, 64))
                           : std::vector<std::size_t>{std::max<std::size_t>(s.m, 1)};
  for (std::size_t ti : tis)
    for (std::size_t tj : tjs) {
      const int S = splits_for(s, ti, tj);
      for (int sp : {S, 1}) {
        const std::size_t b = layout_bytes(s, ti, tj, sp);
        if (b <= budget) return {ti, tj, sp, b};
      }
    }
  const std::size_t minimum = layout_bytes(s, 1, tjs.back(), 1);
  plan::too_small(what + " on the GPU", budget, minimum);
}

// ---- the device leaf ----------------------------------------------------------------------------

/// A leaf's coordinate scaling on the device: its ARD values (if any) copied into the budget.
template <class T>
struct device_scale {
  device_buffer<T> ard;
  dev_scale<T> scale;
  device_scale(const formula_params<T>& p, std::size_t d, device_accountant& acc) {
    if (p.kind != per_dim_kind::none) {
      ard = device_buffer<T>(acc, d);
      MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(ard.data(), p.per_dim, d * sizeof(T), cudaMemcpyDefault, acc.stream()));
    }
    scale = {ard.data(), p.kind};
  }
};

/// Which generator writes tiles: cuBLAS X·Yᵀ for dot-based formulas on unit-stride data (no ARD),
/// the semiring kernel otherwise.
template <class Leaf>
bool gemm_eligible(const Leaf& leaf) {
  using F = typename Leaf::formula_type;
  const bool dotlike = F::base != base_kind::l1;
  return dotlike && leaf.params.kind == per_dim_kind::none && leaf.dim() >= 32;
}

/// Writes map(F(x_i, y_j)) for the block Xb × Yc into `tile` (row-major, ld).
template <class Map, class Leaf, class T>
void generate_tile(const Map& map, const Leaf& leaf, const dev_scale<T>& sc, const dev_points<T>& Xb,
                   const dev_points<T>& Yc, T* tile, std::int64_t ld, bool gemm, blas* bl, T* xn, T* yn,
                   cudaStream_t s) {
  using F = typename Leaf::formula_type;
  constexpr base_kind B = F::base;
  const T ysign = leaf.params.y_sign;
  if (Xb.n == 0 || Yc.n == 0) return;
  if (gemm && Xb.cs == 1 && Yc.cs == 1) {
    if constexpr (B != base_kind::l1) {
      const T one = 1, zero = 0;
      // Row-major C (ni × nj) = X·Yᵀ is column-major Cᵀ = Y·Xᵀ: op(A) = Yᵀ-storage transposed.
      if constexpr (std::is_same_v<T, float>)
        MEMSAFE_CUDA_CHECK(cublasSgemm(bl->get(), CUBLAS_OP_T, CUBLAS_OP_N, int(Yc.n), int(Xb.n), int(Xb.d), &one,
                                       Yc.p, int(Yc.rs), Xb.p, int(Xb.rs), &zero, tile, int(ld)));
      else
        MEMSAFE_CUDA_CHECK(cublasDgemm(bl->get(), CUBLAS_OP_T, CUBLAS_OP_N, int(Yc.n), int(Xb.n), int(Xb.d), &one,
                                       Yc.p, int(Yc.rs), Xb.p, int(Xb.rs), &zero, tile, int(ld)));
      if constexpr (B != base_kind::dot) {
        kernels::norms_kernel<B><<<unsigned(cdiv(Xb.n, 256)), 256, 0, s>>>(Xb, xn);
        MEMSAFE_CUDA_LAUNCHED("norms_kernel");
        kernels::norms_kernel<B><<<unsigned(cdiv(Yc.n, 256)), 256, 0, s>>>(Yc, yn);
        MEMSAFE_CUDA_LAUNCHED("norms_kernel");
      }
      const std::int64_t total = Xb.n * Yc.n;
      const unsigned blocks = unsigned(std::min<std::int64_t>(cdiv(total, 256), 65535));
      kernels::gemm_epilogue_kernel<Map, B><<<blocks, 256, 0, s>>>(map, tile, ld, Xb.n, Yc.n, xn, yn, ysign);
      MEMSAFE_CUDA_LAUNCHED("gemm_epilogue_kernel");
      return;
    }
  }
  const dim3 grid(unsigned(cdiv(Yc.n, kernels::tile_bn)), unsigned(cdiv(Xb.n, kernels::tile_bm)));
  kernels::tile_kernel<Map, B><<<grid, kernels::tile_threads, 0, s>>>(map, Xb, sc, Yc, sc, ysign, tile, ld);
  MEMSAFE_CUDA_LAUNCHED("tile_kernel");
}

/// Launch the fused kernel for one (row block, column chunk) with DB coordinates in registers.
template <int DB, int R, class Map, class DMon, class Leaf, class T>
void launch_fused_db(const Map& map, const DMon& mon, const Leaf& leaf, const dev_scale<T>& sc,
                     const dev_points<T>& Xb, const dev_points<T>& Yc, std::int64_t j_base, int S,
                     typename DMon::state* part, bool first, cudaStream_t s) {
  using F = typename Leaf::formula_type;
  const std::int64_t ni = Xb.n;
  const std::int64_t cps = std::max<std::int64_t>(1, std::int64_t(cdiv(std::max<std::int64_t>(Yc.n, 1), S)));
  const dim3 grid(unsigned(cdiv(std::max<std::int64_t>(ni, 1), fused_tj * R)), unsigned(S));
  kernels::fused_rows_kernel<Map, DMon, F::base, DB, R, fused_tj><<<grid, fused_tj, 0, s>>>(
      map, mon, Xb, sc, Yc, sc, T(leaf.params.y_sign), j_base, cps, part, ni, first);
  MEMSAFE_CUDA_LAUNCHED("fused_rows_kernel");
}
/// Rows per thread: more when the coordinates and the state are small (reuse of each y load).
template <int DB, class DMon>
constexpr int fused_rows_per_thread() {
  constexpr std::size_t sb = sizeof(typename DMon::state);
  if (sb > 64) return 1;
  return DB <= 4 ? 4 : DB <= 16 ? 2 : 1;
}
template <class Map, class DMon, class Leaf, class T>
void launch_fused(const Map& map, const DMon& mon, const Leaf& leaf, const dev_scale<T>& sc, const dev_points<T>& Xb,
                  const dev_points<T>& Yc, std::int64_t j_base, int S, typename DMon::state* part, bool first,
                  cudaStream_t s) {
  const std::size_t d = leaf.dim();
  if (d <= 4) launch_fused_db<4, fused_rows_per_thread<4, DMon>()>(map, mon, leaf, sc, Xb, Yc, j_base, S, part, first, s);
  else if (d <= 16) launch_fused_db<16, fused_rows_per_thread<16, DMon>()>(map, mon, leaf, sc, Xb, Yc, j_base, S, part, first, s);
  else launch_fused_db<64, fused_rows_per_thread<64, DMon>()>(map, mon, leaf, sc, Xb, Yc, j_base, S, part, first, s);
}
template <class DMon>
int rows_per_thread_for(std::size_t d) {
  return d <= 4 ? fused_rows_per_thread<4, DMon>() : d <= 16 ? fused_rows_per_thread<16, DMon>()
                                                               : fused_rows_per_thread<64, DMon>();
}

// ---- output staging ---------------------------------------------------------------------------

/// Where a row block's results go: straight to device outputs, or through device + pinned staging
/// to host outputs (scattered with the caller's strides after the block).
template <class T>
class row_output {
 public:
  row_output(const exec::out_spec<T>& out, double scale, bool host, std::size_t ti, std::size_t c, bool idx,
             device_accountant& acc)
      : out_(out), scale_(scale), host_(host), c_(c), idx_(idx) {
    if (host_) {
      dv_ = device_buffer<T>(acc, ti * c);
      pv_ = std::make_unique<pinned_buffer<T>>(acc, ti * c);
      if (idx) {
        di_ = device_buffer<index_t>(acc, ti * c);
        pi_ = std::make_unique<pinned_buffer<index_t>>(acc, ti * c);
      }
    }
  }
  /// The target of a row block's write kernel and the row offset it writes at.
  dev_out<T> target() const {
    if (host_) return {dv_.data(), std::int64_t(c_), 1, idx_ ? di_.data() : nullptr, std::int64_t(c_), 1, scale_};
    return {out_.values, out_.vrs, out_.vcs, idx_ ? out_.indices : nullptr, out_.irs, out_.ics, scale_};
  }
  std::int64_t base(std::int64_t i0) const { return host_ ? 0 : i0; }
  /// After the write kernel: bring a host block home (synchronises the stream).
  void finish_block(std::size_t i0, std::size_t ni, cudaStream_t s) {
    if (!host_ || ni == 0) return;
    MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(pv_->data(), dv_.data(), ni * c_ * sizeof(T), cudaMemcpyDeviceToHost, s));
    if (idx_)
      MEMSAFE_CUDA_CHECK(
          cudaMemcpyAsync(pi_->data(), di_.data(), ni * c_ * sizeof(index_t), cudaMemcpyDeviceToHost, s));
    MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(s));
    for (std::size_t r = 0; r < ni; ++r)
      for (std::size_t q = 0; q < c_; ++q) {
        out_.v(i0 + r, q) = pv_->data()[r * c_ + q];
        if (idx_ && out_.indices) out_.ix(i0 + r, q) = pi_->data()[r * c_ + q];
      }
  }

 private:
  exec::out_spec<T> out_;
  double scale_;
  bool host_;
  std::size_t c_;
  bool idx_;
  device_buffer<T> dv_;
  device_buffer<index_t> di_;
  std::unique_ptr<pinned_buffer<T>> pv_;
  std::unique_ptr<pinned_buffer<index_t>> pi_;
};

/// acc (ni × c, row-major, ld c) += tile (ni × nj, ld) · B (rows of the column operand, nj × c).
template <class T>
void gemm_accumulate(blas& bl, const T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj,
                     const dev_points<T>& Bc, T* acc, std::int64_t c) {
  if (ni == 0 || nj == 0) return;
  const T one = 1;
  // Column-major accᵀ (c × ni) += Bᵀ (c × nj) · tileᵀ (nj × ni).
  cublasOperation_t opb;
  int ldb;
  if (Bc.cs == 1) { opb = CUBLAS_OP_N; ldb = int(Bc.rs); }      // row-major B is column-major Bᵀ
  else if (Bc.rs == 1) { opb = CUBLAS_OP_T; ldb = int(Bc.cs); }  // column-major B
  else throw argument_error("memsafe::cuda: the dense operand of a product must have unit row or column stride on the device");
  if constexpr (std::is_same_v<T, float>)
    MEMSAFE_CUDA_CHECK(cublasSgemm(bl.get(), opb, CUBLAS_OP_N, int(c), int(ni), int(nj), &one, Bc.p, ldb, tile,
                                   int(ld), &one, acc, int(c)));
  else
    MEMSAFE_CUDA_CHECK(cublasDgemm(bl.get(), opb, CUBLAS_OP_N, int(c), int(ni), int(nj), &one, Bc.p, ldb, tile,
                                   int(ld), &one, acc, int(c)));
}

inline unsigned blocks_for(std::int64_t count, int threads = 256) {
  return unsigned(std::max<std::int64_t>(1, std::int64_t(cdiv(std::max<std::int64_t>(count, 1), threads))));
}

// ---- row jobs (everything but lazy × lazy) --------------------------------------------------------

template <class X>
struct row_eval {
  using T = typename X::value_type;

  template <class Job>
  static job_shape shape(const Job& job, bool out_host, bool with_index, int sms, bool query) {
    using E = std::remove_cvref_t<decltype(job.e)>;
    using Mon = std::remove_cvref_t<decltype(job.mon)>;
    const auto& leaf = dev_map_of<E>::leaf_of(job.e);
    job_shape s;
    s.n = job.e.rows();
    s.m = job.e.cols();
    s.d = leaf.dim();
    s.tsize = sizeof(T);
    s.c = out_cols<Mon, T>(job.mon, s.m);
    s.x_host = query && space_of(leaf.x.data()) == memory_space::host;
    s.y_host = query && space_of(leaf.y.data()) == memory_space::host;
    const auto rhs = column_operand<Mon, T>(job.mon);
    s.rhs_cols = rhs.data() ? rhs.cols() : 0;
    s.rhs_host = query && rhs.data() && space_of(rhs.data()) == memory_space::host;
    s.out_host = out_host;
    s.ard = leaf.params.kind != per_dim_kind::none;
    s.with_index = with_index;
    s.sms = sms;
    const bool small_d = s.d <= fused_max_d;
    if constexpr (std::is_same_v<Mon, exec::softmax_sum_monoid<T>>) s.path = kernel_path::tile_softmax;
    else if constexpr (std::is_same_v<Mon, exec::dense_monoid<T>>) s.path = kernel_path::tile_dense;
    else if constexpr (std::is_same_v<Mon, exec::matmul_monoid<T>>)
      s.path = s.c > 1 ? kernel_path::tile_matmul : (small_d ? kernel_path::fused : kernel_path::tile_fold);
    else if constexpr (requires { job.mon.k; }) {
      s.k = job.mon.k;
      s.path = s.k > std::size_t(fused_max_k) ? kernel_path::tile_topk
                                              : (small_d ? kernel_path::fused : kernel_path::tile_fold);
    } else s.path = small_d ? kernel_path::fused : kernel_path::tile_fold;
    s.gemm = s.path != kernel_path::fused && gemm_eligible(leaf);
    if (s.path == kernel_path::fused || s.path == kernel_path::tile_fold) {
      with_dmon(job.mon, [&](const auto& dm) {
        using DM = std::remove_cvref_t<decltype(dm)>;
        s.state_bytes = sizeof(typename DM::state);
        s.rows_per_thread = rows_per_thread_for<DM>(s.d);
      });
    }
    return s;
  }

  /// Call f with the device monoid of a foldable host reduction.
  template <class Mon, class Fn>
  static void with_dmon(const Mon& mon, Fn&& f) {
    if constexpr (std::is_same_v<Mon, exec::sum_monoid<T>>) f(dmon_sum<T>{});
    else if constexpr (std::is_same_v<Mon, exec::logsumexp_monoid<T>>) f(dmon_logsumexp<T>{});
    else if constexpr (std::is_same_v<Mon, exec::best_monoid<T, false, false>>) f(dmon_best<T, false, false>{});
    else if constexpr (std::is_same_v<Mon, exec::best_monoid<T, true, false>>) f(dmon_best<T, true, false>{});
    else if constexpr (std::is_same_v<Mon, exec::best_monoid<T, false, true>>) f(dmon_best<T, false, true>{});
    else if constexpr (std::is_same_v<Mon, exec::best_monoid<T, true, true>>) f(dmon_best<T, true, true>{});
    else if constexpr (std::is_same_v<Mon, exec::matmul_monoid<T>>) f(dmon_matvec<T>{});
    else if constexpr (requires { mon.k; }) {
      constexpr bool Max = std::is_same_v<Mon, exec::topk_monoid<T, true>>;
      if (mon.k <= 4) f(dmon_topk<T, Max, 4>{int(mon.k)});
      else if (mon.k <= std::size_t(fused_max_k)) f(dmon_topk<T, Max, fused_max_k>{int(mon.k)});
    }
  }

  /// Evaluate; outputs as the host's eval_into lays them out (values/indices may be device or host).
  static tile_plan run(const X& x, T* values, index_t* indices, const options& o, std::size_t budget,
                       device_accountant* acc_out, bool plan_only, rewrite::rule_log& log) {
    auto job = row_job<X>::make(x, log);
    using E = std::remove_cvref_t<decltype(job.e)>;
    using Mon = std::remove_cvref_t<decltype(job.mon)>;
    static_assert(device_supported<E>,
                  "memsafe::cuda: this lazy matrix cannot be evaluated on the GPU: the device backend takes one "
                  "pairwise formula with elementwise maps over it (rbf(X,Y), exp(-sqdist(X,Y)/2), ...); combine "
                  "two pairwise matrices, broadcast tensors or diagonal terms inside a reduction on the host");
    static_assert(red_traits<Mon>::known, "memsafe::cuda: this reduction has no device implementation");
    const auto& leaf = dev_map_of<E>::leaf_of(job.e);
    const bool out_host = plan_only ? true : space_of(values) == memory_space::host;
    if (!job.post.diags.empty() && !out_host && !plan_only)
      throw argument_error("memsafe::cuda: " + x.str() +
                           ": a product or sum with diagonal terms (K + D) needs host outputs on the GPU backend");
    const int sms = plan_only ? 132 : sm_count();
    const job_shape s = shape(job, out_host, X::has_indices, sms, !plan_only);
    if (s.k > topk_max_k)
      throw argument_error("memsafe::cuda: argkmin/argkmax: k = " + std::to_string(s.k) +
                           " is above the GPU backend's limit of " + std::to_string(topk_max_k));
    const layout L = plan_layout(s, budget, x.str());
    tile_plan p;
    p.expression = job.e.str();
    if (job.post.scale != 1) p.expression = std::to_string(job.post.scale) + " * [" + p.expression + "]";
    p.reduction = std::string(Mon::name) + " on the GPU: " + path_name(s.path) +
                  (s.gemm ? " (cuBLAS X·Yᵀ + epilogue)" : "");
    p.rows = s.n;
    p.cols = s.m;
    p.tile_rows = L.ti;
    p.tile_cols = L.tj;
    p.threads = std::size_t(L.splits);
    p.split_columns = L.splits > 1;
    p.row_blocks = cdiv(std::max<std::size_t>(s.n, 1), L.ti);
    p.col_blocks = cdiv(std::max<std::size_t>(s.m, 1), L.tj);
    p.num_tiles = p.row_blocks * p.col_blocks;
    p.per_thread_bytes = L.bytes;
    p.planned_bytes = L.bytes;
    p.min_bytes = layout_bytes(s, 1, std::min<std::size_t>(std::max<std::size_t>(s.m, 1), 64), 1);
    p.budget = budget;
    if (plan_only) return p;

    device_accountant& acc = *acc_out;
    const cudaStream_t st = acc.stream();
    std::unique_ptr<stream> copy_stream;
    if (s.x_host || s.y_host || s.rhs_host) copy_stream = std::make_unique<stream>();
    const cudaStream_t cps = copy_stream ? copy_stream->get() : st;

    const auto map = dev_map_of<E>::make(job.e);
    const device_scale<T> ds(leaf.params, s.d, acc);
    const dev_scale<T>& sc = ds.scale;
    feeder<T> xf(matrix_view<const T>(leaf.x), s.x_host, 1, L.ti, acc, cps);
    feeder<T> yf(matrix_view<const T>(leaf.y), s.y_host, 2, L.tj, acc, cps);
    const auto rhs = column_operand<Mon, T>(job.mon);
    feeder<T> rf(rhs, s.rhs_host, 2, L.tj, acc, cps);
    std::unique_ptr<blas> bl;
    if (s.gemm || s.path == kernel_path::tile_matmul || s.path == kernel_path::tile_softmax)
      bl = std::make_unique<blas>(acc, o.allow_tf32);
    const bool tile_path = s.path != kernel_path::fused;
    device_buffer<T> tile, xn, yn;
    if (tile_path && !(s.path == kernel_path::tile_dense && !s.out_host)) tile = device_buffer<T>(acc, L.ti * L.tj);
    if (tile_path && s.gemm) {
      xn = device_buffer<T>(acc, L.ti);
      yn = device_buffer<T>(acc, L.tj);
    }
    const exec::out_spec<T> out = row_job<X>::out(x, values, indices);

    if (s.path == kernel_path::fused || s.path == kernel_path::tile_fold) {
      with_dmon(job.mon, [&](auto dm) {
        using DM = decltype(dm);
        device_buffer<typename DM::state> part(acc, L.ti * std::size_t(L.splits));
        row_output<T> ro(out, job.post.scale, s.out_host, L.ti, s.c, X::has_indices, acc);
        for (std::size_t i0 = 0; i0 < s.n; i0 += L.ti) {
          const std::size_t ni = std::min(L.ti, s.n - i0);
          const auto Xb = xf.fetch(i0, ni, 0);
          const std::size_t chunks = std::max<std::size_t>(1, cdiv(s.m, L.tj));
          for (std::size_t c = 0; c < chunks; ++c) {
            const std::size_t j0 = c * L.tj, nj = s.m > j0 ? std::min(L.tj, s.m - j0) : 0;
            const int slot = int(c % 2);
            const auto Yc = yf.fetch(j0, nj, slot);
            DM mon = dm;
            if constexpr (std::is_same_v<DM, dmon_matvec<T>>) {
              const auto w = rf.fetch(j0, nj, slot);
              mon.w = w.p;
              mon.ws = w.rs;
            }
            if (s.path == kernel_path::fused) {
              launch_fused(map, mon, leaf, sc, Xb, Yc, std::int64_t(j0), L.splits, part.data(), c == 0, st);
            } else {
              generate_tile(map, leaf, sc, Xb, Yc, tile.data(), std::int64_t(L.tj), s.gemm, bl.get(), xn.data(),
                            yn.data(), st);
              const std::int64_t cpsz = std::max<std::int64_t>(1, std::int64_t(cdiv(std::max<std::size_t>(nj, 1), L.splits)));
              const dim3 grid(blocks_for(std::int64_t(ni) * 32), unsigned(L.splits));
              kernels::tile_rows_kernel<DM, T><<<grid, 256, 0, st>>>(mon, tile.data(), std::int64_t(L.tj),
                                                                     std::int64_t(ni), std::int64_t(nj),
                                                                     std::int64_t(j0), cpsz, part.data(), c == 0);
              MEMSAFE_CUDA_LAUNCHED("tile_rows_kernel");
            }
            yf.release(slot);
            rf.release(slot);
          }
          xf.release(0);
          kernels::merge_rows_kernel<DM, T><<<blocks_for(std::int64_t(ni)), 256, 0, st>>>(
              dm, part.data(), std::int64_t(ni), L.splits, ro.target(), ro.base(std::int64_t(i0)));
          MEMSAFE_CUDA_LAUNCHED("merge_rows_kernel");
          ro.finish_block(i0, ni, st);
        }
      });
    } else {
      run_tiles(s, L, job, map, leaf, sc, xf, yf, rf, bl.get(), tile, xn, yn, out, acc);
    }
    if (s.out_host && !job.post.diags.empty()) {
      MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
      rewrite::linear_post<T> diags = job.post;
      diags.scale = 1;  // the scale was applied on the device
      memsafe::detail::apply_post(diags, job.rhs, out, s.n, job.rhs.data() ? job.rhs.cols() : 1);
    }
    return p;
  }

  /// The tile paths other than the per-row fold: top-k by block sort, K·M, softmax_sum, dense.
  template <class Job, class Map, class Leaf>
  static void run_tiles(const job_shape& s, const layout& L, const Job& job, const Map& map, const Leaf& leaf,
                        const dev_scale<T>& sc, feeder<T>& xf, feeder<T>& yf, feeder<T>& rf, blas* bl,
                        device_buffer<T>& tile, device_buffer<T>& xn, device_buffer<T>& yn,
                        const exec::out_spec<T>& out, device_accountant& acc) {
    using Mon = std::remove_cvref_t<decltype(job.mon)>;
    const cudaStream_t st = acc.stream();
    device_buffer<rank_key> lists;
    device_buffer<T> accb;
    device_buffer<kernels::softmax_state> sms;
    if (s.path == kernel_path::tile_topk) lists = device_buffer<rank_key>(acc, L.ti * s.k);
    if (s.path == kernel_path::tile_matmul || s.path == kernel_path::tile_softmax) accb = device_buffer<T>(acc, L.ti * s.c);
    if (s.path == kernel_path::tile_softmax) sms = device_buffer<kernels::softmax_state>(acc, L.ti);
    std::unique_ptr<pinned_buffer<T>> dense_pin;
    std::unique_ptr<row_output<T>> ro;
    if (s.path == kernel_path::tile_dense) {
      if (s.out_host) dense_pin = std::make_unique<pinned_buffer<T>>(acc, L.ti * L.tj);
    } else {
      ro = std::make_unique<row_output<T>>(out, job.post.scale, s.out_host, L.ti, s.c, s.with_index, acc);
    }
    if (s.path == kernel_path::tile_topk) {
      static bool configured = false;  // once per process: raise the dynamic shared-memory limit
      if (!configured) {
        constexpr bool Max = std::is_same_v<Mon, exec::topk_monoid<T, true>>;
        MEMSAFE_CUDA_CHECK(cudaFuncSetAttribute(kernels::topk_tile_kernel<Max, T>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                int(kernels::topk_smem_bytes)));
        configured = true;
      }
    }
    for (std::size_t i0 = 0; i0 < s.n; i0 += L.ti) {
      const std::size_t ni = std::min(L.ti, s.n - i0);
      const auto Xb = xf.fetch(i0, ni, 0);
      if (s.path == kernel_path::tile_topk) {
        kernels::init_keys_kernel<<<blocks_for(std::int64_t(ni * s.k)), 256, 0, st>>>(lists.data(), std::int64_t(ni * s.k));
        MEMSAFE_CUDA_LAUNCHED("init_keys_kernel");
      }
      if (accb.data()) MEMSAFE_CUDA_CHECK(cudaMemsetAsync(accb.data(), 0, ni * s.c * sizeof(T), st));
      if (s.path == kernel_path::tile_softmax) {
        kernels::softmax_init_kernel<<<blocks_for(std::int64_t(ni)), 256, 0, st>>>(sms.data(), std::int64_t(ni));
        MEMSAFE_CUDA_LAUNCHED("softmax_init_kernel");
      }
      const std::size_t chunks = cdiv(s.m, L.tj);
      for (std::size_t c = 0; c < chunks; ++c) {
        const std::size_t j0 = c * L.tj, nj = std::min(L.tj, s.m - j0);
        const int slot = int(c % 2);
        const auto Yc = yf.fetch(j0, nj, slot);
        T* dst = tile.data();
        std::int64_t ld = std::int64_t(L.tj);
        if (s.path == kernel_path::tile_dense && !s.out_host) {  // straight into the device output
          dst = out.values + i0 * out.vrs + j0 * out.vcs;
          ld = out.vrs;
        }
        generate_tile(map, leaf, sc, Xb, Yc, dst, ld, s.gemm, bl, xn.data(), yn.data(), st);
        if (s.path == kernel_path::tile_topk) {
          constexpr bool Max = std::is_same_v<Mon, exec::topk_monoid<T, true>>;
          kernels::topk_tile_kernel<Max, T><<<unsigned(ni), kernels::topk_threads, kernels::topk_smem_bytes, st>>>(
              dst, ld, std::int64_t(nj), std::int64_t(j0), lists.data(), int(s.k));
          MEMSAFE_CUDA_LAUNCHED("topk_tile_kernel");
        } else if (s.path == kernel_path::tile_matmul) {
          gemm_accumulate(*bl, dst, ld, std::int64_t(ni), std::int64_t(nj), rf.fetch(j0, nj, slot), accb.data(),
                          std::int64_t(s.c));
        } else if (s.path == kernel_path::tile_softmax) {
          kernels::softmax_tile_kernel<T><<<blocks_for(std::int64_t(ni) * 32), 256, 0, st>>>(
              dst, ld, std::int64_t(ni), std::int64_t(nj), sms.data(), accb.data(), std::int64_t(s.c));
          MEMSAFE_CUDA_LAUNCHED("softmax_tile_kernel");
          gemm_accumulate(*bl, dst, ld, std::int64_t(ni), std::int64_t(nj), rf.fetch(j0, nj, slot), accb.data(),
                          std::int64_t(s.c));
        } else if (s.path == kernel_path::tile_dense && s.out_host) {
          MEMSAFE_CUDA_CHECK(cudaMemcpy2DAsync(dense_pin->data(), nj * sizeof(T), dst, std::size_t(ld) * sizeof(T),
                                               nj * sizeof(T), ni, cudaMemcpyDeviceToHost, st));
          MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
          for (std::size_t r = 0; r < ni; ++r)
            for (std::size_t q = 0; q < nj; ++q) out.v(i0 + r, j0 + q) = dense_pin->data()[r * nj + q];
        }
        yf.release(slot);
        rf.release(slot);
      }
      xf.release(0);
      if (s.path == kernel_path::tile_topk) {
        constexpr bool Max = std::is_same_v<Mon, exec::topk_monoid<T, true>>;
        kernels::topk_write_kernel<Max, T><<<blocks_for(std::int64_t(ni * s.k)), 256, 0, st>>>(
            lists.data(), std::int64_t(ni), int(s.k), ro->target(), ro->base(std::int64_t(i0)));
        MEMSAFE_CUDA_LAUNCHED("topk_write_kernel");
      } else if (s.path == kernel_path::tile_matmul) {
        kernels::store_block_kernel<T><<<blocks_for(std::int64_t(ni * s.c)), 256, 0, st>>>(
            accb.data(), std::int64_t(s.c), std::int64_t(ni), std::int64_t(s.c), ro->target(),
            ro->base(std::int64_t(i0)));
        MEMSAFE_CUDA_LAUNCHED("store_block_kernel");
      } else if (s.path == kernel_path::tile_softmax) {
        kernels::softmax_finish_kernel<T><<<blocks_for(std::int64_t(ni * s.c)), 256, 0, st>>>(
            sms.data(), accb.data(), std::int64_t(ni), std::int64_t(s.c), ro->target(),
            ro->base(std::int64_t(i0)));
        MEMSAFE_CUDA_LAUNCHED("softmax_finish_kernel");
      }
      if (ro) ro->finish_block(i0, ni, st);
    }
  }
};

// ---- lazy × lazy ------------------------------------------------------------------------------------

template <class A, class B>
struct product_eval {
  using T = typename A::value_type;
  static tile_plan run(const lazy_product_expr<A, B>& x, T* values, const options& o, std::size_t budget,
                       device_accountant* acc_out, bool plan_only, rewrite::rule_log& log) {
    rewrite::linear_post<T> post;
    auto [a, b] = rewrite::split_product(rewrite::normalize(x.a, log), rewrite::normalize(x.b, log), post, log);
    using EA = decltype(a);
    using EB = decltype(b);
    static_assert(device_supported<EA> && device_supported<EB>,
                  "memsafe::cuda: A * B: each factor must be one pairwise formula with elementwise maps over it");
    const auto& la = dev_map_of<EA>::leaf_of(a);
    const auto& lb = dev_map_of<EB>::leaf_of(b);
    const std::size_t P = a.rows(), N = a.cols(), Q = b.cols(), d1 = la.dim(), d2 = lb.dim();
    const bool out_host = plan_only ? true : space_of(values) == memory_space::host;
    bool hosts[4] = {false, false, false, false};
    if (!plan_only) {
      hosts[0] = space_of(la.x.data()) == memory_space::host;
      hosts[1] = space_of(la.y.data()) == memory_space::host;
      hosts[2] = space_of(lb.x.data()) == memory_space::host;
      hosts[3] = space_of(lb.y.data()) == memory_space::host;
    }
    const bool ga = gemm_eligible(la), gb = gemm_eligible(lb);
    const bool ard = la.params.kind != per_dim_kind::none || lb.params.kind != per_dim_kind::none;
    auto bytes = [&](std::size_t tp, std::size_t tq, std::size_t tt) {
      std::size_t bt = rnd(blas::workspace_bytes) + rnd(tp * tt * sizeof(T)) + rnd(tt * tq * sizeof(T));
      if (out_host) bt += 2 * rnd(tp * tq * sizeof(T));  // device accumulator + pinned staging
      if (ga) bt += rnd(tp * sizeof(T)) + rnd(tt * sizeof(T));
      if (gb) bt += rnd(tt * sizeof(T)) + rnd(tq * sizeof(T));
      if (ard) bt += rnd(d1 * sizeof(T)) + rnd(d2 * sizeof(T));
      bt += feeder_bytes(hosts[0], 1, tp, d1, sizeof(T)) + feeder_bytes(hosts[1], 1, tt, d1, sizeof(T)) +
            feeder_bytes(hosts[2], 1, tt, d2, sizeof(T)) + feeder_bytes(hosts[3], 1, tq, d2, sizeof(T));
      return bt;
    };
    const auto tps = halvings(P, std::size_t(1) << 14, 1), tqs = halvings(Q, std::size_t(1) << 14, 1),
               tts = halvings(N, std::size_t(1) << 14, std::min<std::size_t>(N, 64));
    std::size_t tp = 0, tq = 0, tt = 0;
    for (std::size_t i = 0; i < std::max(tps.size(), tqs.size()) && !tp; ++i)
      for (std::size_t ttc : tts) {
        const std::size_t p1 = tps[std::min(i, tps.size() - 1)], q1 = tqs[std::min(i, tqs.size() - 1)];
        if (bytes(p1, q1, ttc) <= budget) {
          tp = p1, tq = q1, tt = ttc;
          break;
        }
      }
    if (!tp) plan::too_small(x.str() + " on the GPU", budget, bytes(1, 1, tts.back()));
    tile_plan p;
    p.expression = a.str() + " * " + b.str();
    if (post.scale != 1) p.expression = std::to_string(post.scale) + " * (" + p.expression + ")";
    p.reduction = path_name(kernel_path::product);
    p.rows = P, p.cols = Q, p.inner = N;
    p.tile_rows = tp, p.tile_cols = tq, p.tile_inner = tt;
    p.row_blocks = cdiv(P, tp), p.col_blocks = cdiv(Q, tq), p.inner_blocks = cdiv(std::max<std::size_t>(N, 1), tt);
    p.num_tiles = p.row_blocks * p.col_blocks * p.inner_blocks;
    p.planned_bytes = p.per_thread_bytes = bytes(tp, tq, tt);
    p.min_bytes = bytes(1, 1, tts.back());
    p.budget = budget;
    p.threads = 1;
    if (plan_only) return p;

    device_accountant& acc = *acc_out;
    const cudaStream_t st = acc.stream();
    std::unique_ptr<stream> copy_stream;
    if (hosts[0] || hosts[1] || hosts[2] || hosts[3]) copy_stream = std::make_unique<stream>();
    const cudaStream_t cps = copy_stream ? copy_stream->get() : st;
    const device_scale<T> dsa(la.params, d1, acc), dsb(lb.params, d2, acc);
    const dev_scale<T>&sa = dsa.scale, &sb = dsb.scale;
    feeder<T> fax(matrix_view<const T>(la.x), hosts[0], 1, tp, acc, cps), fay(matrix_view<const T>(la.y), hosts[1], 1, tt, acc, cps),
        fbx(matrix_view<const T>(lb.x), hosts[2], 1, tt, acc, cps), fby(matrix_view<const T>(lb.y), hosts[3], 1, tq, acc, cps);
    blas bl(acc, o.allow_tf32);
    device_buffer<T> ta(acc, tp * tt), tb(acc, tt * tq), xna, yna, xnb, ynb, cacc;
    std::unique_ptr<pinned_buffer<T>> pin;
    if (ga) xna = device_buffer<T>(acc, tp), yna = device_buffer<T>(acc, tt);
    if (gb) xnb = device_buffer<T>(acc, tt), ynb = device_buffer<T>(acc, tq);
    if (out_host) {
      cacc = device_buffer<T>(acc, tp * tq);
      pin = std::make_unique<pinned_buffer<T>>(acc, tp * tq);
    }
    const auto ma = dev_map_of<EA>::make(a);
    const auto mb = dev_map_of<EB>::make(b);
    const T alpha = T(post.scale), one = 1;
    for (std::size_t p0 = 0; p0 < P; p0 += tp)
      for (std::size_t q0 = 0; q0 < Q; q0 += tq) {
        const std::size_t np = std::min(tp, P - p0), nq = std::min(tq, Q - q0);
        T* C = out_host ? cacc.data() : values + p0 * Q + q0;
        const std::int64_t ldc = out_host ? std::int64_t(nq) : std::int64_t(Q);
        MEMSAFE_CUDA_CHECK(cudaMemset2DAsync(C, std::size_t(ldc) * sizeof(T), 0, nq * sizeof(T), np, st));
        const auto Ap = fax.fetch(p0, np, 0);
        const auto Bq = fby.fetch(q0, nq, 0);
        for (std::size_t t0 = 0; t0 < N; t0 += tt) {
          const std::size_t nt = std::min(tt, N - t0);
          const auto At = fay.fetch(t0, nt, 0);
          const auto Bt = fbx.fetch(t0, nt, 0);
          generate_tile(ma, la, sa, Ap, At, ta.data(), std::int64_t(nt), ga, &bl, xna.data(), yna.data(), st);
          generate_tile(mb, lb, sb, Bt, Bq, tb.data(), std::int64_t(nq), gb, &bl, xnb.data(), ynb.data(), st);
          // Row-major C (np × nq) += alpha · A (np × nt) · B (nt × nq), as column-major Cᵀ += Bᵀ Aᵀ.
          if constexpr (std::is_same_v<T, float>)
            MEMSAFE_CUDA_CHECK(cublasSgemm(bl.get(), CUBLAS_OP_N, CUBLAS_OP_N, int(nq), int(np), int(nt), &alpha,
                                           tb.data(), int(nq), ta.data(), int(nt), &one, C, int(ldc)));
          else
            MEMSAFE_CUDA_CHECK(cublasDgemm(bl.get(), CUBLAS_OP_N, CUBLAS_OP_N, int(nq), int(np), int(nt), &alpha,
                                           tb.data(), int(nq), ta.data(), int(nt), &one, C, int(ldc)));
          fay.release(0);
          fbx.release(0);
        }
        fax.release(0);
        fby.release(0);
        if (out_host) {
          MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(pin->data(), C, np * nq * sizeof(T), cudaMemcpyDeviceToHost, st));
          MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
          for (std::size_t r = 0; r < np; ++r)
            std::copy(pin->data() + r * nq, pin->data() + (r + 1) * nq, values + (p0 + r) * Q + q0);
        }
      }
    return p;
  }
};

template <class X>
inline constexpr bool is_product_node = false;
template <class A, class B>
inline constexpr bool is_product_node<lazy_product_expr<A, B>> = true;

template <class X>
inline constexpr bool is_row_node = false;
template <class R, class E>
inline constexpr bool is_row_node<reduce_expr<R, E>> = true;
template <class E, bool L>
inline constexpr bool is_row_node<matmul_expr<E, L>> = true;
template <class E>
inline constexpr bool is_row_node<softmax_sum_expr<E>> = true;
template <class E>
inline constexpr bool is_row_node<dense_expr<E>> = true;

template <class X>
tile_plan dispatch(const X& x, typename X::value_type* values, index_t* indices, const options& o,
                   std::size_t budget, device_accountant* acc, bool plan_only, rewrite::rule_log& log) {
  if constexpr (is_product_node<X>) return product_eval<decltype(x.a), decltype(x.b)>::run(x, values, o, budget, acc, plan_only, log);
  else return row_eval<X>::run(x, values, indices, o, budget, acc, plan_only, log);
}

template <class X>
void check_node() {
  static_assert(is_row_node<X> || is_product_node<X>,
                "memsafe::cuda: the GPU backend evaluates reductions (sum, min, argkmin, logsumexp, ...), products "
                "K*v, K*M, v*K, M*K, softmax_sum, dense(E) and lazy x lazy products; product chains, batches and "
                "diag/trace are evaluated on the host (memsafe::eval)");
}

template <class X, class T = typename X::value_type>
eval_stats run(const X& x, T* values, index_t* indices, const options& o) {
  check_node<X>();
  const std::size_t budget = resolve_budget(o.budget);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<stream> own;
  if (!o.stream) own = std::make_unique<stream>();
  const cudaStream_t st = o.stream ? o.stream : own->get();
  rewrite::rule_log log;
  eval_stats stats;
  {
    // dispatch plans first: budget_error before anything is allocated or launched.
    device_accountant acc(budget, st);
    tile_plan p = dispatch(x, values, indices, o, budget, &acc, false, log);
    if (o.synchronize || own) MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));  // frees are stream-ordered
    p.rules = log.fired;
    stats = memsafe::detail::make_stats(std::move(p), acc.counter(), budget,
                                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return stats;
}

}  // namespace detail

/// Evaluate on the GPU into caller-owned outputs (device or host pointers), laid out as the host's
/// eval_into: contiguous row-major rows × cols; `indices` for arg-reductions.
template <evaluable X>
eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, const options& o = {}) {
  memsafe::detail::check_outputs(x, values, indices, "memsafe::cuda::eval_into");
  return detail::run(x, values, indices, o);
}

/// Evaluate on the GPU; results in host vectors, as memsafe::eval returns them.
template <evaluable X>
result<typename X::value_type> eval(const X& x, const options& o = {}) {
  options oo = o;
  oo.synchronize = true;
  return memsafe::detail::into_result(x, [&](auto* v, index_t* ix) { return detail::run(x, v, ix, oo); });
}
/// Compile-time budget: memsafe::cuda::eval<memsafe::budget<1_GiB>>(expr).
template <class Budget, evaluable X>
  requires memsafe::detail::is_budget<Budget>::value
result<typename X::value_type> eval(const X& x, cudaStream_t s = nullptr) {
  return eval(x, options{Budget::bytes, s});
}
/// Run-time budget.
template <evaluable X>
result<typename X::value_type> eval(const X& x, budget_bytes b, cudaStream_t s = nullptr) {
  return eval(x, options{b.bytes, s});
}

/// The plan a device evaluation would follow (nothing allocated or launched; needs no GPU).
template <evaluable X>
tile_plan plan_for(const X& x, const options& o = {}) {
  detail::check_node<X>();
  rewrite::rule_log log;
  auto p = detail::dispatch(x, nullptr, nullptr, o, resolve_budget(o.budget), nullptr, true, log);
  p.rules = log.fired;
  return p;
}

}  // namespace memsafe::cuda
