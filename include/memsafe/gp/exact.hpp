// memsafe/gp/exact.hpp — the exact GP by preconditioned conjugate gradients (Gardner et al. 2018,
// Wang et al. 2019): solve (K + σ²I)·α = B for one or several right-hand sides without forming K,
// predictive means K*f·α, and predictive variances for a (small) set of test points.
//
// Every product with K is a budgeted lazy kernel product, `memsafe::eval_into(k(X, X) · P)` on the
// library's fused host path (K·v, K·M with ≤ 512 columns: no kernel tile; docs/design.md "Fused
// kernel sums"); σ²·P is added to it. Batched CG: the c columns of B run together, each with its own
// step α_j and β_j, so one kernel evaluation per pair serves every column; a column stops (its
// search direction is zeroed) when its recursive residual ‖r_j‖ ≤ tolerance·‖b_j‖.
//
// Preconditioner: P = L_k·L_kᵀ + σ²I with L_k (n×k) the greedy pivoted Cholesky factor of K
// (Harbrecht, Peters, Schneider 2012; GPyTorch's default): start from K's diagonal (σ_f² for these
// stationary kernels), take the largest remaining diagonal entry as the pivot, compute that one
// kernel row on the fly (the GP module's kernel loop), subtract the earlier columns (GEMV through
// BLAS), scale, update the remaining diagonal. P⁻¹ by Woodbury:
//   P⁻¹v = (v − L_k·(σ²I_k + L_kᵀL_k)⁻¹·L_kᵀv)/σ²,
// the k×k matrix factorised once by LAPACK (POTRF), applied by GEMM + two TRSMs per iteration.
//
// Budget: one accountant holds everything the solver allocates that is not the caller's output —
// the CG blocks r, z, p, A·p (4·n·c doubles), L_k (n·k), the remaining diagonal (n), the k×k factor,
// the k×c Woodbury block and a few small vectors — and each kernel product runs under the rest
// (budget − those bytes). The minimum is those bytes plus the kernel product's smallest plan; below
// it the call throws budget_error naming it before any work. α (n×c) is an output.
#pragma once

#if !defined(MEMSAFE_HAS_LAPACK)
#error "memsafe/gp/exact.hpp needs MEMSAFE_HAS_LAPACK: include <memsafe/gp.hpp> and link memsafe::lapack"
#endif

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../api/eval.hpp"
#include "../core/accounting.hpp"
#include "../core/algo.hpp"
#include "../core/budget.hpp"
#include "../core/clock.hpp"
#include "../core/error.hpp"
#include "../core/libm.hpp"
#include "../expr/lazy.hpp"
#include "../expr/overlap.hpp"
#include "../expr/view.hpp"
#include "../linalg/dense.hpp"
#include "../plan/plan.hpp"
#include "kernels.hpp"
#include "sgpr.hpp"

namespace memsafe::gp {

/// Points at which to predict: n points of dimension d (row-major). Not copied.
struct points_view {
  const double* X = nullptr;
  std::size_t n = 0, d = 0;
};

/// How an exact-GP call runs.
struct exact_options {
  std::optional<std::size_t> budget = std::nullopt;  ///< bytes of temporaries; unset: MEMSAFE_BUDGET, then 256 MiB
  double tolerance = 1e-2;               ///< a column stops when ‖r_j‖ ≤ tolerance·‖b_j‖ (GPyTorch's eval default)
  std::size_t max_iterations = 1000;     ///< CG iterations at most (GPyTorch's max_cg_iterations default)
  std::size_t min_iterations = 0;        ///< no column stops before this many (GPyTorch uses 10)
  std::size_t preconditioner_rank = 100; ///< k of the pivoted-Cholesky preconditioner; 0: plain CG
  bool true_residual = true;             ///< one more product at the end: ‖b_j − (K + σ²I)α_j‖/‖b_j‖
  unsigned threads = 0;                  ///< threads; 0: MEMSAFE_NUM_THREADS, then all cores
  /// Keep K's first rows (from the diagonal rightwards) in the part of the budget the solver and
  /// one kernel product leave free, computed once at the first product and read by the later ones
  /// (each pair of that strip once, folded into its row and its column). false: every product
  /// recomputes every kernel value (peak ≈ the solver's bytes and one product's).
  bool cache = true;
};

/// What a solve used.
struct exact_stats {
  std::size_t budget_bytes = 0, peak_temp_bytes = 0, minimum_bytes = 0;
  std::size_t solver_bytes = 0;       ///< the solver's own temporaries (CG blocks, preconditioner, small)
  std::size_t matvec_peak_bytes = 0;  ///< the largest peak of one kernel product (run under budget − solver_bytes)
  std::size_t matvec_minimum_bytes = 0;
  std::size_t matvecs = 0;            ///< kernel products K·P (one per iteration, + 1 with true_residual)
  std::size_t threads = 1;
  std::size_t cache_rows = 0;         ///< rows of K held in the cache (their blocks on and right of the diagonal)
  std::size_t cache_bytes = 0;        ///< its bytes (within the budget, inside peak_temp_bytes)
  double cache_fraction = 0;          ///< the share of the whole strip (all n rows) the cache holds
  double seconds_cache = 0;           ///< computing the cache (inside the first product's time)
  std::size_t preconditioner_rank = 0;     ///< columns of L_k built (< the option when K's residual vanished)
  double preconditioner_trace_error = 0;   ///< tr(K − L_kL_kᵀ)/tr(K) after the build
  double seconds_preconditioner = 0, seconds_cg = 0, seconds_matvec = 0, seconds_total = 0;
  std::string matvec_isa;             ///< the kernel product's instruction set ("avx512", "avx2", "portable")
};

/// The solution of (K + σ²I)·α = B and how it was reached.
struct exact_result {
  std::size_t n = 0, rhs = 0;
  std::vector<double> alpha;                   ///< n × rhs, row-major
  std::size_t iterations = 0;                  ///< CG iterations run (kernel products inside the loop)
  std::vector<std::size_t> column_iterations;  ///< per column: the iteration at which it stopped
  std::vector<double> residual;                ///< per column: recursive ‖r_j‖/‖b_j‖ at the end
  std::vector<double> true_residual;           ///< per column: ‖b_j − (K + σ²I)α_j‖/‖b_j‖ (with true_residual)
  bool converged = false;                      ///< every column reached the tolerance (no breakdown)
  bool breakdown = false;                      ///< some column met pᵀ(K + σ²I)p ≤ 0 or NaN and stopped
  exact_stats stats;
};

/// What a prediction used.
struct exact_predict_stats {
  std::size_t budget_bytes = 0, peak_temp_bytes = 0;
  std::size_t iterations = 0;  ///< variances: the most CG iterations of any batch
  bool converged = true;       ///< variances: every batch's solve converged
  double seconds = 0;
};

}  // namespace memsafe::gp

namespace memsafe::detail::gp {

using memsafe::gp::data_view;
using memsafe::gp::exact_options;
using memsafe::gp::exact_result;
using memsafe::gp::exact_predict_stats;
using memsafe::gp::hyperparameters;
using memsafe::gp::points_view;

/// f(K) with K the lazy kernel matrix k(A, B) (na × nb) of the hyperparameters h: the memsafe
/// builder of the same kernel with ARD lengthscales (r² = Σ (a_k/ℓ_k − b_k/ℓ_k)²) and variance σ_f².
template <class F>
decltype(auto) with_lazy_kernel(const hyperparameters& h, const double* A, std::size_t na, const double* B,
                                std::size_t nb, std::size_t d, F&& f) {
  using memsafe::gp::kernel;
  const auto Av = memsafe::points(A, na, d);
  const auto Bv = memsafe::points(B, nb, d);
  const auto ls = memsafe::ard(h.lengthscales.data(), d);
  switch (h.kind) {
    case kernel::rbf: return f(memsafe::rbf(Av, Bv, ls, h.variance));
    case kernel::matern12: return f(memsafe::matern12(Av, Bv, ls, h.variance));
    case kernel::matern32: return f(memsafe::matern32(Av, Bv, ls, h.variance));
    case kernel::matern52: break;
  }
  return f(memsafe::matern52(Av, Bv, ls, h.variance));
}

/// out (na × c, row-major) = k(A, B)·M (M: nb × c, row-major), under options o.
inline memsafe::eval_stats kernel_product(const hyperparameters& h, const double* A, std::size_t na, const double* B,
                                          std::size_t nb, std::size_t d, const double* M, std::size_t c, double* out,
                                          const memsafe::options& o) {
  return with_lazy_kernel(h, A, na, B, nb, d, [&](const auto& K) {
    if (c == 1) return memsafe::eval_into(K * memsafe::vec(M, nb), out, nullptr, o);
    return memsafe::eval_into(K * memsafe::matrix(M, nb, c), out, nullptr, o);
  });
}

/// The smallest plan of that product (bytes), and its instruction set.
inline memsafe::tile_plan kernel_product_plan(const hyperparameters& h, const double* A, std::size_t na,
                                              const double* B, std::size_t nb, std::size_t d, const double* M,
                                              std::size_t c, const memsafe::options& o) {
  return with_lazy_kernel(h, A, na, B, nb, d, [&](const auto& K) {
    if (c == 1) return memsafe::plan_for(K * memsafe::vec(M, nb), o);
    return memsafe::plan_for(K * memsafe::matrix(M, nb, c), o);
  });
}

/// argument_error for the first point of X (n × d, row-major, finite) whose coordinate over its
/// lengthscale is not finite: the lazy kernel (with_lazy_kernel) scales the coordinates before it
/// takes differences, so x_k/ℓ_k = inf would make k(x, x) = NaN and break the whole solve down.
inline void check_scaled(const double* X, std::size_t n, std::size_t d, const std::vector<double>& ls, const char* what,
                         const std::string& f) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < d; ++k)
      if (!libm::isfinite(X[i * d + k] / ls[k]))
        throw argument_error(cat(msg{f, what, " ", i, ", coordinate ", k, " (", X[i * d + k], ") over its lengthscale (",
                                     ls[k], ") overflows a double; rescale the inputs"}));
}

/// Shapes, parameters and finiteness of the training inputs (the targets are checked where used).
inline void validate_exact(const data_view& D, const hyperparameters& h, const std::string& f) {
  if (D.n == 0 || D.d == 0)
    throw shape_error(cat(msg{f, "no training data (n = ", D.n, ", d = ", D.d, ")"}));
  if (!D.X) throw argument_error(cat(msg{f, "null training inputs X"}));
  validate_kernel(h.variance, h.lengthscales, D.d, f);
  validate_noise(h, f, /*uses_jitter=*/false);  // σ² > 0 makes K + σ²I positive definite
  check_finite(D.X, D.n, D.d, "training input", f);
  check_scaled(D.X, D.n, D.d, h.lengthscales, "training point", f);
}

/// argument_error for a null `what` (when count > 0) or its first entry that is not finite.
inline void validate_values(const double* v, std::size_t count, const std::string& f, const char* what) {
  if (count && !v) throw argument_error(cat(msg{f, "null ", what}));
  check_finite(v, count, 1, cat(msg{what, " entry"}).c_str(), f);
}

inline void validate_options(const exact_options& o, const std::string& f) {
  if (!(libm::isfinite(o.tolerance) && o.tolerance >= 0))
    throw argument_error(cat(msg{f, "tolerance must be finite and >= 0, got ", o.tolerance}));
}

/// What exact_solve and exact_minimum_bytes both check before planning: the data and
/// hyperparameters, the options and at least one right-hand side.
inline void validate_solve(const data_view& D, std::size_t rhs, const hyperparameters& h, const exact_options& o,
                           const std::string& f) {
  validate_exact(D, h, f);
  validate_options(o, f);
  if (rhs == 0) throw shape_error(cat(msg{f, "no right-hand side (rhs = 0)"}));
}

/// What both predictions check first: the training data and hyperparameters, the test points'
/// dimension and the output; sets st's budget. False (nothing to do) when there are no test points.
/// The output (out_count values, named out_name) must not share memory with the test points, the
/// training points or `alpha` (alpha_count values): it is written while they are still being read.
inline bool start_predict(const data_view& D, const hyperparameters& h, const points_view& T, const double* out,
                          std::size_t out_count, const char* out_name, const double* alpha, std::size_t alpha_count,
                          const exact_options& opts, const std::string& f, exact_predict_stats& st) {
  validate_exact(D, h, f);
  st.budget_bytes = memsafe::detail::resolve_budget(opts.budget);
  if (T.n == 0) return false;
  if (T.d != D.d)
    throw shape_error(cat(msg{f, "test points have d = ", T.d, " but the training data have d = ", D.d}));
  if (!out) throw argument_error(cat(msg{f, "null output"}));
  using memsafe::detail::contiguous_block;
  const memsafe::detail::named_block outs[1] = {{out_name, contiguous_block(out, out_count)}};
  const memsafe::detail::named_block ins[3] = {
      {"test points", contiguous_block(T.X, memsafe::detail::checked_mul(T.n, T.d, cat(msg{f, "test points"})))},
      {"training points",
       contiguous_block(D.X, memsafe::detail::checked_mul(D.n, D.d, cat(msg{f, "training points"})))},
      {"alpha", contiguous_block(alpha, alpha_count)}};
  memsafe::detail::check_apart(outs, ins, f.substr(0, f.size() - 2).c_str(), "");
  return true;
}

/// a·b + c (bytes or counts of the solvers' temporaries), or argument_error naming `what` when it
/// does not fit in std::size_t (n = 2³¹ points and a rank-n preconditioner: n² doubles).
inline std::size_t size_fma(std::size_t a, std::size_t b, std::size_t c, const std::string& what) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
    throw argument_error(cat(msg{"memsafe::gp: ", what, " overflow the size type"}));
  return r;
}

/// Bytes of the solver's own temporaries for n points, c right-hand sides, rank k, d dimensions.
inline std::size_t pcg_solver_bytes(std::size_t n, std::size_t c, std::size_t k, std::size_t d) {
  const std::string what = cat(msg{"the CG solver's temporaries for n = ", n, ", ", c, " right-hand side(s) and a rank-", k,
                                  " preconditioner (", n, " × ", k, " doubles; use a lower rank)"});
  std::size_t e = size_fma(4 * c, n, 0, what);  // r, z, p, A·p (4c ≤ 4·2⁴⁰: c is a view's extent)
  e = size_fma(n, k, e, what);                   // L_k (column-major)
  e = size_fma(k ? 1 : 0, n, e, what);           // the remaining diagonal while L_k is built
  e = size_fma(k, k, e, what);                   // chol(σ²I + L_kᵀL_k)
  e = size_fma(k, c, e, what);                   // the Woodbury block L_kᵀ·r
  e = size_fma(1, k + d + 6 * c, e, what);       // a row of L_k (the pivot's), 1/ℓ², ‖b_j‖, rᵀz, step, residual, stopped, eb_j
  return size_fma(sizeof(double), e, 0, what);
}

struct pcg_sizes {
  std::size_t rank = 0, solver = 0, matvec_min = 0;
  std::string isa;
  std::size_t minimum() const { return size_fma(1, solver, matvec_min, "the CG solver's temporaries"); }
};

inline pcg_sizes pcg_plan(const data_view& D, std::size_t c, const hyperparameters& h, const exact_options& o) {
  pcg_sizes s;
  s.rank = std::min(o.preconditioner_rank, D.n);
  s.solver = pcg_solver_bytes(D.n, c, s.rank, D.d);
  // The smallest plan of K·P (any non-null pointer stands for P: the planner reads no values).
  const auto p = kernel_product_plan(h, D.X, D.n, D.X, D.n, D.d, D.X, c, memsafe::options{memsafe::unlimited, 1});
  s.matvec_min = p.min_bytes;
  s.isa = p.isa;
  return s;
}

/// budget_error naming the minimum when `budget` cannot hold the smallest plan.
inline void check_budget(std::size_t budget, const pcg_sizes& sz, std::size_t n, std::size_t c, const char* fn) {
  if (budget >= sz.minimum()) return;
  throw budget_error(cat(msg{"memsafe::gp::", fn, ": a budget of ", format_bytes(budget), " is too small for n = ", n,
                             ", ", c, " right-hand side(s) and a rank-", sz.rank,
                             " preconditioner: the CG blocks and the preconditioner need ", format_bytes(sz.solver),
                             " and the smallest kernel product ", format_bytes(sz.matvec_min),
                             "; use a budget of at least ", sz.minimum(), " bytes (or a lower preconditioner rank)"}),
                     budget, sz.minimum());
}

/// Greedy pivoted Cholesky of k(X, X) to rank ≤ k into Lc (n×k column-major); returns the rank
/// reached. diag (n) and row (k) are scratch; il2 = 1/ℓ². Stops early when the largest remaining
/// diagonal entry falls to 1e-12·σ_f² (K is numerically of that rank).
inline std::size_t pivoted_cholesky(const data_view& D, const hyperparameters& h, std::size_t k, const double* il2,
                                    double* Lc, double* diag, double* row, std::size_t threads, double& trace_error) {
  namespace la = memsafe::linalg;
  const std::size_t n = D.n, d = D.d;
  const double s2 = h.variance;
  std::fill(diag, diag + n, s2);
  std::size_t r = 0;
  for (; r < k; ++r) {
    const std::size_t piv = static_cast<std::size_t>(memsafe::detail::max_element(diag, diag + n) - diag);
    const double dp = diag[piv];
    if (!(dp > 1e-12 * s2)) break;
    double* col = Lc + r * n;
    with_kernel(h.kind, [&](auto kc) {
      parallel_rows(threads, n, [&](std::size_t j0, std::size_t j1, std::size_t) {
        kernel_block<decltype(kc)::value>(D.X + piv * d, 0, 1, D.X + j0 * d, j1 - j0, d, il2, s2, col + j0, j1 - j0,
                                          nullptr, nullptr);
      });
    });
    if (r > 0) {  // col −= L[:, :r]·L[piv, :r]
      for (std::size_t q = 0; q < r; ++q) row[q] = Lc[q * n + piv];
      la::gemm(-1.0, memsafe::matrix(static_cast<const double*>(Lc), r, n).t(), false,
               memsafe::matrix(static_cast<const double*>(row), r, 1), false, 1.0, memsafe::matrix(col, n, 1));
    }
    const double inv = 1.0 / libm::sqrt(dp);
    for (std::size_t j = 0; j < n; ++j) {
      col[j] *= inv;
      diag[j] = std::max(0.0, diag[j] - col[j] * col[j]);
    }
    diag[piv] = 0;
  }
  double rest = 0;
  for (std::size_t j = 0; j < n; ++j) rest += diag[j];
  trace_error = rest / (static_cast<double>(n) * s2);
  return r;
}

/// The kernel cache of exact_solve: K's first `rows` rows from the diagonal rightwards, in block
/// rows of `block` (the last may be shorter when rows = n): block row I holds K[i0 : i0 + bi, i0 : n]
/// row-major, i0 = I·block — each pair (i ≤ j) of the strip once.
struct kernel_strip {
  static constexpr std::size_t block = 256;
  std::size_t n = 0, rows = 0;
  double* values = nullptr;

  /// Bytes of a strip of `rows` rows of an n×n K (a strip is only built when it fits a budget, so
  /// that this fits std::size_t: R.stats reports the whole K's, n·(n + 1)/2 + …, saturated).
  static std::size_t bytes(std::size_t n, std::size_t rows) {
    std::size_t b = 0;
    for (std::size_t i0 = 0; i0 < rows; i0 += block)
      b = memsafe::plan::saturating_add(b, memsafe::plan::saturating_mul(std::min(block, rows - i0), n - i0));
    return memsafe::plan::saturating_mul(b, sizeof(double));
  }
  /// The most rows (whole blocks, or all n) whose strip fits `bytes`.
  static std::size_t rows_fitting(std::size_t n, std::size_t bytes_) {
    std::size_t r = 0, used = 0;
    while (r < n) {
      const std::size_t br = std::min(block, n - r);
      const std::size_t b = memsafe::plan::saturating_mul(memsafe::plan::saturating_mul(br, n - r), sizeof(double));
      if (b > bytes_ || used > bytes_ - b) break;
      used += b;
      r += br;
    }
    return r;
  }
  std::size_t offset(std::size_t i0) const { return bytes(n, i0) / sizeof(double); }
};

/// Fill the strip: one budgeted dense kernel block per block row (the library's tile path, under
/// `o`); returns the largest peak of temporaries of those evaluations.
inline std::size_t fill_strip(const data_view& D, const hyperparameters& h, const kernel_strip& S,
                              const memsafe::options& o) {
  const std::size_t n = D.n, d = D.d;
  std::size_t peak = 0;
  for (std::size_t i0 = 0; i0 < S.rows; i0 += kernel_strip::block) {
    const std::size_t bi = std::min(kernel_strip::block, S.rows - i0);
    peak = std::max(peak, with_lazy_kernel(h, D.X + i0 * d, bi, D.X + i0 * d, n - i0, d, [&](const auto& K) {
      return memsafe::eval_into(memsafe::dense(K), S.values + S.offset(i0), nullptr, o).peak_temp_bytes;
    }));
  }
  return peak;
}

/// c = 1: rows [r0, r0 + nr) (nr ≤ 4) of one block row (rows of length w at blk + r·w, the
/// diagonal block bi wide) against x = in[i0:], into y = col[i0:]: y_r += Σ_j k_rj·x_j over the
/// whole row, and y_j += Σ_r k_rj·x_r right of the diagonal block — each entry read once, the
/// column update shared by the 4 rows.
inline void strip_rows_1(const double* __restrict blk, std::size_t w, std::size_t bi, std::size_t r0,
                         std::size_t nr, const double* __restrict x, double* __restrict y) {
  constexpr std::size_t V = 8;
  double acc[4][V] = {};
  const double* rp[4];
  double xr[4];
  for (std::size_t q = 0; q < 4; ++q) {
    rp[q] = blk + (r0 + std::min(q, nr - 1)) * w;  // a short group repeats its last row with weight 0
    xr[q] = q < nr ? x[r0 + q] : 0.0;
  }
  std::size_t j = 0;
  for (; j + V <= bi; j += V)  // the diagonal block: rows only
    for (std::size_t q = 0; q < 4; ++q)
      for (std::size_t u = 0; u < V; ++u) acc[q][u] += rp[q][j + u] * x[j + u];
  for (; j < bi; ++j)
    for (std::size_t q = 0; q < 4; ++q) acc[q][0] += rp[q][j] * x[j];
  for (; j + V <= w; j += V)
    for (std::size_t u = 0; u < V; ++u) {
      const double k0 = rp[0][j + u], k1 = rp[1][j + u], k2 = rp[2][j + u], k3 = rp[3][j + u], xj = x[j + u];
      acc[0][u] += k0 * xj;
      acc[1][u] += k1 * xj;
      acc[2][u] += k2 * xj;
      acc[3][u] += k3 * xj;
      y[j + u] += (k0 * xr[0] + k1 * xr[1]) + (k2 * xr[2] + k3 * xr[3]);
    }
  for (; j < w; ++j) {
    const double k0 = rp[0][j], k1 = rp[1][j], k2 = rp[2][j], k3 = rp[3][j], xj = x[j];
    acc[0][0] += k0 * xj;
    acc[1][0] += k1 * xj;
    acc[2][0] += k2 * xj;
    acc[3][0] += k3 * xj;
    y[j] += (k0 * xr[0] + k1 * xr[1]) + (k2 * xr[2] + k3 * xr[3]);
  }
  for (std::size_t q = 0; q < nr; ++q) {
    double s = 0;
    for (std::size_t u = 0; u < V; ++u) s += acc[q][u];
    y[r0 + q] += s;
  }
}

/// out[0, n) (n × c) = the strip's part of K·in: rows i < rows get Σ_{j ≥ their block} k_ij·in_j,
/// and every column j right of a block gets Σ_i k_ij·in_i of that block's rows (what the strip
/// holds, read once). out is overwritten. col: threads × n × c doubles of scratch.
inline void apply_strip(const kernel_strip& S, const double* in, std::size_t c, double* out, double* col,
                        std::size_t threads) {
  const std::size_t n = S.n, nb = (S.rows + kernel_strip::block - 1) / kernel_strip::block;
  const std::size_t P = std::max<std::size_t>(1, std::min(threads, nb));
  memsafe::host::parallel(P, [&](std::size_t t) {
    double* cl = col + t * n * c;
    std::fill(cl, cl + n * c, 0.0);
    for (std::size_t b = 0; b < nb; ++b) {
      if (memsafe::host::serpentine_thread(b, P) != t) continue;  // the blocks' work falls with b
      const std::size_t i0 = b * kernel_strip::block, bi = std::min(kernel_strip::block, S.rows - i0), w = n - i0;
      const double* blk = S.values + S.offset(i0);
      if (c == 1) {  // 4 rows at a time
        for (std::size_t r = 0; r < bi; r += 4)
          strip_rows_1(blk, w, bi, r, std::min<std::size_t>(4, bi - r), in + i0, cl + i0);
        continue;
      }
      for (std::size_t r = 0; r < bi; ++r) {
        const double* row = blk + r * w;  // K[i0 + r, i0 : n]
        const std::size_t i = i0 + r;
        double* oi = cl + i * c;
        const double* xi = in + i * c;
        for (std::size_t j = 0; j < w; ++j) {
          const double k = row[j];
          const double* xj = in + (i0 + j) * c;
          for (std::size_t q = 0; q < c; ++q) oi[q] += k * xj[q];
          if (j >= bi) {
            double* oj = cl + (i0 + j) * c;
            for (std::size_t q = 0; q < c; ++q) oj[q] += k * xi[q];
          }
        }
      }
    }
  });
  for (std::size_t q = 0; q < n * c; ++q) {
    double s = 0;
    for (std::size_t t = 0; t < P; ++t) s += col[t * n * c + q];
    out[q] = s;
  }
}

/// (K + σ²I)·X = B by preconditioned CG into X (n × c, row-major; the caller's memory), filling R
/// (everything but R.alpha). budget: the bytes this call may use.
inline void pcg(const data_view& D, const double* B, std::size_t c, const hyperparameters& h, const exact_options& o,
                std::size_t budget, const pcg_sizes& sz, double* X, exact_result& R, const char* fn) {
  namespace la = memsafe::linalg;
  const auto now = [] { return memsafe::detail::monotonic_seconds(); };
  const auto since = [&](double t) { return now() - t; };
  const auto t_start = now();
  const std::size_t n = D.n, d = D.d, k = sz.rank;
  // The system is solved scaled by powers of two, which changes no bit of a solve whose numbers stay
  // normal: K + σ²I divided by 2^es (es the exponent of max(σ_f², σ²) rounded down to even, so
  // that its entries are O(1) — a variance of 1e308 would overflow K·p — and the preconditioner's
  // square roots of pivots scale by 2^(es/2) exactly) and each column of B by 2^eb_j (the exponent
  // of max|b_j|: ‖b_j‖² of a b_j of 1e-170 underflows to 0, of 1e160 overflows, and CG read the
  // first as b_j = 0 and broke down on the second); α_j is scaled back by 2^(eb_j − es) at the end.
  int es = libm::ilogb(std::max(h.variance, h.noise));
  es -= es & 1;
  hyperparameters hs = h;
  hs.variance = libm::ldexp(h.variance, -es);
  const double sig2 = libm::ldexp(h.noise, -es);
  const std::size_t threads = memsafe::plan::resolve_threads(o.threads);
  R.n = n;
  R.rhs = c;
  R.stats.budget_bytes = budget;
  R.stats.solver_bytes = sz.solver;
  R.stats.matvec_minimum_bytes = sz.matvec_min;
  R.stats.minimum_bytes = sz.minimum();
  R.stats.threads = threads;
  R.stats.matvec_isa = sz.isa;
  check_budget(budget, sz, n, c, fn);

  memsafe::detail::accountant acc(budget);
  memsafe::detail::temp_buffer<double> Rb(acc, n * c), Zb(acc, n * c), Pb(acc, n * c), APb(acc, n * c);
  memsafe::detail::temp_buffer<double> Lc(acc, n * k), diag(acc, k ? n : 0), Cw(acc, k * k), Tw(acc, k * c),
      row(acc, k), il2(acc, d), small(acc, 6 * c);
  double* bnorm = small.data();
  double* rz = small.data() + c;
  double* step = small.data() + 2 * c;
  double* res = small.data() + 3 * c;
  double* done = small.data() + 4 * c;  // 1: the column has stopped
  double* eb = small.data() + 5 * c;    // the exponent B's column j is scaled by (see es)
  for (std::size_t q = 0; q < d; ++q) il2[q] = 1.0 / (h.lengthscales[q] * h.lengthscales[q]);
  memsafe::options mv_opts{budget - acc.current(), o.threads};

  // ---- the kernel cache: what the budget leaves after the solver's blocks, one product's plan
  // and the strip's per-thread column sums holds K's first rows (whole blocks of 256) -----------
  kernel_strip strip;
  strip.n = n;
  memsafe::detail::temp_buffer<double> strip_values, strip_cols;
  if (o.cache && n > kernel_strip::block) {
    const std::size_t avail = budget - acc.current();
    const std::size_t prod = kernel_product_plan(hs, D.X, n, D.X, n, d, D.X, c, mv_opts).planned_bytes;
    const std::size_t cols = threads * n * c * sizeof(double);
    if (avail > prod + cols) {
      const std::size_t rows = kernel_strip::rows_fitting(n, avail - prod - cols);
      if (rows >= kernel_strip::block) {
        strip.rows = rows;
        strip_values = memsafe::detail::temp_buffer<double>(acc, kernel_strip::bytes(n, rows) / sizeof(double));
        strip_cols = memsafe::detail::temp_buffer<double>(acc, threads * n * c);
        strip.values = strip_values.data();
        mv_opts.budget = budget - acc.current();
      }
    }
  }
  R.stats.cache_rows = strip.rows;
  R.stats.cache_bytes = kernel_strip::bytes(n, strip.rows);
  R.stats.cache_fraction = static_cast<double>(R.stats.cache_bytes) / static_cast<double>(kernel_strip::bytes(n, n));
  bool strip_filled = false;

  // ---- the preconditioner -------------------------------------------------------------------------
  std::size_t rank = 0;
  if (k > 0) {
    double terr = 0;
    rank = pivoted_cholesky(D, hs, k, il2.data(), Lc.data(), diag.data(), row.data(), threads, terr);
    R.stats.preconditioner_trace_error = terr;
    if (rank > 0) {  // Cw = chol(σ²I + LᵀL)
      auto Lv = memsafe::matrix(static_cast<const double*>(Lc.data()), rank, n).t();
      auto Cv = memsafe::matrix(Cw.data(), rank, rank);
      la::gemm(1.0, Lv, true, Lv, false, 0.0, Cv);
      for (std::size_t i = 0; i < rank; ++i) Cv(i, i) += sig2;
      la::cholesky(Cv);
    }
  } else {
    R.stats.preconditioner_trace_error = 1;
  }
  R.stats.preconditioner_rank = rank;
  R.stats.seconds_preconditioner = since(t_start);

  // z = P⁻¹r (P = LLᵀ + σ²I by Woodbury; σ²I alone at rank 0).
  const auto precondition = [&](const double* r, double* z) {
    std::copy(r, r + n * c, z);
    if (rank > 0) {
      auto Lv = memsafe::matrix(static_cast<const double*>(Lc.data()), rank, n).t();
      auto Cv = memsafe::matrix(static_cast<const double*>(Cw.data()), rank, rank);
      auto Tv = memsafe::matrix(Tw.data(), rank, c);
      la::gemm(1.0, Lv, true, memsafe::matrix(r, n, c), false, 0.0, Tv);
      la::solve_lower(Cv, Tv);
      la::solve_lower(Cv, Tv, true);
      la::gemm(-1.0, Lv, false, memsafe::matrix(static_cast<const double*>(Tw.data()), rank, c), false, 1.0,
               memsafe::matrix(z, n, c));
    }
    const double inv = 1.0 / sig2;
    for (std::size_t q = 0; q < n * c; ++q) z[q] *= inv;
  };
  // out = (K + σ²I)·in
  const auto product = [&](const double* in, double* out) {
    const auto t0 = now();
    if (strip.rows == 0) {
      const auto st = kernel_product(hs, D.X, n, D.X, n, d, in, c, out, mv_opts);
      R.stats.matvec_peak_bytes = std::max(R.stats.matvec_peak_bytes, st.peak_temp_bytes);
    } else {
      if (!strip_filled) {  // the first product computes the strip (under the product's budget)
        const auto tf = now();
        R.stats.matvec_peak_bytes = std::max(R.stats.matvec_peak_bytes, fill_strip(D, hs, strip, mv_opts));
        R.stats.seconds_cache = since(tf);
        strip_filled = true;
      }
      // K = [K11 K12; K12ᵀ K22] with K11, K12 in the strip: the strip gives K11·in1 + K12·in2 and
      // K12ᵀ·in1; K22·in2 is a budgeted product of its own (symmetric: the same points both sides).
      apply_strip(strip, in, c, out, strip_cols.data(), threads);
      const std::size_t r = strip.rows;
      if (r < n) {
        const auto st = kernel_product(hs, D.X + r * d, n - r, D.X + r * d, n - r, d, in + r * c, c,
                                       strip_cols.data(), mv_opts);
        R.stats.matvec_peak_bytes = std::max(R.stats.matvec_peak_bytes, st.peak_temp_bytes);
        for (std::size_t q = 0; q < (n - r) * c; ++q) out[r * c + q] += strip_cols[q];
      }
    }
    R.stats.seconds_matvec += since(t0);
    ++R.stats.matvecs;
    for (std::size_t q = 0; q < n * c; ++q) out[q] += sig2 * in[q];
  };

  // ---- CG -----------------------------------------------------------------------------------------
  const auto t_cg = now();
  double* r = Rb.data();
  double* z = Zb.data();
  double* p = Pb.data();
  double* Ap = APb.data();
  std::fill(X, X + n * c, 0.0);
  R.column_iterations.assign(c, 0);
  R.residual.assign(c, 0.0);
  // r = B with column j scaled by 2^-eb_j (0 for b_j = 0)
  for (std::size_t j = 0; j < c; ++j) bnorm[j] = 0;  // max|b_j| first
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < c; ++j) bnorm[j] = std::max(bnorm[j], libm::fabs(B[i * c + j]));
  for (std::size_t j = 0; j < c; ++j) eb[j] = bnorm[j] > 0 ? libm::ilogb(bnorm[j]) : 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < c; ++j) r[i * c + j] = libm::ldexp(B[i * c + j], -static_cast<int>(eb[j]));
  for (std::size_t j = 0; j < c; ++j) bnorm[j] = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < c; ++j) bnorm[j] += r[i * c + j] * r[i * c + j];
  std::size_t active = 0;
  for (std::size_t j = 0; j < c; ++j) {
    bnorm[j] = libm::sqrt(bnorm[j]);
    res[j] = 0;
    done[j] = 0;
    if (bnorm[j] == 0) done[j] = 1;  // b_j = 0: α_j = 0
    else ++active, res[j] = 1;
  }
  precondition(r, z);
  for (std::size_t j = 0; j < c; ++j) rz[j] = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < c; ++j) {
      const std::size_t q = i * c + j;
      p[q] = done[j] ? 0.0 : z[q];
      rz[j] += r[q] * z[q];
    }
  std::size_t it = 0;
  while (active > 0 && it < o.max_iterations) {
    ++it;
    product(p, Ap);
    for (std::size_t j = 0; j < c; ++j) step[j] = 0;  // pᵀAp
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < c; ++j) step[j] += p[i * c + j] * Ap[i * c + j];
    for (std::size_t j = 0; j < c; ++j) {
      if (done[j]) {
        step[j] = 0;
        continue;
      }
      if (rz[j] == 0) {  // r (or P⁻¹r) is 0: solved exactly while min_iterations kept it going, not a breakdown
        done[j] = 1;
        --active;
        R.column_iterations[j] = it - 1;
        step[j] = 0;
        continue;
      }
      if (!(step[j] > 0) || !libm::isfinite(rz[j])) {  // breakdown: K + σ²I is SPD, so only rounding or NaN
        R.breakdown = true;
        done[j] = 1;
        --active;
        R.column_iterations[j] = it;
        step[j] = 0;
        continue;
      }
      step[j] = rz[j] / step[j];
    }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < c; ++j) {
        if (step[j] == 0) continue;  // stopped (before or at this step): p or Ap may be inf or NaN
        const std::size_t q = i * c + j;
        X[q] += step[j] * p[q];
        r[q] -= step[j] * Ap[q];
      }
    for (std::size_t j = 0; j < c; ++j) {
      if (done[j]) continue;
      double s = 0;
      for (std::size_t i = 0; i < n; ++i) s += r[i * c + j] * r[i * c + j];
      res[j] = libm::sqrt(s) / bnorm[j];
      R.column_iterations[j] = it;
      if (res[j] <= o.tolerance && (it >= o.min_iterations || res[j] == 0)) {  // an exact solve stops at once
        done[j] = 1;
        --active;
      }
    }
    if (active == 0 || it == o.max_iterations) break;
    precondition(r, z);
    for (std::size_t j = 0; j < c; ++j) step[j] = 0;  // new rᵀz
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < c; ++j) step[j] += r[i * c + j] * z[i * c + j];
    for (std::size_t j = 0; j < c; ++j) {
      const double beta = done[j] ? 0.0 : step[j] / rz[j];
      rz[j] = step[j];
      step[j] = beta;
    }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < c; ++j) {
        const std::size_t q = i * c + j;
        p[q] = done[j] ? 0.0 : z[q] + step[j] * p[q];
      }
  }
  R.iterations = it;
  R.converged = !R.breakdown;
  for (std::size_t j = 0; j < c; ++j) {
    R.residual[j] = res[j];
    if (bnorm[j] > 0 && !(res[j] <= o.tolerance)) R.converged = false;
  }
  R.stats.seconds_cg = since(t_cg);
  if (o.true_residual) {  // of the scaled system, as the recursive residual
    product(X, Ap);
    R.true_residual.assign(c, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < c; ++j) {
        const double e = libm::ldexp(B[i * c + j], -static_cast<int>(eb[j])) - Ap[i * c + j];
        R.true_residual[j] += e * e;
      }
    for (std::size_t j = 0; j < c; ++j)
      R.true_residual[j] = bnorm[j] > 0 ? libm::sqrt(R.true_residual[j]) / bnorm[j] : 0.0;
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < c; ++j) X[i * c + j] = libm::ldexp(X[i * c + j], static_cast<int>(eb[j]) - es);
  R.stats.peak_temp_bytes = acc.peak() + R.stats.matvec_peak_bytes;
  R.stats.seconds_total = since(t_start);
}

/// exact_predict_variance's own temporaries for batches of cb test points: k(X, x_q) and its
/// solution (n × cb each) and the inverse squared lengthscales.
inline std::size_t variance_own_bytes(std::size_t n, std::size_t cb, std::size_t d) {
  const std::string what = cat(msg{"exact_predict_variance's temporaries for n = ", n, " and batches of ", cb});
  return size_fma(sizeof(double), size_fma(2 * cb, n, d, what), 0, what);
}
inline void check_variance_batch(std::size_t batch, const std::string& f) {
  if (batch == 0) throw argument_error(cat(msg{f, "batch must be >= 1"}));
}

}  // namespace memsafe::detail::gp

namespace memsafe::gp {

/// Bytes of temporaries the smallest plan of exact_solve needs for `rhs` right-hand sides: the CG
/// blocks and the preconditioner (rank min(opts.preconditioner_rank, n)) plus the smallest plan of
/// one kernel product.
inline std::size_t exact_minimum_bytes(const data_view& D, std::size_t rhs, const hyperparameters& h,
                                       const exact_options& opts = {}) {
  memsafe::detail::gp::validate_solve(D, rhs, h, opts, "memsafe::gp::exact_minimum_bytes: ");
  return memsafe::detail::gp::pcg_plan(D, rhs, h, opts).minimum();
}

/// Bytes of temporaries the smallest plan of exact_predict_variance needs for `test_points` test
/// points in batches of `batch`: the batch's k(X, x_q) and its solution plus one solve's minimum
/// (what its budget_error names). 0 when there are no test points (the call then runs at any
/// budget). Checks what the call checks, in its order.
inline std::size_t exact_predict_variance_minimum_bytes(const data_view& D, const hyperparameters& h,
                                                        std::size_t test_points, const exact_options& opts = {},
                                                        std::size_t batch = 16) {
  namespace dg = memsafe::detail::gp;
  const std::string f = "memsafe::gp::exact_predict_variance_minimum_bytes: ";
  dg::validate_options(opts, f);
  dg::validate_exact(D, h, f);
  if (test_points == 0) return 0;
  dg::check_variance_batch(batch, f);
  const std::size_t cb = std::min(batch, test_points);
  return dg::variance_own_bytes(D.n, cb, D.d) + dg::pcg_plan(D, cb, h, opts).minimum();
}

/// Solve (K + σ²I)·α = B for `rhs` right-hand sides B (n × rhs, row-major) by preconditioned CG
/// (see the file comment). Non-convergence is reported (result.converged = false), not thrown.
/// Throws shape_error / argument_error on bad inputs (no data, lengthscales ≠ d, a non-positive or
/// non-finite parameter, a non-finite input or right-hand side) and budget_error naming the minimum
/// when the budget cannot hold the smallest plan — all before any work.
inline exact_result exact_solve(const data_view& D, const double* B, std::size_t rhs, const hyperparameters& h,
                                const exact_options& opts = {}) {
  namespace dg = memsafe::detail::gp;
  const std::string f = "memsafe::gp::exact_solve: ";
  dg::validate_solve(D, rhs, h, opts, f);
  dg::validate_values(B, memsafe::detail::checked_mul(D.n, rhs, memsafe::detail::cat(memsafe::detail::msg{f, "the right-hand sides"})), f,
                     "right-hand side");
  const std::size_t budget = memsafe::detail::resolve_budget(opts.budget);
  const auto sz = dg::pcg_plan(D, rhs, h, opts);
  dg::check_budget(budget, sz, D.n, rhs, "exact_solve");  // before α is allocated
  exact_result R;
  R.alpha.assign(D.n * rhs, 0.0);
  dg::pcg(D, B, rhs, h, opts, budget, sz, R.alpha.data(), R, "exact_solve");
  return R;
}

/// Solve (K + σ²I)·α = y for the training targets D.y.
inline exact_result exact_solve(const data_view& D, const hyperparameters& h, const exact_options& opts = {}) {
  return exact_solve(D, D.y, 1, h, opts);
}

/// Predictive means at the test points T: mean (T.n × rhs, row-major) = k(T, X)·α, one budgeted
/// kernel product (budget_error with its minimum when even its smallest plan does not fit).
inline exact_predict_stats exact_predict_mean(const data_view& D, const double* alpha, std::size_t rhs,
                                              const hyperparameters& h, const points_view& T, double* mean,
                                              const exact_options& opts = {}) {
  namespace dg = memsafe::detail::gp;
  const std::string f = "memsafe::gp::exact_predict_mean: ";
  exact_predict_stats st;
  using memsafe::detail::cat, memsafe::detail::msg;
  if (!dg::start_predict(D, h, T, mean, memsafe::detail::checked_mul(T.n, rhs, cat(msg{f, "the means"})), "mean", alpha,
                         memsafe::detail::checked_mul(D.n, rhs, cat(msg{f, "alpha"})), opts, f, st))
    return st;
  if (rhs == 0) throw shape_error(cat(msg{f, "no weights (rhs = 0)"}));
  dg::validate_values(T.X, T.n * T.d, f, "test input");
  dg::check_scaled(T.X, T.n, T.d, h.lengthscales, "test point", f);
  dg::validate_values(alpha, D.n * rhs, f, "alpha");
  const double t0 = memsafe::detail::monotonic_seconds();
  memsafe::eval_stats ev;
  try {
    ev = dg::kernel_product(h, T.X, T.n, D.X, D.n, D.d, alpha, rhs, mean, memsafe::options{st.budget_bytes, opts.threads});
  } catch (const budget_error& e) {  // the product's message, under this function's name (not two prefixes)
    std::string_view why = e.what();
    if (why.starts_with("memsafe: ")) why.remove_prefix(9);
    throw budget_error(cat(msg{f, why}), e.budget_bytes, e.minimum_bytes);
  }
  st.peak_temp_bytes = ev.peak_temp_bytes;
  st.seconds = memsafe::detail::monotonic_seconds() - t0;
  return st;
}

/// Latent predictive variances at the test points T: var_q = k(x_q, x_q) − k_qᵀ(K + σ²I)⁻¹k_q
/// (add σ² for y), each k_q = k(X, x_q) solved by the same preconditioned CG, `batch` test points
/// (right-hand sides) at a time. Costs a CG solve per batch: meant for a subset of test points.
/// Temporaries: the batch's k(X, x_q) and its solution (2·n·batch doubles) plus one solve's.
/// The variance is clamped at 0 (a loose tolerance can make the quadratic form overshoot).
inline exact_predict_stats exact_predict_variance(const data_view& D, const hyperparameters& h, const points_view& T,
                                                  double* var, const exact_options& opts = {},
                                                  std::size_t batch = 16) {
  namespace dg = memsafe::detail::gp;
  const std::string f = "memsafe::gp::exact_predict_variance: ";
  dg::validate_options(opts, f);
  exact_predict_stats st;
  if (!dg::start_predict(D, h, T, var, T.n, "var", nullptr, 0, opts, f, st)) return st;
  using memsafe::detail::cat, memsafe::detail::msg;
  dg::check_variance_batch(batch, f);
  dg::validate_values(T.X, T.n * T.d, f, "test input");
  const std::size_t n = D.n, d = D.d, cb = std::min(batch, T.n);
  const auto sz = dg::pcg_plan(D, cb, h, opts);
  const std::size_t minimum = dg::variance_own_bytes(n, cb, d) + sz.minimum();
  if (st.budget_bytes < minimum)
    throw budget_error(cat(msg{f, "a budget of ", format_bytes(st.budget_bytes), " is too small for n = ", n,
                               " and batches of ", cb, " test points: use a budget of at least ", minimum, " bytes"}),
                       st.budget_bytes, minimum);
  const double t0 = memsafe::detail::monotonic_seconds();
  const std::size_t threads = memsafe::plan::resolve_threads(opts.threads);
  memsafe::detail::accountant acc(st.budget_bytes);
  memsafe::detail::temp_buffer<double> Kb(acc, n * cb), Ab(acc, n * cb), il2(acc, d);
  for (std::size_t q = 0; q < d; ++q) il2[q] = 1.0 / (h.lengthscales[q] * h.lengthscales[q]);
  std::size_t inner_peak = 0;
  for (std::size_t t0b = 0; t0b < T.n; t0b += cb) {
    const std::size_t c = std::min(cb, T.n - t0b);
    // Kb (n × c, row-major) = k(X, T_b)
    dg::with_kernel(h.kind, [&](auto kc) {
      dg::parallel_rows(threads, n, [&](std::size_t i0, std::size_t i1, std::size_t) {
        dg::kernel_block<decltype(kc)::value>(D.X, i0, i1, T.X + t0b * d, c, d, il2.data(), h.variance,
                                              Kb.data() + i0 * c, c, nullptr, nullptr);
      });
    });
    const auto szb = c == cb ? sz : dg::pcg_plan(D, c, h, opts);
    exact_result R;
    dg::pcg(D, Kb.data(), c, h, opts, st.budget_bytes - acc.current(), szb, Ab.data(), R, "exact_predict_variance");
    inner_peak = std::max(inner_peak, R.stats.peak_temp_bytes);
    st.iterations = std::max(st.iterations, R.iterations);
    st.converged = st.converged && R.converged;
    for (std::size_t j = 0; j < c; ++j) {
      double q = 0;
      for (std::size_t i = 0; i < n; ++i) q += Kb[i * c + j] * Ab[i * c + j];
      var[t0b + j] = q > h.variance ? 0.0 : h.variance - q;  // clamped at 0; NaN stays NaN
    }
  }
  st.peak_temp_bytes = acc.peak() + inner_peak;
  st.seconds = memsafe::detail::monotonic_seconds() - t0;
  return st;
}

}  // namespace memsafe::gp
