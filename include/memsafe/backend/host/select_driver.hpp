// memsafe/backend/host/select_driver.hpp — fused k-nearest selection on the host (no distance tile at all).
//
// For argkmin/argmin/min of sqdist, l1 and cosine, and argkmax/argmax/max of dot, a worker packs a
// column tile of Y once per row block, then screens groups of query rows against its panels in
// registers (the kernels of the instruction set chosen at run time, isa.hpp and simd.hpp) and
// re-evaluates only the lanes that pass. Each row keeps its k best as a binary heap whose top is
// the current k-th value, so the screening threshold tightens at every insertion. Results are
// identical to the tile path's (the reference) — see select.hpp for why — at every budget and on
// every instruction set; the plan names the one that ran (tile_plan::isa).
//
// Workspace per thread (all accounted, carved from one buffer; the same on every instruction set):
//   packed Y tile, screening offsets (+ 1/‖y‖ for cosine)    panels(tj)·W·(d + 2)·T
//   the row block's query rows, 1/‖x‖, screening constants    ti·(d·T + ...)
//   heaps and counts                                          ti·k·(T + index)
//   merge scratch (threads splitting one row block's columns) k·(T + index)
//   sqdist: the tile and the block's rows less the centre      panels(tj)·W·d·T + ti·d·T + d·(T + 8)
//     (the FP32/FP64 screen about the row block's centre, select.hpp)
//   the bfloat16, AMX or int16 screen: their pairs (⌈d/2⌉, AMX:
//     rounded up to 16, bf16_pairs), and the int16 screen's
//     per-row scales and margins, per-point starts             (panels(tj)·W + ti)·pairs·4 + ti·16 + panels(tj)·W·4
#pragma once
#include "../../core/algo.hpp"
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "isa.hpp"
#include "kernels.hpp"
#include "select.hpp"
#include "simd.hpp"
#include "../../core/accounting.hpp"
#include "../../core/env.hpp"
#include "../../core/maybe.hpp"
#include "../../expr/formulas.hpp"
#include "../../expr/lazy.hpp"
#include "../../plan/plan.hpp"
#include "executor.hpp"
#include "monoids.hpp"

namespace memsafe::host {

// The host backend runs the implementation types of memsafe::detail (nodes, the accountant, ...).
using namespace memsafe::detail;

/// The fused path is on unless MEMSAFE_KERNELS=reference or MEMSAFE_ISA=portable (then every
/// expression takes the portable tile path — for comparisons and debugging), or no instruction set
/// of the kernels is available (the CPU, or a translation unit without them: isa.hpp).
inline bool fused_kernels_enabled() { return choose_isa(isa_compiled) != isa::portable; }

template <class F, bool Max>
struct select_kind_of {
  static constexpr bool ok = false;
};
template <>
struct select_kind_of<formula::sqdist, false> {
  static constexpr bool ok = true;
  static constexpr host::select_kind kind = host::select_kind::sqdist;
};
template <>
struct select_kind_of<formula::l1, false> {
  static constexpr bool ok = true;
  static constexpr host::select_kind kind = host::select_kind::l1;
};
template <>
struct select_kind_of<formula::cosine, false> {
  static constexpr bool ok = true;
  static constexpr host::select_kind kind = host::select_kind::cosine;
};
template <>
struct select_kind_of<formula::dot, true> {
  static constexpr bool ok = true;
  static constexpr host::select_kind kind = host::select_kind::dot_max;
};

/// Which monoids are selections: k (1 for min/argmin), direction, and whether indices are written.
template <class Mon>
struct select_monoid {
  static constexpr bool ok = false;
  static constexpr bool max = false;
};
template <class T, bool Max>
struct select_monoid<topk_monoid<T, Max>> {
  static constexpr bool ok = true, max = Max, top_k = true;
  static std::size_t k(const topk_monoid<T, Max>& m) { return m.k; }
};
template <class T, bool Max, bool WithIndex>
struct select_monoid<best_monoid<T, Max, WithIndex>> {
  static constexpr bool ok = true, max = Max, top_k = false;
  static std::size_t k(const best_monoid<T, Max, WithIndex>&) { return 1; }
};

template <class E, class Mon>
inline constexpr bool fusable_select = false;
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D, class Mon>
inline constexpr bool fusable_select<pairwise<F, T, RX, RY, D>, Mon> =
    isa_compiled != isa_bit(isa::portable) && select_monoid<Mon>::ok && select_kind_of<F, select_monoid<Mon>::max>::ok;

/// The plan of a row job that the fused kernels serve: fused()'s, unless its smallest plan is over
/// the budget and the tile loop's (tile()) is not — then the tile loop's, which says why. Where
/// neither fits, the budget_error of the one with the smaller minimum. The plan's minimum is the
/// smaller of the two forms' minima: below the fused form's the tile loop runs. The run takes the
/// form the plan names (tile_plan::fused).
template <class Fused, class Tile>
MEMSAFE_COLD tile_plan plan_fused_or_tile(Fused&& fused, Tile&& tile) {
  tile_plan p;
  try {
    p = fused();
  } catch (const budget_error& f) {
    tile_plan q;
    try {
      q = tile();
    } catch (const budget_error& t) {
      if (t.minimum_bytes <= f.minimum_bytes) throw;
      throw budget_error(f);
    }
    q.fused = false;
    q.fused_min_bytes = f.minimum_bytes;
    if (q.isa.empty()) q.isa = isa_name(isa::portable);
    q.reduction += cat(msg{"; the tile loop, as the fused kernels' smallest plan (", format_bytes(f.minimum_bytes),
                        ") is over the budget"});
    return q;
  }
  p.fused = true;
  p.fused_min_bytes = p.min_bytes;
  try {
    p.min_bytes = std::min(p.min_bytes, tile().min_bytes);
  } catch (const budget_error&) {  // the tile loop's minimum is over the budget, so over the fused one's
  }
  return p;
}

/// fused(leaf) for the fused kernels' leaf (the expression, or the fast form a guard chose), with
/// generic(e) for the tile loop: at planning (tile_plan results) through plan_fused_or_tile, at
/// run time directly (the plan chose it).
template <class Leaf, class E, class Fused, class Generic>
decltype(auto) fused_or_generic(const Leaf& leaf, const E& e, Fused& fused, Generic& generic) {
  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(fused(leaf))>, tile_plan>)
    return plan_fused_or_tile([&] { return fused(leaf); }, [&] { return generic(e); });
  else
    return fused(leaf);
}

/// Whether a host row job takes the fused kernels: the plan's choice when running (`planned`), else
/// the environment's (MEMSAFE_ISA, MEMSAFE_KERNELS), looked up only when planning.
inline bool fused_chosen(detail::maybe<bool> planned) { return planned ? *planned : fused_kernels_enabled(); }

/// Call fused(leaf) when the fused selection applies to the (normalised) expression `e` — a
/// pairwise leaf, or a guarded rewrite whose run-time guard chose one — and an instruction set of
/// its kernels is chosen (choose_isa), else generic(e). A plan from generic is marked portable
/// unless it names its instruction set (the fused sums of sum_driver.hpp, tried inside generic).
/// `planned`: empty when planning (the fused kernels where an instruction set of theirs is chosen,
/// and plan_fused_or_tile may still choose the tile loop); when running, the plan's `fused`, so the
/// run takes the planned form whatever the environment says by then.
template <class E, class Mon, class Fused, class Generic>
decltype(auto) dispatch_select(const E& e, const Mon&, Fused&& fused, Generic&& generic,
                               detail::maybe<bool> planned = {}) {
  if constexpr (fusable_select<E, Mon>) {
    if (fused_chosen(planned)) return fused_or_generic(e, e, fused, generic);
  } else if constexpr (requires { e.use_fast; }) {
    if constexpr (fusable_select<std::remove_cvref_t<decltype(e.fast)>, Mon>)
      if (e.use_fast && fused_chosen(planned)) return fused_or_generic(e.fast, e, fused, generic);
  }
  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(generic(e))>, tile_plan>) {
    tile_plan p = generic(e);
    if (p.isa.empty()) p.isa = isa_name(isa::portable);  // a fused sum (sum_driver.hpp) names its own
    return p;
  } else {
    return generic(e);
  }
}

#if defined(MEMSAFE_SIMD_DISPATCH)

template <class E, class Mon>
struct select_worker {
  using T = typename E::value_type;
  using F = typename E::formula_type;
  static constexpr bool Max = select_monoid<Mon>::max;
  static constexpr host::select_kind K = select_kind_of<F, Max>::kind;
  static constexpr bool cos = K == host::select_kind::cosine;
  static constexpr bool sq = K == host::select_kind::sqdist;
  static constexpr std::size_t W = host::lanes<T>;  // points per packed panel
  static constexpr std::size_t hit_batch = 4;  // exact values evaluated together (hit)

  /// sqdist: room to screen a row block about its centre (the panels and rows less c, the centre);
  /// a paired screen `sm` (float: bfloat16 or AMX, or sqdist's int16): their panels and query pairs
  /// too (bf16_pairs 32-bit pairs per point and row), packed from those, and the int16 screen's
  /// scale and margin per row and accumulator start per point.
  static std::size_t bytes(const E& e, std::size_t k, std::size_t ti, std::size_t tj, host::screen_mode sm) {
    using host::align64;
    const bool paired = sm != host::screen_mode::native;
    const std::size_t d = e.dim(), np = host::panels<T>(tj), dp = host::bf16_pairs(d, sm);
    const std::size_t centre = align64(d * sizeof(T)) + align64(d * 8);
    return align64(np * W * d * sizeof(T)) + align64(np * W * sizeof(T)) + align64(np * W * sizeof(double)) +
           (cos ? align64(np * W * sizeof(T)) : 0) +
           align64(ti * d * sizeof(T)) + align64(ti * sizeof(T)) * 2 + align64(ti * sizeof(host::row_screen<T>)) +
           align64(ti * k * sizeof(ranked<T>)) + align64(ti * sizeof(std::size_t)) + align64(k * sizeof(ranked<T>)) +
           (sq ? align64(np * W * d * sizeof(T)) + align64(ti * d * sizeof(T)) + centre : 0) +
           (paired ? align64(np * W * dp * 4) + align64(ti * dp * 4) + align64(ti * 8) + 2 * align64(ti * 4) +
                         align64(np * W * 4)
                   : 0);
  }

  const E& e;
  std::size_t k, d, dp;  // dp: pairs per row and point of a paired screen (bf16_pairs)
  // the bfloat16 screen (on VDPBF16PS or AMX tiles), the int16 screen (select.hpp), the AMX screen
  // (amx_kernel.inc)
  bool b16, q16, amx;
  double delta;
  T *pack, *init, *yinv = nullptr, *xs, *xinv, *thr;
  double* sqn;  // the column tile's squared norms (screening_init's input)
  std::uint32_t *pack2 = nullptr, *xs2 = nullptr;
  // int16 (select.hpp): each row's margin in units of its scales' product (pack_i16_row), its scale
  // exponent, its scales' product with the current tile (qs), the tile's accumulator starts, and
  // the block's range of row exponents; tile_ey: the current tile's exponent, or none when it
  // screens in T.
  double* row_q = nullptr;
  int* row_e = nullptr;
  T* qs = nullptr;
  std::int32_t* acc0 = nullptr;
  int e_lo = 0, e_hi = 0;
  detail::maybe<int> tile_ey;
  T* center = nullptr;         // sqdist: the row block's centre
  double* center_sum = nullptr;  // its scratch
  T *cpack = nullptr, *cxs = nullptr;  // sqdist: the panels and rows less the centre
  bool centred = false;        // this row block screens about its centre (always for bfloat16, else worth_centring)
  host::row_screen<T>* rs;
  ranked<T>* heap;
  std::size_t* count;
  ranked<T>* scratch;

  std::size_t tj, m;
  const out_spec<T>* out;
  host::screen_kernels<T> kernels;
  host::screen_kernels<T> native;  // int16: T's own screen, for a tile whose scales leave the int16 screen's range
  std::size_t group_r0 = 0, group_rows = 0, tile_j0 = 0, tile_nj = 0;  // what `hit` works on

  select_worker(const E& e_, std::size_t k_, std::byte* ws, std::size_t ti, std::size_t tj_, const out_spec<T>& o,
                isa i, host::screen_mode sm)
      : e(e_), k(k_), d(e_.dim()), dp(host::bf16_pairs(d, sm)),
        b16(sm == host::screen_mode::bf16 || sm == host::screen_mode::amx),
        q16(sm == host::screen_mode::i16), amx(sm == host::screen_mode::amx),
        delta(b16 ? host::select_margin_bf16(d) : host::select_margin<T>(d)),
        tj(tj_), m(e_.cols()), out(&o), kernels(host::screen_kernels_for<T, K>(i, sm)),
        native(q16 ? host::screen_kernels_for<T, K>(i) : host::screen_kernels<T>{}) {
    if (!kernels.group || (q16 && !native.group) || (b16 && !kernels.center_bf16))
      throw error(cat(msg{"memsafe: internal: no ", isa_name(i), b16 ? " bfloat16" : q16 ? " int16" : "",
                       " selection kernels"}));
    std::byte* cur = ws;
    const std::size_t np = host::panels<T>(tj);
    pack = carve<T>(cur, np * W * d);
    init = carve<T>(cur, np * W);
    sqn = carve<double>(cur, np * W);
    if constexpr (cos) yinv = carve<T>(cur, np * W);
    xs = carve<T>(cur, ti * d);
    xinv = carve<T>(cur, ti);
    thr = carve<T>(cur, ti);
    rs = carve<host::row_screen<T>>(cur, ti);
    heap = carve<ranked<T>>(cur, ti * k);
    count = carve<std::size_t>(cur, ti);
    scratch = carve<ranked<T>>(cur, k);
    if constexpr (sq) {
      cpack = carve<T>(cur, np * W * d);
      cxs = carve<T>(cur, ti * d);
      center = carve<T>(cur, d);
      center_sum = carve<double>(cur, d);
    }
    if (b16 || q16) {
      pack2 = carve<std::uint32_t>(cur, np * W * dp);
      xs2 = carve<std::uint32_t>(cur, ti * dp);
      row_q = carve<double>(cur, ti);
      row_e = carve<int>(cur, ti);
      qs = carve<T>(cur, ti);
      acc0 = carve<std::int32_t>(cur, np * W);
    }
  }

  /// "a ranks before b", as an object the heap algorithms inline (a function's address they may not).
  struct before {
    bool operator()(const ranked<T>& a, const ranked<T>& b) const { return ranks_before<Max>(a, b); }
  };
  static constexpr before cmp{};

  T threshold(std::size_t r) const {
    const bool full = count[r] == k;
    // int16: plus the row half of the quantisation margin (select.hpp) on the row's and tile's scales
    constexpr double eta = memsafe::detail::screen_eta<T>();
    return host::screen_threshold<T, K>(
        full, full ? heap[r * k].v : T(0), rs[r], delta,
        tile_ey ? eta + double(qs[r]) * row_q[r] * (1.0 + 0x1p-20) : eta);
  }

  /// Offer (v, j) to row r's heap (the heap top ranks last: it is the k-th best).
  void offer(std::size_t r, T v, index_t j) {
    ranked<T>* h = heap + r * k;
    std::size_t& c = count[r];
    const ranked<T> x{v, j};
    if (c < k) {
      h[c++] = x;
      std::push_heap(h, h + c, cmp);
      if (c == k) thr[r] = threshold(r);
    } else if (cmp(x, h[0])) {  // x replaces the top, sifted down: one pass (a pop and a push take two)
      std::size_t i = 0;
      for (std::size_t ch = 1; ch < k; i = ch, ch = 2 * ch + 1) {
        if (ch + 1 < k && cmp(h[ch], h[ch + 1])) ++ch;  // the child that ranks last
        if (!cmp(x, h[ch])) break;
        h[i] = h[ch];
      }
      h[i] = x;
      thr[r] = threshold(r);
    }
  }

  /// Start a row block: load its rows (scaled as the tile path does) and empty its heaps.
  void start(std::size_t i0, std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r) {
      xinv[r] = host::load_row(e.x, e.params, i0 + r, xs + r * d, cos);
      rs[r] = host::screen_row<T, K>(xs + r * d, d, xinv[r]);
    }
    centred = false;
    if constexpr (sq) {  // about the block's centre (select.hpp): the rows less c and ‖fl(x − c)‖²
      host::block_center(xs, d, ni, center, center_sum);
      double centred_sum = 0, raw_sum = 0;  // over the finite rows (the others screen nothing out)
      for (std::size_t r = 0; r < ni; ++r) {
        const double n2 = host::center_row(xs + r * d, d, center, cxs + r * d);
        if (rs[r].finite) {
          centred_sum += n2;
          raw_sum += rs[r].xn2;
        }
      }
      // The bfloat16 screen always runs about the centre (its margin is relative to ‖x − c‖); the
      // int16 screen's scale follows the largest |x − c| only when the block is centred.
      centred = b16 || host::worth_centring(centred_sum, raw_sum);
      if (centred)
        for (std::size_t r = 0; r < ni; ++r) {
          const double n2 = host::row_sqnorm(cxs + r * d, d);
          rs[r].xn2 = n2;
          rs[r].finite = rs[r].finite && libm::isfinite(n2) && n2 < double(std::numeric_limits<T>::max()) / 4;
        }
      if constexpr (std::is_same_v<T, float>) {
        if (q16) {  // each row's own scale: 2^e ≥ its largest |x| (|x − c|, centred) / qmax
          const T* sx = centred ? cxs : xs;
          const std::int32_t qmax = host::i16_qmax(d);
          e_lo = std::numeric_limits<int>::max(), e_hi = std::numeric_limits<int>::min();
          for (std::size_t r = 0; r < ni; ++r) {
            const double mx = rs[r].finite ? kernels.max_abs(sx + r * d, d) : 0.0;
            row_e[r] = mx > 0 ? host::i16_exponent(mx, qmax) : std::numeric_limits<int>::min();
            if (mx > 0) e_lo = std::min(e_lo, row_e[r]), e_hi = std::max(e_hi, row_e[r]);
          }
          if (e_lo > e_hi) e_lo = e_hi = 0;  // no row with a nonzero finite value
          for (std::size_t r = 0; r < ni; ++r) {
            if (row_e[r] == std::numeric_limits<int>::min()) row_e[r] = e_hi;  // zeros (or not finite): any scale
            row_q[r] = host::pack_i16_row(sx + r * d, d, row_e[r], rs[r].finite, xs2 + r * dp);
          }
        }
      }
    }
    if constexpr (std::is_same_v<T, float>)
      if (b16) {  // the rows' pairs: sqdist's about the centre; cosine's unit rows and dot's rows as they are
        const T* sx = centred ? cxs : xs;
        for (std::size_t r = 0; r < ni; ++r) host::pack_bf16_row(sx + r * d, d, dp, xs2 + r * dp);
      }
    tile_ey.reset();
    for (std::size_t r = 0; r < ni; ++r) {
      count[r] = 0;
      thr[r] = threshold(r);  // accept everything until k values are held
    }
  }

  /// The kernels' call back (screen_args::hit): re-evaluate the passing lanes of panels
  /// [pnl, pnl + nb) for the rows of the current group exactly and offer them to their heaps, in
  /// row, panel, lane order. Compiled for the translation unit's target and never inlined into a
  /// kernel, so exact_values rounds as the portable path does (select.hpp). The lanes are
  /// evaluated hit_batch at a time (their chains interleaved; a short last batch repeats its
  /// first pair) and offered after each batch: the masks were fixed before the call, so the
  /// offers' order, and the heaps, are those of one lane at a time.
  [[gnu::noinline]] static void hit(void* ctx, std::size_t pnl, std::size_t nb, const std::uint32_t* masks) {
    auto& w = *static_cast<select_worker*>(ctx);
    const std::size_t d = w.d;
    const T* yp = w.pack + pnl * d * W;
    const T* xb[hit_batch];
    const T* yb[hit_batch];
    T xw[hit_batch], yw[hit_batch], v[hit_batch];
    std::size_t rb[hit_batch], jb[hit_batch], n = 0;
    const auto flush = [&] {
      for (std::size_t i = n; i < hit_batch; ++i) xb[i] = xb[0], yb[i] = yb[0], xw[i] = xw[0], yw[i] = yw[0];
      host::exact_values<T, K>(xb, yb, d, W, xw, yw, v);
      for (std::size_t i = 0; i < n; ++i) w.offer(rb[i], v[i], index_t(w.tile_j0 + jb[i]));
      n = 0;
    };
    for (std::size_t q = 0; q < w.group_rows; ++q)
      for (std::size_t p = 0; p < nb; ++p)
        for (std::uint32_t mk = masks[q * nb + p]; mk; mk &= mk - 1) {
          const std::size_t lane = static_cast<std::size_t>(__builtin_ctz(mk)), j = (pnl + p) * W + lane;
          if (j >= w.tile_nj) continue;
          const std::size_t r = w.group_r0 + q;
          xb[n] = w.xs + r * d, yb[n] = yp + p * d * W + lane;
          xw[n] = w.xinv[r], yw[n] = cos ? w.yinv[j] : T(0);
          rb[n] = r, jb[n] = j;
          if (++n == hit_batch) flush();
        }
    if (n) flush();
  }

  /// Screen rows [r, r + rows) (rows: the kernels' block or 1) against the packed tile.
  void group(host::screen_args<T>& a, const host::screen_kernels<T>& ks, std::size_t r, std::size_t rows,
             bool tile_clean) {
    bool clean = tile_clean;
    for (std::size_t q = 0; q < rows; ++q) clean = clean && rs[r + q].finite;
    a.xs = (centred ? cxs : xs) + r * d;
    if (b16 || q16) a.xs2 = xs2 + r * dp;
    if (q16) a.qscale = qs + r;
    a.thr = thr + r;
    a.clean = clean;
    group_r0 = r;
    group_rows = rows;
    (rows == 1 ? ks.single : ks.group)(a);
  }

  /// Fold column tiles [cb0, cb1) into the row block's heaps, then sort each heap best first
  /// (what merge_from and finish read).
  void fold(std::size_t, std::size_t ni, std::size_t cb0, std::size_t cb1) {
    for (std::size_t cb = cb0; cb < cb1; ++cb) {
      const std::size_t j0 = cb * tj, nj = std::min(tj, m - j0), np = host::panels<T>(nj);
      host::pack_panels(e.y, e.params, j0, nj, pack, yinv);
      if constexpr (std::is_same_v<T, float>) {
        if (b16)  // sqdist: about the row block's centre (always, for this screen), in one pass;
                  // cosine, dot: the panels as they are (center null)
          kernels.center_bf16(pack, d, np, center, cpack, dp, pack2);
        else if (centred)
          host::center_panels(pack, d, np, W, center, cpack);
      } else if (centred) {
        host::center_panels(pack, d, np, W, center, cpack);
      }
      // Offsets from what the screen reads: ‖fl(y − c)‖² when it runs about the centre, else ‖y‖²;
      // the exact values (hit) always read pack.
      kernels.sqnorms(centred ? cpack : pack, d, np, sqn);
      const bool clean = host::screening_init<T, K>(sqn, nj, np, W, init, delta);
      // int16: the tile's scale 2^ey, and the screen on int16 pairs where every row's scales'
      // product 2^(e + ey) is a normal float far from overflow (else T's own screen for this tile).
      if constexpr (std::is_same_v<T, float>)
        if (q16) {
          const T* yq = centred ? cpack : pack;
          const int ey = host::i16_exponent(kernels.max_abs(yq, np * W * d), host::i16_qmax(d));
          const detail::maybe<int> was = tile_ey;
          tile_ey.reset();
          if (e_lo + ey >= -100 && e_hi + ey <= 100) {
            tile_ey = ey;
            kernels.pack_i16(yq, d, np, ey, pack2, acc0);
            for (std::size_t r = 0; r < ni; ++r) qs[r] = host::pow2f(row_e[r] + ey);  // |e| ≤ 100 (above)
          }
          if (tile_ey != was)  // the row half of the int16 margin moved with the tile's scale
            for (std::size_t r = 0; r < ni; ++r) thr[r] = threshold(r);
        }
      const host::screen_kernels<T>& ks = q16 && !tile_ey ? native : kernels;
      const std::size_t R = static_cast<std::size_t>(ks.rows);
      tile_j0 = j0;
      tile_nj = nj;
      host::screen_args<T> a;
      a.d = d;
      a.pack = centred ? cpack : pack;
      a.init = init;
      a.yinv = yinv;
      a.np = np;
      a.pack2 = pack2;
      a.dp = dp;
      a.acc0 = acc0;
      a.hit = &select_worker::hit;
      a.ctx = this;
      std::size_t r = 0;
      for (; r + R <= ni; r += R) group(a, ks, r, R, clean);
      if (amx && r < ni && ni >= R) {  // the last rows on the tiles too: a block ending at ni, its first rows skipped
        a.skip = static_cast<int>(R - (ni - r));
        group(a, ks, ni - R, R, clean);
        a.skip = 0;
        r = ni;
      }
      for (; r < ni; ++r) group(a, ks, r, 1, clean);
    }
    for (std::size_t r = 0; r < ni; ++r) std::sort_heap(heap + r * k, heap + r * k + count[r], cmp);
  }

  /// Merge another worker's sorted rows (other columns of the same row block) into ours (sorted).
  void merge_from(const select_worker& o, std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r) {
      ranked<T>* a = heap + r * k;
      const ranked<T>* b = o.heap + r * k;
      std::size_t na = count[r], nb = o.count[r], ia = 0, ib = 0, n = 0;
      while (n < k && (ia < na || ib < nb)) {
        if (ib >= nb || (ia < na && cmp(a[ia], b[ib]))) scratch[n++] = a[ia++];
        else scratch[n++] = b[ib++];
      }
      std::copy(scratch, scratch + n, a);
      count[r] = n;
    }
  }
  void finish(std::size_t i0, std::size_t ni) const {
    for (std::size_t r = 0; r < ni; ++r) {
      const ranked<T>* h = heap + r * k;
      for (std::size_t q = 0; q < k; ++q) {
        const bool have = q < count[r];
        out->v(i0 + r, q) = have ? h[q].v : std::numeric_limits<T>::quiet_NaN();
        if (out->indices) out->ix(i0 + r, q) = have ? h[q].i : -1;
      }
    }
  }
};

/// Bytes per thread of the fused selection on ti × tj tiles with screen `sm`.
template <class E, class Mon>
std::size_t select_bytes(const E& e, const Mon& mon, std::size_t ti, std::size_t tj, screen_mode sm) {
  return select_worker<E, Mon>::bytes(e, select_monoid<Mon>::k(mon), ti, tj, sm);
}

/// The smallest d at which the bfloat16 screen is chosen by default: below it the screen's share of
/// the work is small and its wider margin lets more lanes through (select.hpp). Zen 5, n = 10⁶,
/// m = 1000, against the FP32 screen: sqdist d = 4 1.02×, d = 8 1.40×; cosine d = 4 0.73×, d = 8
/// 1.33×; dot d = 4 1.27×, d = 8 1.50×; Zen 4 at d = 8: cosine 1.28×, dot 1.69× (docs/design.md).
inline constexpr std::size_t paired_screen_min_d = 8;
/// The smallest d at which the AMX tile screen (amx_kernel.inc) is chosen by default where the
/// process may use the tiles (cpu_has_amx_bf16): a step is 32 features, so below 16 most of the
/// tiles' work is padding (Intel Xeon, family 6 model 207, n = 4·10⁵, m = 1000 against the FP32
/// screen: d = 8 0.95×, d = 16 1.49×, d = 32 2.21×; docs/design.md).
inline constexpr std::size_t amx_screen_min_d = 16;
/// The smallest d at which the int16 screen is chosen by default: below it packing the int16 panels
/// (per point and row block) costs what the faster products save (this Zen 5, AVX2 kernels,
/// n = 2·10⁵, m = 1000: d = 8 a tie, d = 16 1.05×, d = 32 1.23×, d = 100 1.35×; docs/design.md).
inline constexpr std::size_t i16_screen_min_d = 16;
/// The int16 screen's largest d: i16_qmax(d) ≥ 1 (d·2² ≤ 2³¹ − 1). Beyond it no magnitude fits (q
/// would be 0, and i16_exponent would search forever for a scale): the screen is not used there.
inline constexpr std::size_t i16_screen_max_d = 536870911;

/// The screen of the fused selection of (T, K) at dimension d with instruction set i. MEMSAFE_SCREEN
/// (core/env.hpp) — fp32: T's own; bf16, amx or i16: that screen where it applies (bf16 and amx:
/// float sqdist, cosine and dot; i16: float sqdist), an argument_error where this CPU or instruction
/// set lacks it (bf16: AVX-512 with AVX512-BF16; amx: that and AMX-BF16 tiles granted by the OS;
/// i16: the AVX2 kernels); unset: where it applies, on the AVX-512 kernels amx at
/// d ≥ amx_screen_min_d where the tiles are there, else bf16 at d ≥ paired_screen_min_d where
/// VDPBF16PS pays (cpu_dpbf16_pays; sqdist, cosine and dot alike), else fp32; on AVX2 i16 for sqdist
/// at i16_screen_min_d ≤ d ≤ i16_screen_max_d (VPMADDWD does 16 products per instruction against an
/// FMA's 8).
template <class T, select_kind K>
MEMSAFE_COLD screen_mode choose_screen(isa i, std::size_t d) {
  check_screen_word();
  const auto e = env::screen();
  constexpr bool sq = K == select_kind::sqdist;
  constexpr bool applies = std::is_same_v<T, float> && K != select_kind::l1;
  if (!applies || e == "fp32" || (!sq && e == "i16")) return screen_mode::native;
  const bool bf16 = i == isa::avx512 && cpu_has_avx512bf16();
  if (e == "bf16") {
    if (!bf16)
      throw argument_error(cpu_has_avx512bf16()
                               ? cat(msg{"memsafe: MEMSAFE_SCREEN=bf16: the bfloat16 screen runs on the AVX-512 kernels, not ",
                                      isa_name(i)})
                               : cat(msg{"memsafe: MEMSAFE_SCREEN=bf16: this CPU has no AVX512-BF16 (or AVX-512F)"}));
    return screen_mode::bf16;
  }
  const bool amx = bf16 && cpu_has_amx_bf16();
  if (e == "amx") {
    if (!amx)
      throw argument_error(
          cpu_has_amx_bf16()
              ? cat(msg{"memsafe: MEMSAFE_SCREEN=amx: the AMX screen runs with the AVX-512 kernels, not ", isa_name(i)})
              : cat(msg{"memsafe: MEMSAFE_SCREEN=amx: this CPU (or its operating system) offers no AMX-BF16 tiles"}));
    return screen_mode::amx;
  }
  if (!e.empty()) {  // i16, forced
    if (i != isa::avx2)
      throw argument_error(cat(msg{"memsafe: MEMSAFE_SCREEN=i16: the int16 screen runs on the AVX2 kernels, not ",
                                isa_name(i), " (MEMSAFE_ISA=avx2 selects them)"}));
    if (d > i16_screen_max_d)
      throw argument_error(cat(msg{"memsafe: MEMSAFE_SCREEN=i16: d = ", d, " features is more than the int16 screen's ",
                                i16_screen_max_d, " (their products' sums would leave int32)"}));
    return screen_mode::i16;
  }
  if (amx && d >= amx_screen_min_d) return screen_mode::amx;
  if (bf16 && cpu_dpbf16_pays()) return d >= paired_screen_min_d ? screen_mode::bf16 : screen_mode::native;
  if (bf16 || !sq) return screen_mode::native;
  return i == isa::avx2 && d >= i16_screen_min_d && d <= i16_screen_max_d ? screen_mode::i16 : screen_mode::native;
}

/// The plan's name of a screen (tile_plan::screen) and back.
template <class T>
const char* screen_name(screen_mode m) {
  return m == screen_mode::bf16 ? "bf16"
         : m == screen_mode::amx ? "amx"
         : m == screen_mode::i16 ? "i16"
         : sizeof(T) == 8        ? "fp64"
                                 : "fp32";
}
template <class = void>
screen_mode parse_screen(const std::string& s) {
  return s == "bf16"  ? screen_mode::bf16
         : s == "amx" ? screen_mode::amx
         : s == "i16" ? screen_mode::i16
                      : screen_mode::native;
}

/// Preferred column tiles: a packed tile of about 24 KiB (L1) for small d; at least 64 points.
template <class T>
std::vector<std::size_t> select_tile_cols(std::size_t d) {
  const std::size_t target = std::max<std::size_t>(64, (24u << 10) / (std::max<std::size_t>(d, 1) * sizeof(T)));
  std::vector<std::size_t> v;
  for (std::size_t c = 8192; c >= 1; c /= 2)
    if (c <= target) v.push_back(c);
  return v;
}

/// The AMX screen's preferred column tiles: its panels' pairs (bf16_pairs × 4 bytes a point) about
/// 256 KiB, in L2 — each block of 32 query rows streams the whole tile through the tiles while its
/// own pairs stay in L1; tiles as small as select_tile_cols' L1-sized ones reload the rows' pairs
/// from L2 every few panels (1.3× slower at d = 100 here; docs/design.md).
template <class = void>
std::vector<std::size_t> amx_tile_cols(std::size_t d) {
  const std::size_t target = std::max<std::size_t>(64, (std::size_t{256} << 10) / (bf16_pairs(d, screen_mode::amx) * 4));
  std::vector<std::size_t> v;
  for (std::size_t c = 8192; c >= 1; c /= 2)
    if (c <= target) v.push_back(c);
  return v;
}

template <class E, class Mon>
MEMSAFE_COLD tile_plan plan_select(const E& e, const Mon& mon, std::size_t budget, std::size_t threads, const std::string& what) {
  using T = typename E::value_type;
  constexpr host::select_kind K = select_kind_of<typename E::formula_type, select_monoid<Mon>::max>::kind;
  const isa i = choose_isa(isa_compiled);
  const screen_mode sm = choose_screen<T, K>(i, e.dim());
  // Tall row blocks: the packed column tile (and its screening offsets) is reused by every row.
  // Taller still on the AMX tiles, whose screen is fast enough that packing each column tile once
  // per row block shows (a sixth of a cosine kNN at n = 10^5, m = 10^4, d = 100 with blocks of 1024).
  const std::size_t tallest = sm == screen_mode::amx ? 4096 : 1024;
  const auto tis =
      plan::candidates(std::min(e.rows(), tallest), {4096, 2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1});
  std::vector<std::size_t> tjs;
  for (std::size_t c : sm == screen_mode::amx ? amx_tile_cols(e.dim()) : select_tile_cols<T>(e.dim()))
    if (!detail::contains(tjs, std::min(c, e.cols()))) tjs.push_back(std::min(c, e.cols()));
  auto p = plan::tiles_2d(
      e.rows(), e.cols(), budget, threads,
      [&](std::size_t ti, std::size_t tj) { return select_bytes(e, mon, ti, tj, sm); }, what, tis, tjs);
  // Even out the row blocks (a multiple of the threads, 8-row aligned, 32 for the AMX screen's
  // blocks); smaller tiles still fit.
  if (p.row_blocks > 1 && p.threads > 1 && !p.split_columns) {
    const std::size_t nb = (p.row_blocks + p.threads - 1) / p.threads * p.threads;
    const std::size_t al = sm == screen_mode::amx ? 32 : 8;
    const std::size_t ti = std::min(p.tile_rows, ((e.rows() + nb - 1) / nb + al - 1) / al * al);
    p.tile_rows = ti;
    p.row_blocks = (e.rows() + ti - 1) / ti;
    p.num_tiles = plan::saturating_mul(p.row_blocks, p.col_blocks);
    p.per_thread_bytes = select_bytes(e, mon, ti, p.tile_cols, sm);
    p.planned_bytes = p.threads * p.per_thread_bytes;
  }
  p.isa = isa_name(i);
  p.screen = screen_name<T>(sm);  // the screen runs in T unless in bfloat16 or int16
  const char* products = sm == screen_mode::bf16  ? ", bfloat16 dot products"
                         : sm == screen_mode::amx ? ", bfloat16 dot products on AMX tiles"
                         : sm == screen_mode::i16 ? (cpu_has_avx_vnni() ? ", int16 dot products (AVX-VNNI)" : ", int16 dot products")
                                                  : nullptr;
  p.reduction = cat(msg{Mon::name, " over j, fused: screened in registers (", p.isa, products ? products : "",
                     products ? " with a proven margin" : "", "), passing lanes re-evaluated exactly; no distance tile"});
  return p;
}

/// Run the fused selection of every row of `e` into `out` (same outputs as run_rows with `mon`), with
/// the kernels of the instruction set the plan names.
template <class E, class Mon>
void run_select(const E& e, const Mon& mon, const out_spec<typename E::value_type>& out, const tile_plan& p,
                accountant& acc) {
  const isa i = parse_isa(p.isa).value_or(isa::portable);
  const screen_mode sm = parse_screen(p.screen);
  run_row_blocks(e.rows(), e.cols(), mon, out, p, acc, [&](std::byte* ws) {
    return select_worker<E, Mon>(e, select_monoid<Mon>::k(mon), ws, p.tile_rows, p.tile_cols, out, i, sm);
  });
}

#else  // no SIMD kernels in this translation unit: never chosen (fusable_select is false); declared so callers compile.

template <class E, class Mon>
tile_plan plan_select(const E&, const Mon&, std::size_t, std::size_t, const std::string&) {
  return {};
}
template <class E, class Mon>
void run_select(const E&, const Mon&, const out_spec<typename E::value_type>&, const tile_plan&, accountant&) {}

#endif

}  // namespace memsafe::host
