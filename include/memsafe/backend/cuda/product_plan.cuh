// memsafe/backend/cuda/product_plan.cuh — planning a lazy × lazy product (lower/job.hpp's
// product_job) on the device: its shape (extents, where the factors' points and the output live,
// which factor's tiles come from cuBLAS), the exact byte model of the driver's allocations and the
// block search (plan::best_fit over output blocks shrunk together and inner chunks). plan_job is
// pure, as for row jobs (rows_plan.cuh); its product_plan carries the shape and the blocks to
// run_job (product.cuh). A symmetric product (the rule symmetric_product: A·Aᵀ of one pairwise
// leaf) has square blocks and only those on and below the diagonal are computed, each written
// with its transpose (mirroring needs no buffer: the byte model is that of one block).
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../lower/job.hpp"
#include "../../plan/plan.hpp"
#include "device_expr.cuh"
#include "plan.cuh"
#include "runtime.cuh"

namespace memsafe::cuda::detail {

// ---- byte model and block search -------------------------------------------------------------------

/// Everything the product's byte model needs: C (P × Q) = A (P × N) · B (N × Q).
struct product_shape {
  std::size_t P = 0, N = 0, Q = 0, d1 = 0, d2 = 0, tsize = 4;
  bool out_host = false, ga = false, gb = false, ard = false;
  bool symmetric = false;  ///< A·Aᵀ (P = Q): blocks on and below the diagonal, mirrored
  bool hosts[4] = {false, false, false, false};  ///< A's X, A's Y, B's X, B's Y streamed from the host
};

/// The chosen tiling: output blocks tp × tq, inner chunks tt, their bytes and the minimum.
struct product_layout {
  std::size_t tp = 0, tq = 0, tt = 0;
  std::size_t bytes = 0, min_bytes = 0;
};

/// Exact bytes of device and pinned temporaries for output blocks tp × tq and inner chunks tt (a
/// symmetric product's mirrored blocks are written from the same accumulator or output: no more).
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

/// Output blocks shrunk together (tp, tq), the largest inner chunk that fits for each; budget_error
/// otherwise. A symmetric product has P = Q, so its blocks are square (tp = tq), as mirroring needs.
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
  if (!L.tp) plan::too_small(cat(msg{what, " on the GPU"}), budget, L.min_bytes);
  L.bytes = product_bytes(s, L.tp, L.tq, L.tt);
  return L;
}

// ---- plan_job -----------------------------------------------------------------------------------

/// A product job with its output (lower/job.hpp binds the outputs of row jobs only): C, P × Q
/// row-major, device or host memory.
template <class J, class T>
struct bound_product {
  J job;
  T* values = nullptr;
};
/// Bind the output of a lowered product (api.cuh, after jobs::lower).
template <class EA, class EB, class T>
bound_product<jobs::product_job<EA, EB, T>, T> bind_output(jobs::product_job<EA, EB, T> job, T* values) {
  return {std::move(job), values};
}

/// What run_job follows: the plan as plan_for shows it, the product's shape and the chosen blocks.
struct product_plan {
  tile_plan plan;
  product_shape s;
  product_layout L;
};

/// The product's shape; the memory spaces of the factors' points as `where` says.
template <class EA, class EB, class T>
product_shape product_shape_of(const jobs::product_job<EA, EB, T>& job, bool out_host, residency where) {
  const auto& la = dev_map_of<EA>::leaf_of(job.a);
  const auto& lb = dev_map_of<EB>::leaf_of(job.b);
  product_shape s;
  s.P = job.a.rows(), s.N = job.a.cols(), s.Q = job.b.cols(), s.d1 = la.dim(), s.d2 = lb.dim();
  s.tsize = sizeof(T);
  s.out_host = out_host;
  s.hosts[0] = input_on_host(la.x.data(), where);
  s.hosts[1] = input_on_host(la.y.data(), where);
  s.hosts[2] = input_on_host(lb.x.data(), where);
  s.hosts[3] = input_on_host(lb.y.data(), where);
  s.ga = gemm_values(la), s.gb = gemm_values(lb);
  s.ard = la.params.kind != per_dim_kind::none || lb.params.kind != per_dim_kind::none;
  s.symmetric = job.symmetric && s.P == s.Q;
  return s;
}

/// The plan as plan_for shows it.
template <class EA, class EB, class T>
tile_plan describe(const jobs::product_job<EA, EB, T>& job, const product_shape& s, const product_layout& L,
                   std::size_t budget) {
  tile_plan p;
  p.expression = cat(msg{job.a.str(), " * ", job.b.str()});
  if (job.post.scale != 1) p.expression = cat(msg{job.post.scale, " * (", p.expression, ")"});
  p.reduction = path_name(kernel_path::product);
  if (s.symmetric) p.reduction += "; symmetric: the blocks on and below the diagonal, each mirrored";
  p.rows = s.P, p.cols = s.Q, p.inner = s.N;
  p.tile_rows = L.tp, p.tile_cols = L.tq, p.tile_inner = L.tt;
  p.row_blocks = cdiv(s.P, L.tp), p.col_blocks = cdiv(s.Q, L.tq);
  p.inner_blocks = cdiv(std::max<std::size_t>(s.N, 1), L.tt);
  p.symmetric = s.symmetric;
  const std::size_t blocks = s.symmetric ? p.row_blocks * (p.row_blocks + 1) / 2 : p.row_blocks * p.col_blocks;
  p.num_tiles = plan::saturating_mul(blocks, p.inner_blocks);
  p.planned_bytes = p.per_thread_bytes = L.bytes;
  p.min_bytes = L.min_bytes;
  p.budget = budget;
  p.threads = 1;
  return p;
}

/// Plan a lazy × lazy product (the device's resources do not change it); budget_error before
/// anything runs.
template <class EA, class EB, class T>
product_plan plan_job(const bound_product<jobs::product_job<EA, EB, T>, T>& b, std::size_t budget,
                      const device_resources&, residency where, const std::string& what) {
  static_assert(device_supported<EA> && device_supported<EB>,
                "memsafe::cuda: A * B: each factor must be one pairwise formula with elementwise maps over it");
  product_plan P;
  P.s = product_shape_of(b.job, output_on_host(b.values, where), where);
  // A device output's blocks are accumulated in place by cuBLAS with its row length as the leading
  // dimension (a host output's go through a tq-column accumulator).
  if (!P.s.out_host && !fits_blas_int(P.s.Q))
    throw argument_error(cat(msg{"memsafe::cuda: ", what, ": a device output of ", P.s.Q,
                                 " columns is beyond cuBLAS's 32-bit leading dimension"}));
  if (P.s.P == 0 || P.s.Q == 0 || P.s.N == 0) {
    // Nothing to tile, as on the host: no output, or an inner extent of 0 whose result is zeros
    // (product.cuh, run_job); no temporaries at any budget.
    P.L = product_layout{std::max<std::size_t>(P.s.P, 1), std::max<std::size_t>(P.s.Q, 1),
                         std::max<std::size_t>(P.s.N, 1), 0, 0};
  } else {
    P.L = plan_product(P.s, budget, what);
  }
  P.plan = describe(b.job, P.s, P.L, budget);
  return P;
}

}  // namespace memsafe::cuda::detail
