// memsafe/backend/host/grad.hpp — the host's plan and run of a backward job (lower/grad.hpp).
//
//   plan_grad(job, budget, threads, what) → grad_host_plan   pure: nothing allocated or computed
//   run_grad(job, plan, outputs, accountant)                  executes the planned passes
//
// A backward is one or two row passes (docs/design.md, "Gradients"), each run by run_row_blocks
// like a forward reduction: a pass over E for the row-side point sets and the parameters (and, when
// fused, the column side in per-thread accumulators), and a pass over Eᵀ for the column side when
// not fused. Per tile a worker forms W (and E's own tile when the softmax weights or the operand
// gradient need it), then for each term of the lazy matrix the per-pair scalars c_ij and the
// contractions with the points, by direct differences (no ‖x‖² − 2x·y expansion), in double
// across tiles. Every byte is in the pass's cost(ti, tj), which the planner searches with
// plan::tiles_2d; the parameter and fused column accumulators are allocated beside the tile
// workspaces, one per thread, and counted in the same plan.
#pragma once
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/algo.hpp"
#include "../../core/libm.hpp"

#include "../../core/accounting.hpp"
#include "../../core/budget.hpp"
#include "../../expr/derivatives.hpp"
#include "../../lower/grad.hpp"
#include "../../lower/job.hpp"
#include "../../plan/grad.hpp"
#include "../../plan/plan.hpp"
#include "executor.hpp"
#include "jobs.hpp"
#include "kernels.hpp"
#include "tile.hpp"
#include "tile_isa.hpp"

namespace memsafe::host {

/// What one row pass computes and where each accumulator lives (a pure function of the job).
struct grad_layout {
  bool transposed = false;   ///< the pass sweeps Eᵀ: its rows are E's columns
  bool need_e = false;       ///< E's tile is generated (softmax weights, operand gradient)
  bool params = false;       ///< parameter gradients (the pass over E only)
  bool op_rows = false;      ///< operand gradient on the row side (the pass over Eᵀ)
  bool op_cols = false;      ///< operand gradient on the column side (a fused pass over E)
  bool cols = false;         ///< column-side point sets (a fused pass over E)
  bool cols_direct = false;  ///< the column side is written straight to the outputs (one row block:
                             ///< every column tile is visited by one worker only; lazy × lazy)
  bool formed = false;       ///< W is formed per tile from the job's weights (not a lazy × lazy pass)
  std::size_t wrank = 0;     ///< the rank of a low-rank W (0: dense W)
  std::size_t dmax = 0, c = 0, m = 0;
  bool terms = false;        ///< some term is active: the row scratch exists (also when every d is 0)
  std::size_t row_width = 0, op_row_off = 0;  ///< doubles per row of the row accumulators
  std::size_t col_width = 0, op_col_off = 0;  ///< doubles of the per-thread column accumulators
  std::size_t par_width = 0;                  ///< doubles of the per-thread parameter accumulators
  std::vector<long> roff, coff;               ///< per requested point set: offset, or −1
  std::vector<std::size_t> pdim, prows;       ///< per requested point set: d and rows
  std::vector<int> rslot, cslot;              ///< per term: requested point set, or −1
  std::vector<std::size_t> poff, dim;         ///< per term
  std::vector<char> active, par;              ///< per term
  bool anything() const { return row_width > 0 || col_width > 0 || par_width > 0; }
};

template <class T>
std::size_t grad_ext_bytes(const grad_layout& L) {
  return (L.par_width ? align64(L.par_width * sizeof(double)) : 0) +
         (L.col_width && !L.cols_direct ? align64(L.col_width * sizeof(double)) : 0);
}

template <class F>
constexpr bool has_any_param() {
  using D = derivative<F>;
  return D::has_variance || D::has_lengthscale || D::has_alpha;
}

/// The layout of a pass over the lazy matrix P whose term t feeds the requested point set
/// rslot[t] on its row side and cslot[t] on its column side (−1: none).
template <class P, class T, std::size_t N>
grad_layout layout_for(const P& pe, const std::array<int, N>& rslot, const std::array<int, N>& cslot,
                       const std::vector<matrix_view<const T>>& points, bool params) {
  grad_layout L;
  const std::size_t np = points.size();
  L.rslot.assign(rslot.begin(), rslot.end());
  L.cslot.assign(cslot.begin(), cslot.end());
  L.poff.assign(N, 0);
  L.dim.assign(N, 0);
  L.active.assign(N, 0);
  L.par.assign(N, 0);
  L.roff.assign(np, -1);
  L.coff.assign(np, -1);
  for (const auto& v : points) {
    L.pdim.push_back(v.cols());
    L.prows.push_back(v.rows());
  }
  L.params = params;
  jobs::detail::for_each_term(pe, [&](std::size_t t, const auto& term) {
    using Leaf = typename std::remove_cvref_t<decltype(term)>::leaf_type;
    L.dim[t] = term.leaf->dim();
    L.par[t] = params && has_any_param<typename Leaf::formula_type>();
    L.active[t] = L.rslot[t] >= 0 || L.cslot[t] >= 0 || L.par[t];
    if (L.active[t]) {
      L.terms = true;
      L.dmax = std::max(L.dmax, L.dim[t]);
    }
  });
  for (std::size_t k = 0; k < np; ++k)
    for (std::size_t t = 0; t < N; ++t) {
      if (L.rslot[t] == int(k) && L.roff[k] < 0) {
        L.roff[k] = long(L.row_width);
        L.row_width += points[k].cols();
      }
      if (L.cslot[t] == int(k) && L.coff[k] < 0) {
        L.coff[k] = long(L.col_width);
        L.col_width += points[k].rows() * points[k].cols();
        L.cols = true;
      }
    }
  for (std::size_t t = 0; t < N; ++t) {
    L.poff[t] = L.par_width;
    if (L.par[t]) L.par_width += 2 + L.dim[t];
  }
  return L;
}

/// The layout of the pass over E (transposed = false; `fused`: the column side too) or over Eᵀ.
template <class J>
grad_layout make_layout(const J& j, bool transposed, bool fused) {
  std::array<int, J::terms> none;
  none.fill(-1);
  grad_layout L = layout_for(j.e, transposed ? j.col_slot : j.row_slot, (!transposed && fused) ? j.col_slot : none,
                             j.points, !transposed && j.params);
  L.transposed = transposed;
  L.c = j.w.b.cols();
  L.formed = true;
  L.wrank = j.w.dense ? 0 : j.w.a.cols();
  L.m = j.e.cols();
  L.op_rows = transposed && j.operand;
  L.op_cols = !transposed && fused && j.operand;
  if (L.op_rows) {
    L.op_row_off = L.row_width;
    L.row_width += L.c;
  }
  if (L.op_cols) {
    L.op_col_off = L.col_width;
    L.col_width += L.m * L.c;
  }
  L.need_e = L.anything() && (j.w.softmax || L.op_rows || L.op_cols);
  return L;
}

/// Columns per block of the backward row kernel (grad_kernel.inc); the column buffers are padded
/// to a multiple of it.
inline constexpr std::size_t grad_lanes = 8;
inline std::size_t grad_cols_padded(std::size_t nj) { return (nj + grad_lanes - 1) / grad_lanes * grad_lanes; }

/// Bytes of one thread's tile workspace of a pass over P with ti×tj tiles (the carves of
/// grad_worker, in order); the per-thread accumulators are grad_ext_bytes.
template <class P, class T>
std::size_t grad_tile_bytes(const P& p, const grad_layout& L, std::size_t ti, std::size_t tj) {
  const std::size_t tjp = grad_cols_padded(tj);
  std::size_t b = align64(ti * tjp * sizeof(T));
  if (L.need_e) b += tile_gen<P>::workspace_bytes(p, ti, tj);
  if (L.formed) b += align64(tjp * sizeof(double)) + align64(L.wrank * tjp * sizeof(T));
  if (L.terms)
    b += align64(L.dmax * tjp * sizeof(T)) + align64(ti * L.dmax * sizeof(T)) + 4 * align64(tjp * sizeof(T)) +
         align64(2 * L.dmax * grad_lanes * sizeof(double)) + align64(L.dmax * sizeof(double));
  if (L.cols) b += align64(L.dmax * tjp * sizeof(T));
  b += align64(ti * L.row_width * sizeof(double));
  return b;
}

/// What the workers of one pass share: the pass's matrix, its terms, the layout, the weights and
/// the outputs (requested point sets' gradients, zero-initialised, and the operand's). O (lazy ×
/// lazy only) is the other factor's transpose whose tiles give the weights.
template <class P, class T, class O = void>
struct grad_ctx {
  const P& p;
  jobs::terms_t<P> terms;
  const grad_layout& L;
  const jobs::grad_weights<T>& w;
  const std::vector<T*>& out;
  T* op_out;
  std::ptrdiff_t op_rs, op_cs;
  std::conditional_t<std::is_void_v<O>, const void*, const O*> other = nullptr;
  bool a_side = true;  ///< lazy × lazy: the pass over A (W = Ḡ·Bᵀ tile) or over B (W = Aᵀ tile·Ḡ)
  grad_ctx(const P& pp, const grad_layout& l, const jobs::grad_weights<T>& ww, const std::vector<T*>& o, T* op,
           std::ptrdiff_t rs, std::ptrdiff_t cs)
      : p(pp), terms(jobs::collect_terms(pp)), L(l), w(ww), out(o), op_out(op), op_rs(rs), op_cs(cs) {}
};

/// C (ni×nj, ld nj, double) += A (ni×K view) · B (K×nj view): one DGEMM (gemm_acc) when both have
/// unit column strides, else a loop.
template <class T>
void gemm_views(std::size_t ni, std::size_t nj, std::size_t K, const matrix_view<const T>& A,
                const matrix_view<const T>& B, double* C) {
  if (ni == 0 || nj == 0 || K == 0) return;
  if (A.col_stride() == 1 && B.col_stride() == 1) {
    gemm_acc(ni, nj, K, A.data(), A.row_stride(), B.data(), B.row_stride(), C, nj);
    return;
  }
  for (std::size_t r = 0; r < ni; ++r)
    for (std::size_t k = 0; k < K; ++k) {
      const double a = static_cast<double>(A(r, k));
      for (std::size_t q = 0; q < nj; ++q) C[r * nj + q] += a * static_cast<double>(B(k, q));
    }
}
/// Rows [r0, r0+nr) × columns [c0, c0+nc) of a view.
template <class T>
matrix_view<const T> block(const matrix_view<const T>& v, std::size_t r0, std::size_t nr, std::size_t c0,
                           std::size_t nc) {
  return {nr && nc ? &v(r0, c0) : v.data(), nr, nc, v.row_stride(), v.col_stride()};
}
/// The other factor's tile of a lazy × lazy pass: Bᵀ (q × tj) on A's side, Aᵀ (ti × p) on B's.
template <class O, class T>
std::size_t other_bytes(const O& o, bool a_side, std::size_t ti, std::size_t tj) {
  const std::size_t r = a_side ? o.rows() : ti, c = a_side ? tj : o.cols();
  return align64(r * c * sizeof(T)) + tile_gen<O>::workspace_bytes(o, r, c) + align64(ti * tj * sizeof(double));
}

/// One term's rows of one backward tile, for term_rows (grad_kernel.inc).
template <class T>
struct term_rows_args {
  std::size_t ni = 0, nj = 0, njp = 0, d = 0;  ///< rows, columns, padded columns, dimension
  const T* xs = nullptr;       ///< ni × d row points, transformed (the formula's scales)
  const T* ys = nullptr;       ///< d × njp column points, transformed, signed; zero past nj
  const T* w = nullptr;        ///< ni × njp weights W; zero past nj
  T *u = nullptr, *c = nullptr, *f = nullptr, *al = nullptr;  ///< njp-wide row scratch
  const double* rsc = nullptr; ///< d row-gradient scales
  double* ra = nullptr;        ///< the row gradients (rows ra_ld apart), or nullptr
  std::size_t ra_ld = 0;
  double* pq = nullptr;        ///< d per-dimension parameter sums, or nullptr
  T* gyt = nullptr;            ///< d × njp column gradients, or nullptr
  double* lanes = nullptr;     ///< 2·d·grad_lanes doubles of scratch
  bool par = false;            ///< accumulate pv / pa
  double pv = 0, pa = 0;       ///< Σ W h′ F and Σ W h′ ∂F/∂α over the tile (added to)
};

#define MEMSAFE_TILE_LANE_LOOP MEMSAFE_LANE_LOOP
#include "grad_kernel.inc"
#undef MEMSAFE_TILE_LANE_LOOP

}  // namespace memsafe::host

#if defined(MEMSAFE_TILE_AVX2)  // the AVX2 copy for a build whose own target lacks it (tile_isa.hpp)
#include "avx2_begin.inc"
namespace memsafe::host::avx2_tile {
#include "grad_kernel.inc"
}  // namespace memsafe::host::avx2_tile
#include "avx2_end.inc"
/// `call` (a grad_kernel.inc function) from the AVX2 copy when `avx2`, else the TU's own.
#define MEMSAFE_GRAD_KERNEL(avx2, call) ((avx2) ? avx2_tile::call : call)
#else
#define MEMSAFE_GRAD_KERNEL(avx2, call) call
#endif

namespace memsafe::host {

/// One thread's worker of a backward row pass (the run_row_blocks protocol: start, fold,
/// merge_from, finish).
template <class P, class T, class O = void>
struct grad_worker {
  struct no_gen {};
  const grad_ctx<P, T, O>* c;
  tile_gen<P> gen;
  std::conditional_t<std::is_void_v<O>, no_gen, std::optional<tile_gen<std::conditional_t<std::is_void_v<O>, P, O>>>>
      gen_o;
  T *tile = nullptr, *ybuf = nullptr, *xs = nullptr, *gyt = nullptr, *otile = nullptr, *wpack = nullptr;
  T *urow = nullptr, *crow = nullptr, *frow = nullptr, *arow = nullptr;
  double *racc = nullptr, *ext_par = nullptr, *ext_col = nullptr, *wd = nullptr, *wrow = nullptr;
  double *lanes = nullptr, *rsc = nullptr;
  std::size_t tj;
  bool avx2;  ///< term_rows from host::avx2_tile (tile_avx2())

  grad_worker(const grad_ctx<P, T, O>& ctx, std::byte* ws, std::size_t ti, std::size_t tj_, double* ext)
      : c(&ctx), gen(ctx.p), tj(tj_), avx2(tile_avx2()) {
    const grad_layout& L = ctx.L;
    std::byte* cur = ws;
    const std::size_t tjp = grad_cols_padded(tj);
    tile = carve<T>(cur, ti * tjp);  // rows tjp apart (grad_cols_padded(nj) for a narrower tile)
    if (L.need_e) gen.bind(cur, ti, tj);
    if (L.formed) {
      wrow = carve<double>(cur, tjp);
      wpack = carve<T>(cur, L.wrank * tjp);
    }
    if constexpr (!std::is_void_v<O>) {
      const O& o = *ctx.other;
      const std::size_t r = ctx.a_side ? o.rows() : ti, cc = ctx.a_side ? tj : o.cols();
      otile = carve<T>(cur, r * cc);
      gen_o.emplace(o);
      gen_o->bind(cur, r, cc);
      wd = carve<double>(cur, ti * tj);
    }
    if (L.terms) {
      ybuf = carve<T>(cur, L.dmax * tjp);
      xs = carve<T>(cur, ti * L.dmax);
      urow = carve<T>(cur, tjp);
      crow = carve<T>(cur, tjp);
      frow = carve<T>(cur, tjp);
      arow = carve<T>(cur, tjp);
      lanes = carve<double>(cur, 2 * L.dmax * grad_lanes);
      rsc = carve<double>(cur, L.dmax);
    }
    if (L.cols) gyt = carve<T>(cur, L.dmax * tjp);
    racc = carve<double>(cur, ti * L.row_width);
    if (L.par_width) {
      ext_par = ext;
      ext += align64(L.par_width * sizeof(double)) / sizeof(double);
    }
    if (L.col_width && !L.cols_direct) ext_col = ext;
  }

  void start(std::size_t, std::size_t ni) { std::fill(racc, racc + ni * c->L.row_width, 0.0); }
  void fold(std::size_t i0, std::size_t ni, std::size_t cb0, std::size_t cb1) {
    const std::size_t m = c->p.cols();
    for (std::size_t cb = cb0; cb < cb1; ++cb) {
      const std::size_t j0 = cb * tj, nj = std::min(tj, m - j0);
      tile_step(i0, ni, j0, nj);
    }
  }
  void merge_from(const grad_worker& o, std::size_t ni) {
    for (std::size_t q = 0; q < ni * c->L.row_width; ++q) racc[q] += o.racc[q];
  }
  void finish(std::size_t i0, std::size_t ni) {
    const grad_layout& L = c->L;
    for (std::size_t k = 0; k < L.roff.size(); ++k) {
      if (L.roff[k] < 0) continue;
      const std::size_t d = L.pdim[k];
      T* o = c->out[k];
      for (std::size_t r = 0; r < ni; ++r)
        for (std::size_t q = 0; q < d; ++q)
          o[(i0 + r) * d + q] += static_cast<T>(racc[r * L.row_width + std::size_t(L.roff[k]) + q]);
    }
    if (L.op_rows)
      for (std::size_t r = 0; r < ni; ++r)
        for (std::size_t q = 0; q < L.c; ++q)
          c->op_out[std::ptrdiff_t(i0 + r) * c->op_rs + std::ptrdiff_t(q) * c->op_cs] +=
              static_cast<T>(racc[r * L.row_width + L.op_row_off + q]);
  }

 private:
  void tile_step(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj) {
    const grad_layout& L = c->L;
    if constexpr (!std::is_void_v<O>) {
      product_weights(i0, ni, j0, nj);
    } else {
      form_weights(i0, ni, j0, nj);
    }
    const std::size_t ld = grad_cols_padded(nj);  // W's rows, zero past nj for term_rows
    if (ld > nj)
      for (std::size_t r = 0; r < ni; ++r) std::fill(tile + r * ld + nj, tile + (r + 1) * ld, T(0));
    std::size_t k = 0;
    auto one = [&](const auto& term) {
      if (L.active[k]) term_step(term, k, i0, ni, j0, nj);
      ++k;
    };
    std::apply([&](const auto&... t) { (one(t), ...); }, c->terms);
  }

  /// Lazy × lazy: W = Ḡ[rows]·Bᵀ[:, cols] over A's tile, or Aᵀ[rows, :]·Ḡ[:, cols] over B's.
  void product_weights(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj) {
    if constexpr (!std::is_void_v<O>) {
      const auto& G = c->w.g;
      std::fill(wd, wd + ni * nj, 0.0);
      if (c->a_side) {
        const std::size_t q = c->other->rows();
        gen_o->fill(0, q, j0, nj, otile, nj);
        gemm_views<T>(ni, nj, q, block(G, i0, ni, 0, q), matrix_view<const T>(otile, q, nj), wd);
      } else {
        const std::size_t p = c->other->cols();
        gen_o->fill(i0, ni, 0, p, otile, p);
        gemm_views<T>(ni, nj, p, matrix_view<const T>(otile, ni, p), block(G, 0, p, j0, nj), wd);
      }
      const std::size_t ld = grad_cols_padded(nj);
      for (std::size_t r = 0; r < ni; ++r)
        for (std::size_t q = 0; q < nj; ++q) tile[r * ld + q] = static_cast<T>(wd[r * nj + q]);
    }
  }

  void form_weights(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj) {
    const grad_layout& L = c->L;
    const auto& w = c->w;
    const bool tr = L.transposed;
    const std::size_t ld = grad_cols_padded(nj);
    if (L.need_e) {
      gen.fill(i0, ni, j0, nj, tile, ld);
      if (w.softmax)  // P_ij = exp(E_ij − lse_i), i the row of E
        for (std::size_t r = 0; r < ni; ++r)
          for (std::size_t q = 0; q < nj; ++q) {
            const std::size_t oi = tr ? j0 + q : i0 + r;
            tile[r * ld + q] = math::exp(tile[r * ld + q] - w.lse[oi]);
          }
      operand_step(i0, ni, j0, nj);
    }
    // W_ij in place (times P_ij when softmax), one row of the tile at a time in double. Low rank:
    // W_ij = Σ_k R_ik·C_jk with R the factor indexed by this pass's rows (A over E, B over Eᵀ) and
    // C the other; C's tile columns are packed k-major once per tile, so that each row is a sum of
    // contiguous, vectorised axpys in the same k order as a direct dot product.
    const std::size_t rank = L.wrank;
    const matrix_view<const T>& R = tr ? w.b : w.a;
    const matrix_view<const T>& C = tr ? w.a : w.b;
    for (std::size_t k = 0; k < rank; ++k) {
      for (std::size_t q = 0; q < nj; ++q) wpack[k * ld + q] = C(j0 + q, k);
      std::fill(wpack + k * ld + nj, wpack + (k + 1) * ld, T(0));
    }
    for (std::size_t r = 0; r < ni; ++r) {
      const std::size_t i = i0 + r;
      if (w.dense) {
        if (tr)
          for (std::size_t q = 0; q < nj; ++q) wrow[q] = static_cast<double>(w.g(j0 + q, i));
        else
          for (std::size_t q = 0; q < nj; ++q) wrow[q] = static_cast<double>(w.g(i, j0 + q));
        std::fill(wrow + nj, wrow + ld, 0.0);
      } else if (rank) {
        const T* ri = R.data() + i * R.row_stride();
        MEMSAFE_GRAD_KERNEL(avx2, lowrank_row(ri, R.col_stride(), rank, wpack, ld, wrow));
      } else {
        std::fill(wrow, wrow + ld, 0.0);
      }
      T* wt = tile + r * ld;
      if (!w.softmax) {
        MEMSAFE_GRAD_KERNEL(avx2, narrow_row(wrow, ld, wt));
      } else if (!w.delta) {
        for (std::size_t q = 0; q < nj; ++q) wt[q] = static_cast<T>(static_cast<double>(wt[q]) * wrow[q]);
      } else if (tr) {  // δ indexed by E's row, this pass's column
        for (std::size_t q = 0; q < nj; ++q)
          wt[q] = static_cast<T>(static_cast<double>(wt[q]) * (wrow[q] - static_cast<double>(w.delta[j0 + q])));
      } else {
        const double dl = static_cast<double>(w.delta[i]);
        for (std::size_t q = 0; q < nj; ++q) wt[q] = static_cast<T>(static_cast<double>(wt[q]) * (wrow[q] - dl));
      }
    }
  }

  /// ∂L/∂B_jq += Σ_i Q_ij A_iq with Q the tile of E (or P): on the column side of a fused pass,
  /// on the row side of the pass over Eᵀ.
  void operand_step(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj) {
    const grad_layout& L = c->L;
    const auto& A = c->w.a;
    const std::size_t C = L.c, ld = grad_cols_padded(nj);
    if (L.op_cols) {
      for (std::size_t r = 0; r < ni; ++r)
        for (std::size_t q = 0; q < nj; ++q) {
          const double qv = static_cast<double>(tile[r * ld + q]);
          double* dst = ext_col + L.op_col_off + (j0 + q) * C;
          for (std::size_t k = 0; k < C; ++k) dst[k] += qv * static_cast<double>(A(i0 + r, k));
        }
    }
    if (L.op_rows) {
      for (std::size_t r = 0; r < ni; ++r) {
        double* dst = racc + r * L.row_width + L.op_row_off;
        for (std::size_t q = 0; q < nj; ++q) {
          const double qv = static_cast<double>(tile[r * ld + q]);
          for (std::size_t k = 0; k < C; ++k) dst[k] += qv * static_cast<double>(A(j0 + q, k));
        }
      }
    }
  }

  /// One term's contribution from one tile (W in `tile`).
  template <class Term>
  void term_step(const Term& tm, std::size_t t, std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj) {
    using Leaf = typename Term::leaf_type;
    using Chain = typename Term::chain_type;
    using F = typename Leaf::formula_type;
    using Dv = derivative<F>;
    constexpr bool stat = Dv::kind == derivative_kind::stationary;
    const grad_layout& L = c->L;
    const Leaf& leaf = *tm.leaf;
    const formula_params<T>& p = leaf.params;
    const std::size_t d = leaf.dim();
    const int rs = L.rslot[t], cs = L.cslot[t];
    const bool par = L.par[t];
    // per-dimension factors: the coordinate transform and the row/column gradient scales
    auto xform = [&](std::size_t k, T v) { return stat ? p.scale(k, v) : v; };
    auto wk = [&](std::size_t k) -> T {  // dot kind: F = Σ_k w_k x_k s y_k
      return p.kind == per_dim_kind::sqrt ? p.per_dim[k] : p.variance;
    };
    auto row_scale = [&](std::size_t k) -> double {
      if constexpr (stat) {
        const double sk = p.kind == per_dim_kind::inverse ? 1.0 / static_cast<double>(p.per_dim[k]) : 1.0;
        return 2.0 * static_cast<double>(p.acc_scale) * sk;
      } else {
        return static_cast<double>(wk(k));
      }
    };
    // column points of the tile, [k][j], zero-padded to a multiple of grad_lanes columns
    const std::size_t njp = grad_cols_padded(nj);
    for (std::size_t k = 0; k < d; ++k) {
      T* yk = ybuf + k * njp;
      for (std::size_t q = 0; q < nj; ++q) yk[q] = p.y_sign * xform(k, leaf.y(j0 + q, k));
      std::fill(yk + nj, yk + njp, T(0));
    }
    for (std::size_t r = 0; r < ni; ++r)
      for (std::size_t k = 0; k < d; ++k) xs[r * d + k] = xform(k, leaf.x(i0 + r, k));
    for (std::size_t k = 0; k < d; ++k) rsc[k] = row_scale(k);
    if (cs >= 0) std::fill(gyt, gyt + d * njp, T(0));
    T hconst = T(1);
    if constexpr (Chain::affine) hconst = tm.chain.der(T(0));
    term_rows_args<T> a{.ni = ni, .nj = nj, .njp = njp, .d = d, .xs = xs, .ys = ybuf, .w = tile,
                        .u = urow, .c = crow, .f = frow, .al = arow, .rsc = rsc,
                        .ra = rs >= 0 ? racc + std::size_t(L.roff[std::size_t(rs)]) : nullptr,
                        .ra_ld = L.row_width, .pq = par ? ext_par + L.poff[t] + 2 : nullptr,
                        .gyt = cs >= 0 ? gyt : nullptr, .lanes = lanes, .par = par};
    MEMSAFE_GRAD_KERNEL(avx2, term_rows<Dv>(tm.chain, p, hconst, a));
    if (par) {
      ext_par[L.poff[t]] += a.pv;
      ext_par[L.poff[t] + 1] += a.pa;
    }
    if (cs >= 0 && L.cols_direct) {  // this worker is the only one that sees these columns
      T* o = c->out[std::size_t(cs)];
      for (std::size_t k = 0; k < d; ++k) {
        const double sc = row_scale(k) * static_cast<double>(p.y_sign);
        const T* g = gyt + k * njp;
        for (std::size_t q = 0; q < nj; ++q) o[(j0 + q) * d + k] += static_cast<T>(sc * static_cast<double>(g[q]));
      }
    } else if (cs >= 0) {
      double* ca = ext_col + std::size_t(L.coff[std::size_t(cs)]);
      for (std::size_t k = 0; k < d; ++k) {
        const double sc = row_scale(k) * static_cast<double>(p.y_sign);
        const T* g = gyt + k * njp;
        for (std::size_t q = 0; q < nj; ++q) ca[(j0 + q) * d + k] += sc * static_cast<double>(g[q]);
      }
    }
  }
};

// ---- plan ------------------------------------------------------------------------------------------

/// The forward pre-steps of a backward (none; lse for logsumexp; lse and the softmax_sum output for δ).
template <class J, jobs::grad_pre = J::pre>
struct grad_pre_jobs {
  static constexpr std::size_t persistent_values = 0;  // n-vectors alive through the passes
};
template <class En, class T>
using lse_job_t = decltype(jobs::lower(memsafe::logsumexp(std::declval<const En&>()), static_cast<T*>(nullptr), nullptr,
                                       std::declval<rewrite::rule_log&>()));
template <class En, class T>
using smax_job_t =
    decltype(jobs::lower(memsafe::softmax_sum(std::declval<const En&>(), std::declval<matrix_view<const T>>()),
                         static_cast<T*>(nullptr), nullptr, std::declval<rewrite::rule_log&>()));
template <class J>
struct grad_pre_jobs<J, jobs::grad_pre::logsumexp> {
  static constexpr std::size_t persistent_values = 1;
  lse_job_t<typename J::expr_type, typename J::value_type> lse;
  tile_plan lse_plan{};
};
template <class J>
struct grad_pre_jobs<J, jobs::grad_pre::softmax_sum> {
  static constexpr std::size_t persistent_values = 2;
  lse_job_t<typename J::expr_type, typename J::value_type> lse;
  smax_job_t<typename J::expr_type, typename J::value_type> sm;
  tile_plan lse_plan{}, sm_plan{};
};

/// The host's decisions for a backward: which passes, their layouts and plans, the pre-steps.
template <class J>
struct grad_host_plan {
  grad_plan shown;
  bool rows = false, cols = false, fused = false, diagonal = false;
  grad_layout row_layout, col_layout;
  tile_plan row_plan, col_plan;
  std::size_t row_ext = 0, col_ext = 0;  ///< per-thread accumulator bytes outside the tile workspace
  std::optional<grad_pre_jobs<J>> pre;
};

namespace detail {
/// A pass planned at `avail` bytes (nullopt when its minimum does not fit) and its minimum.
struct pass_fit {
  std::size_t min = 0;
  std::optional<tile_plan> plan;
};
template <class Cost>
pass_fit fit_pass(std::size_t n, std::size_t m, std::size_t avail, std::size_t threads, Cost cost,
                  const std::string& what) {
  pass_fit f;
  f.min = cost(1, 1);
  if (f.min <= avail) f.plan = plan::tiles_2d(n, m, avail, threads, cost, what);
  return f;
}
template <class PlanFn>
pass_fit fit_forward(std::size_t avail, std::size_t threads, PlanFn&& planfn) {
  pass_fit f;
  f.min = planfn(unlimited, std::size_t{1}).min_bytes;
  if (f.min <= avail) f.plan = planfn(avail, threads);
  return f;
}
inline std::size_t sat_sub(std::size_t a, std::size_t b) { return a > b ? a - b : 0; }
}  // namespace detail

template <class J>
grad_host_plan<J> plan_grad(const J& j, std::size_t budget, std::size_t threads, const std::string& what) {
  using T = typename J::value_type;
  check_isa();
  grad_host_plan<J> hp;
  grad_plan& g = hp.shown;
  g.rewritten = j.expression;
  g.weights = j.w.str();
  g.budget = budget;
  const std::size_t n = j.e.rows(), m = j.e.cols();
  const bool empty = n == 0 || m == 0;
  if (j.diagonal) {  // diag(E) / trace(E): the n pairs (i, i), one thread, 1×1 tiles, both sides direct
    grad_layout L = make_layout(j, false, true);
    L.cols_direct = true;
    hp.row_layout = L;
    if (empty || !L.anything()) {
      g.mode = "none (nothing to compute)";
      return hp;
    }
    hp.row_ext = grad_ext_bytes<T>(L);
    const std::size_t cost = grad_tile_bytes<typename J::expr_type, T>(j.e, L, 1, 1) + hp.row_ext;
    g.min_bytes = g.planned_bytes = cost;
    if (budget < cost) plan::too_small(what, budget, cost);
    tile_plan& p = hp.row_plan;
    p.expression = j.expression;
    p.reduction = "the diagonal pairs (i, i)";
    p.rows = p.cols = n;
    p.tile_rows = p.tile_cols = 1;
    p.threads = g.threads = 1;
    p.per_thread_bytes = p.planned_bytes = p.min_bytes = cost;
    p.budget = budget;
    p.row_blocks = p.col_blocks = p.num_tiles = n;
    hp.rows = hp.fused = hp.diagonal = true;
    g.weights = memsafe::detail::cat(memsafe::detail::msg{
        "W_ii = A_i[", j.w.a.shape(), "] on the diagonal only (diag: the upstream; trace: its one value)"});
    g.mode = "diagonal (the n pairs (i, i) only, one thread)";
    g.labels.push_back("pairs (i, i): both sides' points and parameters");
    g.passes.push_back(p);
    return hp;
  }
  // Which sides are needed at all.
  const grad_layout rows_only = make_layout(j, false, false);
  const grad_layout fused = make_layout(j, false, true);
  const grad_layout colsL = make_layout(j, true, false);
  const bool need_rows = rows_only.anything();
  const bool need_cols = colsL.anything();
  hp.row_layout = rows_only;  // its parameter layout sizes the (zero) parameter gradients even when nothing runs
  if (empty || (!need_rows && !need_cols)) {
    g.mode = "none (nothing to compute)";
    return hp;
  }
  // Forward pre-steps and the vectors they leave for the passes.
  const std::size_t persistent = grad_pre_jobs<J>::persistent_values * n * sizeof(T);
  g.persistent_bytes = persistent;
  std::size_t pre_min = 0;  // the largest phase minimum of the pre-steps (persistent included)
  if constexpr (J::pre != jobs::grad_pre::none) {
    rewrite::rule_log prelog;
    if constexpr (J::pre == jobs::grad_pre::logsumexp)
      hp.pre.emplace(grad_pre_jobs<J>{jobs::lower(memsafe::logsumexp(j.e), static_cast<T*>(nullptr), nullptr, prelog)});
    else
      hp.pre.emplace(grad_pre_jobs<J>{
          jobs::lower(memsafe::logsumexp(j.e), static_cast<T*>(nullptr), nullptr, prelog),
          jobs::lower(memsafe::softmax_sum(j.e, j.values), static_cast<T*>(nullptr), nullptr, prelog)});
    auto& pj = *hp.pre;
    const auto lf = detail::fit_forward(detail::sat_sub(budget, persistent), threads,
                                        [&](std::size_t b, std::size_t t) { return plan_job(pj.lse, b, t, what); });
    pre_min = std::max(pre_min, persistent + lf.min);
    if (lf.plan) pj.lse_plan = *lf.plan;
    g.pre_labels.push_back("forward logsumexp(E) -> lse (n values, kept)");
    g.pre.push_back(pj.lse_plan);
    if constexpr (J::pre == jobs::grad_pre::softmax_sum) {
      const std::size_t out_bytes = n * j.values.cols() * sizeof(T);
      const auto sf = detail::fit_forward(detail::sat_sub(budget, persistent + out_bytes), threads,
                                          [&](std::size_t b, std::size_t t) { return plan_job(pj.sm, b, t, what); });
      pre_min = std::max(pre_min, persistent + out_bytes + sf.min);
      if (sf.plan) pj.sm_plan = *sf.plan;
      g.pre_labels.push_back("forward softmax_sum(E, V) -> out (n x c, freed) -> delta = rowsum(G * out) (kept)");
      g.pre.push_back(pj.sm_plan);
    }
  }
  const std::size_t avail = detail::sat_sub(budget, persistent);
  auto cost_of = [](const auto& P, const grad_layout& L) {
    const std::size_t ext = grad_ext_bytes<T>(L);
    return [&P, &L, ext](std::size_t ti, std::size_t tj) {
      return grad_tile_bytes<std::remove_cvref_t<decltype(P)>, T>(P, L, ti, tj) + ext;
    };
  };
  using En = typename J::expr_type;
  using Et = typename J::texpr_type;
  // Candidates: fused (one pass over E), split (a pass over E when it has row work, a pass over Eᵀ).
  detail::pass_fit ffit, rfit, cfit;
  const bool try_fused = need_cols && need_rows;
  if (try_fused) {
    const grad_layout& L = fused;
    ffit = detail::fit_pass(n, m, avail, threads, cost_of(static_cast<const En&>(j.e), L), what);
  }
  if (need_rows) rfit = detail::fit_pass(n, m, avail, threads, cost_of(static_cast<const En&>(j.e), rows_only), what);
  if (need_cols) cfit = detail::fit_pass(m, n, avail, threads, cost_of(static_cast<const Et&>(j.et), colsL), what);
  const std::size_t split_min = std::max(need_rows ? rfit.min : 0, need_cols ? cfit.min : 0);
  const bool split_fits = (!need_rows || rfit.plan) && (!need_cols || cfit.plan);
  const std::size_t pass_min = try_fused ? std::min(ffit.min, split_min) : split_min;
  g.min_bytes = std::max(pre_min, persistent + pass_min);
  if (budget < g.min_bytes) plan::too_small(what, budget, g.min_bytes);
  bool use_fused = false;
  if (try_fused && ffit.plan) {
    std::size_t split_threads = ~std::size_t{0};
    if (rfit.plan) split_threads = std::min(split_threads, rfit.plan->threads);
    if (cfit.plan) split_threads = std::min(split_threads, cfit.plan->threads);
    use_fused = !split_fits || ffit.plan->threads >= split_threads;
  }
  std::size_t planned_passes = 0;
  if (use_fused) {
    hp.fused = hp.rows = true;
    hp.row_layout = fused;
    hp.row_plan = *ffit.plan;
    hp.row_ext = grad_ext_bytes<T>(fused);
    g.mode = "fused (one pass over E; column-side gradients in per-thread accumulators)";
    g.labels.push_back(memsafe::detail::cat(memsafe::detail::msg{
        "rows of E: ", fused.row_width ? "row-side points; " : "", fused.par_width ? "parameters; " : "",
        fused.cols ? "column-side points per thread" : "", fused.cols && fused.op_cols ? "; " : "",
        fused.op_cols ? "operand per thread" : ""}));
    g.passes.push_back(hp.row_plan);
    planned_passes = hp.row_plan.planned_bytes;
  } else {
    if (need_rows) {
      hp.rows = true;
      hp.row_layout = rows_only;
      hp.row_plan = *rfit.plan;
      hp.row_ext = grad_ext_bytes<T>(rows_only);
      g.labels.push_back(memsafe::detail::cat(memsafe::detail::msg{
          "rows of E: ", rows_only.row_width ? "row-side points" : "",
          rows_only.row_width && rows_only.par_width ? ", " : "", rows_only.par_width ? "parameters" : ""}));
      g.passes.push_back(hp.row_plan);
      planned_passes = std::max(planned_passes, hp.row_plan.planned_bytes);
    }
    if (need_cols) {
      hp.cols = true;
      hp.col_layout = colsL;
      hp.col_plan = *cfit.plan;
      hp.col_ext = grad_ext_bytes<T>(colsL);
      g.labels.push_back(memsafe::detail::cat(memsafe::detail::msg{
          "rows of E^T: ", colsL.row_width > (colsL.op_rows ? colsL.c : 0) ? "column-side points" : "",
          colsL.row_width > (colsL.op_rows ? colsL.c : 0) && colsL.op_rows ? ", " : "",
          colsL.op_rows ? "operand" : ""}));
      g.passes.push_back(hp.col_plan);
      planned_passes = std::max(planned_passes, hp.col_plan.planned_bytes);
    }
    g.mode = need_rows && need_cols ? "split (a pass over E, then a pass over E^T)"
             : need_rows            ? "rows (one pass over E)"
                                    : "columns (one pass over E^T)";
  }
  g.planned_bytes = persistent + planned_passes;
  for (const auto& q : g.pre) g.planned_bytes = std::max(g.planned_bytes, persistent + q.planned_bytes);
  if constexpr (J::pre == jobs::grad_pre::softmax_sum)
    g.planned_bytes =
        std::max(g.planned_bytes, persistent + n * j.values.cols() * sizeof(T) + hp.pre->sm_plan.planned_bytes);
  for (const auto& q : g.passes) g.threads = std::max(g.threads, q.threads);
  return hp;
}

/// The host's decisions for the backward of a lazy × lazy product A·B: a pass over A (one row
/// block of all p rows, threads splitting the contraction's chunks, A's column side written
/// directly) and a pass over B (row blocks of the contraction, all q columns per tile, B's column
/// side in per-thread accumulators).
struct grad_product_plan {
  grad_plan shown;
  bool a = false, b = false;
  grad_layout la, lb;
  tile_plan pa, pb;
  std::size_t ea = 0, eb = 0;  ///< per-thread accumulator bytes outside the tile workspace
};

template <class An, class Bn, class Atn, class Btn, class T>
grad_product_plan plan_grad(const jobs::grad_product_job<An, Bn, Atn, Btn, T>& j, std::size_t budget,
                            std::size_t threads, const std::string& what) {
  check_isa();
  grad_product_plan hp;
  grad_plan& g = hp.shown;
  g.rewritten = j.expression;
  g.weights = memsafe::detail::cat(memsafe::detail::msg{
      "dL/dA = G·Bᵀ (per tile of A: G[rows]·Bᵀ[:, chunk], Bᵀ generated q × chunk), dL/dB = Aᵀ·G (per "
      "tile of B: Aᵀ[chunk, :]·G, Aᵀ generated chunk × p); G[",
      j.g.shape(), "]"});
  g.budget = budget;
  const std::size_t p = j.a.rows(), s = j.a.cols(), q = j.b.cols();
  hp.la = layout_for(j.a, j.a_row, j.a_col, j.points, j.params);
  hp.la.cols_direct = true;
  hp.lb = layout_for(j.b, j.b_row, j.b_col, j.points, j.params);
  const bool need_a = hp.la.anything(), need_b = hp.lb.anything();
  if (p == 0 || q == 0 || s == 0 || (!need_a && !need_b)) {
    g.mode = "none (nothing to compute)";
    return hp;
  }
  hp.ea = grad_ext_bytes<T>(hp.la);
  hp.eb = grad_ext_bytes<T>(hp.lb);
  auto cost_a = [&](std::size_t ti, std::size_t tj) {
    return grad_tile_bytes<An, T>(j.a, hp.la, ti, tj) + other_bytes<Btn, T>(j.bt, true, ti, tj) + hp.ea;
  };
  auto cost_b = [&](std::size_t ti, std::size_t tj) {
    return grad_tile_bytes<Bn, T>(j.b, hp.lb, ti, tj) + other_bytes<Atn, T>(j.at, false, ti, tj) + hp.eb;
  };
  const std::size_t min_a = need_a ? cost_a(p, 1) : 0, min_b = need_b ? cost_b(1, q) : 0;
  g.min_bytes = std::max(min_a, min_b);
  if (budget < g.min_bytes) plan::too_small(what, budget, g.min_bytes);
  const std::vector<std::size_t> chunks_j = plan::candidates(s, {1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1}),
                                 chunks_i = plan::candidates(s, {64, 32, 16, 8, 4, 2, 1});
  if (need_a) {
    hp.a = true;
    hp.pa = plan::tiles_2d(p, s, budget, threads, cost_a, what, {p}, chunks_j);
    hp.pa.min_bytes = min_a;  // all p rows per tile: the smallest tile is p × 1
    g.labels.push_back(
        "A (rows of A, chunks of the contraction): A's row side and parameters; its column side per chunk");
    g.passes.push_back(hp.pa);
    g.planned_bytes = std::max(g.planned_bytes, hp.pa.planned_bytes);
  }
  if (need_b) {
    hp.b = true;
    hp.pb = plan::tiles_2d(s, q, budget, threads, cost_b, what, chunks_i, {q});
    hp.pb.min_bytes = min_b;  // all q columns per tile: the smallest tile is 1 × q
    g.labels.push_back(
        "B (chunks of the contraction, all columns of B): B's row side per chunk; its column side and "
        "parameters per thread");
    g.passes.push_back(hp.pb);
    g.planned_bytes = std::max(g.planned_bytes, hp.pb.planned_bytes);
  }
  g.mode = need_a && need_b ? "lazy x lazy (a pass over A, then a pass over B)"
           : need_a         ? "lazy x lazy (a pass over A)"
                            : "lazy x lazy (a pass over B)";
  for (const auto& t : g.passes) g.threads = std::max(g.threads, t.threads);
  return hp;
}

// ---- run -------------------------------------------------------------------------------------------

/// Where a backward writes: one zero-initialised rows×d buffer per requested point set, the
/// parameter accumulators (summed over threads; converted by the API), the operand's buffer.
template <class T>
struct grad_outputs {
  std::vector<T*> points;
  std::vector<double> params;    ///< the pass over E's (or A's) parameter layout (its poff)
  std::vector<double> params_b;  ///< lazy × lazy: the pass over B's
  T* op = nullptr;
};

/// Run one pass over P (E, Eᵀ, or a factor of a lazy × lazy product with O the other factor's
/// transpose) under its plan; its parameter accumulators are added to `params`.
template <class P, class T, class O = void>
void run_grad_pass(const P& p, const grad_layout& L, const tile_plan& plan, std::size_t ext_bytes,
                   const jobs::grad_weights<T>& w, grad_outputs<T>& out, std::vector<double>& params,
                   std::ptrdiff_t op_rs, std::ptrdiff_t op_cs, accountant& acc, const O* other = nullptr,
                   bool a_side = true) {
  const std::size_t n = p.rows(), m = p.cols();
  if (n == 0 || m == 0) return;
  grad_ctx<P, T, O> ctx(p, L, w, out.points, out.op, op_rs, op_cs);
  if constexpr (!std::is_void_v<O>) ctx.other = other;
  ctx.a_side = a_side;
  const std::size_t P_ = plan.threads;
  std::vector<temp_buffer<double>> ext;
  ext.reserve(P_);
  for (std::size_t t = 0; t < P_; ++t) {
    ext.emplace_back(acc, ext_bytes / sizeof(double));
    std::fill(ext.back().data(), ext.back().data() + ext_bytes / sizeof(double), 0.0);
  }
  tile_plan run_plan = plan;
  run_plan.per_thread_bytes = plan.per_thread_bytes - ext_bytes;  // the tile workspace; ext is above
  struct no_identity {
    static void identity(std::size_t, const jobs::out_spec<T>&) {}
  };
  const jobs::out_spec<T> none{};
  std::size_t slot = 0;
  run_row_blocks(n, m, no_identity{}, none, run_plan, acc, [&](std::byte* ws) {
    return grad_worker<P, T, O>(ctx, ws, plan.tile_rows, plan.tile_cols, ext_bytes ? ext[slot++].data() : nullptr);
  });
  // merge the per-thread accumulators
  const std::size_t par_doubles = L.par_width ? align64(L.par_width * sizeof(double)) / sizeof(double) : 0;
  for (std::size_t t = 0; t < P_ && ext_bytes; ++t) {
    const double* e = ext[t].data();
    for (std::size_t q = 0; q < L.par_width; ++q) params[q] += e[q];
    const double* col = e + par_doubles;
    for (std::size_t k = 0; k < L.coff.size(); ++k) {
      if (L.coff[k] < 0 || L.cols_direct) continue;
      T* o = out.points[k];
      const double* src = col + std::size_t(L.coff[k]);
      for (std::size_t q = 0; q < L.prows[k] * L.pdim[k]; ++q) o[q] += static_cast<T>(src[q]);
    }
    if (L.op_cols) {
      const double* src = col + L.op_col_off;
      for (std::size_t jj = 0; jj < L.m; ++jj)
        for (std::size_t q = 0; q < L.c; ++q)
          out.op[std::ptrdiff_t(jj) * op_rs + std::ptrdiff_t(q) * op_cs] += static_cast<T>(src[jj * L.c + q]);
    }
  }
}

/// Run a planned lazy × lazy backward: the pass over A, then the pass over B.
template <class An, class Bn, class Atn, class Btn, class T>
void run_grad(const jobs::grad_product_job<An, Bn, Atn, Btn, T>& j, grad_product_plan& hp, grad_outputs<T>& out,
              accountant& acc) {
  jobs::grad_weights<T> w;
  w.dense = true;
  w.g = j.g;
  if (hp.a) run_grad_pass<An, T, Btn>(j.a, hp.la, hp.pa, hp.ea, w, out, out.params, 0, 0, acc, &j.bt, true);
  if (hp.b) run_grad_pass<Bn, T, Atn>(j.b, hp.lb, hp.pb, hp.eb, w, out, out.params_b, 0, 0, acc, &j.at, false);
}

/// Run the diagonal backward (diag/trace): one worker over the pairs (i, i), 1×1 tiles.
template <class P, class T>
void run_grad_diagonal(const P& p, const grad_layout& L, const tile_plan& plan, std::size_t ext_bytes,
                       const jobs::grad_weights<T>& w, grad_outputs<T>& out, accountant& acc) {
  const std::size_t n = p.rows();
  grad_ctx<P, T> ctx(p, L, w, out.points, out.op, 0, 0);
  temp_buffer<double> ext(acc, ext_bytes / sizeof(double));
  std::fill(ext.data(), ext.data() + ext.size(), 0.0);
  temp_buffer<std::byte> ws(acc, plan.per_thread_bytes - ext_bytes);
  grad_worker<P, T> wk(ctx, ws.data(), 1, 1, ext_bytes ? ext.data() : nullptr);
  for (std::size_t i = 0; i < n; ++i) {
    wk.start(i, 1);
    wk.fold(i, 1, i, i + 1);
    wk.finish(i, 1);
  }
  for (std::size_t q = 0; q < L.par_width; ++q) out.params[q] += ext[q];
}

/// Run a planned backward: the pre-steps (into accounted vectors), then the passes.
template <class J>
void run_grad(const J& j, grad_host_plan<J>& hp, grad_outputs<typename J::value_type>& out, accountant& acc) {
  using T = typename J::value_type;
  if (!hp.rows && !hp.cols) return;
  if (hp.diagonal) {
    run_grad_diagonal(j.e, hp.row_layout, hp.row_plan, hp.row_ext, j.w, out, acc);
    return;
  }
  const std::size_t n = j.e.rows();
  jobs::grad_weights<T> w = j.w;
  temp_buffer<T> lse, delta;
  if constexpr (J::pre != jobs::grad_pre::none) {
    auto& pj = *hp.pre;
    lse = temp_buffer<T>(acc, n);
    if constexpr (J::pre == jobs::grad_pre::softmax_sum) delta = temp_buffer<T>(acc, n);
    pj.lse.out.values = lse.data();
    run_job(pj.lse, pj.lse_plan, static_cast<T*>(nullptr), static_cast<index_t*>(nullptr), acc);
    w.lse = lse.data();
    if constexpr (J::pre == jobs::grad_pre::softmax_sum) {
      const std::size_t c = j.values.cols();
      {
        temp_buffer<T> o(acc, n * c);
        pj.sm.out.values = o.data();
        run_job(pj.sm, pj.sm_plan, static_cast<T*>(nullptr), static_cast<index_t*>(nullptr), acc);
        for (std::size_t i = 0; i < n; ++i) {
          double s = 0;
          for (std::size_t q = 0; q < c; ++q) s += static_cast<double>(j.w.a(i, q)) * static_cast<double>(o[i * c + q]);
          delta[i] = static_cast<T>(s);
        }
      }
      w.delta = delta.data();
    }
  }
  if (hp.rows) run_grad_pass(j.e, hp.row_layout, hp.row_plan, hp.row_ext, w, out, out.params, j.op_rs, j.op_cs, acc);
  if (hp.cols) run_grad_pass(j.et, hp.col_layout, hp.col_plan, hp.col_ext, w, out, out.params, j.op_rs, j.op_cs, acc);
}

}  // namespace memsafe::host
