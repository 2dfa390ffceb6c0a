// memsafe/backend/cuda/product.cuh — running a lazy × lazy product under its product_plan
// (product_plan.cuh): per output block, a tile of each factor per inner chunk, accumulated by
// cuBLAS GEMM straight into a device output, or into a device accumulator staged home to a host
// output per block. A symmetric product (A·Aᵀ, as the host's run_product does it) computes only
// the blocks on and below the diagonal and writes each block below it also transposed, into the
// block above: by a transpose kernel within a device output, by the CPU from the pinned copy into
// a host output.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "../../lower/job.hpp"
#include "device_expr.cuh"
#include "kernels_fold.cuh"
#include "launch.cuh"
#include "plan.cuh"
#include "product_plan.cuh"
#include "runtime.cuh"
#include "staging.cuh"

namespace memsafe::cuda::detail {

template <class T>
device_buffer<T> buffer_if(bool on, device_accountant& acc, std::size_t n) {
  return on ? device_buffer<T>(acc, n) : device_buffer<T>();
}

/// Everything the product allocates, in the byte model's terms and in this order.
template <class T>
struct product_resources {
  device_scale<T> dsa, dsb;
  feeder<T> fax, fay, fbx, fby;
  blas bl;
  device_buffer<T> ta, tb, xna, yna, xnb, ynb, cacc;
  std::unique_ptr<pinned_buffer<T>> pin;

  template <class LA, class LB>
  product_resources(const LA& la, const LB& lb, const product_shape& s, const product_layout& L, const options& o,
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
        xna(buffer_if<T>(s.ga, acc, L.tp)),
        yna(buffer_if<T>(s.ga, acc, L.tt)),
        xnb(buffer_if<T>(s.gb, acc, L.tt)),
        ynb(buffer_if<T>(s.gb, acc, L.tq)),
        cacc(buffer_if<T>(s.out_host, acc, L.tp * L.tq)),
        pin(s.out_host ? std::make_unique<pinned_buffer<T>>(acc, L.tp * L.tq) : nullptr) {}
};

/// What every output block reads: the factors' device maps and leaves, the buffers, the plan.
template <class MA, class LA, class MB, class LB, class T>
struct product_pass {
  using value_type = T;
  const MA& ma;
  const LA& la;
  const MB& mb;
  const LB& lb;
  product_resources<T>& R;
  const product_shape& s;
  const product_layout& L;
  T alpha;
  T* values;
  cudaStream_t st;
};

/// Row-major C (np × nq) += alpha · A (np × nt) · B (nt × nq), as column-major Cᵀ += Bᵀ Aᵀ.
template <class T>
void gemm_into(product_resources<T>& R, T alpha, std::size_t np, std::size_t nq, std::size_t nt, T* C,
               std::int64_t ldc) {
  const T one = 1;
  if constexpr (std::is_same_v<T, float>)
    MEMSAFE_CUDA_CHECK(cublasSgemm(R.bl.get(), CUBLAS_OP_N, CUBLAS_OP_N, int(nq), int(np), int(nt), &alpha,
                                   R.tb.data(), int(nq), R.ta.data(), int(nt), &one, C, int(ldc)));
  else
    MEMSAFE_CUDA_CHECK(cublasDgemm(R.bl.get(), CUBLAS_OP_N, CUBLAS_OP_N, int(nq), int(np), int(nt), &alpha,
                                   R.tb.data(), int(nq), R.ta.data(), int(nt), &one, C, int(ldc)));
}

/// C (np × nq, ldc) = alpha · A[p0.., :] · B[:, q0..], over the inner chunks.
template <class PP>
void accumulate_block(const PP& r, std::size_t p0, std::size_t np, std::size_t q0, std::size_t nq,
                      typename PP::value_type* C, std::int64_t ldc) {
  auto& R = r.R;
  const std::size_t N = r.s.N, tt = r.L.tt;
  MEMSAFE_CUDA_CHECK(cudaMemset2DAsync(C, std::size_t(ldc) * sizeof(*C), 0, nq * sizeof(*C), np, r.st));
  const auto Ap = R.fax.fetch(p0, np, 0);
  const auto Bq = R.fby.fetch(q0, nq, 0);
  for (std::size_t t0 = 0; t0 < N; t0 += tt) {
    const std::size_t nt = std::min(tt, N - t0);
    const auto At = R.fay.fetch(t0, nt, 0);
    const auto Bt = R.fbx.fetch(t0, nt, 0);
    generate_tile(r.ma, r.la, R.dsa.scale, Ap, At, R.ta.data(), std::int64_t(nt), r.s.ga, &R.bl, R.xna.data(),
                  R.yna.data(), r.st);
    generate_tile(r.mb, r.lb, R.dsb.scale, Bt, Bq, R.tb.data(), std::int64_t(nq), r.s.gb, &R.bl, R.xnb.data(),
                  R.ynb.data(), r.st);
    gemm_into(R, r.alpha, np, nq, nt, C, ldc);
    R.fay.release(0);
    R.fbx.release(0);
  }
  R.fax.release(0);
  R.fby.release(0);
}

/// A host output's block: from the device accumulator through pinned memory into its rows.
template <class PP>
void bring_home(const PP& r, const typename PP::value_type* C, std::size_t p0, std::size_t np, std::size_t q0,
                std::size_t nq) {
  const std::size_t Q = r.s.Q;
  const auto* pin = r.R.pin->data();
  MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(r.R.pin->data(), C, np * nq * sizeof(*C), cudaMemcpyDeviceToHost, r.st));
  MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(r.st));
  for (std::size_t i = 0; i < np; ++i) std::copy(pin + i * nq, pin + (i + 1) * nq, r.values + (p0 + i) * Q + q0);
}

/// A symmetric product's block below the diagonal, C[p0.., q0..] (q0 < p0), written transposed
/// into C[q0.., p0..]: on the device from the output itself, on the host from the pinned copy.
template <class PP>
void mirror_block(const PP& r, std::size_t p0, std::size_t np, std::size_t q0, std::size_t nq) {
  const std::size_t Q = r.s.Q;
  if (r.s.out_host) {
    const auto* pin = r.R.pin->data();
    for (std::size_t j = 0; j < nq; ++j)
      for (std::size_t i = 0; i < np; ++i) r.values[(q0 + j) * Q + p0 + i] = pin[i * nq + j];
    return;
  }
  const dim3 grid(unsigned(cdiv(nq, kernels::transpose_tile)), unsigned(cdiv(np, kernels::transpose_tile)));
  const dim3 block(kernels::transpose_tile, kernels::transpose_rows);
  kernels::transpose_block_kernel<<<grid, block, 0, r.st>>>(r.values + p0 * Q + q0, std::int64_t(Q), std::int64_t(np),
                                                            std::int64_t(nq), r.values + q0 * Q + p0, std::int64_t(Q));
  MEMSAFE_CUDA_LAUNCHED("transpose_block_kernel");
}

/// One output block C[p0.., q0..]: accumulated in place (device output) or in the device
/// accumulator and brought home (host output); below the diagonal of a symmetric product, mirrored.
template <class PP>
void out_block(const PP& r, std::size_t p0, std::size_t q0) {
  const std::size_t P = r.s.P, Q = r.s.Q;
  const std::size_t np = std::min(r.L.tp, P - p0), nq = std::min(r.L.tq, Q - q0);
  auto* C = r.s.out_host ? r.R.cacc.data() : r.values + p0 * Q + q0;
  const std::int64_t ldc = r.s.out_host ? std::int64_t(nq) : std::int64_t(Q);
  accumulate_block(r, p0, np, q0, nq, C, ldc);
  if (r.s.out_host) bring_home(r, C, p0, np, q0, nq);
  if (r.s.symmetric && q0 < p0) mirror_block(r, p0, np, q0, nq);
}

/// Run a lazy × lazy product under its plan.
template <class EA, class EB, class T>
void run_job(const bound_product<jobs::product_job<EA, EB, T>, T>& b, const product_plan& plan, const options& o,
             device_accountant& acc) {
  const product_shape& s = plan.s;
  const product_layout& L = plan.L;
  if (s.P == 0 || s.Q == 0) return;
  if (s.N == 0) {  // a sum over nothing: zeros, with no temporaries (planned with none)
    if (s.out_host) std::fill_n(b.values, s.P * s.Q, T(0));
    else MEMSAFE_CUDA_CHECK(cudaMemsetAsync(b.values, 0, s.P * s.Q * sizeof(T), acc.stream()));
    return;
  }
  const auto& la = dev_map_of<EA>::leaf_of(b.job.a);
  const auto& lb = dev_map_of<EB>::leaf_of(b.job.b);
  const cudaStream_t st = acc.stream();
  std::unique_ptr<stream> copy_stream;
  if (s.hosts[0] || s.hosts[1] || s.hosts[2] || s.hosts[3]) copy_stream = std::make_unique<stream>();
  const cudaStream_t cps = copy_stream ? copy_stream->get() : st;
  product_resources<T> R(la, lb, s, L, o, acc, cps);
  const auto ma = dev_map_of<EA>::make(b.job.a);
  const auto mb = dev_map_of<EB>::make(b.job.b);
  using PP = product_pass<std::remove_cvref_t<decltype(ma)>, std::remove_cvref_t<decltype(la)>,
                          std::remove_cvref_t<decltype(mb)>, std::remove_cvref_t<decltype(lb)>, T>;
  const PP r{ma, la, mb, lb, R, s, L, T(b.job.post.scale), b.values, st};
  for (std::size_t p0 = 0; p0 < s.P; p0 += L.tp)
    for (std::size_t q0 = 0; q0 < s.Q; q0 += L.tq)
      if (!(s.symmetric && q0 > p0)) out_block(r, p0, q0);  // above the diagonal: mirrored from (q0, p0)
}

}  // namespace memsafe::cuda::detail
