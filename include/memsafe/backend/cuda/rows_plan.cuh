// memsafe/backend/cuda/rows_plan.cuh — planning a row job (lower/job.hpp's bound_rows) on the
// device: its shape (extents, where the points, the dense operand and the outputs live, the kernel
// path), the checks that refuse a job before anything runs (k above the top-k limit, diagonal terms
// with device outputs, a dense operand cuBLAS cannot read), the exact byte model of the driver's
// allocations and the layout search (plan::best_fit over row blocks, column chunks and column
// splits). plan_job is pure: it allocates nothing and launches nothing; with residency::assumed it
// does not touch the runtime at all (plan_for without a device). Its rows_plan carries the shape
// and the layout to run_job (rows.cuh), which follows them as they are.
#pragma once
#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/env.hpp"
#include "../../lower/job.hpp"
#include "../../plan/plan.hpp"
#include "../../rewrite/rules.hpp"
#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "kernels_fold.cuh"
#include "plan.cuh"
#include "runtime.cuh"

namespace memsafe::cuda::detail {

// ---- byte model and layout search ------------------------------------------------------------------

/// Everything the byte model and the driver need about one row job: extents, where its data
/// live, the kernel path and what the path needs.
struct job_shape {
  std::size_t n = 0, m = 0, d = 0, c = 1, k = 0, tsize = 4, state_bytes = 8;
  bool x_host = false, y_host = false, rhs_host = false, out_host = false, ard = false;
  bool gemm = false;    ///< tiles from cuBLAS X·Yᵀ (+ norms)
  bool screen = false;  ///< ... holding screening values, re-evaluated exactly (kernels_screen.cuh)
  bool with_index = false;
  std::size_t rhs_cols = 0;
  kernel_path path = kernel_path::fused;
  int rows_per_block = 128;  ///< query rows per thread block of the fused path
  int split_target = 4;      ///< thread blocks per SM the column splits aim at (fused_split_target)
  int sms = 0;  ///< from device_resources
  /// K(X, X)·v on device-resident data may take the symmetric form (rows.cuh, run_symmetric):
  /// the same point view on both sides, one column, n ≥ sym_min_blocks row blocks.
  bool sym_eligible = false;
  bool sym_forced = false;  ///< MEMSAFE_SYMMETRIC=on: wherever it applies and fits (tests)
  bool symmetric = false;   ///< ... and takes it: the layout's ti is the band, splits band 0's
};

/// The chosen tiling: row block ti, column chunk tj, column splits, and their exact bytes.
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
  if (s.symmetric) {  // the band's column sums per row block, and every column's double state
    b += rnd(cdiv(std::max<std::size_t>(ti, 1), std::size_t(s.rows_per_block)) * s.n * T) + rnd(s.n * 8);
  }
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

/// The smallest layout's bytes: one row, the smallest column chunk, one split, in the plain form
/// (the symmetric K·v is taken only above it).
inline std::size_t min_layout_bytes(const job_shape& s) {
  job_shape plain = s;
  plain.symmetric = false;
  return layout_bytes(plain, 1, std::min<std::size_t>(std::max<std::size_t>(s.m, 1), 64), 1);
}

/// Column splits: enough thread blocks to fill the GPU (split_target per SM on the fused path, 4 on
/// the tile fold), no more than the column tiles.
inline int splits_for(const job_shape& s, std::size_t ti, std::size_t tj) {
  if (s.path != kernel_path::fused && s.path != kernel_path::tile_fold) return 1;
  const bool fused = s.path == kernel_path::fused;
  const std::size_t rows_per_block = fused ? std::size_t(s.rows_per_block) : 8;
  const std::size_t groups = cdiv(std::max<std::size_t>(ti, 1), rows_per_block);
  const std::size_t want = cdiv(std::size_t(fused ? s.split_target : 4) * s.sms, groups);
  const std::size_t most = std::max<std::size_t>(1, cdiv(std::max<std::size_t>(tj, 1), fused_tj));
  return int(std::clamp<std::size_t>(want, 1, std::min<std::size_t>(most, 1024)));
}

/// The first candidate layout whose bytes fit the budget, its bytes filled in (plan::best_fit with a
/// constant score: the candidates come in order of preference).
inline std::optional<layout> first_fit(const job_shape& s, const std::vector<layout>& cands, std::size_t budget) {
  const auto bytes = [&](const layout& c) { return layout_bytes(s, c.ti, c.tj, c.splits); };
  if (const std::size_t k = plan::best_fit(cands, budget, bytes, [](const layout&) { return 0; }); k != plan::npos) {
    layout L = cands[k];
    L.bytes = bytes(L);
    return L;
  }
  return std::nullopt;
}

/// Symmetric K·v: the rows' band is at most sym_max_blocks row blocks, about n/16 (each band
/// folds its own square both ways, so a band of n/16 evaluates 1/32 of the pairs twice); the
/// form runs from sym_min_blocks row blocks up.
inline constexpr std::size_t sym_max_blocks = 32, sym_min_blocks = 4;

/// A band's column splits over the nj columns [r0, n) right of its start: at most S, each a
/// whole number of fused_tj-column tiles (so no tile straddles the band's end), at most 65,535 (the grid's limit).
struct sym_split {
  int S;
  std::int64_t cps;
};
inline sym_split sym_splits_for(std::size_t nj, int S) {
  const std::size_t tiles = std::max<std::size_t>(1, cdiv(nj, std::size_t(fused_tj)));
  const std::size_t want = std::clamp<std::size_t>(std::size_t(std::max(S, 1)), 1, std::min<std::size_t>(tiles, 65535));
  const std::size_t cps = cdiv(tiles, want) * fused_tj;
  return {int(cdiv(std::max<std::size_t>(nj, 1), cps)), std::int64_t(cps)};
}

/// The symmetric form's layout: the largest band (row blocks from about n/16, at most
/// sym_max_blocks, halved down to one), then the splits that fill the GPU (split_target per SM
/// over the band's row blocks), halved, that fit the budget; none when nothing fits. The first
/// band's launch must have sym_min_blocks_per_sm thread blocks per SM (each band is a launch of
/// its own, and a launch of few blocks leaves SMs idle where the plain form's one launch
/// would not) unless the form is forced (MEMSAFE_SYMMETRIC=on).
inline constexpr std::size_t sym_min_blocks_per_sm = 8;
inline std::optional<layout> plan_sym_layout(const job_shape& s, std::size_t budget) {
  const std::size_t rpb = std::size_t(s.rows_per_block), sms = std::size_t(std::max(s.sms, 1));
  std::vector<layout> cands;
  for (std::size_t g = std::clamp<std::size_t>(cdiv(cdiv(s.n, 16), rpb), 1, sym_max_blocks);; g = (g + 1) / 2) {
    const std::size_t want = cdiv(std::size_t(s.split_target) * sms, g);
    for (int sp = sym_splits_for(s.n, int(std::min<std::size_t>(want, 65535))).S;; sp = (sp + 1) / 2) {
      if (s.sym_forced || g * std::size_t(sp) >= sym_min_blocks_per_sm * sms) cands.push_back({g * rpb, s.m, sp, 0});
      if (sp == 1) break;
    }
    if (g == 1) break;
  }
  return first_fit(s, cands, budget);
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
  // that fill the GPU before fewer; the first that fits (plan::best_fit, constant score).
  std::vector<layout> cands;
  for (std::size_t ti : tis)
    for (std::size_t tj : tjs) {
      // The splits that fill the GPU, then halvings of them down to one (a smaller budget keeps
      // as many splits as fit).
      for (int sp = splits_for(s, ti, tj);; sp = (sp + 1) / 2) {
        cands.push_back({ti, tj, sp, 0});
        if (sp == 1) break;
      }
    }
  if (const auto L = first_fit(s, cands, budget)) return *L;
  const std::size_t minimum = layout_bytes(s, 1, tjs.back(), 1);
  plan::too_small(cat(msg{what, " on the GPU"}), budget, minimum);
}

// ---- plan_job: shape, checks, layout, the plan as shown ---------------------------------------------

/// What run_job follows: the plan as plan_for shows it, the job's shape and the chosen layout.
struct rows_plan {
  tile_plan plan;
  job_shape s;
  layout L;
};

/// The kernel path of a reduction (and k for top-k): fused when no tile is needed and d fits the
/// registers, block-sort top-k above the register capacity, GEMM accumulation for several columns.
template <class R, class T>
void choose_path(const R& r, job_shape& s) {
  const bool small_d = s.d <= fused_max_d;
  if constexpr (std::is_same_v<R, red::softmax_sum<T>>) s.path = kernel_path::tile_softmax;
  else if constexpr (std::is_same_v<R, red::dense>) s.path = kernel_path::tile_dense;
  else if constexpr (std::is_same_v<R, red::matmul<T>>)
    s.path = s.c > 1 ? kernel_path::tile_matmul : (small_d ? kernel_path::fused : kernel_path::tile_fold);
  else if constexpr (requires { r.k; }) {
    s.k = r.k;
    s.path = s.k > std::size_t(fused_max_k) ? kernel_path::tile_topk
                                            : (small_d ? kernel_path::fused : kernel_path::tile_fold);
  } else s.path = small_d ? kernel_path::fused : kernel_path::tile_fold;
}

/// The job's shape; the memory spaces of its inputs as `where` says (outputs: out_host).
template <class E, class R, class T>
job_shape rows_shape(const jobs::rows_job<E, R, T>& job, bool out_host, residency where, int sms) {
  const auto& leaf = dev_map_of<E>::leaf_of(job.e);
  job_shape s;
  s.n = job.e.rows();
  s.m = job.e.cols();
  s.d = leaf.dim();
  s.tsize = sizeof(T);
  s.c = out_cols<R, T>(job.red, s.m);
  s.x_host = input_on_host(leaf.x.data(), where);
  s.y_host = input_on_host(leaf.y.data(), where);
  const auto rhs = column_operand<R, T>(job.red);
  s.rhs_cols = rhs.data() ? rhs.cols() : 0;
  s.rhs_host = input_on_host(rhs.data(), where);
  s.out_host = out_host;
  s.ard = leaf.params.kind != per_dim_kind::none;
  s.with_index = red_indexed<R>;
  s.sms = sms;
  choose_path<R, T>(job.red, s);
  // cuBLAS tiles: for the selections over a bare squared-distance or cosine leaf a screen (TF32 by
  // default, exact re-evaluation); otherwise values for dot and cosine in the sums, while every
  // other reduction of a squared distance takes the semiring kernel's tile. A selection never ranks
  // cuBLAS's values themselves: they are blocked sums whose last bits differ from the semiring
  // kernel's, which a budget below cuBLAS's workspace takes, so its answers (near-ties) would
  // depend on the budget.
  if (s.path != kernel_path::fused) {
    s.screen = screen_capable<E> && red_selects<R> && gemm_eligible(leaf);
    s.gemm = s.screen || (gemm_values(leaf) && !red_selects<R>);
  }
  if (s.path == kernel_path::fused || s.path == kernel_path::tile_fold) {
    with_dmon<T>(job.red, [&](const auto& dm) {
      using DM = std::remove_cvref_t<decltype(dm)>;
      s.state_bytes = sizeof(typename DM::state);
      s.rows_per_block = fused_rows_per_block<DM>(s.d);
      s.split_target = fused_split_target<DM>();
    });
  }
  if constexpr (std::is_same_v<R, red::matmul<T>>) {
    // k(X, X)·v: the same view of device-resident points on both sides (equal values elsewhere do
    // not count), every device formula being symmetric, k(x_i, x_j) = k(x_j, x_i).
    s.sym_forced = env::symmetric_forced();
    s.sym_eligible = s.path == kernel_path::fused && s.c == 1 && !s.x_host && !s.rhs_host &&
                     rewrite::same_view(leaf.x, leaf.y) &&
                     (s.sym_forced || s.n >= sym_min_blocks * std::size_t(s.rows_per_block)) && !env::symmetric_off();
  }
  return s;
}

/// What the driver cannot run, refused before anything is allocated or launched: top-k above the
/// block sort's capacity, and a dense operand read in place by cuBLAS (K·M, softmax_sum) with
/// neither unit row nor column stride (a streamed operand is gathered contiguous).
template <class T>
void check_shape(const job_shape& s, const matrix_view<const T>& operand) {
  if (s.k > topk_max_k)
    throw argument_error(cat(msg{"memsafe::cuda: argkmin/argkmax: k = ", s.k, " is above the GPU backend's limit of ",
                                 topk_max_k}));
  const bool gemm_reads = s.path == kernel_path::tile_matmul || s.path == kernel_path::tile_softmax;
  if (!gemm_reads || s.n == 0 || s.m == 0 || s.c == 0) return;
  // cuBLAS reads a device operand in place (a streamed one is gathered contiguous) and writes c
  // columns.
  if (!s.rhs_host && !blas_layout(s.m, s.c, operand.row_stride(), operand.col_stride()))
    throw argument_error(operand_stride_message);
  if (!fits_blas_int(s.c))
    throw argument_error(cat(msg{"memsafe::cuda: the dense operand's ", s.c, " columns are beyond cuBLAS's 32-bit extents"}));
}

/// The plan as plan_for shows it, from the shape and the chosen layout.
template <class E, class R, class T>
tile_plan describe(const jobs::rows_job<E, R, T>& job, const job_shape& s, const layout& L, std::size_t budget) {
  tile_plan p;
  p.expression = jobs::shown(job);
  p.reduction = cat(msg{R::name, " on the GPU: ", path_name(s.path),
                        s.screen ? " (cuBLAS X·Yᵀ screen, exact re-evaluation)" : s.gemm ? " (cuBLAS X·Yᵀ + epilogue)" : ""});
  if (s.symmetric)
    p.reduction = cat(msg{p.reduction, "; symmetric: K = k(X, X), each pair once, folded into its row and its column, ",
                          "in bands of ", L.ti, " rows"});
  p.symmetric = s.symmetric;
  p.rows = s.n;
  p.cols = s.m;
  p.tile_rows = L.ti;
  p.tile_cols = L.tj;
  p.threads = std::size_t(L.splits);
  p.split_columns = L.splits > 1;
  p.row_blocks = cdiv(std::max<std::size_t>(s.n, 1), L.ti);
  p.col_blocks = cdiv(std::max<std::size_t>(s.m, 1), L.tj);
  p.num_tiles = plan::saturating_mul(p.row_blocks, p.col_blocks);
  p.per_thread_bytes = L.bytes;
  p.planned_bytes = L.bytes;
  p.min_bytes = min_layout_bytes(s);
  p.budget = budget;
  return p;
}

template <class J, class T>
rows_plan plan_supported_job(const jobs::bound_rows<J, T>& b, std::size_t budget, const device_resources& dev,
                             residency where, const std::string& what);

/// True when the GPU backend evaluates row job J on T (plan_job's static_asserts say why not).
template <class J, class T>
inline constexpr bool rows_job_supported =
    device_supported<std::remove_cvref_t<decltype(std::declval<const J&>().e)>> && red_known<typename J::reduction, T>;

/// Plan a row job on a device with these resources: the shape (memory spaces as `where` says),
/// the checks, then the layout; argument_error or budget_error before anything runs. An unsupported
/// job stops at one static_assert here (the rest is not instantiated, so no error follows it).
template <class J, class T>
rows_plan plan_job(const jobs::bound_rows<J, T>& b, std::size_t budget, const device_resources& dev, residency where,
                   const std::string& what) {
  using E = std::remove_cvref_t<decltype(b.job.e)>;
  using R = typename J::reduction;
  static_assert(device_supported<E>,
                "memsafe::cuda: this lazy matrix cannot be evaluated on the GPU: the device backend takes one "
                "pairwise formula with elementwise maps over it (rbf(X,Y), exp(-sqdist(X,Y)/2), ...); combine "
                "two pairwise matrices, broadcast tensors or diagonal terms inside a reduction on the host");
  static_assert(red_known<R, T>, "memsafe::cuda: this reduction has no device implementation");
  if constexpr (rows_job_supported<J, T>) return plan_supported_job(b, budget, dev, where, what);
  else return {};
}

template <class J, class T>
rows_plan plan_supported_job(const jobs::bound_rows<J, T>& b, std::size_t budget, const device_resources& dev,
                             residency where, const std::string& what) {
  using R = typename J::reduction;
  const bool out_host = output_on_host(b.out.values, where);
  if (!b.job.post.diags.empty() && !out_host)
    throw argument_error(cat(msg{"memsafe::cuda: ", what,
                                 ": a product or sum with diagonal terms (K + D) needs host outputs on the GPU backend"}));
  // The diagonal terms are applied on the host, reading diag(d)'s d there (the dense factor M of
  // (K + D)·M is checked before the lowering reads it: api.cuh, check_diag_operand).
  if (where != residency::assumed)
    for (const auto& [coef, dg] : b.job.post.diags)
      if (dg.vector && dg.vector->d.data() && space_of(dg.vector->d.data()) != memory_space::host)
        throw argument_error(cat(msg{"memsafe::cuda: ", what,
                                     ": a sum or product with diagonal terms diag(d) adds them on the host after the "
                                     "device pass, so d must be in host memory on the GPU backend"}));
  rows_plan P;
  P.s = rows_shape(b.job, out_host, where, dev.sms);
  check_shape(P.s, column_operand<R, T>(b.job.red));
  if (P.s.n == 0 || P.s.m == 0 || P.s.c == 0) {
    // Nothing to tile, as on the host (plan.hpp): no rows or no output columns write nothing, no
    // columns write each row's identity (run_job, write_identities); no temporaries at any budget.
    P.L = layout{std::max<std::size_t>(P.s.n, 1), std::max<std::size_t>(P.s.m, 1), 1, 0};
    P.plan = describe(b.job, P.s, P.L, budget);
    P.plan.min_bytes = 0;
    return P;
  }
  // cuBLAS tiles are a speed-up the semiring tile can do without (its values are exact; the GEMM
  // form's are a screen or dot/cosine values): a budget too small for cuBLAS's workspace takes it.
  const bool blas_needed = P.s.path == kernel_path::tile_matmul || P.s.path == kernel_path::tile_softmax;
  job_shape plain = P.s;
  plain.gemm = plain.screen = false;
  const bool optional_blas = P.s.gemm && !blas_needed;
  if (optional_blas && budget < min_layout_bytes(P.s)) P.s = plain;
  std::optional<layout> sym;
  if (P.s.sym_eligible) {
    job_shape t = P.s;
    t.symmetric = true;
    if ((sym = plan_sym_layout(t, budget))) P.s = t;
  }
  P.L = sym ? *sym : plan_layout(P.s, budget, what);
  P.plan = describe(b.job, P.s, P.L, budget);
  if (optional_blas) P.plan.min_bytes = std::min(P.plan.min_bytes, min_layout_bytes(plain));
  return P;
}

}  // namespace memsafe::cuda::detail
