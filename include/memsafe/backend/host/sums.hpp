// memsafe/backend/host/sums.hpp — the interface of the fused kernel-sum micro-kernels
// (sum_kernel.inc, compiled per instruction set in simd.hpp; driven by sum_driver.hpp).
//
// A kernel folds a block of query rows against the packed panels of one column tile straight into
// the reduction's state: the formula is evaluated in registers and never stored.
#pragma once
#include <cstddef>

#include "monoids.hpp"

namespace memsafe::host {

/// What a fused sum folds.
enum class fsum_mode {
  weighted,  ///< acc[r·c + q] += Σ_j k_rj·rhs_jq (row sums: c = 1, rhs = 1; K·v: c = 1; K·M: c ≤ fsum_max_cols)
  lse,       ///< logsumexp: (max, Σ exp(k − max)) per row, NaN / +inf flags (logsumexp_monoid's state)
  softmax    ///< Σ_j exp(k_rj − max)·V_jq with the same running max (softmax_sum_monoid's state)
};

/// The arguments of one kernel call (R rows against one column tile).
template <class T>
struct fsum_args {
  const T* xs = nullptr;    ///< R×d query rows, contiguous (scaled as the tile path loads them)
  std::size_t d = 0;
  const T* pack = nullptr;  ///< np packed panels of the column tile ([panel][k][lane])
  std::size_t np = 0, nj = 0;  ///< panels, valid columns
  /// Right-hand side of the tile in double, 0 past nj: one column, [panel][lane]; c > 1 columns
  /// (C = 0 kernels), [panel][lane][cp], each point's row padded with zeros to cp columns.
  const double* rhs = nullptr;
  std::size_t c = 1;   ///< its columns
  std::size_t cp = 1;  ///< c rounded up to whole registers of doubles (fsum_kernels::col_width); C = 0
  const formula_params<T>* params = nullptr;
  const void* op = nullptr;  ///< the elementwise op applied after the formula, if any
  double* acc = nullptr;     ///< R×c sums (weighted, softmax), added into
  lse_state* st = nullptr;   ///< R running (max, sum, flags) (lse, softmax)
  double* lanes = nullptr;   ///< R×cp partial sums of this call (C = 0), zero between calls
  /// Symmetric K·v (the C = 2 kernels; sum_driver.hpp): the same values are also folded down the
  /// columns, col[pn·W + w] += Σ_r k_r,(pn·W+w)·xr[r] (np·W entries; padding lanes add 0). xr: the
  /// R rows' own right-hand values. Only whole groups of real rows fold down.
  double* col = nullptr;
  const double* xr = nullptr;
};

/// One instantiation's kernel: a block of `rows` rows (a row block's last, partial group is run
/// on copies padded to `rows`: one kernel per instantiation keeps compile time down).
template <class T>
struct fsum_kernels {
  using fn = void (*)(const fsum_args<T>&);
  int rows = 0;
  fn group = nullptr;
  std::size_t col_width = 1;  ///< doubles per register: the C = 0 kernels take c columns padded to a multiple
};

}  // namespace memsafe::host
