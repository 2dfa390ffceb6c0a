// memsafe/backend/cuda/product.cuh — the lazy × lazy product driver: per output block, a tile of
// each factor per inner chunk, accumulated by cuBLAS GEMM (staged to host outputs per block).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "device_expr.cuh"
#include "launch.cuh"
#include "plan.cuh"
#include "runtime.cuh"
#include "staging.cuh"

namespace memsafe::cuda::detail {

template <class A, class B>
struct product_eval {
  using T = typename A::value_type;

  /// Plan (plan_only: host output, factors' points taken as device-resident), then evaluate.
  static tile_plan run(const memsafe::detail::lazy_product_expr<A, B>& x, T* values, const options& o,
                       std::size_t budget, const device_resources& /*dev: the product's plan does not depend on it*/,
                       device_accountant* acc_out, bool plan_only, rewrite::rule_log& log) {
    const auto job = jobs::lower(x, values, nullptr, log);  // every rule fired once, logged
    const auto& a = job.a;
    const auto& b = job.b;
    const auto& post = job.post;
    using EA = std::remove_cvref_t<decltype(a)>;
    using EB = std::remove_cvref_t<decltype(b)>;
    static_assert(device_supported<EA> && device_supported<EB>,
                  "memsafe::cuda: A * B: each factor must be one pairwise formula with elementwise maps over it");
    const product_shape s = shape(a, b, values, plan_only);
    const product_layout L = plan_product(s, budget, x.str());
    tile_plan p = describe(a, b, post, s, L, budget);
    if (job.symmetric) p.reduction += "; symmetric, but every block is computed on the GPU";
    if (plan_only) return p;
    execute(a, b, T(post.scale), s, L, values, o, *acc_out);
    return p;
  }

  template <class EA, class EB>
  static product_shape shape(const EA& a, const EB& b, const T* values, bool plan_only) {
    const auto& la = dev_map_of<EA>::leaf_of(a);
    const auto& lb = dev_map_of<EB>::leaf_of(b);
    product_shape s;
    s.P = a.rows(), s.N = a.cols(), s.Q = b.cols(), s.d1 = la.dim(), s.d2 = lb.dim();
    s.tsize = sizeof(T);
    s.out_host = plan_only ? true : space_of(values) == memory_space::host;
    if (!plan_only) {
      s.hosts[0] = space_of(la.x.data()) == memory_space::host;
      s.hosts[1] = space_of(la.y.data()) == memory_space::host;
      s.hosts[2] = space_of(lb.x.data()) == memory_space::host;
      s.hosts[3] = space_of(lb.y.data()) == memory_space::host;
    }
    s.ga = gemm_eligible(la), s.gb = gemm_eligible(lb);
    s.ard = la.params.kind != memsafe::detail::per_dim_kind::none ||
            lb.params.kind != memsafe::detail::per_dim_kind::none;
    return s;
  }

  template <class EA, class EB>
  static tile_plan describe(const EA& a, const EB& b, const rewrite::linear_post<T>& post, const product_shape& s,
                            const product_layout& L, std::size_t budget) {
    tile_plan p;
    p.expression = a.str() + " * " + b.str();
    if (post.scale != 1) p.expression = std::to_string(post.scale) + " * (" + p.expression + ")";
    p.reduction = path_name(kernel_path::product);
    p.rows = s.P, p.cols = s.Q, p.inner = s.N;
    p.tile_rows = L.tp, p.tile_cols = L.tq, p.tile_inner = L.tt;
    p.row_blocks = cdiv(s.P, L.tp), p.col_blocks = cdiv(s.Q, L.tq);
    p.inner_blocks = cdiv(std::max<std::size_t>(s.N, 1), L.tt);
    p.num_tiles = p.row_blocks * p.col_blocks * p.inner_blocks;
    p.planned_bytes = p.per_thread_bytes = L.bytes;
    p.min_bytes = L.min_bytes;
    p.budget = budget;
    p.threads = 1;
    return p;
  }

  static device_buffer<T> buffer_if(bool on, device_accountant& acc, std::size_t n) {
    return on ? device_buffer<T>(acc, n) : device_buffer<T>();
  }

  /// Everything the product allocates, in the byte model's terms and in this order.
  struct resources {
    device_scale<T> dsa, dsb;
    feeder<T> fax, fay, fbx, fby;
    blas bl;
    device_buffer<T> ta, tb, xna, yna, xnb, ynb, cacc;
    std::unique_ptr<pinned_buffer<T>> pin;

    template <class LA, class LB>
    resources(const LA& la, const LB& lb, const product_shape& s, const product_layout& L, const options& o,
              device_accountant& acc, cudaStream_t cps)
        : dsa(la.params, s.d1, acc),
          dsb(lb.params, s.d2, acc),
          fax(matrix_view<const T>(la.x), s.hosts[0], 1, L.tp, acc, cps),
          fay(matrix_view<const T>(la.y), s.hosts[1], 1, L.tt, acc, cps),
          fbx(matrix_view<const T>(lb.x), s.hosts[2], 1, L.tt, acc, cps),
          fby(matrix_view<const T>(lb.y), s.hosts[3], 1, L.tq, acc, cps),
          bl(acc, o.allow_tf32),
          ta(acc, L.tp * L.tt),
          tb(acc, L.tt * L.tq),
          xna(buffer_if(s.ga, acc, L.tp)),
          yna(buffer_if(s.ga, acc, L.tt)),
          xnb(buffer_if(s.gb, acc, L.tt)),
          ynb(buffer_if(s.gb, acc, L.tq)),
          cacc(buffer_if(s.out_host, acc, L.tp * L.tq)),
          pin(s.out_host ? std::make_unique<pinned_buffer<T>>(acc, L.tp * L.tq) : nullptr) {}
  };

  template <class EA, class EB>
  static void execute(const EA& a, const EB& b, T alpha, const product_shape& s, const product_layout& L, T* values,
                      const options& o, device_accountant& acc) {
    const auto& la = dev_map_of<EA>::leaf_of(a);
    const auto& lb = dev_map_of<EB>::leaf_of(b);
    const cudaStream_t st = acc.stream();
    std::unique_ptr<stream> copy_stream;
    if (s.hosts[0] || s.hosts[1] || s.hosts[2] || s.hosts[3]) copy_stream = std::make_unique<stream>();
    const cudaStream_t cps = copy_stream ? copy_stream->get() : st;
    resources R(la, lb, s, L, o, acc, cps);
    const auto ma = dev_map_of<EA>::make(a);
    const auto mb = dev_map_of<EB>::make(b);
    for (std::size_t p0 = 0; p0 < s.P; p0 += L.tp)
      for (std::size_t q0 = 0; q0 < s.Q; q0 += L.tq) out_block(ma, la, mb, lb, R, s, L, alpha, values, p0, q0, st);
  }

  /// One output block C[p0.., q0..]: zeroed, accumulated over the inner chunks, staged home if the
  /// output is on the host.
  template <class MA, class LA, class MB, class LB>
  static void out_block(const MA& ma, const LA& la, const MB& mb, const LB& lb, resources& R, const product_shape& s,
                        const product_layout& L, T alpha, T* values, std::size_t p0, std::size_t q0,
                        cudaStream_t st) {
    const std::size_t P = s.P, Q = s.Q, N = s.N;
    const std::size_t np = std::min(L.tp, P - p0), nq = std::min(L.tq, Q - q0);
    T* C = s.out_host ? R.cacc.data() : values + p0 * Q + q0;
    const std::int64_t ldc = s.out_host ? std::int64_t(nq) : std::int64_t(Q);
    MEMSAFE_CUDA_CHECK(cudaMemset2DAsync(C, std::size_t(ldc) * sizeof(T), 0, nq * sizeof(T), np, st));
    const auto Ap = R.fax.fetch(p0, np, 0);
    const auto Bq = R.fby.fetch(q0, nq, 0);
    for (std::size_t t0 = 0; t0 < N; t0 += L.tt) {
      const std::size_t nt = std::min(L.tt, N - t0);
      const auto At = R.fay.fetch(t0, nt, 0);
      const auto Bt = R.fbx.fetch(t0, nt, 0);
      generate_tile(ma, la, R.dsa.scale, Ap, At, R.ta.data(), std::int64_t(nt), s.ga, &R.bl, R.xna.data(),
                    R.yna.data(), st);
      generate_tile(mb, lb, R.dsb.scale, Bt, Bq, R.tb.data(), std::int64_t(nq), s.gb, &R.bl, R.xnb.data(),
                    R.ynb.data(), st);
      gemm_into(R, alpha, np, nq, nt, C, ldc);
      R.fay.release(0);
      R.fbx.release(0);
    }
    R.fax.release(0);
    R.fby.release(0);
    if (s.out_host) {
      MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(R.pin->data(), C, np * nq * sizeof(T), cudaMemcpyDeviceToHost, st));
      MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
      for (std::size_t r = 0; r < np; ++r)
        std::copy(R.pin->data() + r * nq, R.pin->data() + (r + 1) * nq, values + (p0 + r) * Q + q0);
    }
  }

  /// Row-major C (np × nq) += alpha · A (np × nt) · B (nt × nq), as column-major Cᵀ += Bᵀ Aᵀ.
  static void gemm_into(resources& R, T alpha, std::size_t np, std::size_t nq, std::size_t nt, T* C,
                        std::int64_t ldc) {
    const T one = 1;
    if constexpr (std::is_same_v<T, float>)
      MEMSAFE_CUDA_CHECK(cublasSgemm(R.bl.get(), CUBLAS_OP_N, CUBLAS_OP_N, int(nq), int(np), int(nt), &alpha,
                                     R.tb.data(), int(nq), R.ta.data(), int(nt), &one, C, int(ldc)));
    else
      MEMSAFE_CUDA_CHECK(cublasDgemm(R.bl.get(), CUBLAS_OP_N, CUBLAS_OP_N, int(nq), int(np), int(nt), &alpha,
                                     R.tb.data(), int(nq), R.ta.data(), int(nt), &one, C, int(ldc)));
  }
};

}  // namespace memsafe::cuda::detail
