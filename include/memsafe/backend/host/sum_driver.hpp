// memsafe/backend/host/sum_driver.hpp — fused kernel sums on the host (no kernel tile at all).
//
// For row sums, K·v, K·M (c ≤ fsum_max_cols right-hand columns), logsumexp and softmax_sum over a
// pairwise formula with a sqeuclid, l1 or dot base (sqdist, dist, rbf, matern12/32/52, rq, l1, dot,
// linear), optionally under one elementwise op (exp(−γ·sqdist), −sqdist, ...), and v·K (the same
// row job on the transposed leaf), a worker packs a column tile of Y once per row block and the
// kernels of the instruction set chosen at run time (isa.hpp, simd.hpp, sum_kernel.inc) evaluate
// the formula for a block of query rows in registers and fold it into the reduction's state —
// the host monoid's own accumulators (monoids.hpp), so merging partials and finishing are the
// tile path's. Sums are accumulated in double, as on the tile path (f32 values are widened before
// the multiply-add); logsumexp / softmax_sum keep a running max per row in T and rescale their
// double sums when it grows, with the tile path's NaN / ±inf semantics. Cosine (unit vectors and
// weights) keeps the tile path, and so does a reduction with more than fsum_max_cols columns.
//
// Workspace per thread (all accounted, carved from one buffer; the same on every instruction set):
//   packed Y tile                                   panels(tj)·W·d·T
//   the row block's query rows                      ti·d·T
//   right-hand side of the tile, in double          panels(tj)·W·c'·8       (not for logsumexp)
//   partial sums of a row group                     4·c'·8                  (c > 1, softmax_sum)
//   the last partial row group, padded to 4 rows    4·d·T + 4·c·8 (+ 4 lse_state: logsumexp, softmax_sum)
//   the monoid's accumulators                       Mon::accum_bytes(ti)
// where c' is c for one column, else c rounded up to a multiple of 8 (whole registers of doubles on
// every instruction set: the many-column kernels' fold_cols, sum_kernel.inc).
//
// Symmetric K·v. When the leaf is k(X, X) — the same point view on both sides (same data, extent
// and strides), so k(x_i, x_j) = k(x_j, x_i) for every formula here — and the reduction is a
// weighted sum with one column (K·v, row sums), each pair is evaluated once: row block I folds
// its own square K_II row-wise only, and the columns to its right, j ≥ end of I, both ways —
// out_i += k_ij·v_j into the row's sums and col_j += k_ij·v_i into the thread's column sums, in
// the same registers (sum_kernel.inc, fsum_args::col). Rows left of I reach row i through the
// column sums of earlier blocks. Half the kernel evaluations (n(n + ti)/2 instead of n²) for one
// FMA per pair more. Row blocks go to threads in a fixed serpentine order (0, 1, …, P−1, P−1, …, 0,
// …: the blocks' work falls with I) and out_i = scale·Σ_t col_t[i] in thread order, so the result
// is deterministic for a given thread count. Extra bytes per thread: the column sums (n + W
// doubles) and the row block's right-hand values (ti doubles); the planner takes this form
// only when they fit the budget with the plain form's tiles (else the plain form, whose minimum
// is the call's minimum). MEMSAFE_SYMMETRIC=off turns it off (core/env.hpp).
#pragma once
#include "../../core/algo.hpp"
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../../rewrite/rules.hpp"
#include "isa.hpp"
#include "kernels.hpp"
#include "monoids.hpp"
#include "select_driver.hpp"
#include "simd.hpp"
#include "sums.hpp"
#include "../../core/accounting.hpp"
#include "../../core/maybe.hpp"
#include "../../core/env.hpp"
#include "../../expr/formulas.hpp"
#include "../../expr/lazy.hpp"
#include "../../plan/plan.hpp"
#include "executor.hpp"

namespace memsafe::host {

// The host backend runs the implementation types of memsafe::detail (nodes, the accountant, ...).
using namespace memsafe::detail;

/// Right-hand columns (K·M, softmax_sum's values) a fused sum takes; more go the tile path. Up to
/// here the fused kernels beat the tile path (1.25× at 512 columns, Zen 3 AVX2; docs/design.md);
/// beyond it one panel's right-hand rows (W·c doubles) outgrow the L1 cache (at 1024 the tile path
/// was 1.5× faster), and the fused sum's minimum bytes (a panel of them per thread) outgrow the
/// tile path's.
inline constexpr std::size_t fsum_max_cols = 512;

/// The most bytes of right-hand side a fused sum's column tile holds (tj·c'·8, c > 1): half a
/// core's L2 on the x86 cores of 2020 on. Each 4-row group reads all of it once per tile, so a
/// wider tile only moves those reads out to L3: with c = 512 (n = 5000, f32, d = 3, 2 threads,
/// Zen 3) 836 × 2048 tiles (8 MiB of it) took 0.91–1.06 s, 836 × 64 tiles 0.74–0.95 s, in
/// alternating runs; c ≤ 16 keep their tiles.
inline constexpr std::size_t fsum_rhs_tile_bytes = std::size_t{256} << 10;

/// The leaves a fused sum evaluates: a pairwise formula (not cosine), or one elementwise op of one.
template <class E>
struct fsum_leaf {
  static constexpr bool ok = false;
};
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
struct fsum_leaf<pairwise<F, T, RX, RY, D>> {
  static constexpr bool ok = F::base != base_kind::cosine;
  using pw_type = pairwise<F, T, RX, RY, D>;
  using op_type = void;
  static const pw_type& pw(const pw_type& e) { return e; }
  static const void* op(const pw_type&) { return nullptr; }
};
template <class Op, class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
struct fsum_leaf<unary_expr<Op, pairwise<F, T, RX, RY, D>>> {
  static constexpr bool ok = F::base != base_kind::cosine;
  using pw_type = pairwise<F, T, RX, RY, D>;
  using op_type = Op;
  static const pw_type& pw(const unary_expr<Op, pw_type>& e) { return e.e; }
  static const void* op(const unary_expr<Op, pw_type>& e) { return &e.op; }
};

/// Which monoids a fused sum serves, in which mode, with how many right-hand columns.
template <class Mon>
struct fsum_monoid {
  static constexpr bool ok = false;
};
template <class T>
struct fsum_monoid<sum_monoid<T>> {
  static constexpr bool ok = true;
  static constexpr fsum_mode mode = fsum_mode::weighted;
  static std::size_t cols(const sum_monoid<T>&) { return 1; }
};
template <class T>
struct fsum_monoid<matmul_monoid<T>> {
  static constexpr bool ok = true;
  static constexpr fsum_mode mode = fsum_mode::weighted;
  static std::size_t cols(const matmul_monoid<T>& m) { return m.c(); }
  static matrix_view<const T> rhs(const matmul_monoid<T>& m) { return m.rhs; }
};
template <class T>
struct fsum_monoid<logsumexp_monoid<T>> {
  static constexpr bool ok = true;
  static constexpr fsum_mode mode = fsum_mode::lse;
  static std::size_t cols(const logsumexp_monoid<T>&) { return 0; }
};
template <class T>
struct fsum_monoid<softmax_sum_monoid<T>> {
  static constexpr bool ok = true;
  static constexpr fsum_mode mode = fsum_mode::softmax;
  static std::size_t cols(const softmax_sum_monoid<T>& m) { return m.dv(); }
  static matrix_view<const T> rhs(const softmax_sum_monoid<T>& m) { return m.values; }
};

template <class E, class Mon>
inline constexpr bool fusable_sum =
    isa_compiled != isa_bit(isa::portable) && fsum_leaf<E>::ok && fsum_monoid<Mon>::ok;

/// The run-time part: at most fsum_max_cols right-hand columns, at least one where there are any.
template <class Mon>
bool fsum_fits(const Mon& mon) {
  if constexpr (fsum_monoid<Mon>::mode == fsum_mode::lse) return true;
  else {
    const std::size_t c = fsum_monoid<Mon>::cols(mon);
    return c >= 1 && c <= fsum_max_cols;
  }
}

/// Whether the fused sum of `e` with `mon` may take the symmetric form (see the file comment):
/// a weighted sum of one column over k(X, X) with the same view on both sides.
template <class E, class Mon>
bool fsum_symmetric(const E& e, const Mon& mon) {
  if constexpr (fsum_monoid<Mon>::mode != fsum_mode::weighted) {
    return false;
  } else {
    if (fsum_monoid<Mon>::cols(mon) != 1) return false;
    if (env::symmetric_off()) return false;
    const auto& pw = fsum_leaf<E>::pw(e);
    return rewrite::same_view(pw.x, pw.y);
  }
}

/// Call fused(leaf) when the fused sum applies to the (normalised) expression `e` — a leaf of
/// fsum_leaf, or a guarded rewrite whose run-time guard chose one — and an instruction set of its
/// kernels is chosen (choose_isa), else generic(e). `planned` as for dispatch_select.
template <class E, class Mon, class Fused, class Generic>
decltype(auto) dispatch_sum(const E& e, const Mon& mon, Fused&& fused, Generic&& generic,
                            detail::maybe<bool> planned = {}) {
  if constexpr (fusable_sum<E, Mon>) {
    if (fsum_fits(mon) && fused_chosen(planned)) return fused_or_generic(e, e, fused, generic);
  } else if constexpr (requires { e.use_fast; }) {
    if constexpr (fusable_sum<std::remove_cvref_t<decltype(e.fast)>, Mon>)
      if (e.use_fast && fsum_fits(mon) && fused_chosen(planned))
        return fused_or_generic(e.fast, e, fused, generic);
  }
  return generic(e);
}

#if defined(MEMSAFE_SIMD_DISPATCH)

template <class E, class Mon>
struct fsum_worker {
  using L = fsum_leaf<E>;
  using P = typename L::pw_type;
  using Op = typename L::op_type;
  using T = typename E::value_type;
  using F = typename P::formula_type;
  static constexpr fsum_mode M = fsum_monoid<Mon>::mode;
  static constexpr std::size_t W = host::lanes<T>;
  static constexpr std::size_t Rk = 4;  // rows of a kernel group (fsum_kernels_for)

  /// Right-hand columns packed per tile (row sums: a column of ones; logsumexp: none).
  static std::size_t rhs_cols(const Mon& mon) { return M == fsum_mode::lse ? 0 : fsum_monoid<Mon>::cols(mon); }
  /// Whether the kernels keep partial sums of c columns in the workspace (C = 0).
  static bool many(const Mon& mon) { return M == fsum_mode::softmax || (M == fsum_mode::weighted && rhs_cols(mon) > 1); }
  /// The columns the workspace holds per point and row: c, padded to whole registers of doubles on
  /// every instruction set (8) for the C = 0 kernels.
  static std::size_t held_cols(const Mon& mon) { return many(mon) ? (rhs_cols(mon) + 7) / 8 * 8 : rhs_cols(mon); }

  static std::size_t bytes(const E& e, const Mon& mon, std::size_t ti, std::size_t tj) {
    using host::align64;
    const P& pw = L::pw(e);
    const std::size_t d = pw.dim(), np = host::panels<T>(tj), c = rhs_cols(mon), ch = held_cols(mon);
    return align64(np * W * d * sizeof(T)) + align64(ti * d * sizeof(T)) + align64(np * W * ch * sizeof(double)) +
           (many(mon) ? align64(Rk * ch * sizeof(double)) : 0) + align64(Rk * d * sizeof(T)) +
           align64(Rk * c * sizeof(double)) + (M == fsum_mode::weighted ? 0 : align64(Rk * sizeof(lse_state))) +
           mon.accum_bytes(ti);
  }

  const E& e;
  const P& pw;
  Mon mon;
  std::size_t d, c, cp, tj, m;  // cp: the columns of a point in rhsp and of a row in lanes (C = 0)
  T *pack, *xs;
  double *rhsp = nullptr, *lanes = nullptr;
  T* tail_xs;                        // the row block's last rows, padded with zero rows to Rk
  double* tail_acc;                  // their sums (Rk·c)
  lse_state* tail_st = nullptr;      // their running max / sum (logsumexp, softmax_sum)
  std::size_t tail_rows = 0;
  const out_spec<T>* out;
  fsum_kernels<T> kernels;
  fsum_kernels<T> sym_kernels;  // the symmetric form's (C = 2), when it runs

  static fsum_kernels<T> kernels_for(isa i, bool many_cols) {
    if constexpr (M == fsum_mode::lse) return host::fsum_kernels_for<F, Op, T, M, 1>(i);
    else if constexpr (M == fsum_mode::softmax) return host::fsum_kernels_for<F, Op, T, M, 0>(i);
    else if constexpr (std::is_same_v<Mon, sum_monoid<T>>) return host::fsum_kernels_for<F, Op, T, M, 1>(i);
    else return many_cols ? host::fsum_kernels_for<F, Op, T, M, 0>(i) : host::fsum_kernels_for<F, Op, T, M, 1>(i);
  }

  fsum_worker(const E& ex, const Mon& proto, std::byte* ws, std::size_t ti, std::size_t tj_, const out_spec<T>& o,
              isa i, bool symmetric = false)
      : e(ex), pw(L::pw(ex)), mon(proto), d(pw.dim()), c(rhs_cols(proto)), cp(c), tj(tj_), m(ex.cols()), out(&o),
        kernels(kernels_for(i, many(proto))) {
    if (!kernels.group) throw error(cat(msg{"memsafe: internal: no ", isa_name(i), " fused-sum kernels"}));
    if (many(proto)) {
      const std::size_t cw = kernels.col_width;
      cp = (c + cw - 1) / cw * cw;  // ≤ held_cols: cw divides 8
    }
    if constexpr (M == fsum_mode::weighted) {
      if (symmetric) {
        sym_kernels = host::fsum_kernels_for<F, Op, T, M, 2>(i);
        if (!sym_kernels.group) throw error(cat(msg{"memsafe: internal: no ", isa_name(i), " symmetric kernels"}));
      }
    }
    std::byte* cur = ws;
    const std::size_t np = host::panels<T>(tj);
    pack = carve<T>(cur, np * W * d);
    xs = carve<T>(cur, ti * d);
    rhsp = carve<double>(cur, np * W * held_cols(proto));
    if (many(proto)) {
      lanes = carve<double>(cur, Rk * held_cols(proto));
      std::fill(lanes, lanes + Rk * cp, 0.0);
    }
    tail_xs = carve<T>(cur, Rk * d);
    tail_acc = carve<double>(cur, Rk * c);
    if constexpr (M != fsum_mode::weighted) tail_st = carve<lse_state>(cur, Rk);
    mon.bind(cur, ti, tj);
  }

  void start(std::size_t i0, std::size_t ni) {
    mon.init(ni);
    for (std::size_t r = 0; r < ni; ++r) host::load_row(pw.x, pw.params, i0 + r, xs + r * d, false);
    tail_rows = ni % Rk;
    std::fill(tail_xs, tail_xs + Rk * d, T(0));
    std::copy(xs + (ni - tail_rows) * d, xs + ni * d, tail_xs);
  }

  /// Row r's accumulators and state in the monoid (weighted, softmax: acc; lse, softmax: st).
  double* acc_of(std::size_t r) {
    if constexpr (M == fsum_mode::lse) return nullptr;
    else return mon.acc + r * c;
  }
  lse_state* st_of(std::size_t r) {
    if constexpr (M == fsum_mode::weighted) return nullptr;
    else if constexpr (M == fsum_mode::lse) return mon.acc + r;
    else return mon.st + r;
  }

  /// The right-hand side of columns [j0, j0 + nj) as doubles, 0 past nj and past c: [panel][lane]
  /// for one column, [panel][lane][cp] for more (fsum_args::rhs).
  void pack_rhs(std::size_t j0, std::size_t nj) {
    const std::size_t np = host::panels<T>(nj);
    if constexpr (M == fsum_mode::lse) {
      return;
    } else if constexpr (std::is_same_v<Mon, sum_monoid<T>>) {
      for (std::size_t j = 0; j < np * W; ++j) rhsp[j] = j < nj ? 1.0 : 0.0;
    } else {
      const matrix_view<const T> R = fsum_monoid<Mon>::rhs(mon);
      const T* base = R.data();
      const std::size_t rs = R.row_stride(), cs = R.col_stride();
      for (std::size_t j = 0; j < np * W; ++j) {  // one point's row of cp (c = 1: cp = 1)
        double* dst = rhsp + j * cp;
        for (std::size_t q = 0; q < cp; ++q)
          dst[q] = j < nj && q < c ? static_cast<double>(base[(j0 + j) * rs + q * cs]) : 0.0;
      }
    }
  }

  void fold(std::size_t, std::size_t ni, std::size_t cb0, std::size_t cb1) {
    fold_range(ni, cb0 * tj, std::min(m, cb1 * tj), nullptr, nullptr);
  }
  /// Fold the started row block against columns [jb, je) in tiles of tj. The symmetric form
  /// (weighted sums only) passes `col`, the thread's column sums (n + W entries), to fold down the
  /// columns too, with `xr` the block's right-hand values (only whole groups of rows do).
  void fold_range(std::size_t ni, std::size_t jb, std::size_t je, double* col, const double* xr) {
    const std::size_t R = static_cast<std::size_t>(kernels.rows);
    const auto group = col ? sym_kernels.group : kernels.group;
    for (std::size_t j0 = jb; j0 < je; j0 += tj) {
      const std::size_t nj = std::min(tj, je - j0);
      host::pack_panels(pw.y, pw.params, j0, nj, pack, static_cast<T*>(nullptr));
      pack_rhs(j0, nj);
      fsum_args<T> a;
      a.d = d;
      a.pack = pack;
      a.np = host::panels<T>(nj);
      a.nj = nj;
      a.rhs = rhsp;
      a.c = c;
      a.cp = cp;
      a.params = &pw.params;
      a.op = L::op(e);
      a.lanes = lanes;
      a.col = col ? col + j0 : nullptr;
      const std::size_t full = ni - tail_rows;
      for (std::size_t r = 0; r < full; r += R) {
        a.xs = xs + r * d;
        a.acc = acc_of(r);
        a.st = st_of(r);
        if (col) a.xr = xr + r;
        group(a);
      }
      if (tail_rows) {  // the last rows, on padded copies of their rows and state
        if (col) throw error("memsafe: internal: a partial row group folded down the columns");
        a.xs = tail_xs;
        if constexpr (M != fsum_mode::lse) {
          std::fill(tail_acc, tail_acc + R * c, 0.0);
          std::copy(acc_of(full), acc_of(full) + tail_rows * c, tail_acc);
          a.acc = tail_acc;
        }
        if constexpr (M != fsum_mode::weighted) {
          std::fill(tail_st, tail_st + R, lse_state{-std::numeric_limits<double>::infinity(), 0.0, false, false});
          std::copy(st_of(full), st_of(full) + tail_rows, tail_st);
          a.st = tail_st;
        }
        kernels.group(a);
        if constexpr (M != fsum_mode::lse) std::copy(tail_acc, tail_acc + tail_rows * c, acc_of(full));
        if constexpr (M != fsum_mode::weighted) std::copy(tail_st, tail_st + tail_rows, st_of(full));
      }
    }
  }
  void merge_from(const fsum_worker& o, std::size_t ni) { mon.merge_from(o.mon, ni); }
  void finish(std::size_t i0, std::size_t ni) const { mon.finish(i0, ni, *out); }
};

/// Extra bytes per thread of the symmetric form on an n×n product with row tiles of ti.
template <class T>
std::size_t fsum_symmetric_bytes(std::size_t n, std::size_t ti) {
  return host::align64((n + host::lanes<T>) * sizeof(double)) + host::align64(ti * sizeof(double));
}

/// Bytes per thread of the fused sum on ti × tj tiles.
template <class E, class Mon>
std::size_t fsum_bytes(const E& e, const Mon& mon, std::size_t ti, std::size_t tj) {
  return fsum_worker<E, Mon>::bytes(e, mon, ti, tj);
}

template <class E, class Mon>
MEMSAFE_COLD tile_plan plan_fsum(const E& e, const Mon& mon, std::size_t budget, std::size_t threads, const std::string& what) {
  using T = typename E::value_type;
  const std::size_t d = fsum_leaf<E>::pw(e).dim();
  const auto tis = plan::candidates(e.rows(), {1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1});
  // Many columns: every group of 4 rows streams the tile's whole right-hand side (tj·c'·8 bytes),
  // so it is kept within fsum_rhs_tile_bytes (L2) rather than the widest tile that fits.
  const std::size_t row_bytes = fsum_worker<E, Mon>::held_cols(mon) * sizeof(double);
  const std::size_t tj_cap = row_bytes > sizeof(double) ? std::max<std::size_t>(16, fsum_rhs_tile_bytes / row_bytes)
                                                        : ~std::size_t{0};
  std::vector<std::size_t> tjs;
  for (std::size_t c : select_tile_cols<T>(d))
    if ((c <= tj_cap || c <= 16) && !detail::contains(tjs, std::min(c, e.cols())))
      tjs.push_back(std::min(c, e.cols()));
  auto p = plan::tiles_2d(
      e.rows(), e.cols(), budget, threads, [&](std::size_t ti, std::size_t tj) { return fsum_bytes(e, mon, ti, tj); },
      what, tis, tjs);
  // Even out the row blocks (a multiple of the threads); smaller tiles still fit.
  if (p.row_blocks > 1 && p.threads > 1 && !p.split_columns) {
    const std::size_t nb = (p.row_blocks + p.threads - 1) / p.threads * p.threads;
    const std::size_t ti = std::min(p.tile_rows, ((e.rows() + nb - 1) / nb + 3) / 4 * 4);
    p.tile_rows = ti;
    p.row_blocks = (e.rows() + ti - 1) / ti;
    p.num_tiles = plan::saturating_mul(p.row_blocks, p.col_blocks);
    p.per_thread_bytes = fsum_bytes(e, mon, ti, p.tile_cols);
    p.planned_bytes = p.threads * p.per_thread_bytes;
  }
  p.isa = isa_name(choose_isa(isa_compiled));
  p.reduction = cat(msg{Mon::name, " over j, fused: formula evaluated in registers (", p.isa,
                     "), accumulated in double; no kernel tile"});
  if (fsum_symmetric(e, mon)) {  // k(X, X)·v: each pair once, when its extra bytes fit
    const std::size_t n = e.rows();
    const auto cost = [&](std::size_t ti, std::size_t tj) {
      return fsum_bytes(e, mon, ti, tj) + fsum_symmetric_bytes<T>(n, ti);
    };
    std::vector<std::size_t> tis;  // multiples of the kernels' 4 rows: only the last block has a partial group
    for (std::size_t ti : {256, 128, 64, 32, 16, 8, 4})
      if (ti <= n) tis.push_back(ti);
    if (!tis.empty() && cost(tis.back(), 1) <= budget) {
      auto q = plan::tiles_2d(n, n, budget, threads, cost, what, tis, tjs);
      if (!q.split_columns && q.tile_rows % 4 == 0) {
        q.symmetric = true;
        q.min_bytes = p.min_bytes;  // below the symmetric form's bytes the plain form runs
        q.isa = p.isa;
        q.reduction = cat(msg{p.reduction, "; symmetric: K = k(X, X), each pair once, folded into its row and its column"});
        return q;
      }
    }
  }
  return p;
}

/// The symmetric form of run_fsum (see the file comment).
template <class E, class Mon>
void run_fsum_symmetric(const E& e, const Mon& mon, const out_spec<typename E::value_type>& out, const tile_plan& p,
                        accountant& acc, isa i) {
  using T = typename E::value_type;
  using Wk = fsum_worker<E, Mon>;
  const std::size_t n = e.rows(), ti = p.tile_rows, P = p.threads, nrb = (n + ti - 1) / ti;
  const std::size_t extra = fsum_symmetric_bytes<T>(n, ti);
  std::vector<temp_buffer<std::byte>> ws;
  ws.reserve(P);
  for (std::size_t t = 0; t < P; ++t) ws.emplace_back(acc, p.per_thread_bytes);
  worker_array<Wk> workers(P);
  std::vector<double*> cols(P), xrs(P);
  for (std::size_t t = 0; t < P; ++t) {
    workers.add([&] { return Wk(e, mon, ws[t].data() + extra, ti, p.tile_cols, out, i, true); });
    std::byte* cur = ws[t].data();
    cols[t] = carve<double>(cur, n + host::lanes<T>);
    xrs[t] = carve<double>(cur, ti);
  }
  // The row block's right-hand values v_i (row sums: 1), as the kernels fold them down the columns.
  const auto row_rhs = [&](std::size_t i0, std::size_t ni, double* xr) {
    if constexpr (std::is_same_v<Mon, sum_monoid<T>>) {
      std::fill(xr, xr + ni, 1.0);
    } else {
      const matrix_view<const T> V = fsum_monoid<Mon>::rhs(mon);
      for (std::size_t r = 0; r < ni; ++r) xr[r] = static_cast<double>(V.data()[(i0 + r) * V.row_stride()]);
    }
  };
  parallel(P, [&](std::size_t t) {
    Wk& w = workers[t];
    double* col = cols[t];
    std::fill(col, col + n + host::lanes<T>, 0.0);
    for (std::size_t b = 0; b < nrb; ++b) {
      if (serpentine_thread(b, P) != t) continue;
      const std::size_t i0 = b * ti, ni = std::min(ti, n - i0);
      w.start(i0, ni);
      row_rhs(i0, ni, xrs[t]);
      w.fold_range(ni, i0, i0 + ni, nullptr, nullptr);  // K_II: row-wise only
      w.fold_range(ni, i0 + ni, n, col, xrs[t]);         // j right of I: row-wise and column-wise
      for (std::size_t r = 0; r < ni; ++r) col[i0 + r] += w.acc_of(r)[0];
    }
  });
  for (std::size_t r = 0; r < n; ++r) {
    double s = 0;
    for (std::size_t t = 0; t < P; ++t) s += cols[t][r];
    out.v(r, 0) = static_cast<T>(mon.scale * s);
  }
}

/// Run the fused sum of every row of `e` into `out` (same outputs as run_rows with `mon`), with the
/// kernels of the instruction set the plan names.
template <class E, class Mon>
void run_fsum(const E& e, const Mon& mon, const out_spec<typename E::value_type>& out, const tile_plan& p,
              accountant& acc) {
  const isa i = parse_isa(p.isa).value_or(isa::portable);
  if (p.symmetric) {
    if constexpr (fsum_monoid<Mon>::mode == fsum_mode::weighted) {
      run_fsum_symmetric(e, mon, out, p, acc, i);
      return;
    }
  }
  run_row_blocks(e.rows(), e.cols(), mon, out, p, acc, [&](std::byte* ws) {
    return fsum_worker<E, Mon>(e, mon, ws, p.tile_rows, p.tile_cols, out, i);
  });
}

#else  // no SIMD kernels in this translation unit: never chosen (fusable_sum is false); declared so callers compile.

template <class E, class Mon>
tile_plan plan_fsum(const E&, const Mon&, std::size_t, std::size_t, const std::string&) {
  return {};
}
template <class E, class Mon>
void run_fsum(const E&, const Mon&, const out_spec<typename E::value_type>&, const tile_plan&, accountant&) {}

#endif

}  // namespace memsafe::host
