// memsafe/gp/sgpr.hpp — the SGPR (Titsias 2009) collapsed bound, its gradient with respect to every
// hyperparameter and the inducing points, and predictions, under a budget of temporaries.
//
// Notation: X (n×d) training inputs, y (n), Z (m×d) inducing points, k an ARD kernel (kernels.hpp),
// σ² the noise variance, Kuu = k(Z, Z) + jitter·I (a fixed jitter on the diagonal, as GPflow does),
// L = chol(Kuu), Ψ₂ = Kuf·Kufᵀ, b = Kuf·y, A = L⁻¹Kuf/σ, B = AAᵀ + I, LB = chol(B), c = LB⁻¹L⁻¹b/σ².
//   bound = −n/2·log 2π − Σ log diag LB − n/2·log σ² − yᵀy/(2σ²) + cᵀc/2 − tr(Kff)/(2σ²) + tr(AAᵀ)/2
// (GPflow's SGPR.elbo). The n-sized work — Ψ₂, b, and in the backward pass the contraction of
// W = ∂F/∂Kuf = 2·Ḡ₂·Kuf + ḡ₁·yᵀ with ∂Kuf/∂(σ_f², ℓ, Z) — runs over chunks of columns of Kuf: each
// chunk (m × nc) is formed once from the kernel, then BLAS does the n-sized products on it (SYRK for
// Ψ₂, GEMM for W). The chunk buffers are the only temporaries; they come from one accountant limited
// by the budget, nc is the largest that fits, and a budget below one column is a budget_error naming
// the minimum before any work. The m×m matrices (L, B, LB, and with the gradient B⁻¹, Ḡ₂, Ḡuu) are
// outputs of the call, not temporaries: they live in std::vector and are not counted (docs/design.md).
// The call is a composition of phases (detail::gp: factor_kuu, accumulate, finish, backward_setup,
// contract_kuu, contract_kuf, finalise_gradient); mpi::sgpr (mpi/sgpr.hpp) composes the same phases
// on each rank's shard of the training points with one allreduce per pass.
//
// Gradient (with P = Kuu + Ψ₂/σ² = L·B·Lᵀ, w = L⁻ᵀLB⁻ᵀc = P⁻¹b/σ², Linv = L⁻¹):
//   Ḡ₂ = ∂F/∂Ψ₂  = Linvᵀ(I − B⁻¹)Linv/(2σ²) − wwᵀ/(2σ²)
//   ḡ₁ = ∂F/∂b   = w/σ²
//   Ḡuu = ∂F/∂Kuu = Linvᵀ(I − B⁻¹/2 − B/2)Linv − wwᵀ/2
//   ∂F/∂σ² = (m − tr B⁻¹ − tr AAᵀ − n − ‖Lᵀw‖²)/(2σ²) + (yᵀy − wᵀb + tr Kff)/(2σ⁴)
// and ∂F/∂θ = Σ Ḡuu ⊙ ∂Kuu/∂θ + Σ W ⊙ ∂Kuf/∂θ − n/(2σ²)·∂σ_f²/∂θ (tr Kff = n·σ_f²).
#pragma once

#if !defined(MEMSAFE_HAS_LAPACK)
#error "memsafe/gp/sgpr.hpp needs MEMSAFE_HAS_LAPACK: include <memsafe/gp.hpp> and link memsafe::lapack"
#endif

#include <cstddef>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

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
#include "../backend/host/executor.hpp"
#include "../backend/host/tile_isa.hpp"
#include "../plan/plan.hpp"
#include "kernels.hpp"

namespace memsafe::gp {

/// Kernel and likelihood hyperparameters, as positive values (see softplus below for training).
struct hyperparameters {
  kernel kind = kernel::rbf;
  double variance = 1.0;             ///< σ_f², the kernel variance
  std::vector<double> lengthscales;  ///< ℓ_1..ℓ_d (ARD; exactly d values)
  double noise = 0.1;                ///< σ², the Gaussian noise variance
  double jitter = 1e-6;              ///< fixed, added to Kuu's diagonal (not a parameter)
};

/// Training data: n points of dimension d (row-major), and n targets. Not copied.
struct data_view {
  const double* X = nullptr;
  const double* y = nullptr;
  std::size_t n = 0, d = 0;
};

/// Inducing points: m points of dimension d (row-major). Not copied.
struct inducing_view {
  const double* Z = nullptr;
  std::size_t m = 0, d = 0;
};

/// How a call runs.
struct sgpr_options {
  std::optional<std::size_t> budget = std::nullopt;  ///< bytes of temporaries; unset: MEMSAFE_BUDGET, then 256 MiB
  bool gradient = false;              ///< also compute ∂bound/∂(σ_f², ℓ, σ², Z)
  /// The order of the n-sized sums. true: whitened, AAᵀ = Σ (L⁻¹Kuf_c)(L⁻¹Kuf_c)ᵀ (GPflow's order;
  /// accurate whatever Kuu's conditioning). false: Gram first, L⁻¹(Σ Kuf_c Kuf_cᵀ)L⁻ᵀ (fewer flops,
  /// but its rounding grows with κ(Kuu)·σ_f²/σ²). Unset (the default): Gram first where
  /// eps·κ₁(Kuu + jitter·I)·σ_f²/σ² ≤ gram_first_limit, else whitened (sgpr_stats says which ran).
  std::optional<bool> whitened = std::nullopt;
  unsigned threads = 0;               ///< threads of the kernel loops; 0: MEMSAFE_NUM_THREADS, then all cores
};

/// ∂bound/∂(each hyperparameter and the inducing points).
struct sgpr_gradient {
  double variance = 0;
  std::vector<double> lengthscales;
  double noise = 0;
  std::vector<double> Z;  ///< m×d, row-major
};

/// What a call used.
struct sgpr_stats {
  std::size_t budget_bytes = 0, peak_temp_bytes = 0, minimum_bytes = 0;
  std::size_t chunk_columns = 0;           ///< nc of the forward pass
  std::size_t chunk_columns_backward = 0;  ///< nc of the backward pass (0 without gradient)
  std::size_t threads = 1;
  /// The loops over rows of Kuf ran their AVX2 copy: a translation unit compiled without AVX2 (no
  /// -march) on a CPU that has it, MEMSAFE_ISA not portable (backend/host/tile_isa.hpp).
  bool avx2_rows = false;
  bool whitened = false;      ///< the order of the n-sized sums that ran (sgpr_options::whitened)
  double kuu_condition = 0;   ///< κ₁(Kuu + jitter·I), estimated (linalg::inverse_norm1_estimate)
  double seconds_forward = 0, seconds_backward = 0;
};

/// The automatic choice of sgpr_options::whitened: the Gram-first order where
/// eps·κ₁(Kuu + jitter·I)·σ_f²/σ² is at most this. Measured (RBF, n = 2000, d = 1, evenly spaced Z,
/// against a long-double bound; docs/design.md): that product tracks the Gram-first order's absolute
/// error in the bound up to ≈ 1e-4, and beyond ≈ 1e-3 the error grows to nats and B's Cholesky
/// factorisation can fail; at 1e-7 the error is below 1e-7 of the bound's magnitude per 2000 points.
inline constexpr double gram_first_limit = 1e-7;

/// What prediction needs from a fit (the m×m factors are outputs of the bound's call).
struct sgpr_posterior {
  kernel kind = kernel::rbf;
  double variance = 1;
  std::vector<double> lengthscales;
  std::size_t m = 0, d = 0;
  std::vector<double> Z;   ///< copy of the inducing points (m×d)
  std::vector<double> L;   ///< chol(Kuu + jitter·I), m×m lower, row-major
  std::vector<double> LB;  ///< chol(AAᵀ + I), m×m lower
  std::vector<double> w;   ///< L⁻ᵀLB⁻ᵀc: predictive mean = K*u·w
};

struct sgpr_result {
  double bound = 0;
  /// The bound's pieces: Σ log diag LB, cᵀc, tr(AAᵀ), yᵀy, tr(Kff).
  double sum_log_diag_LB = 0, ctc = 0, trace_aat = 0, yty = 0, trace_kff = 0;
  bool has_gradient = false;
  sgpr_gradient grad;
  sgpr_posterior posterior;
  sgpr_stats stats;
};

/// Positivity for training: a parameter p > floor is stored as t with p = softplus(t) + floor.
inline double softplus(double t) { return t > 30 ? t : libm::log1p(libm::exp(t)); }
/// The inverse of softplus: t with softplus(t) = v (v > 0).
inline double softplus_inverse(double v) { return v > 30 ? v : libm::log(libm::expm1(v)); }
/// d softplus / dt (the logistic sigmoid).
inline double softplus_derivative(double t) { return 1.0 / (1.0 + libm::exp(-t)); }

}  // namespace memsafe::gp

namespace memsafe::detail::gp {

using memsafe::gp::data_view;
using memsafe::gp::hyperparameters;
using memsafe::gp::inducing_view;

/// f(r0, r1, t) over [0, rows) split among `threads` threads (t = the part's index), by
/// host::parallel: part 0 on the caller, the others on their own threads; a thread the system
/// refuses leaves its part to the caller (fewer threads, the same parts), and the first exception
/// of any part is rethrown after every thread has been joined.
template <class F>
void parallel_rows(std::size_t threads, std::size_t rows, F&& f) {
  threads = std::max<std::size_t>(1, std::min(threads, rows));
  if (threads == 1) {
    f(std::size_t{0}, rows, std::size_t{0});
    return;
  }
  const std::size_t per = (rows + threads - 1) / threads;
  memsafe::host::parallel(threads, [&](std::size_t t) {
    f(std::min(rows, t * per), t + 1 == threads ? rows : std::min(rows, (t + 1) * per), t);
  });
}

/// argument_error naming the first entry of the rows × cols values v (row-major) that is not
/// finite: a NaN or an infinity in the data gives no answer worth returning (a NaN bound, or a
/// Cholesky factor of NaNs).
inline void check_finite(const double* v, std::size_t rows, std::size_t cols, const char* what, const std::string& f) {
  for (std::size_t q = 0; q < rows * cols; ++q)
    if (!libm::isfinite(v[q]))
      throw argument_error(cols > 1
                               ? cat(msg{f, what, " ", q / cols, ", dimension ", q % cols, " is not finite (", v[q], ")"})
                               : cat(msg{f, what, " ", q / cols, " is not finite (", v[q], ")"}));
}

/// The kernel's parameters for inputs of dimension d: d ARD lengthscales, each finite and > 0 with
/// 1/ℓ² a normal double (the lazy kernels' range, expr/lazy.hpp lengthscale_in_range), and a
/// finite kernel variance > 0. `f` prefixes the messages.
inline void validate_kernel(double variance, const std::vector<double>& lengthscales, std::size_t d,
                            const std::string& f) {
  if (lengthscales.size() != d)
    throw shape_error(cat(msg{f, lengthscales.size(), " lengthscales for d = ", d, " (ARD: one per input dimension)"}));
  if (!(libm::isfinite(variance) && variance > 0))
    throw argument_error(cat(msg{f, "kernel variance must be finite and > 0, got ", variance}));
  for (std::size_t k = 0; k < d; ++k) {
    const double l = lengthscales[k];
    if (!(libm::isfinite(l) && l > 0))
      throw argument_error(cat(msg{f, "lengthscale ", k, " must be finite and > 0, got ", l}));
    if (!memsafe::detail::lengthscale_in_range(l))
      throw argument_error(cat(msg{
          f, memsafe::detail::lengthscale_range_message(l, cat(msg{"lengthscale ", k, " ="}).c_str()), "; rescale the inputs"}));
  }
}

/// The noise variance (finite, > 0) and, where the call uses it, the jitter (finite, >= 0).
inline void validate_noise(const hyperparameters& h, const std::string& f, bool uses_jitter = true) {
  if (!(libm::isfinite(h.noise) && h.noise > 0))
    throw argument_error(cat(msg{f, "noise variance must be finite and > 0, got ", h.noise}));
  if (!libm::isfinite(1 / h.noise))  // a subnormal σ²: 1/σ² (CG's preconditioner, the bound's σ⁻²) is inf
    throw argument_error(cat(msg{f, "noise variance ", h.noise, " is too small: 1/noise overflows a double (the smallest is ",
                                 std::numeric_limits<double>::min(), "); rescale the targets"}));
  if (uses_jitter && !(libm::isfinite(h.jitter) && h.jitter >= 0))
    throw argument_error(cat(msg{f, "jitter must be finite and >= 0, got ", h.jitter}));
}

/// The inducing points and the kernel's parameters: what a posterior holds besides its factors.
inline void validate_inducing(const inducing_view& I, double variance, const std::vector<double>& lengthscales,
                              const std::string& f) {
  if (I.m == 0) throw shape_error(cat(msg{f, "no inducing points (m = 0)"}));
  if (I.d == 0) throw shape_error(cat(msg{f, "inducing points of dimension d = 0"}));
  if (!I.Z) throw argument_error(cat(msg{f, "null data pointer (Z)"}));
  validate_kernel(variance, lengthscales, I.d, f);
  check_finite(I.Z, I.m, I.d, "inducing point", f);
}

/// The checks of what a call's ranks replicate (the inducing points and the hyperparameters); `f`
/// prefixes the messages.
inline void validate_model(const inducing_view& I, const hyperparameters& h, const std::string& f) {
  validate_inducing(I, h.variance, h.lengthscales, f);
  validate_noise(h, f);
}

inline void validate(const data_view& D, const inducing_view& I, const hyperparameters& h, const char* fn) {
  const std::string f = cat(msg{"memsafe::gp::", fn, ": "});
  if (D.n == 0 || D.d == 0) throw shape_error(cat(msg{f, "no training data (n = ", D.n, ", d = ", D.d, ")"}));
  if (I.m == 0) throw shape_error(cat(msg{f, "no inducing points (m = 0)"}));
  if (I.d != D.d) throw shape_error(cat(msg{f, "inducing points have d = ", I.d, " but the data have d = ", D.d}));
  if (!D.X || !D.y || !I.Z) throw argument_error(cat(msg{f, "null data pointer (X, y or Z)"}));
  validate_model(I, h, f);
  check_finite(D.X, D.n, D.d, "training input", f);
  check_finite(D.y, D.n, 1, "training target", f);
}

/// r2[j] = Σ_k (x_jk − z_k)²/ℓ_k² for the nc points Xc (row-major, d columns) and one point z.
inline void scaled_sqdist_row(const double* z, const double* Xc, std::size_t nc, std::size_t d, const double* il2,
                              double* r2) {
  for (std::size_t j = 0; j < nc; ++j) {
    const double* x = Xc + j * d;
    double s = 0;
    for (std::size_t k = 0; k < d; ++k) {
      const double u = x[k] - z[k];
      s += u * u * il2[k];
    }
    r2[j] = s;
  }
}

/// K(rows [i0, i1) of Z, the nc points Xc) · σ_f² into out (row i at out + (i − i0)·ld): per row
/// the r² values first, then φ over the row in place (a loop with no carried value: it vectorises).
/// When b is given, b[i] += Σ_j out(i, j)·yc[j].
template <memsafe::gp::kernel K>
void kernel_block(const double* Z, std::size_t i0, std::size_t i1, const double* Xc, std::size_t nc, std::size_t d,
                  const double* il2, double s2, double* out, std::size_t ld, double* b, const double* yc) {
  for (std::size_t i = i0; i < i1; ++i) {
    double* o = out + (i - i0) * ld;
    scaled_sqdist_row(Z + i * d, Xc, nc, d, il2, o);
    for (std::size_t j = 0; j < nc; ++j) o[j] = s2 * profile<K>::phi(o[j]);
    if (b) {
      double acc = 0;
      for (std::size_t j = 0; j < nc; ++j) acc += o[j] * yc[j];
      b[i] += acc;
    }
  }
}

/// A block of training points transposed for the row kernels (row_kernel.inc): xt holds d rows of
/// ncp values — the nc points' coordinates, then zeros up to ncp, a multiple of gp_lanes — and yt
/// their ncp targets (zeros where there are none and past nc).
struct col_block {
  const double* xt = nullptr;
  const double* yt = nullptr;
  std::size_t d = 0, nc = 0, ncp = 0;
};

/// Points of a block for dimension d where the budget has room: as many as keep its transposed copy
/// within 4096 doubles (32 KiB, a level-1 data cache), a multiple of gp_lanes, from gp_lanes to
/// 256 (sgpr_call takes gp_lanes where it has not).
inline std::size_t block_columns(std::size_t d) {
  return memsafe::detail::clamp<std::size_t>(4096 / (d + 1) / gp_lanes * gp_lanes, gp_lanes, 256);
}

/// Doubles of one thread's scratch for the row kernels: a block of `block` points and
/// contract_rows's lanes.
inline std::size_t row_scratch(std::size_t d, std::size_t block) { return (d + 1) * block + (2 * d + 1) * gp_lanes; }

/// The nc (≤ the block's size) points X (row-major, d columns) and their targets y (or none)
/// transposed into buf.
inline col_block load_block(const double* X, const double* y, std::size_t nc, std::size_t d, double* buf) {
  const std::size_t ncp = (nc + gp_lanes - 1) / gp_lanes * gp_lanes;
  for (std::size_t k = 0; k < d; ++k) {
    double* r = buf + k * ncp;
    for (std::size_t j = 0; j < nc; ++j) r[j] = X[j * d + k];
    std::fill(r + nc, r + ncp, 0.0);
  }
  double* yt = buf + d * ncp;
  if (y) std::copy(y, y + nc, yt);
  else std::fill(yt, yt + nc, 0.0);
  std::fill(yt + nc, yt + ncp, 0.0);
  return {buf, yt, d, nc, ncp};
}

#define MEMSAFE_TILE_LANE_LOOP MEMSAFE_LANE_LOOP
#include "row_kernel.inc"
#undef MEMSAFE_TILE_LANE_LOOP

}  // namespace memsafe::detail::gp

#if defined(MEMSAFE_TILE_AVX2)  // the AVX2 copy for a build whose own target lacks it (backend/host/tile_isa.hpp)
#include "../backend/host/avx2_begin.inc"
namespace memsafe::detail::gp::avx2 {
#include "row_kernel.inc"
}  // namespace memsafe::detail::gp::avx2
#include "../backend/host/avx2_end.inc"
/// `call` (a row_kernel.inc function) from the AVX2 copy when `on`, else the translation unit's own.
#define MEMSAFE_GP_ROWS(on, call) ((on) ? avx2::call : call)
#else
#define MEMSAFE_GP_ROWS(on, call) call
#endif

namespace memsafe::detail::gp {

/// σ_f²·K(rows [r0, r1) of Z, the nc points Xc) into out (row i at out + (i − r0)·ld); with b,
/// b[i] += Σ_j K_ij·yc[j]. Blocks of S points through `scratch` (row_scratch(d, S) doubles, the
/// thread's); `avx2`: the AVX2 copy of the kernel (host::tile_avx2()).
template <memsafe::gp::kernel K>
void kuf_block([[maybe_unused]] bool avx2, const double* Z, std::size_t r0, std::size_t r1, const double* Xc, const double* yc,
               std::size_t nc, std::size_t d, const double* il2, double s2, double* out, std::size_t ld, double* b,
               double* scratch, std::size_t S) {
  for (std::size_t j0 = 0; j0 < nc; j0 += S) {
    const col_block cb = load_block(Xc + j0 * d, b ? yc + j0 : nullptr, std::min(S, nc - j0), d, scratch);
    MEMSAFE_GP_ROWS(avx2, kuf_rows<K>(Z, r0, r1, cb, il2, s2, out + j0, ld, b));
  }
}

/// The backward contraction (contract_rows) of rows [r0, r1) of Z against the nc points Xc with
/// targets yc (or none, then g1 is ignored), Wm's row i at Wm + (i − r0)·ld; block by block as kuf_block.
template <memsafe::gp::kernel K>
void contract_block([[maybe_unused]] bool avx2, const double* Z, std::size_t r0, std::size_t r1, const double* Xc, const double* yc,
                    std::size_t nc, std::size_t d, const double* il2, double s2, const double* Wm, std::size_t ld,
                    const double* g1, double zf, double* gZ, double* lsum, double* vsum, double* scratch,
                    std::size_t S) {
  double* lanes = scratch + (d + 1) * S;
  for (std::size_t j0 = 0; j0 < nc; j0 += S) {
    const col_block cb = load_block(Xc + j0 * d, yc ? yc + j0 : nullptr, std::min(S, nc - j0), d, scratch);
    MEMSAFE_GP_ROWS(avx2, contract_rows<K>(Z, r0, r1, cb, il2, s2, Wm + j0, ld, yc ? g1 : nullptr, zf, gZ, lsum,
                                           vsum, lanes, lanes + d * gp_lanes, lanes + 2 * d * gp_lanes));
  }
}

/// Largest chunk of columns (≤ n) whose `per_column` bytes, plus `fixed`, fit the budget.
inline std::size_t chunk_columns(std::size_t budget, std::size_t fixed, std::size_t per_column, std::size_t n) {
  if (budget < fixed + per_column) return 0;
  return std::max<std::size_t>(1, std::min(n, (budget - fixed) / per_column));
}

/// dsygst (itype 1) on column-major A (n×n, leading dimension lda) with the triangular factor B
/// (ldb): uplo 'L': A ← B⁻¹·A·B⁻ᵀ, 'U': A ← B⁻ᵀ·A·B⁻¹, in the `uplo` triangle of A; **the other
/// triangle is overwritten** (workspace). Recursive, after ReLAPACK: the leading half is
/// transformed; then, with S = ½·B21·A11 ('U': ½·A11·B12), A21 ← A21·B11⁻ᵀ − S,
/// A22 ← A22 − A21·B21ᵀ − B21·A21ᵀ, A21 ← B22⁻¹·(A21 − S) ('U': the same on A12 = A21ᵀ); the
/// trailing half is transformed in turn; dsygst itself below `base`. S is one GEMM, its transpose
/// written into the free triangle (ReLAPACK and dsygst compute it twice as SYMMs: 4/3·n³ flops
/// when halving, against n³ here). OpenBLAS's dsygst is reference LAPACK's loop over panels of 64:
/// at n = 6000 on a 2-core Zen 4 it runs at 61 GFLOP/s for uplo 'U' (80 for 'L'), this at 93
/// (docs/design.md). Returns dsygst's info (non-zero only for an illegal argument).
inline int sygst_recursive(char uplo, int n, double* A, int lda, const double* B, int ldb, int base = 256) {
  int info = 0;
  if (n <= base) {
    const int itype = 1;
    dsygst_(&itype, &uplo, &n, A, &lda, B, &ldb, &info, 1);
    return info;
  }
  const int n1 = n / 2, n2 = n - n1;
  const double one = 1, mone = -1, half = 0.5, zero = 0;
  const char L = 'L', R = 'R', U = 'U', N = 'N', T = 'T';
  const std::size_t la = static_cast<std::size_t>(lda), lb = static_cast<std::size_t>(ldb);
  const std::size_t u1 = static_cast<std::size_t>(n1), u2 = static_cast<std::size_t>(n2);
  double* A22 = A + u1 + u1 * la;
  const double* B22 = B + u1 + u1 * lb;
  double* A21 = A + u1;       // n2×n1
  double* A12 = A + u1 * la;  // n1×n2
  if ((info = sygst_recursive(uplo, n1, A, lda, B, ldb, base)) != 0) return info;
  // A11 whole (its other triangle is free), for the GEMM.
  const matrix_view<double> cm(A, u1, u1, 1, la);  // A11 as stored (column-major)
  if (uplo == 'L') {
    memsafe::linalg::detail::mirror_lower(cm);
    const double* B21 = B + u1;
    dtrsm_(&R, &L, &T, &N, &n2, &n1, &one, B, &ldb, A21, &lda, 1, 1, 1, 1);
    dgemm_(&N, &T, &n1, &n2, &n1, &half, A, &lda, B21, &ldb, &zero, A12, &lda, 1, 1);  // Sᵀ into A12
    memsafe::linalg::detail::subtract_transposed(A21, A12, u2, u1, la);
    dsyr2k_(&L, &N, &n2, &n1, &mone, A21, &lda, B21, &ldb, &one, A22, &lda, 1, 1);
    memsafe::linalg::detail::subtract_transposed(A21, A12, u2, u1, la);
    dtrsm_(&L, &L, &N, &N, &n2, &n1, &one, B22, &ldb, A21, &lda, 1, 1, 1, 1);
  } else {
    memsafe::linalg::detail::mirror_lower(cm.t());
    const double* B12 = B + u1 * lb;
    dtrsm_(&L, &U, &T, &N, &n1, &n2, &one, B, &ldb, A12, &lda, 1, 1, 1, 1);
    dgemm_(&T, &N, &n2, &n1, &n1, &half, B12, &ldb, A, &lda, &zero, A21, &lda, 1, 1);  // Sᵀ into A21
    memsafe::linalg::detail::subtract_transposed(A12, A21, u1, u2, la);
    dsyr2k_(&U, &T, &n2, &n1, &mone, A12, &lda, B12, &ldb, &one, A22, &lda, 1, 1);
    memsafe::linalg::detail::subtract_transposed(A12, A21, u1, u2, la);
    dtrsm_(&R, &U, &N, &N, &n1, &n2, &one, B22, &ldb, A12, &lda, 1, 1, 1, 1);
  }
  return sygst_recursive(uplo, n2, A22, lda, B22, ldb, base);
}

/// sygst_recursive on symmetric X (m×m) with the triangular factor stored in L, `uplo` in
/// column-major terms: the triangle of X read and written (the other one overwritten), and L's.
/// Returns dsygst's info.
inline int sygst(char uplo, const std::vector<double>& L, std::vector<double>& X, std::size_t m) {
  const int N = memsafe::linalg::detail::to_int(m, "gp::sgpr", "m");
  return sygst_recursive(uplo, N, X.data(), N, L.data(), N);
}
inline void require_sygst(int info) {
  if (info != 0) throw memsafe::error(cat(msg{"memsafe::gp::sgpr: dsygst failed (info ", info, ")"}));
}

/// X ← L⁻¹·X·L⁻ᵀ for symmetric X (row-major, m×m; its lower triangle read and written, the upper
/// overwritten), L lower-triangular row-major: one sygst, half the flops of two triangular
/// solves with m right-hand sides. Row-major L is column-major U = Lᵀ and X's row-major lower triangle
/// its column-major upper one, so the call is uplo 'U': inv(Uᵀ)·X·inv(U) = L⁻¹·X·L⁻ᵀ.
inline void whiten_symmetric(const std::vector<double>& L, std::vector<double>& X, std::size_t m) {
  require_sygst(sygst('U', L, X, m));
}

/// X ← L⁻ᵀ·X·L⁻¹ for symmetric X (row-major m×m), L lower-triangular row-major: one sygst after
/// reversing the index order. With J the reversal, L⁻ᵀ·X·L⁻¹ = J·[L̃⁻¹·(JXJ)·L̃⁻ᵀ]·J for the
/// lower-triangular L̃ = J·Lᵀ·J. In row-major storage JXJ is X's array reversed, and L's array
/// reversed is J·L·J (upper), whose column-major reading is L̃: so X and L are reversed in place,
/// sygst (uplo 'L') works on X's row-major upper triangle, and both arrays are reversed back (L
/// exactly as it was; X's result then in its lower triangle, mirrored: exactly symmetric).
inline void sandwich(std::vector<double>& L, std::vector<double>& X, std::size_t m) {
  memsafe::detail::reverse_range(X.begin(), X.end());
  memsafe::detail::reverse_range(L.begin(), L.end());
  const int info = sygst('L', L, X, m);
  memsafe::detail::reverse_range(L.begin(), L.end());  // restored before any error is raised
  memsafe::detail::reverse_range(X.begin(), X.end());
  require_sygst(info);
  memsafe::linalg::detail::mirror_lower(memsafe::matrix(X.data(), m, m));
}

/// Ψ += Kc·Kcᵀ (Kc: m×nc row-major), updating Ψ's lower triangle (row-major) only.
inline void syrk_lower(const double* Kc, std::size_t m, std::size_t nc, double* Psi) {
  // Kc's memory read column-major is Kcᵀ (nc×m, ld nc): Ψ = (Kcᵀ)ᵀ(Kcᵀ), TRANS = 'T'. Ψ's row-major
  // lower triangle is its column-major upper one.
  const int N = memsafe::linalg::detail::to_int(m, "gp::sgpr", "m");
  const int Kk = memsafe::linalg::detail::to_int(nc, "gp::sgpr", "chunk");
  const double one = 1.0;
  const char uplo = 'U', trans = 'T';
  dsyrk_(&uplo, &trans, &N, &Kk, &one, Kc, &Kk, &one, Psi, &N, 1, 1);
}

/// Bytes of the small temporaries: 1/ℓ² (d), and per thread its partial sums (d + 1: the
/// lengthscales' and the variance's) and the row kernels' scratch for blocks of `block` points
/// (row_scratch).
inline std::size_t small_bytes(std::size_t d, std::size_t threads, std::size_t block = gp_lanes) {
  return (d + threads * (d + 1 + row_scratch(d, block))) * sizeof(double);
}

/// The budget_error of a call whose budget cannot hold its smallest plan (`what` names that plan).
[[noreturn]] inline void too_small(const std::string& fn, std::size_t budget, std::size_t minimum, std::size_t m,
                                   bool gradient, const std::string& what) {
  throw budget_error(cat(msg{fn, ": a budget of ", format_bytes(budget), " is too small for m = ", m,
                             gradient ? " with the gradient" : "", ": ", what, " needs ", format_bytes(minimum),
                             " of temporaries; use a budget of at least ", minimum, " bytes"}),
                     budget, minimum);
}

// ---- the phases of one call ---------------------------------------------------------------------
// gp::sgpr composes them on the whole data set with no communication:
//   factor_kuu → accumulate → finish → [gradient] backward_setup → contract_kuu → contract_kuf → finalise_gradient
// mpi::sgpr (mpi/sgpr.hpp) composes the same phases on a rank's shard of the training points, with
// one allreduce of the forward_sums after accumulate and one of the gradient_sums after contract_kuf;
// the m×m phases (factor_kuu, finish, backward_setup) run identically on every rank. accumulate and
// contract_kuf are the n-sized work; they see only the points they are given.

/// One call's decisions and its small temporaries, shared by its phases. Every temporary of the
/// call comes from `acc`, limited by the budget.
struct sgpr_call {
  std::size_t m, d, budget, threads;
  bool gradient, whitened;
  bool choose_order;          ///< whitened is decided by factor_kuu (sgpr_options::whitened unset)
  double kuu_condition = 0;   ///< κ₁(Kuu + jitter·I), estimated by factor_kuu
  memsafe::detail::accountant acc;
  memsafe::detail::temp_buffer<double> small;  ///< 1/ℓ² (d), per-thread partial sums (d + 1 each), scratch
  double* il2 = nullptr;
  double* partial = nullptr;
  double* scratch = nullptr;  ///< per thread row_scratch(d, block) doubles (thread_scratch)
  std::size_t block = gp_lanes;  ///< points of the row kernels' blocks
  std::size_t fixed = 0;      ///< bytes of `small`, held for the whole call
  bool avx2 = (memsafe::host::check_isa(), memsafe::host::tile_avx2());  ///< the row kernels' AVX2 copy (MEMSAFE_ISA checked)

  /// The thread count is lowered until the partial sums and the smallest blocks leave room for
  /// `column_bytes`; the blocks are block_columns(d) points where that leaves room for as many
  /// columns of `column_bytes`, else gp_lanes.
  sgpr_call(std::size_t m_, std::size_t d_, const hyperparameters& h, const memsafe::gp::sgpr_options& o,
            std::size_t budget_, std::size_t column_bytes)
      : m(m_), d(d_), budget(budget_), threads(memsafe::plan::resolve_threads(o.threads)), gradient(o.gradient),
        whitened(o.whitened.value_or(false)), choose_order(!o.whitened.has_value()), acc(budget_) {
    while (threads > 1 && small_bytes(d, threads) + column_bytes > budget) --threads;
    const std::size_t big = block_columns(d);
    if (small_bytes(d, threads, big) + big * column_bytes <= budget) block = big;
    small = memsafe::detail::temp_buffer<double>(acc, small_bytes(d, threads, block) / sizeof(double));
    il2 = small.data();
    partial = small.data() + d;
    scratch = partial + threads * (d + 1);
    fixed = small.size() * sizeof(double);
    for (std::size_t k = 0; k < d; ++k) il2[k] = 1.0 / (h.lengthscales[k] * h.lengthscales[k]);
  }
  void clear_partials() { std::fill(partial, partial + threads * (d + 1), 0.0); }
  /// Thread t's partial sums: Σ q·u_k² per dimension (d), then Σ w·φ (∂F/∂σ_f²).
  double* partials(std::size_t t) const { return partial + t * (d + 1); }
  double* thread_scratch(std::size_t t) const { return scratch + t * row_scratch(d, block); }
};

/// Kuu + jitter·I and its Cholesky factor L into P, with the kernel, its parameters and a copy of Z
/// (m×m output; O(m²d + m³)), and κ₁(Kuu + jitter·I) estimated into c (one m-vector of temporaries,
/// O(m²)), which decides the order of the sums when the options leave it open. argument_error when
/// Kuu + jitter·I is not positive definite.
inline void factor_kuu(sgpr_call& c, const inducing_view& I, const hyperparameters& h,
                       memsafe::gp::sgpr_posterior& P, const std::string& fn) {
  const std::size_t m = c.m, d = c.d;
  P.kind = h.kind;
  P.variance = h.variance;
  P.lengthscales = h.lengthscales;
  P.m = m;
  P.d = d;
  P.Z.assign(I.Z, I.Z + m * d);
  const double* Z = P.Z.data();
  P.L.assign(m * m, 0.0);
  with_kernel(h.kind, [&](auto kc) {
    parallel_rows(c.threads, m, [&](std::size_t r0, std::size_t r1, std::size_t t) {
      kuf_block<decltype(kc)::value>(c.avx2, Z, r0, r1, Z, nullptr, m, d, c.il2, h.variance, P.L.data() + r0 * m, m,
                                     nullptr, c.thread_scratch(t), c.block);
    });
  });
  for (std::size_t i = 0; i < m; ++i) P.L[i * m + i] += h.jitter;
  double norm1 = 0;  // ‖Kuu + jitter·I‖₁: the largest column (= row) sum of the symmetric matrix
  for (std::size_t i = 0; i < m; ++i) {
    double r = 0;
    for (std::size_t j = 0; j < m; ++j) r += libm::fabs(P.L[i * m + j]);
    norm1 = std::max(norm1, r);
  }
  try {
    memsafe::linalg::cholesky(memsafe::matrix(P.L.data(), m, m));
  } catch (const argument_error& e) {
    throw argument_error(cat(msg{fn,
                                 ": Kuu + jitter·I is not positive definite (duplicate or very close inducing points? "
                                 "raise the jitter): ",
                                 e.what()}));
  }
  {
    memsafe::detail::temp_buffer<double> work(c.acc, m);
    c.kuu_condition = norm1 * memsafe::linalg::inverse_norm1_estimate(
                                  memsafe::matrix(static_cast<const double*>(P.L.data()), m, m),
                                  memsafe::vec(work.data(), m));
  }
  if (c.choose_order)
    c.whitened = std::numeric_limits<double>::epsilon() * c.kuu_condition * (h.variance / h.noise) >
                 memsafe::gp::gram_first_limit;
}

/// The forward pass's n-sized sums over a set of training points (the whole data set, or a rank's
/// shard: sums over shards add up to the whole data's).
struct forward_sums {
  std::vector<double> B;  ///< m×m, lower triangle (row-major): Ψ₂ = Σ Kuf_c·Kuf_cᵀ, or σ²AAᵀ = Σ A_c·A_cᵀ whitened
  std::vector<double> b;  ///< Kuf·y (m)
  double yty = 0;         ///< yᵀy
  double n = 0;           ///< the number of points (a double: it is summed with the rest)
};

/// Ψ₂ (or σ²AAᵀ whitened) and b = Kuf·y over chunks of columns of Kuf, and yᵀy. D may be empty.
inline forward_sums accumulate(sgpr_call& c, const data_view& D, const hyperparameters& h,
                               const memsafe::gp::sgpr_posterior& P, memsafe::gp::sgpr_stats& st) {
  namespace la = memsafe::linalg;
  const std::size_t n = D.n, m = c.m, d = c.d;
  forward_sums S;
  S.B.assign(m * m, 0.0);
  S.b.assign(m, 0.0);
  S.n = static_cast<double>(n);
  st.chunk_columns = 0;
  if (n > 0) {
    const std::size_t ncf = chunk_columns(c.budget, c.fixed, m * sizeof(double), n);
    st.chunk_columns = ncf;
    auto Lv = memsafe::matrix(static_cast<const double*>(P.L.data()), m, m);
    const double* Z = P.Z.data();
    memsafe::detail::temp_buffer<double> Kc(c.acc, m * ncf);
    for (std::size_t j0 = 0; j0 < n; j0 += ncf) {
      const std::size_t nc = std::min(ncf, n - j0);
      const double* Xc = D.X + j0 * d;
      with_kernel(h.kind, [&](auto kc) {
        parallel_rows(c.threads, m, [&](std::size_t r0, std::size_t r1, std::size_t t) {
          kuf_block<decltype(kc)::value>(c.avx2, Z, r0, r1, Xc, D.y + j0, nc, d, c.il2, h.variance,
                                         Kc.data() + r0 * nc, nc, S.b.data(), c.thread_scratch(t), c.block);
        });
      });
      if (c.whitened) la::solve_lower(Lv, memsafe::matrix(Kc.data(), m, nc));
      syrk_lower(Kc.data(), m, nc, S.B.data());
    }
  }
  for (std::size_t j = 0; j < n; ++j) S.yty += D.y[j] * D.y[j];
  return S;
}

/// What the backward pass needs from the forward pass.
struct forward_state {
  std::vector<double> Bfull;  ///< B = I + AAᵀ (kept only with the gradient)
  std::vector<double> b;      ///< Kuf·y
  double trace_aat = 0, yty = 0, trace_kff = 0, n = 0;
};

/// The forward pass's m×m algebra on the whole data's sums: the bound and its pieces, LB and w into R.
inline forward_state finish(const sgpr_call& c, const hyperparameters& h, forward_sums&& S,
                            memsafe::gp::sgpr_result& R, const char* fn = "memsafe::gp::sgpr") {
  namespace la = memsafe::linalg;
  const std::size_t m = c.m;
  const double s2 = h.variance, sig2 = h.noise;
  auto& P = R.posterior;
  auto Lv = memsafe::matrix(static_cast<const double*>(P.L.data()), m, m);
  std::vector<double>& B = S.B;  // Ψ₂ (its lower triangle) → AAᵀ → B → LB
  auto Bv = memsafe::matrix(B.data(), m, m);
  if (!c.whitened) whiten_symmetric(P.L, B, m);  // AAᵀσ² = L⁻¹Ψ₂L⁻ᵀ, in the lower triangle
  forward_state F;
  double trace_aat = 0;
  for (std::size_t i = 0; i < m; ++i) {  // the lower triangle, then mirrored: B exactly symmetric
    for (std::size_t j = 0; j <= i; ++j) B[i * m + j] /= sig2;
    trace_aat += B[i * m + i];
    B[i * m + i] += 1.0;
  }
  memsafe::linalg::detail::mirror_lower(Bv);
  if (c.gradient) F.Bfull = B;
  try {
    la::cholesky(Bv);  // LB (B = I + AAᵀ: eigenvalues ≥ 1 in exact arithmetic)
  } catch (const argument_error& e) {
    throw argument_error(cat(msg{
        fn, ": B = I + AAᵀ (A = L⁻¹Kuf/σ) lost its positive definiteness to rounding (κ₁(Kuu + jitter·I) ≈ ",
        c.kuu_condition, ", σ_f² = ", h.variance, ", σ² = ", h.noise, ", ",
        c.whitened ? "whitened order): the kernel variance is extreme against the noise; raise the jitter"
                   : "Gram-first order): use the whitened order (sgpr_options::whitened = true or unset) or raise "
                     "the jitter",
        " (", e.what(), ")"}));
  }
  P.LB = std::move(B);
  auto LBv = memsafe::matrix(static_cast<const double*>(P.LB.data()), m, m);
  std::vector<double> cv = S.b;
  la::solve_lower(Lv, memsafe::vec(cv.data(), m));
  for (auto& v : cv) v /= sig2;
  la::solve_lower(LBv, memsafe::vec(cv.data(), m));
  double ctc = 0, sld = 0;
  const double yty = S.yty;
  for (std::size_t i = 0; i < m; ++i) ctc += cv[i] * cv[i];
  for (std::size_t i = 0; i < m; ++i) sld += libm::log(P.LB[i * m + i]);
  const double nd = S.n;
  const double trace_kff = nd * s2;
  constexpr double log_two_pi = 1.8378770664093454835606594728112;
  R.bound = -0.5 * nd * log_two_pi - sld - 0.5 * nd * libm::log(sig2) - 0.5 * yty / sig2 + 0.5 * ctc -
            0.5 * trace_kff / sig2 + 0.5 * trace_aat;
  R.sum_log_diag_LB = sld;
  R.ctc = ctc;
  R.trace_aat = trace_aat;
  R.yty = yty;
  R.trace_kff = trace_kff;
  P.w = std::move(cv);
  la::solve_lower(LBv, memsafe::vec(P.w.data(), m), true);
  la::solve_lower(Lv, memsafe::vec(P.w.data(), m), true);
  F.b = std::move(S.b);
  F.trace_aat = trace_aat;
  F.yty = yty;
  F.trace_kff = trace_kff;
  F.n = nd;
  return F;
}

/// Ḡ₂ = ∂F/∂Ψ₂, ḡ₁ = ∂F/∂b and Ḡuu = ∂F/∂Kuu.
struct backward_state {
  std::vector<double> G2, g1, Guu;
};

/// The backward pass's m×m algebra (no n-sized work): Ḡ₂, ḡ₁, Ḡuu, and ∂F/∂σ² into R.grad.noise.
/// Consumes F.Bfull.
inline backward_state backward_setup(const sgpr_call& c, const hyperparameters& h, forward_state& F,
                                     memsafe::gp::sgpr_result& R) {
  namespace la = memsafe::linalg;
  const std::size_t m = c.m;
  const double sig2 = h.noise;
  const auto& P = R.posterior;
  const std::vector<double>& w = P.w;
  backward_state Bk;
  std::vector<double>& G2 = Bk.G2;  // LB → B⁻¹ → Ḡ₂
  G2 = P.LB;
  la::cholesky_inverse(memsafe::matrix(G2.data(), m, m));
  double tr_bi = 0;
  for (std::size_t i = 0; i < m; ++i) tr_bi += G2[i * m + i];
  std::vector<double>& Guu = Bk.Guu;  // B → Ḡuu
  Guu = std::move(F.Bfull);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      const double id = i == j ? 1.0 : 0.0;
      Guu[i * m + j] = id - 0.5 * G2[i * m + j] - 0.5 * Guu[i * m + j];
      G2[i * m + j] = (id - G2[i * m + j]) / (2.0 * sig2);
    }
  sandwich(R.posterior.L, Guu, m);  // L reversed and restored inside
  sandwich(R.posterior.L, G2, m);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      Guu[i * m + j] -= 0.5 * w[i] * w[j];
      G2[i * m + j] -= w[i] * w[j] / (2.0 * sig2);
    }
  Bk.g1.resize(m);
  for (std::size_t i = 0; i < m; ++i) Bk.g1[i] = w[i] / sig2;

  // ∂F/∂σ²: no n-sized work.
  double ltw2 = 0, wtb = 0;
  std::vector<double> ltw(m, 0.0);  // (Lᵀw)_i = Σ_{j ≥ i} L_ji w_j, summed along L's rows
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t i = 0; i <= j; ++i) ltw[i] += P.L[j * m + i] * w[j];
  for (std::size_t i = 0; i < m; ++i) {
    ltw2 += ltw[i] * ltw[i];
    wtb += w[i] * F.b[i];
  }
  R.grad.noise = (static_cast<double>(m) - tr_bi - F.trace_aat - F.n - ltw2) / (2.0 * sig2) +
                 (F.yty - wtb + F.trace_kff) / (2.0 * sig2 * sig2);
  return Bk;
}

/// The gradient's sums before the last scaling: what the contractions add to (sums over shards,
/// and over a split of Kuu's rows, add up to the whole call's).
struct gradient_sums {
  double variance = 0;    ///< ∂F/∂σ_f²
  std::vector<double> l;  ///< Σ q·u_k² per dimension (∂F/∂ℓ_k = −2·l_k/ℓ_k³)
  std::vector<double> Z;  ///< ∂F/∂Z (m×d, row-major)
  gradient_sums(std::size_t m, std::size_t d, double variance0) : variance(variance0), l(d, 0.0), Z(m * d, 0.0) {}
  /// Adds the call's per-thread partial sums.
  void add_partials(const sgpr_call& c) {
    for (std::size_t t = 0; t < c.threads; ++t) {
      const double* p = c.partials(t);
      for (std::size_t k = 0; k < c.d; ++k) l[k] += p[k];
      variance += p[c.d];
    }
  }
};

/// Σ Ḡuu ⊙ ∂Kuu/∂(σ_f², ℓ, Z) over Kuu's rows [i0, i1), O((i1 − i0)·m·d), no temporary but the
/// threads' scratch. Kuu depends on Z through both arguments: each row's Z gradient counts twice
/// (Ḡuu is symmetric), −4/ℓ² Σ_j q_ij (z_j − z_i); φ(0) = 1 on the diagonal, where u = 0.
inline void contract_kuu(sgpr_call& c, const hyperparameters& h, const double* Z, const std::vector<double>& Guu,
                         std::size_t i0, std::size_t i1, gradient_sums& g) {
  const std::size_t m = c.m, d = c.d;
  c.clear_partials();
  with_kernel(h.kind, [&](auto kc) {
    parallel_rows(c.threads, i1 - i0, [&](std::size_t r0, std::size_t r1, std::size_t t) {
      double* p = c.partials(t);
      contract_block<decltype(kc)::value>(c.avx2, Z, i0 + r0, i0 + r1, Z, nullptr, m, d, c.il2, h.variance,
                                          Guu.data() + (i0 + r0) * m, m, nullptr, -4.0, g.Z.data(), p, p + d,
                                          c.thread_scratch(t), c.block);
    });
  });
  g.add_partials(c);
}

/// The backward pass's n-sized work over a set of training points (D may be empty): per chunk
/// W_c = 2·Ḡ₂·Kuf_c + ḡ₁·y_cᵀ (GEMM, then the row kernel), contracted with ∂Kuf/∂(σ_f², ℓ, Z).
inline void contract_kuf(sgpr_call& c, const data_view& D, const hyperparameters& h, const double* Z,
                         const backward_state& Bk, gradient_sums& g, memsafe::gp::sgpr_stats& st) {
  namespace la = memsafe::linalg;
  const std::size_t n = D.n, m = c.m, d = c.d;
  const double s2 = h.variance;
  const double* il2 = c.il2;
  st.chunk_columns_backward = 0;
  if (n == 0) return;
  const std::size_t ncb = chunk_columns(c.budget, c.fixed, 2 * m * sizeof(double), n);
  st.chunk_columns_backward = ncb;
  memsafe::detail::temp_buffer<double> Kc(c.acc, m * ncb);
  memsafe::detail::temp_buffer<double> Wc(c.acc, m * ncb);
  auto G2v = memsafe::matrix(static_cast<const double*>(Bk.G2.data()), m, m);
  for (std::size_t j0 = 0; j0 < n; j0 += ncb) {
    const std::size_t nc = std::min(ncb, n - j0);
    const double* Xc = D.X + j0 * d;
    const double* yc = D.y + j0;
    with_kernel(h.kind, [&](auto kc) {
      parallel_rows(c.threads, m, [&](std::size_t r0, std::size_t r1, std::size_t t) {
        kuf_block<decltype(kc)::value>(c.avx2, Z, r0, r1, Xc, nullptr, nc, d, il2, s2, Kc.data() + r0 * nc, nc,
                                       nullptr, c.thread_scratch(t), c.block);
      });
    });
    la::gemm(2.0, G2v, false, memsafe::matrix(static_cast<const double*>(Kc.data()), m, nc), false, 0.0,
             memsafe::matrix(Wc.data(), m, nc));
    c.clear_partials();
    with_kernel(h.kind, [&](auto kc) {
      parallel_rows(c.threads, m, [&](std::size_t r0, std::size_t r1, std::size_t t) {
        double* p = c.partials(t);
        contract_block<decltype(kc)::value>(c.avx2, Z, r0, r1, Xc, yc, nc, d, il2, s2, Wc.data() + r0 * nc, nc,
                                            Bk.g1.data(), -2.0, g.Z.data(), p, p + d, c.thread_scratch(t), c.block);
      });
    });
    g.add_partials(c);
  }
}

/// The gradient from the whole call's sums, into R.grad (R.grad.noise is backward_setup's).
inline void finalise_gradient(const hyperparameters& h, gradient_sums&& g, memsafe::gp::sgpr_result& R) {
  auto& G = R.grad;
  G.variance = g.variance;
  G.lengthscales.assign(g.l.size(), 0.0);
  for (std::size_t k = 0; k < g.l.size(); ++k) {
    const double l = h.lengthscales[k];
    G.lengthscales[k] = -2.0 * (g.l[k] / l) / (l * l);  // not / ℓ³: it underflows for ℓ ≲ 1e-103
  }
  G.Z = std::move(g.Z);
}

}  // namespace memsafe::detail::gp

namespace memsafe::gp {

/// Bytes of temporaries the smallest plan needs (one column per chunk, one thread).
inline std::size_t sgpr_minimum_bytes(std::size_t m, std::size_t d, bool gradient) {
  return detail::gp::small_bytes(d, 1) + (gradient ? 2 : 1) * m * sizeof(double);
}

/// The SGPR collapsed bound at (hyperparameters h, inducing points Z) on data D; with
/// opts.gradient its gradient. Throws shape_error / argument_error on bad inputs, budget_error
/// (with the minimum) when the budget cannot hold one column of Kuf (two with the gradient), and
/// argument_error when Kuu + jitter·I is not positive definite — all before the n-sized work.
/// (mpi::sgpr, <memsafe/mpi_gp.hpp>, is the same call over the ranks of a communicator.)
inline sgpr_result sgpr(const data_view& D, const inducing_view& I, const hyperparameters& h,
                        const sgpr_options& opts = {}) {
  namespace dg = memsafe::detail::gp;
  dg::validate(D, I, h, "sgpr");
  const std::size_t m = I.m, d = D.d;
  const std::size_t budget = memsafe::detail::resolve_budget(opts.budget);

  sgpr_result R;
  R.has_gradient = opts.gradient;
  R.stats.budget_bytes = budget;
  R.stats.minimum_bytes = sgpr_minimum_bytes(m, d, opts.gradient);
  if (budget < R.stats.minimum_bytes)
    dg::too_small("memsafe::gp::sgpr", budget, R.stats.minimum_bytes, m, opts.gradient, "one column of Kuf");
  dg::sgpr_call c(m, d, h, opts, budget, (opts.gradient ? 2 : 1) * m * sizeof(double));
  R.stats.threads = c.threads;
  R.stats.avx2_rows = c.avx2;

  double t0 = memsafe::detail::monotonic_seconds();
  dg::factor_kuu(c, I, h, R.posterior, "memsafe::gp::sgpr");
  R.stats.whitened = c.whitened;
  R.stats.kuu_condition = c.kuu_condition;
  dg::forward_state F = dg::finish(c, h, dg::accumulate(c, D, h, R.posterior, R.stats), R);
  R.stats.seconds_forward = memsafe::detail::monotonic_seconds() - t0;
  if (!opts.gradient) {
    R.stats.peak_temp_bytes = c.acc.peak();
    return R;
  }

  t0 = memsafe::detail::monotonic_seconds();
  const dg::backward_state Bk = dg::backward_setup(c, h, F, R);
  dg::gradient_sums g(m, d, -F.n / (2.0 * h.noise));
  dg::contract_kuu(c, h, R.posterior.Z.data(), Bk.Guu, 0, m, g);
  dg::contract_kuf(c, D, h, R.posterior.Z.data(), Bk, g, R.stats);
  dg::finalise_gradient(h, std::move(g), R);
  R.stats.seconds_backward = memsafe::detail::monotonic_seconds() - t0;
  R.stats.peak_temp_bytes = c.acc.peak();
  return R;
}

/// Statistics of one prediction call.
struct predict_stats {
  std::size_t budget_bytes = 0, peak_temp_bytes = 0, chunk_points = 0;
};

/// Predictive mean and latent variance (GPflow's SGPR.predict_f, full_cov = False) at ns test points
/// Xs (row-major ns×d): mean = K*u·w, var = k** − ‖L⁻¹ku*‖² + ‖LB⁻¹L⁻¹ku*‖². Each chunk of test
/// points forms ku* (m × nc) once, inside the budget. Add the noise variance for the predictive
/// variance of y.
inline predict_stats predict(const sgpr_posterior& P, const double* Xs, std::size_t ns, double* mean, double* var,
                             std::optional<std::size_t> budget_opt = std::nullopt, unsigned threads_opt = 0) {
  namespace la = memsafe::linalg;
  namespace dg = memsafe::detail::gp;
  predict_stats st;
  st.budget_bytes = memsafe::detail::resolve_budget(budget_opt);
  if (ns == 0) return st;
  if (!Xs || !mean || !var) throw argument_error("memsafe::gp::predict: null pointer (Xs, mean or var)");
  const std::size_t m = P.m, d = P.d;
  {  // the outputs are written chunk by chunk while later chunks of Xs are still to be read
    using memsafe::detail::contiguous_block;
    const std::size_t xs_count = memsafe::detail::checked_mul(ns, d, "memsafe::gp::predict: Xs");
    const memsafe::detail::named_block outs[2] = {{"mean", contiguous_block(mean, ns)},
                                                  {"var", contiguous_block(var, ns)}};
    const memsafe::detail::named_block ins[1] = {{"Xs", contiguous_block(Xs, xs_count)}};
    memsafe::detail::check_apart(outs, ins, "predict", "memsafe::gp::");
  }
  if (m == 0 || d == 0 || P.L.size() != m * m || P.LB.size() != m * m || P.w.size() != m || P.Z.size() != m * d ||
      P.lengthscales.size() != d)
    throw argument_error(memsafe::detail::cat(memsafe::detail::msg{
        "memsafe::gp::predict: the posterior is empty or inconsistent: m = ", m, ", d = ", d,
        " needs Z of m·d, L and LB of m·m, w of m and d lengthscales; has ", P.Z.size(), ", ", P.L.size(), ", ",
        P.LB.size(), ", ", P.w.size(), " and ", P.lengthscales.size(), " (fit with gp::sgpr first)"}));
  memsafe::detail::gp::validate_inducing({P.Z.data(), m, d}, P.variance, P.lengthscales,
                                         "memsafe::gp::predict: the posterior's ");
  const std::size_t threads = memsafe::plan::resolve_threads(threads_opt);
  const std::size_t fixed = (d + 2) * sizeof(double);
  const std::size_t minimum = fixed + m * sizeof(double);
  if (st.budget_bytes < minimum)
    throw budget_error(memsafe::detail::cat(memsafe::detail::msg{
                           "memsafe::gp::predict: a budget of ", format_bytes(st.budget_bytes), " is too small for m = ",
                           m, ": one test point needs ", format_bytes(minimum), "; use a budget of at least ", minimum,
                           " bytes"}),
                       st.budget_bytes, minimum);
  memsafe::detail::accountant acc(st.budget_bytes);
  memsafe::detail::temp_buffer<double> small(acc, d);
  for (std::size_t k = 0; k < d; ++k) small[k] = 1.0 / (P.lengthscales[k] * P.lengthscales[k]);
  const std::size_t nc0 = std::max<std::size_t>(1, std::min(ns, (st.budget_bytes - fixed) / (m * sizeof(double))));
  st.chunk_points = nc0;
  memsafe::detail::temp_buffer<double> Kc(acc, m * nc0);
  auto Lv = memsafe::matrix(P.L.data(), m, m);
  auto LBv = memsafe::matrix(P.LB.data(), m, m);
  for (std::size_t j0 = 0; j0 < ns; j0 += nc0) {
    const std::size_t nc = std::min(nc0, ns - j0);
    dg::with_kernel(P.kind, [&](auto kc) {
      dg::parallel_rows(threads, m, [&](std::size_t r0, std::size_t r1, std::size_t) {
        dg::kernel_block<decltype(kc)::value>(P.Z.data(), r0, r1, Xs + j0 * d, nc, d, small.data(), P.variance,
                                              Kc.data() + r0 * nc, nc, nullptr, nullptr);
      });
    });
    auto K = memsafe::matrix(Kc.data(), m, nc);
    for (std::size_t j = 0; j < nc; ++j) {
      mean[j0 + j] = 0;
      var[j0 + j] = P.variance;
    }
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < nc; ++j) mean[j0 + j] += Kc[i * nc + j] * P.w[i];
    la::solve_lower(Lv, K);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < nc; ++j) var[j0 + j] -= Kc[i * nc + j] * Kc[i * nc + j];
    la::solve_lower(LBv, K);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < nc; ++j) var[j0 + j] += Kc[i * nc + j] * Kc[i * nc + j];
  }
  st.peak_temp_bytes = acc.peak();
  return st;
}

}  // namespace memsafe::gp
