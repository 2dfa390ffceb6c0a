// memsafe/backend/cuda/rows.cuh — the row-job driver (every reduction and product but lazy × lazy):
// path choice and plan, then row blocks × column chunks of launches (per-row fold, top-k by block
// sort, K·M, softmax_sum, dense tiles).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "kernels.cuh"
#include "launch.cuh"
#include "output.cuh"
#include "plan.cuh"
#include "runtime.cuh"
#include "staging.cuh"

namespace memsafe::cuda::detail {

template <class X>
struct row_eval {
  using T = typename X::value_type;

  // ---- plan ---------------------------------------------------------------------------------------

  template <class Job>
  static job_shape shape(const Job& job, bool out_host, bool with_index, int sms, bool query) {
    using E = std::remove_cvref_t<decltype(job.e)>;
    using R = typename std::remove_cvref_t<decltype(job)>::reduction;
    const auto& leaf = dev_map_of<E>::leaf_of(job.e);
    job_shape s;
    s.n = job.e.rows();
    s.m = job.e.cols();
    s.d = leaf.dim();
    s.tsize = sizeof(T);
    s.c = out_cols<R, T>(job.red, s.m);
    s.x_host = query && space_of(leaf.x.data()) == memory_space::host;
    s.y_host = query && space_of(leaf.y.data()) == memory_space::host;
    const auto rhs = column_operand<R, T>(job.red);
    s.rhs_cols = rhs.data() ? rhs.cols() : 0;
    s.rhs_host = query && rhs.data() && space_of(rhs.data()) == memory_space::host;
    s.out_host = out_host;
    s.ard = leaf.params.kind != memsafe::detail::per_dim_kind::none;
    s.with_index = with_index;
    s.sms = sms;
    const bool small_d = s.d <= fused_max_d;
    if constexpr (std::is_same_v<R, red::softmax_sum<T>>) s.path = kernel_path::tile_softmax;
    else if constexpr (std::is_same_v<R, red::dense>) s.path = kernel_path::tile_dense;
    else if constexpr (std::is_same_v<R, red::matmul<T>>)
      s.path = s.c > 1 ? kernel_path::tile_matmul : (small_d ? kernel_path::fused : kernel_path::tile_fold);
    else if constexpr (requires { job.red.k; }) {
      s.k = job.red.k;
      s.path = s.k > std::size_t(fused_max_k) ? kernel_path::tile_topk
                                              : (small_d ? kernel_path::fused : kernel_path::tile_fold);
    } else s.path = small_d ? kernel_path::fused : kernel_path::tile_fold;
    s.gemm = s.path != kernel_path::fused && gemm_eligible(leaf);
    if (s.path == kernel_path::fused || s.path == kernel_path::tile_fold) {
      with_dmon(job.red, [&](const auto& dm) {
        using DM = std::remove_cvref_t<decltype(dm)>;
        s.state_bytes = sizeof(typename DM::state);
        s.rows_per_thread = rows_per_thread_for<DM>(s.d);
      });
    }
    return s;
  }

  /// Call f with the device monoid of a foldable reduction tag.
  template <class R, class Fn>
  static void with_dmon(const R& r, Fn&& f) {
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

  /// The plan as plan_for shows it, from the shape and the chosen layout.
  template <class Job>
  static tile_plan describe(const Job& job, const job_shape& s, const layout& L, std::size_t budget) {
    using R = typename std::remove_cvref_t<decltype(job)>::reduction;
    tile_plan p;
    p.expression = job.e.str();
    if (job.post.scale != 1) p.expression = std::to_string(job.post.scale) + " * [" + p.expression + "]";
    p.reduction = std::string(R::name) + " on the GPU: " + path_name(s.path) +
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
    return p;
  }

  /// Plan (plan_only: host outputs, inputs taken as device-resident, nothing touched), then evaluate;
  /// outputs as the host's eval_into lays them out (values/indices may be device or host).
  static tile_plan run(const X& x, T* values, index_t* indices, const options& o, std::size_t budget,
                       const device_resources& dev, device_accountant* acc_out, bool plan_only,
                       rewrite::rule_log& log) {
    auto job = rows_lowering<X>::make(x, log);
    using E = std::remove_cvref_t<decltype(job.e)>;
    using R = typename std::remove_cvref_t<decltype(job)>::reduction;
    static_assert(device_supported<E>,
                  "memsafe::cuda: this lazy matrix cannot be evaluated on the GPU: the device backend takes one "
                  "pairwise formula with elementwise maps over it (rbf(X,Y), exp(-sqdist(X,Y)/2), ...); combine "
                  "two pairwise matrices, broadcast tensors or diagonal terms inside a reduction on the host");
    static_assert(red_known<R, T>, "memsafe::cuda: this reduction has no device implementation");
    const bool out_host = plan_only ? true : space_of(values) == memory_space::host;
    if (!job.post.diags.empty() && !out_host && !plan_only)
      throw argument_error("memsafe::cuda: " + x.str() +
                           ": a product or sum with diagonal terms (K + D) needs host outputs on the GPU backend");
    const job_shape s = shape(job, out_host, X::has_indices, dev.sms, !plan_only);
    if (s.k > topk_max_k)
      throw argument_error("memsafe::cuda: argkmin/argkmax: k = " + std::to_string(s.k) +
                           " is above the GPU backend's limit of " + std::to_string(topk_max_k));
    const layout L = plan_layout(s, budget, x.str());
    tile_plan p = describe(job, s, L, budget);
    if (plan_only) return p;
    execute(x, job, s, L, values, indices, o, *acc_out);
    return p;
  }

  // ---- execute ------------------------------------------------------------------------------------

  /// What every pass of a row job reads and writes.
  template <class Job, class Map, class Leaf>
  struct pass {
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
  };

  /// Allocate the inputs' staging, cuBLAS and the tile (in the byte model's terms), run the path,
  /// then apply the diagonal terms on the host.
  template <class Job>
  static void execute(const X& x, const Job& job, const job_shape& s, const layout& L, T* values,
                      index_t* indices, const options& o, device_accountant& acc) {
    using E = std::remove_cvref_t<decltype(job.e)>;
    using R = typename std::remove_cvref_t<decltype(job)>::reduction;
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
    if (s.gemm || s.path == kernel_path::tile_matmul || s.path == kernel_path::tile_softmax)
      bl = std::make_unique<blas>(acc, o.allow_tf32);
    const bool tile_path = s.path != kernel_path::fused;
    device_buffer<T> tile, xn, yn;
    if (tile_path && !(s.path == kernel_path::tile_dense && !s.out_host)) tile = device_buffer<T>(acc, L.ti * L.tj);
    if (tile_path && s.gemm) {
      xn = device_buffer<T>(acc, L.ti);
      yn = device_buffer<T>(acc, L.tj);
    }
    const jobs::out_spec<T> out = rows_lowering<X>::out(x, values, indices);
    using Leaf = std::remove_cvref_t<decltype(leaf)>;
    using Map = std::remove_cvref_t<decltype(map)>;
    const pass<Job, Map, Leaf> r{s, L, job, map, leaf, ds.scale, xf, yf, rf, bl.get(), tile, xn, yn, out, acc};
    if (s.path == kernel_path::fused || s.path == kernel_path::tile_fold) run_fold(r);
    else run_tiles(r);
    if (s.out_host && !job.post.diags.empty()) {
      MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
      rewrite::linear_post<T> diags = job.post;
      diags.scale = 1;  // the scale was applied on the device
      jobs::apply_post(diags, job.rhs, out, s.n, job.rhs.data() ? job.rhs.cols() : 1);
    }
  }

  // ---- fused and tile + fold: partial states per row and column split, merged per row block ------

  template <class P>
  static void run_fold(const P& r) {
    with_dmon(r.job.red, [&](auto dm) {
      using DM = decltype(dm);
      const cudaStream_t st = r.acc.stream();
      device_buffer<typename DM::state> part(r.acc, r.L.ti * std::size_t(r.L.splits));
      row_output<T> ro(r.out, r.job.post.scale, r.s.out_host, r.L.ti, r.s.c, X::has_indices, r.acc);
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

  /// One column chunk of a row block: the fused kernel, or a tile and its per-row fold.
  template <class P, class DM>
  static void fold_chunk(const P& r, const DM& dm, const dev_points<T>& Xb, std::size_t ni, std::size_t c,
                         typename DM::state* part) {
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
      generate_tile(r.map, r.leaf, r.sc, Xb, Yc, r.tile.data(), std::int64_t(L.tj), s.gemm, r.bl, r.xn.data(),
                    r.yn.data(), st);
      const std::int64_t cpsz = std::max<std::int64_t>(1, std::int64_t(cdiv(std::max<std::size_t>(nj, 1), L.splits)));
      const dim3 grid(blocks_for(std::int64_t(ni) * 32), unsigned(L.splits));
      kernels::tile_rows_kernel<DM, T><<<grid, 256, 0, st>>>(mon, r.tile.data(), std::int64_t(L.tj), std::int64_t(ni),
                                                             std::int64_t(nj), std::int64_t(j0), cpsz, part, c == 0);
      MEMSAFE_CUDA_LAUNCHED("tile_rows_kernel");
    }
    r.yf.release(slot);
    r.rf.release(slot);
  }

  // ---- the other tile paths: top-k by block sort, K·M, softmax_sum, dense -------------------------

  /// The buffers of those paths, allocated (and counted) in this order.
  struct tile_buffers {
    device_buffer<rank_key> lists;
    device_buffer<T> accb;
    device_buffer<kernels::softmax_state> soft;
    std::unique_ptr<pinned_buffer<T>> dense_pin;
    std::unique_ptr<row_output<T>> ro;
  };

  template <class P>
  static void allocate(const P& r, tile_buffers& b) {
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

  /// Once per process (per expression type): raise the top-k kernel's dynamic shared-memory limit.
  template <bool Max>
  static void configure_topk() {
    static bool configured = false;
    if (!configured) {
      MEMSAFE_CUDA_CHECK(cudaFuncSetAttribute(kernels::topk_tile_kernel<Max, T>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              int(kernels::topk_smem_bytes)));
      configured = true;
    }
  }

  template <class Job>
  static constexpr bool topk_max = std::is_same_v<typename Job::reduction, red::argkmax>;

  template <class P>
  static void run_tiles(const P& r) {
    using Job = std::remove_cvref_t<decltype(r.job)>;
    tile_buffers b;
    allocate(r, b);
    if (r.s.path == kernel_path::tile_topk) configure_topk<topk_max<Job>>();
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

  /// Before a row block's chunks: empty top-k lists, zero accumulators, fresh softmax states.
  template <class P>
  static void begin_block(const P& r, tile_buffers& b, std::size_t ni) {
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

  /// One column chunk: the tile (straight into a device dense output), then the path's use of it.
  template <class P>
  static void tile_chunk(const P& r, tile_buffers& b, const dev_points<T>& Xb, std::size_t i0, std::size_t ni,
                         std::size_t c) {
    using Job = std::remove_cvref_t<decltype(r.job)>;
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
    generate_tile(r.map, r.leaf, r.sc, Xb, Yc, dst, ld, s.gemm, r.bl, r.xn.data(), r.yn.data(), st);
    if (s.path == kernel_path::tile_topk) {
      kernels::topk_tile_kernel<topk_max<Job>, T><<<unsigned(ni), kernels::topk_threads, kernels::topk_smem_bytes, st>>>(
          dst, ld, std::int64_t(nj), std::int64_t(j0), b.lists.data(), int(s.k));
      MEMSAFE_CUDA_LAUNCHED("topk_tile_kernel");
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
      MEMSAFE_CUDA_CHECK(cudaMemcpy2DAsync(b.dense_pin->data(), nj * sizeof(T), dst, std::size_t(ld) * sizeof(T),
                                           nj * sizeof(T), ni, cudaMemcpyDeviceToHost, st));
      MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
      for (std::size_t row = 0; row < ni; ++row)
        for (std::size_t q = 0; q < nj; ++q) r.out.v(i0 + row, j0 + q) = b.dense_pin->data()[row * nj + q];
    }
    r.yf.release(slot);
    r.rf.release(slot);
  }

  /// After a row block's chunks: write the top-k lists, the K·M block or the softmax_sum block.
  template <class P>
  static void end_block(const P& r, tile_buffers& b, std::size_t i0, std::size_t ni) {
    using Job = std::remove_cvref_t<decltype(r.job)>;
    const job_shape& s = r.s;
    const cudaStream_t st = r.acc.stream();
    if (s.path == kernel_path::tile_topk) {
      kernels::topk_write_kernel<topk_max<Job>, T><<<blocks_for(std::int64_t(ni * s.k)), 256, 0, st>>>(
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
};

}  // namespace memsafe::cuda::detail
