// memsafe/backend/cuda/rows.cuh — running a row job (every reduction and product but lazy × lazy)
// under its rows_plan (rows_plan.cuh): the inputs' staging, cuBLAS and the tile allocated as the
// byte model counts them, then row blocks × column chunks of launches on one stream — fused or
// tile + per-row fold with partial states per column split, or a tile path (top-k by block sort,
// K·M, softmax_sum, dense tiles) — and the diagonal terms applied on the host. run_job decides
// nothing: the path, the layout and where the data live come from the plan.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "../../lower/job.hpp"
#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "kernels_fold.cuh"
#include "kernels_screen.cuh"
#include "kernels_topk.cuh"
#include "launch.cuh"
#include "output.cuh"
#include "plan.cuh"
#include "rows_plan.cuh"
#include "runtime.cuh"
#include "staging.cuh"

namespace memsafe::cuda::detail {

/// What every pass of a row job reads and writes.
template <class Job, class Map, class Leaf>
struct row_pass {
  using T = typename Job::value_type;
  using job_type = Job;
  const job_shape& s;
  const layout& L;
  const Job& job;
  const Map& map;
  const Leaf& leaf;
  const dev_scale<T>& sc;
  feeder<T>& xf;
  feeder<T>& yf;
  feeder<T>& rf;
  blas* bl;
  device_buffer<T>& tile;
  device_buffer<T>& xn;
  device_buffer<T>& yn;
  const jobs::out_spec<T>& out;
  device_accountant& acc;
  double screen_delta;  ///< the screening margin δ (kernels_screen.cuh), when s.screen

  /// Whether this block × chunk's tile is a screen: the plan says so and cuBLAS can read the points.
  bool screened(const dev_points<T>& Xb, const dev_points<T>& Yc) const {
    return s.screen && Xb.cs == 1 && Yc.cs == 1;
  }
  /// Call f with the tile's entry source: screening values re-evaluated exactly (selections over a
  /// bare squared-distance or cosine leaf), or the tile's values as they are.
  template <class Fn>
  void with_entries(bool screen, const dev_points<T>& Xb, const dev_points<T>& Yc, Fn&& f) const {
    if constexpr (screen_capable<std::remove_cvref_t<decltype(Job::e)>>) {
      if (screen) {
        constexpr base_kind B = Leaf::formula_type::base;
        f(kernels::screened_leaf<Map, T, B>{map, Xb, Yc, xn.data(), yn.data(), T(leaf.params.y_sign),
                                            screen_bounds_margin<T>(screen_delta)});
        return;
      }
    }
    f(kernels::tile_values<T>{});
  }
};

// ---- fused and tile + fold: partial states per row and column split, merged per row block ------

/// One column chunk of a row block: the fused kernel, or a tile and its per-row fold.
template <class P, class DM>
void fold_chunk(const P& r, const DM& dm, const dev_points<typename P::T>& Xb, std::size_t ni, std::size_t c,
                typename DM::state* part) {
  using T = typename P::T;
  const job_shape& s = r.s;
  const layout& L = r.L;
  const cudaStream_t st = r.acc.stream();
  const std::size_t j0 = c * L.tj, nj = s.m > j0 ? std::min(L.tj, s.m - j0) : 0;
  const int slot = int(c % 2);
  const auto Yc = r.yf.fetch(j0, nj, slot);
  DM mon = dm;
  if constexpr (std::is_same_v<DM, dmon_matvec<T>>) {
    const auto w = r.rf.fetch(j0, nj, slot);
    mon.w = w.p;
    mon.ws = w.rs;
  }
  if (s.path == kernel_path::fused) {
    launch_fused(r.map, mon, r.leaf, r.sc, Xb, Yc, std::int64_t(j0), L.splits, part, c == 0, st);
  } else {
    const bool screen = r.screened(Xb, Yc);
    generate_tile(r.map, r.leaf, r.sc, Xb, Yc, r.tile.data(), std::int64_t(L.tj), s.gemm, r.bl, r.xn.data(),
                  r.yn.data(), st, screen);
    const std::int64_t cpsz = std::max<std::int64_t>(1, std::int64_t(cdiv(std::max<std::size_t>(nj, 1), L.splits)));
    const dim3 grid(blocks_for(std::int64_t(ni) * 32), unsigned(L.splits));
    if constexpr (requires { DM::max_first; }) {
      r.with_entries(screen, Xb, Yc, [&](const auto& src) {
        using Src = std::remove_cvref_t<decltype(src)>;
        kernels::select_rows_kernel<DM, T, Src><<<grid, 256, 0, st>>>(mon, src, r.tile.data(), std::int64_t(L.tj),
                                                                      std::int64_t(ni), std::int64_t(nj),
                                                                      std::int64_t(j0), cpsz, part, c == 0);
        MEMSAFE_CUDA_LAUNCHED("select_rows_kernel");
      });
    } else {
      kernels::tile_rows_kernel<DM, T, kernels::tile_values<T>><<<grid, 256, 0, st>>>(
          mon, kernels::tile_values<T>{}, r.tile.data(), std::int64_t(L.tj), std::int64_t(ni), std::int64_t(nj),
          std::int64_t(j0), cpsz, part, c == 0);
      MEMSAFE_CUDA_LAUNCHED("tile_rows_kernel");
    }
  }
  r.yf.release(slot);
  r.rf.release(slot);
}

template <class P>
void run_fold(const P& r) {
  using T = typename P::T;
  with_dmon<T>(r.job.red, [&](auto dm) {
    using DM = decltype(dm);
    const cudaStream_t st = r.acc.stream();
    device_buffer<typename DM::state> part(r.acc, r.L.ti * std::size_t(r.L.splits));
    row_output<T> ro(r.out, r.job.post.scale, r.s.out_host, r.L.ti, r.s.c, r.s.with_index, r.acc);
    for (std::size_t i0 = 0; i0 < r.s.n; i0 += r.L.ti) {
      const std::size_t ni = std::min(r.L.ti, r.s.n - i0);
      const auto Xb = r.xf.fetch(i0, ni, 0);
      const std::size_t chunks = std::max<std::size_t>(1, cdiv(r.s.m, r.L.tj));
      for (std::size_t c = 0; c < chunks; ++c) fold_chunk(r, dm, Xb, ni, c, part.data());
      r.xf.release(0);
      kernels::merge_rows_kernel<DM, T><<<blocks_for(std::int64_t(ni)), 256, 0, st>>>(
          dm, part.data(), std::int64_t(ni), r.L.splits, ro.target(), ro.base(std::int64_t(i0)));
      MEMSAFE_CUDA_LAUNCHED("merge_rows_kernel");
      ro.finish_block(i0, ni, st);
    }
  });
}

// ---- symmetric K·v: each pair once, in bands of rows ----------------------------------------------

/// k(X, X)·v with the same device-resident points on both sides (rows_plan.cuh, sym_eligible).
/// The rows go in bands of ti = G row blocks (the last band may be shorter). Band [r0, r1)
/// against the columns [r0, n), in one launch of fused_sym_kernel: its own square row-wise, every
/// pair right of it once, into the row's split states and into its column's sum, one value per
/// column and row block (colpart, G·n). sym_columns_kernel then adds the G column sums right of
/// the band to each column's double state (colsum) in row-block order, and merge_rows_kernel
/// writes the band's rows: their split states plus what the earlier bands added to them as
/// columns. Pairs: n(n + ti)/2 instead of n²; every sum in a fixed order (deterministic for a
/// plan). Bytes beyond the plain form's: colpart and colsum (rows_plan.cuh, layout_bytes).
template <class P>
void run_symmetric(const P& r) {
  using T = typename P::T;
  if constexpr (!std::is_same_v<typename P::job_type::reduction, red::matmul<T>>) {
    throw error("memsafe::cuda: internal: the symmetric form planned for a reduction other than K·v");
  } else {
    using DM = dmon_matvec<T>;
    const cudaStream_t st = r.acc.stream();
    const std::size_t n = r.s.n, tb = r.L.ti, rpb = std::size_t(r.s.rows_per_block);
    device_buffer<typename DM::state> part(r.acc, tb * std::size_t(r.L.splits));
    device_buffer<T> colpart(r.acc, cdiv(tb, rpb) * n);
    device_buffer<double> colsum(r.acc, n);
    row_output<T> ro(r.out, r.job.post.scale, r.s.out_host, tb, r.s.c, r.s.with_index, r.acc);
    MEMSAFE_CUDA_CHECK(cudaMemsetAsync(colsum.data(), 0, n * sizeof(double), st));
    const auto X = r.xf.fetch(0, n, 0);
    const auto w = r.rf.fetch(0, n, 0);
    DM mon;
    mon.w = w.p;
    mon.ws = w.rs;
    for (std::size_t r0 = 0; r0 < n; r0 += tb) {
      const std::size_t ni = std::min(tb, n - r0), r1 = r0 + ni;
      const sym_split sp = sym_splits_for(n - r0, r.L.splits);
      launch_sym(r.map, mon, r.leaf, r.sc, X, std::int64_t(r0), std::int64_t(ni), sp.S, sp.cps, part.data(),
                 colpart.data(), st);
      if (r1 < n) {
        kernels::sym_columns_kernel<T><<<blocks_for(std::int64_t(n - r1)), 256, 0, st>>>(
            colpart.data(), int(cdiv(ni, rpb)), std::int64_t(n), std::int64_t(r1), colsum.data());
        MEMSAFE_CUDA_LAUNCHED("sym_columns_kernel");
      }
      kernels::merge_rows_kernel<DM, T><<<blocks_for(std::int64_t(ni)), 256, 0, st>>>(
          mon, part.data(), std::int64_t(ni), sp.S, ro.target(), ro.base(std::int64_t(r0)), colsum.data() + r0);
      MEMSAFE_CUDA_LAUNCHED("merge_rows_kernel");
      ro.finish_block(r0, ni, st);
    }
    r.xf.release(0);
    r.rf.release(0);
  }
}

// ---- the other tile paths: top-k by block sort, K·M, softmax_sum, dense -------------------------

/// The buffers of those paths, allocated (and counted) in this order.
template <class T>
struct tile_buffers {
  device_buffer<rank_key> lists;
  device_buffer<T> accb;
  device_buffer<kernels::softmax_state> soft;
  std::unique_ptr<pinned_buffer<T>> dense_pin;
  std::unique_ptr<row_output<T>> ro;
};

template <class P>
void allocate(const P& r, tile_buffers<typename P::T>& b) {
  using T = typename P::T;
  const job_shape& s = r.s;
  const layout& L = r.L;
  if (s.path == kernel_path::tile_topk) b.lists = device_buffer<rank_key>(r.acc, L.ti * s.k);
  if (s.path == kernel_path::tile_matmul || s.path == kernel_path::tile_softmax)
    b.accb = device_buffer<T>(r.acc, L.ti * s.c);
  if (s.path == kernel_path::tile_softmax) b.soft = device_buffer<kernels::softmax_state>(r.acc, L.ti);
  if (s.path == kernel_path::tile_dense) {
    if (s.out_host) b.dense_pin = std::make_unique<pinned_buffer<T>>(r.acc, L.ti * L.tj);
  } else {
    b.ro = std::make_unique<row_output<T>>(r.out, r.job.post.scale, s.out_host, L.ti, s.c, s.with_index, r.acc);
  }
}

template <class P>
inline constexpr bool topk_max = std::is_same_v<typename P::job_type::reduction, red::argkmax>;

/// Before a row block's chunks: empty top-k lists, zero accumulators, fresh softmax states.
template <class P>
void begin_block(const P& r, tile_buffers<typename P::T>& b, std::size_t ni) {
  using T = typename P::T;
  const job_shape& s = r.s;
  const cudaStream_t st = r.acc.stream();
  if (s.path == kernel_path::tile_topk) {
    kernels::init_keys_kernel<<<blocks_for(std::int64_t(ni * s.k)), 256, 0, st>>>(b.lists.data(),
                                                                                 std::int64_t(ni * s.k));
    MEMSAFE_CUDA_LAUNCHED("init_keys_kernel");
  }
  if (b.accb.data()) MEMSAFE_CUDA_CHECK(cudaMemsetAsync(b.accb.data(), 0, ni * s.c * sizeof(T), st));
  if (s.path == kernel_path::tile_softmax) {
    kernels::softmax_init_kernel<<<blocks_for(std::int64_t(ni)), 256, 0, st>>>(b.soft.data(), std::int64_t(ni));
    MEMSAFE_CUDA_LAUNCHED("softmax_init_kernel");
  }
}

/// A dense tile to host outputs: through the pinned buffer, scattered with the caller's strides.
template <class P>
void store_dense_home(const P& r, tile_buffers<typename P::T>& b, const typename P::T* dst, std::int64_t ld,
                      std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj) {
  using T = typename P::T;
  const cudaStream_t st = r.acc.stream();
  MEMSAFE_CUDA_CHECK(cudaMemcpy2DAsync(b.dense_pin->data(), nj * sizeof(T), dst, std::size_t(ld) * sizeof(T),
                                       nj * sizeof(T), ni, cudaMemcpyDeviceToHost, st));
  MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
  for (std::size_t row = 0; row < ni; ++row)
    for (std::size_t q = 0; q < nj; ++q) r.out.v(i0 + row, j0 + q) = b.dense_pin->data()[row * nj + q];
}

/// One column chunk: the tile (straight into a device dense output), then the path's use of it.
template <class P>
void tile_chunk(const P& r, tile_buffers<typename P::T>& b, const dev_points<typename P::T>& Xb, std::size_t i0,
                std::size_t ni, std::size_t c) {
  using T = typename P::T;
  const job_shape& s = r.s;
  const cudaStream_t st = r.acc.stream();
  const std::size_t j0 = c * r.L.tj, nj = std::min(r.L.tj, s.m - j0);
  const int slot = int(c % 2);
  const auto Yc = r.yf.fetch(j0, nj, slot);
  T* dst = r.tile.data();
  std::int64_t ld = std::int64_t(r.L.tj);
  if (s.path == kernel_path::tile_dense && !s.out_host) {  // straight into the device output
    dst = r.out.values + i0 * r.out.vrs + j0 * r.out.vcs;
    ld = r.out.vrs;
  }
  const bool screen = r.screened(Xb, Yc);
  generate_tile(r.map, r.leaf, r.sc, Xb, Yc, dst, ld, s.gemm, r.bl, r.xn.data(), r.yn.data(), st, screen);
  if (s.path == kernel_path::tile_topk) {
    r.with_entries(screen, Xb, Yc, [&](const auto& src) {
      using Src = std::remove_cvref_t<decltype(src)>;
      // The dynamic shared-memory limit is raised right here, before each launch, on the kernel this
      // function launches: nvcc gives a kernel template's host stub internal linkage, one copy per
      // translation unit, so a separate configure function (one merged copy) or a "done" flag
      // configured another unit's copy and every launch from this one failed with
      // cudaErrorInvalidValue (seen on an H200). The attribute write is host-side, no synchronisation.
      const auto kernel = kernels::topk_tile_kernel<topk_max<P>, T, Src>;
      MEMSAFE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              int(kernels::topk_smem_bytes)));
      kernel<<<unsigned(ni), kernels::topk_threads, kernels::topk_smem_bytes, st>>>(
          src, dst, ld, std::int64_t(nj), std::int64_t(j0), b.lists.data(), int(s.k));
      MEMSAFE_CUDA_LAUNCHED("topk_tile_kernel");
    });
  } else if (s.path == kernel_path::tile_matmul) {
    gemm_accumulate(*r.bl, dst, ld, std::int64_t(ni), std::int64_t(nj), r.rf.fetch(j0, nj, slot), b.accb.data(),
                    std::int64_t(s.c));
  } else if (s.path == kernel_path::tile_softmax) {
    kernels::softmax_tile_kernel<T><<<blocks_for(std::int64_t(ni) * 32), 256, 0, st>>>(
        dst, ld, std::int64_t(ni), std::int64_t(nj), b.soft.data(), b.accb.data(), std::int64_t(s.c));
    MEMSAFE_CUDA_LAUNCHED("softmax_tile_kernel");
    gemm_accumulate(*r.bl, dst, ld, std::int64_t(ni), std::int64_t(nj), r.rf.fetch(j0, nj, slot), b.accb.data(),
                    std::int64_t(s.c));
  } else if (s.path == kernel_path::tile_dense && s.out_host) {
    store_dense_home(r, b, dst, ld, i0, ni, j0, nj);
  }
  r.yf.release(slot);
  r.rf.release(slot);
}

/// After a row block's chunks: write the top-k lists, the K·M block or the softmax_sum block.
template <class P>
void end_block(const P& r, tile_buffers<typename P::T>& b, std::size_t i0, std::size_t ni) {
  using T = typename P::T;
  const job_shape& s = r.s;
  const cudaStream_t st = r.acc.stream();
  if (s.path == kernel_path::tile_topk) {
    kernels::topk_write_kernel<topk_max<P>, T><<<blocks_for(std::int64_t(ni * s.k)), 256, 0, st>>>(
        b.lists.data(), std::int64_t(ni), int(s.k), b.ro->target(), b.ro->base(std::int64_t(i0)));
    MEMSAFE_CUDA_LAUNCHED("topk_write_kernel");
  } else if (s.path == kernel_path::tile_matmul) {
    kernels::store_block_kernel<T><<<blocks_for(std::int64_t(ni * s.c)), 256, 0, st>>>(
        b.accb.data(), std::int64_t(s.c), std::int64_t(ni), std::int64_t(s.c), b.ro->target(),
        b.ro->base(std::int64_t(i0)));
    MEMSAFE_CUDA_LAUNCHED("store_block_kernel");
  } else if (s.path == kernel_path::tile_softmax) {
    kernels::softmax_finish_kernel<T><<<blocks_for(std::int64_t(ni * s.c)), 256, 0, st>>>(
        b.soft.data(), b.accb.data(), std::int64_t(ni), std::int64_t(s.c), b.ro->target(),
        b.ro->base(std::int64_t(i0)));
    MEMSAFE_CUDA_LAUNCHED("softmax_finish_kernel");
  }
}

template <class P>
void run_tiles(const P& r) {
  using T = typename P::T;
  tile_buffers<T> b;
  allocate(r, b);
  const cudaStream_t st = r.acc.stream();
  for (std::size_t i0 = 0; i0 < r.s.n; i0 += r.L.ti) {
    const std::size_t ni = std::min(r.L.ti, r.s.n - i0);
    const auto Xb = r.xf.fetch(i0, ni, 0);
    begin_block(r, b, ni);
    const std::size_t chunks = cdiv(r.s.m, r.L.tj);
    for (std::size_t c = 0; c < chunks; ++c) tile_chunk(r, b, Xb, i0, ni, c);
    r.xf.release(0);
    end_block(r, b, i0, ni);
    if (b.ro) b.ro->finish_block(i0, ni, st);
  }
}

// ---- run_job ------------------------------------------------------------------------------------

/// The diagonal terms of a sum or product, on the host outputs once the device pass is done (the
/// hoisted scale was applied on the device).
template <class E, class R, class T>
void apply_diagonal_terms(const jobs::rows_job<E, R, T>& job, const jobs::out_spec<T>& out, std::size_t n,
                          cudaStream_t st) {
  MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
  rewrite::linear_post<T> diags = job.post;
  diags.scale = 1;
  jobs::apply_post(diags, job.rhs, out, n, job.rhs.data() ? job.rhs.cols() : 1);
}

/// An empty reduction (m = 0): every row's identity, as the host writes it (host/executor.hpp,
/// run_row_blocks), with no temporaries: 0 for sums and products, −∞ for logsumexp, ±∞ and index −1
/// for min/max/argmin/argmax, NaN for softmax_sum (top-k with k > m = 0 is refused by the lowering).
/// The identity is one row formed on the host by the device monoid's own init and write (both
/// MEMSAFE_HD) and copied into every row: on the host, or by fill_rows_kernel into device outputs.
template <class J, class T>
void write_identities(const J& job, const jobs::out_spec<T>& out, const job_shape& s, cudaStream_t st) {
  using R = typename J::reduction;
  T value = T(0);
  index_t index = -1;
  if constexpr (std::is_same_v<R, red::softmax_sum<T>>) {
    value = std::numeric_limits<T>::quiet_NaN();
  } else if constexpr (!std::is_same_v<R, red::matmul<T>>) {
    with_dmon<T>(job.red, [&](auto dm) {
      using DM = decltype(dm);
      constexpr bool topk = [] {
        if constexpr (requires { DM::capacity; }) return DM::capacity > 1;
        else return false;
      }();
      if constexpr (topk) {
        throw error("memsafe::cuda: internal: an empty top-k reached the device");
      } else {
        typename DM::state st0;
        dm.init(st0);
        dm.write(st0, dev_out<T>{&value, 0, 1, &index, 0, 1, 1.0}, 0);
      }
    });
  }
  value = job.post.scale == 1 ? value : static_cast<T>(job.post.scale * static_cast<double>(value));
  const bool with_index = s.with_index && out.indices;
  if (s.out_host) {
    for (std::size_t i = 0; i < s.n; ++i)
      for (std::size_t q = 0; q < s.c; ++q) {
        out.v(i, q) = value;
        if (with_index) out.ix(i, q) = index;
      }
    return;
  }
  const dev_out<T> o{out.values, out.vrs, out.vcs, with_index ? out.indices : nullptr, out.irs, out.ics, 1.0};
  kernels::fill_rows_kernel<T><<<blocks_for(std::int64_t(s.n)), 256, 0, st>>>(o, std::int64_t(s.n),
                                                                               std::int64_t(s.c), value, index);
  MEMSAFE_CUDA_LAUNCHED("fill_rows_kernel");
}

/// Run a row job under its plan: allocate the inputs' staging, cuBLAS and the tile (in the byte
/// model's terms), run the plan's path, then apply the diagonal terms on the host.
template <class J, class T>
void run_supported_job(const jobs::bound_rows<J, T>& b, const rows_plan& plan, const options& o,
                       device_accountant& acc);
template <class J, class T>
void run_job(const jobs::bound_rows<J, T>& b, const rows_plan& plan, const options& o, device_accountant& acc) {
  // an unsupported job was refused by plan_job's static_assert: nothing more to instantiate
  if constexpr (rows_job_supported<J, T>) run_supported_job(b, plan, o, acc);
}
template <class J, class T>
void run_supported_job(const jobs::bound_rows<J, T>& b, const rows_plan& plan, const options& o,
                       device_accountant& acc) {
  const J& job = b.job;
  const job_shape& s = plan.s;
  const layout& L = plan.L;
  if (s.n == 0 || s.c == 0) return;  // no output: nothing to read (a K·M with M m×0 read column 0)
  using E = std::remove_cvref_t<decltype(job.e)>;
  using R = typename J::reduction;
  if (s.m == 0) return write_identities(job, b.out, s, acc.stream());
  const auto& leaf = dev_map_of<E>::leaf_of(job.e);
  const cudaStream_t st = acc.stream();
  std::unique_ptr<stream> copy_stream;
  if (s.x_host || s.y_host || s.rhs_host) copy_stream = std::make_unique<stream>();
  const cudaStream_t cps = copy_stream ? copy_stream->get() : st;

  const auto map = dev_map_of<E>::make(job.e);
  const device_scale<T> ds(leaf.params, s.d, acc);
  feeder<T> xf(matrix_view<const T>(leaf.x), s.x_host, 1, L.ti, acc, cps);
  feeder<T> yf(matrix_view<const T>(leaf.y), s.y_host, 2, L.tj, acc, cps);
  feeder<T> rf(column_operand<R, T>(job.red), s.rhs_host, 2, L.tj, acc, cps);
  std::unique_ptr<blas> bl;
  // A screen's GEMM may use TF32 (options.screen_tf32): its margin covers it and the values
  // folded are re-evaluated exactly; in a screened job cuBLAS computes nothing else.
  const bool tf32 = o.allow_tf32 || (s.screen && o.screen_tf32);
  if (s.gemm || s.path == kernel_path::tile_matmul || s.path == kernel_path::tile_softmax)
    bl = std::make_unique<blas>(acc, tf32);
  const bool tile_path = s.path != kernel_path::fused;
  device_buffer<T> tile, xn, yn;
  if (tile_path && !(s.path == kernel_path::tile_dense && !s.out_host)) tile = device_buffer<T>(acc, L.ti * L.tj);
  if (tile_path && s.gemm) {
    xn = device_buffer<T>(acc, L.ti);
    yn = device_buffer<T>(acc, L.tj);
  }
  using Leaf = std::remove_cvref_t<decltype(leaf)>;
  using Map = std::remove_cvref_t<decltype(map)>;
  const double delta = screen_margin<T>(Leaf::formula_type::base, s.d, tf32);
  const row_pass<J, Map, Leaf> r{s, L, job, map, leaf, ds.scale, xf, yf, rf, bl.get(), tile, xn, yn, b.out, acc, delta};
  if (s.symmetric) run_symmetric(r);
  else if (s.path == kernel_path::fused || s.path == kernel_path::tile_fold) run_fold(r);
  else run_tiles(r);
  if (s.out_host && !job.post.diags.empty()) apply_diagonal_terms(job, b.out, s.n, st);
}

}  // namespace memsafe::cuda::detail
