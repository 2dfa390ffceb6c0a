// memsafe/backend/host/attention.hpp — attention on the host: the online-softmax forward and the
// recomputing backward (the FlashAttention-2 scheme), tiled, budgeted and multi-threaded.
//
// Tiles: a block of Br query rows (Br chosen by the planner from the budget, ≤ 64) against
// blocks of BC = 64 keys, products by a register-blocked micro-kernel (6 rows × 2 SIMD registers
// of accumulators, AVX-512 or AVX2+FMA intrinsics compiled for those targets in every x86-64
// translation unit and chosen at run time by host::choose_isa — the CPU, MEMSAFE_ISA; a plain
// loop otherwise; the two vector kernels give the same bits). The element-wise steps around the
// products (scale, bias, masks, running max and sum, exp: attention_softmax.inc) are compiled for
// the same instruction sets and chosen with them, so a consumer built with plain -O2 runs them
// vectorised too. Forward: the score tile is computed transposed, Sᵀ = K_blk · Q_blkᵀ (64 × Br):
// K's rows feed the kernel in place (packed only when their elements are strided), Qᵀ is packed
// once per row block, and the softmax runs down the key axis with the query rows as SIMD lanes
// (running max m, sum l, output accumulator rescaled by exp(m_old − m_new)); then O += P·V with
// P read in place from Sᵀ and V's rows in place (packed when strided or dv is not a multiple of
// the kernel width). Causal: a key block wholly above a row block's last visible key is never
// touched; a block that crosses the diagonal is computed and its hidden entries masked.
// Backward (FlashAttention-2): per key block Kᵀ, K, Vᵀ are packed once and every row block that
// can see it recomputes S, P = exp(S − lse), dP = dO·Vᵀ, dS = P ∘ (dP − D), and accumulates
// dV += Pᵀ dO, dK += dSᵀ Q (Pᵀ, dSᵀ read in place), dQ += dS K — one worker per (b, h) head; or,
// with fewer heads than workers, two passes: dK, dV by (head, key block), then dQ by (head, row
// block), the same sums in the same order (see backward()).
//
// Byte model (elements of T, each piece rounded up to 64 bytes; one workspace per worker;
// d', dv', Br' = d, dv, Br rounded up to the kernel width of 64 bytes):
//   forward   d·Br' (Qᵀ) + 64·d (K) + 64·dv' (V) + 64·Br' (Sᵀ) + Br·dv' (O acc) + 4·Br' (m, l, α, m_ref)
//   backward  d·64 (Kᵀ) + 64·d' (K) + dv·64 (Vᵀ) + 64·dv' (dV acc) + 64·d' (dK acc) + Br·d' (Q)
//             + Br·dv' (dO) + 2·Br·64 (P, dP) + Br·d' (dQ tile) + 2·Br (lse, D)
// Peak = threads × workspace; the plan is made before anything is allocated and a budget below
// one worker at Br = 1 is a budget_error naming that minimum.
//
// Every row's result is computed in the same order whatever Br, the threads and the backward's
// schedule are (keys in blocks of 64 from the left; the backward's dK, dV sums run over rows in
// order, dQ's over key blocks in order): results are bitwise independent of the budget and the
// thread count.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../../core/accounting.hpp"
#include "../../core/algo.hpp"
#include "../../core/libm.hpp"
#include "../../core/budget.hpp"
#include "../../core/clock.hpp"
#include "../../core/error.hpp"
#include "../../core/math.hpp"
#include "../../expr/attention.hpp"
#include "../../plan/options.hpp"
#include "../../plan/plan.hpp"
#include "executor.hpp"

#include "isa.hpp"
#include "simd.hpp"


namespace memsafe::detail::attn {

inline constexpr std::size_t BC = 64;  ///< keys per tile
inline constexpr std::size_t BR_MAX = 64;
/// Micro-tile width: 64 bytes (2 AVX2 registers) of T.
template <class T>
inline constexpr std::size_t NR = 64 / sizeof(T);
inline std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

/// C[MR × n] += A[MR × k] · B[k × n], A(r, kk) at A[r·ars + kk·acs] (so Aᵀ is read in place); n a
/// multiple of NR<T>. Each C entry sums over k in order, whatever MR (so the row grouping never
/// changes a result). The portable loop:
template <int MR, class T>
inline void mm_rows_portable(std::size_t n, std::size_t k, const T* A, std::size_t ars, std::size_t acs, const T* B,
                             std::size_t ldb, T* C, std::size_t ldc) {
  for (int r = 0; r < MR; ++r)
    for (std::size_t kk = 0; kk < k; ++kk) {
      const T a = A[r * ars + kk * acs];
      const T* b = B + kk * ldb;
      T* c = C + r * ldc;
      for (std::size_t j = 0; j < n; ++j) c[j] += a * b[j];
    }
}

/// C[m × n] += A[m × k] · B[k × n] in row groups of 6 (see mm_rows_portable).
#define MEMSAFE_ATTENTION_MM(NAME, ROWS)                                                                    \
  template <class T>                                                                                        \
  void NAME(std::size_t m, std::size_t n, std::size_t k, const T* A, std::size_t ars, std::size_t acs,     \
            const T* B, std::size_t ldb, T* C, std::size_t ldc) {                                           \
    if (n == 0) return;                                                                                     \
    std::size_t i = 0;                                                                                      \
    for (; i + 6 <= m; i += 6) ROWS<6>(n, k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc);              \
    const T* a = A + i * ars;                                                                               \
    T* c = C + i * ldc;                                                                                     \
    switch (m - i) {                                                                                        \
      case 5: ROWS<5>(n, k, a, ars, acs, B, ldb, c, ldc); break;                                            \
      case 4: ROWS<4>(n, k, a, ars, acs, B, ldb, c, ldc); break;                                            \
      case 3: ROWS<3>(n, k, a, ars, acs, B, ldb, c, ldc); break;                                            \
      case 2: ROWS<2>(n, k, a, ars, acs, B, ldb, c, ldc); break;                                            \
      case 1: ROWS<1>(n, k, a, ars, acs, B, ldb, c, ldc); break;                                            \
      default: break;                                                                                       \
    }                                                                                                       \
  }
MEMSAFE_ATTENTION_MM(mm_portable, mm_rows_portable)

template <class T>
inline T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

/// One forward tile for softmax_tile (attention_softmax.inc): Sᵀ, nk key rows of brp elements (nrp
/// query lanes used, a multiple of NR<T>; the first nr are real queries).
template <class T>
struct fwd_tile {
  T* St;
  std::size_t brp, nk, nr, nrp;
  T scale;
  const T* bias;                 ///< the bias of (query i0 + r, key j0 + j) at bias[r·bias_qs + j·bias_ks]; null: none
  std::size_t bias_qs, bias_ks;
  const unsigned char* keep;     ///< keep[j] for key j0 + j; null: no key padding
  bool causal;
  long hide0;                    ///< causal: key j0 + j is hidden from query lanes [0, hide0 + j)
  T *m, *l, *alpha, *mref;       ///< running max and sum, the tile's rescaling, the max used for exp (nrp each)
  T* Oa;                         ///< the output accumulator, nr rows of dvp, rescaled by alpha
  std::size_t dvp;
  bool drop;                     ///< dropout: a weight whose draw is below thr is zeroed, the others scaled by inv
  std::uint32_t thr;
  T inv;
  const std::uint32_t* rk;       ///< dropout: the row keys of the nrp query lanes
  std::uint32_t j0;              ///< the tile's first key (its index in the draws)
};

/// One backward tile for probs_tile: P holds the nr × BC scores Q·Kᵀ of queries i0 … against keys
/// j0 … (nk real keys).
template <class T>
struct bwd_tile {
  T* P;
  std::size_t nr, nk;
  T scale;
  const T* bias;                 ///< as fwd_tile's
  std::size_t bias_qs, bias_ks;
  const unsigned char* keep;
  bool causal;
  long last0;                    ///< causal: query i0 + r sees keys j0 + j with j ≤ last0 + r
  const T* lse;                  ///< the forward's logsumexp of the nr rows
  bool drop;                     ///< dropout, as fwd_tile's
  std::uint32_t thr;
  T inv;
  const std::uint32_t* rk;       ///< dropout: the row keys of the nr rows
  std::uint32_t j0;
};

// The element-wise steps with the translation unit's own flags (MEMSAFE_ISA=portable, CPUs without
// AVX2, builds without the dispatched kernels).
namespace portable {
#include "attention_softmax.inc"
}  // namespace portable

#if defined(MEMSAFE_SIMD_DISPATCH)
// The AVX2 + FMA and AVX-512 kernels (attention_kernel.inc, written once), each compiled for its
// target whatever the translation unit's -march (as simd.hpp's kernels) and chosen at run time
// (host::choose_isa: the CPU, MEMSAFE_ISA). Their four operations (load, store, broadcast, fused
// multiply-add) are simd.hpp's host::<isa>::simd<T>, the screening kernels' own: GCC/Clang vector
// types and builtins, without <immintrin.h>, whose parsing alone is ≈ 2.9 G compiler instructions
// (g++ 12 -O2), more than all of memsafe.hpp (docs/design.md, "Compile time").
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
template <class T>
using simd = memsafe::host::avx2::simd<T>;
#include "attention_kernel.inc"
#include "attention_softmax.inc"
}  // namespace avx2
MEMSAFE_ATTENTION_MM(mm_avx2, avx2::mm_rows)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#pragma clang attribute push(__attribute__((min_vector_width(512))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
namespace avx512 {
template <class T>
using simd = memsafe::host::avx512::simd<T>;
#include "attention_kernel.inc"
#include "attention_softmax.inc"
}  // namespace avx512
MEMSAFE_ATTENTION_MM(mm_avx512, avx512::mm_rows)
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
#undef MEMSAFE_ATTENTION_MM

/// The kernel of one evaluation: AVX-512 or AVX2 + FMA when the CPU and the translation unit have
/// it and MEMSAFE_ISA / MEMSAFE_KERNELS do not say otherwise; the portable loop else.
struct kernel {
  memsafe::host::isa i = memsafe::host::isa::portable;
  static kernel choose() { return {memsafe::host::choose_isa(memsafe::host::isa_compiled)}; }
  template <class T>
  void operator()(std::size_t m, std::size_t n, std::size_t k, const T* A, std::size_t ars, std::size_t acs,
                  const T* B, std::size_t ldb, T* C, std::size_t ldc) const {
#if defined(MEMSAFE_SIMD_DISPATCH)
    if (i == memsafe::host::isa::avx512) return mm_avx512(m, n, k, A, ars, acs, B, ldb, C, ldc);
    if (i == memsafe::host::isa::avx2) return mm_avx2(m, n, k, A, ars, acs, B, ldb, C, ldc);
#endif
    mm_portable(m, n, k, A, ars, acs, B, ldb, C, ldc);
  }
  /// The element-wise steps (attention_softmax.inc) of the same instruction set: softmax
  /// (softmax_tile), probs and dscores (their _tile functions).
#if defined(MEMSAFE_SIMD_DISPATCH)
#define MEMSAFE_ATTENTION_STEP(NAME, FN)                                       \
  template <class... A>                                                        \
  void NAME(const A&... args) const {                                          \
    if (i == memsafe::host::isa::avx512) return avx512::FN(args...);            \
    if (i == memsafe::host::isa::avx2) return avx2::FN(args...);                \
    portable::FN(args...);                                                     \
  }
#else
#define MEMSAFE_ATTENTION_STEP(NAME, FN) \
  template <class... A>                  \
  void NAME(const A&... args) const {    \
    portable::FN(args...);               \
  }
#endif
  MEMSAFE_ATTENTION_STEP(softmax, softmax_tile)
  MEMSAFE_ATTENTION_STEP(probs, probs_tile)
  MEMSAFE_ATTENTION_STEP(dscores, dscores_tile)
#undef MEMSAFE_ATTENTION_STEP
};

/// Hands out consecutive 64-byte-aligned pieces of one worker's workspace.
template <class T>
struct carver {
  T* p;
  T* take(std::size_t n) {
    T* r = p;
    p += round_up(n, 64 / sizeof(T));
    return r;
  }
};
template <class T>
std::size_t piece(std::size_t n) {
  return round_up(n, 64 / sizeof(T));
}

/// Workspace elements of one forward worker at Br query rows (Br' = Br rounded up to NR<T>).
template <class T>
std::size_t forward_elems(std::size_t Br, std::size_t d, std::size_t dv) {
  const std::size_t dvp = round_up(dv, NR<T>), brp = round_up(Br, NR<T>);
  return piece<T>(d * brp) + piece<T>(BC * d) + piece<T>(BC * dvp) + piece<T>(BC * brp) + piece<T>(Br * dvp) +
         piece<T>(4 * brp);
}
/// Workspace elements of one backward worker at Br query rows.
template <class T>
std::size_t backward_elems(std::size_t Br, std::size_t d, std::size_t dv) {
  const std::size_t dp = round_up(d, NR<T>), dvp = round_up(dv, NR<T>);
  return piece<T>(d * BC) + piece<T>(BC * dp) + piece<T>(dv * BC) + piece<T>(BC * dvp) + piece<T>(BC * dp) +
         piece<T>(Br * dp) + piece<T>(Br * dvp) + 2 * piece<T>(Br * BC) + piece<T>(Br * dp) + piece<T>(2 * Br);
}

struct attn_plan {
  std::size_t Br = 1, threads = 1, per_thread_bytes = 0, bytes = 0, min_bytes = 0;
};

/// The plan: the Br and worker count that maximise threads × Br within the budget (ties: the
/// larger Br). `bytes_at(Br)` is one worker's workspace, `items_at(Br)` the parallel work items.
template <class Bytes, class Items>
attn_plan choose(const char* what, std::size_t budget, std::size_t max_threads, std::size_t rows, Bytes bytes_at,
            Items items_at) {
  attn_plan best;
  best.min_bytes = bytes_at(1);
  if (best.min_bytes > budget)
    throw budget_error(cat(msg{"memsafe: ", what, ": the budget ", format_bytes(budget),
                               " cannot hold the smallest plan (one worker, 1 query row × ", BC, " keys), which needs ",
                               format_bytes(best.min_bytes)}),
                       budget, best.min_bytes);
  std::size_t top = std::min(BR_MAX, std::max<std::size_t>(rows, 1)), score = 0;
  for (std::size_t Br = top;; Br = Br > 1 ? (Br + 1) / 2 : 0) {
    if (Br == 0) break;
    const std::size_t b = bytes_at(Br);
    if (b <= budget) {
      std::size_t P = std::min(std::min(max_threads, std::max<std::size_t>(items_at(Br), 1)), budget / b);
      if (P * Br > score) {
        score = P * Br;
        best.Br = Br;
        best.threads = P;
        best.per_thread_bytes = b;
        best.bytes = P * b;
      }
    }
    if (Br == 1) break;
  }
  return best;
}

/// Σ_c x[c]·y[c·ys] for c < n, x contiguous, in NR<T> interleaved lanes (vectorised; a fixed order).
template <class T>
inline T dot_lanes(const T* x, const T* y, std::size_t ys, std::size_t n) {
  constexpr std::size_t L = NR<T>;
  T acc[L] = {};
  std::size_t c = 0;
  if (ys == 1)
    for (; c + L <= n; c += L)
      for (std::size_t u = 0; u < L; ++u) acc[u] += x[c + u] * y[c + u];
  for (; c < n; ++c) acc[c % L] += x[c] * y[c * ys];
  for (std::size_t w = L / 2; w > 0; w /= 2)
    for (std::size_t u = 0; u < w; ++u) acc[u] += acc[u + w];
  return acc[0];
}

/// No query row meets a key (B·H·Tq·Tk = 0): the outputs are constants (O = 0 and lse = −inf, the
/// gradients 0), written without temporaries, so any budget fits.
template <class T>
bool no_scores(const attention_expr<T>& a) {
  return a.batch() == 0 || a.heads() == 0 || a.queries() == 0 || a.keys() == 0;
}
inline attn_plan empty_plan() {
  attn_plan p;
  p.threads = 0;
  return p;
}
/// Every entry of X set to v.
template <class T>
void fill_heads(heads_view<T> X, T v) {
  for (std::size_t b = 0; b < X.batch(); ++b)
    for (std::size_t h = 0; h < X.heads(); ++h)
      for (std::size_t t = 0; t < X.length(); ++t)
        for (std::size_t c = 0; c < X.dim(); ++c) X(b, h, t, c) = v;
}

inline constexpr const char* forward_schedule = "online softmax: blocks of query rows against blocks of 64 keys";

/// The forward's plan: the Br and workers that fit the budget (choose).
template <class T>
attn_plan plan_forward(const attention_expr<T>& a, std::size_t budget, std::size_t max_threads) {
  const std::size_t BH = a.batch() * a.heads(), Tq = a.queries(), d = a.dim(), dv = a.value_dim();
  if (no_scores(a)) return empty_plan();
  return choose("attention", budget, max_threads, Tq, [&](std::size_t Br) { return forward_elems<T>(Br, d, dv) * sizeof(T); },
                [&](std::size_t Br) { return BH * ((Tq + Br - 1) / Br); });
}

/// The backward's plan and schedule (see backward()): S work slices of G heads each (Bs × Hs of
/// them), one pass or two.
struct bwd_plan {
  attn_plan p;
  bool two_pass = false;
  std::size_t Bs = 0, Hs = 0, S = 0, G = 0;
  const char* schedule() const {
    return two_pass ? "recomputed tiles in two passes: dK, dV by (head, key block), then dQ by (head, row block)"
                    : "recomputed tiles in one pass per head: dK, dV by key block, dQ accumulated";
  }
};
template <class T>
bwd_plan plan_backward(const attention_expr<T>& a, bool want_db, std::size_t budget, std::size_t max_threads) {
  const attention_scores<T>& sc = a.s;
  const std::size_t B = a.batch(), H = a.heads(), Tq = a.queries(), d = a.dim(), dv = a.value_dim();
  const std::size_t BH = B * H, nkb = (a.keys() + BC - 1) / BC;
  bwd_plan r;
  // the bias slices the work items own: one per head, or per shared slice of a broadcast bias when
  // its gradient is wanted (Bs × Hs slices of G heads each)
  r.Bs = want_db && sc.bias.batch() == 1 ? 1 : B;
  r.Hs = want_db && sc.bias.heads() == 1 ? 1 : H;
  r.S = r.Bs * r.Hs;
  r.G = (r.Bs ? B / r.Bs : 0) * (r.Hs ? H / r.Hs : 0);
  if (no_scores(a)) {
    r.p = empty_plan();
    return r;
  }
  auto bytes_at = [&](std::size_t Br) { return backward_elems<T>(Br, d, dv) * sizeof(T); };
  const std::size_t S = r.S;
  r.p = choose("attention backward", budget, max_threads, Tq, bytes_at, [&](std::size_t) { return S; });
  if (r.p.threads < max_threads && BH > 0 && nkb > 1) {
    const attn_plan two = choose("attention backward", budget, max_threads, Tq, bytes_at, [&](std::size_t Br) {
      return std::min(S * nkb, BH * ((Tq + Br - 1) / Br));
    });
    const double cost_one = 5.0 * double(r.G) * double((S + r.p.threads - 1) / r.p.threads);
    const double cost_two = 7.0 * double(BH) / double(two.threads);
    if (cost_two < cost_one) {
      r.p = two;
      r.two_pass = true;
    }
  }
  return r;
}

/// What a forward or backward pass reports: its time, the budget and the accountant's peak, the
/// plan's bytes, minimum and threads, the tile shape (Br × BC over d) and the tiles it computed.
template <class Plan>
eval_stats pass_stats(double t0, std::size_t budget, const accountant& acc,
                      const Plan& p, std::size_t Br, std::size_t BC, std::size_t d, std::size_t tiles, kernel mm,
                      const char* schedule) {
  eval_stats st;
  st.plan.isa = memsafe::host::isa_name(mm.i);
  st.plan.reduction = schedule;
  st.seconds = monotonic_seconds() - t0;
  st.budget_bytes = budget;
  st.peak_temp_bytes = acc.peak();
  st.planned_temp_bytes = p.bytes;
  st.min_budget_bytes = p.min_bytes;
  st.temp_allocations = acc.allocations();
  st.tile_rows = Br;
  st.tile_cols = BC;
  st.tile_inner = d;
  st.num_tiles = tiles;
  st.threads = p.threads;
  return st;
}

/// Forward: O[b, h] and lse[b, h] (lse may be null).
template <class T>
eval_stats forward(const attention_expr<T>& a, heads_view<T> O, T* lse, const options& o) {
  const double t0 = monotonic_seconds();
  const attention_scores<T>& sc = a.s;
  const std::size_t B = a.batch(), H = a.heads(), Tq = a.queries(), Tk = a.keys(), d = a.dim(), dv = a.value_dim();
  const std::size_t budget = resolve_budget(o.budget);
  const std::size_t BH = B * H;
  const kernel mm = kernel::choose();
  const attn_plan p = plan_forward(a, budget, memsafe::plan::resolve_threads(o.threads));
  if (no_scores(a)) {  // no row sees a key: O = 0, lse = −inf
    fill_heads(O, T(0));
    if (lse) std::fill(lse, lse + BH * Tq, neg_inf<T>());
    return pass_stats(t0, budget, accountant(budget), p, 0, BC, d, 0, mm, forward_schedule);
  }
  const bool drop = a.drop.p > 0;
  const std::uint32_t thr = dropout_threshold(a.drop.p);
  const T inv = static_cast<T>(1 / (1 - a.drop.p));
  accountant acc(budget);
  const std::size_t Br = p.Br, dvp = round_up(dv, NR<T>), brp = round_up(Br, NR<T>);
  const std::size_t nrb = (Tq + Br - 1) / Br, items = BH * nrb;
  std::vector<temp_buffer<T>> ws;
  ws.reserve(p.threads);
  for (std::size_t t = 0; t < p.threads; ++t) ws.emplace_back(acc, p.per_thread_bytes / sizeof(T));
  std::atomic<std::size_t> next{0}, tiles{0};
  const long off = static_cast<long>(Tk) - static_cast<long>(Tq);

  memsafe::host::parallel(p.threads, [&](std::size_t t) {
    // Scores are computed transposed, Sᵀ = K·Qᵀ (keys × queries): K's rows feed the micro-kernel in
    // place when contiguous, Qᵀ is packed once per row block, and the softmax runs down the key
    // axis with the query rows as SIMD lanes.
    carver<T> cv{ws[t].data()};
    T* QT = cv.take(d * brp);
    T* Kp = cv.take(BC * d);
    T* Vp = cv.take(BC * dvp);
    T* St = cv.take(BC * brp);
    T* Oa = cv.take(Br * dvp);
    T* m = cv.take(4 * brp);
    T* l = m + brp;
    T* alpha = l + brp;
    T* mref = alpha + brp;
    const bool k_direct = sc.k.stride(3) == 1, v_direct = a.v.stride(3) == 1 && dv == dvp;
    const T scale = static_cast<T>(sc.scale);
    std::uint32_t rk[BR_MAX] = {};  // dropout: the row keys of the block's query lanes (nrp ≤ BR_MAX)
    std::size_t my_tiles = 0;
    for (std::size_t it; (it = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
      // causal: the last row blocks (the most work) first
      const std::size_t bh = it % BH, rb = sc.is_causal ? nrb - 1 - it / BH : it / BH;
      const std::size_t b = bh / H, h = bh % H, i0 = rb * Br, nr = std::min(Br, Tq - i0), nrp = round_up(nr, NR<T>);
      for (std::size_t r = 0; r < nr; ++r) {
        const T* q = sc.q.row(b, h, i0 + r);
        const std::size_t qs = sc.q.stride(3);
        for (std::size_t c = 0; c < d; ++c) QT[c * brp + r] = q[c * qs];
      }
      for (std::size_t c = 0; c < d; ++c)
        for (std::size_t r = nr; r < nrp; ++r) QT[c * brp + r] = 0;
      for (std::size_t r = 0; r < nrp; ++r) {
        m[r] = neg_inf<T>();
        l[r] = 0;
      }
      if (drop)
        for (std::size_t r = 0; r < nr; ++r) rk[r] = dropout_row_key(a.drop.seed, b, h, i0 + r);
      std::fill(Oa, Oa + nr * dvp, T(0));
      const std::size_t kend = sc.is_causal ? static_cast<std::size_t>(memsafe::detail::clamp<long>(
                                                  static_cast<long>(i0 + nr) + off, 0, static_cast<long>(Tk)))
                                            : Tk;
      for (std::size_t j0 = 0; j0 < kend; j0 += BC) {
        const std::size_t nk = std::min(BC, Tk - j0);
        const T* Kr = k_direct ? sc.k.row(b, h, j0) : Kp;
        const std::size_t ldk = k_direct ? sc.k.stride(2) : d;
        if (!k_direct)
          for (std::size_t j = 0; j < nk; ++j) {
            const T* k = sc.k.row(b, h, j0 + j);
            for (std::size_t c = 0; c < d; ++c) Kp[j * d + c] = k[c * sc.k.stride(3)];
          }
        const T* Vr = v_direct ? a.v.row(b, h, j0) : Vp;
        const std::size_t ldv = v_direct ? a.v.stride(2) : dvp;
        if (!v_direct)
          for (std::size_t j = 0; j < nk; ++j) {
            const T* v = a.v.row(b, h, j0 + j);
            for (std::size_t c = 0; c < dv; ++c) Vp[j * dvp + c] = v[c * a.v.stride(3)];
            for (std::size_t c = dv; c < dvp; ++c) Vp[j * dvp + c] = 0;
          }
        for (std::size_t j = 0; j < nk; ++j) std::fill(St + j * brp, St + j * brp + nrp, T(0));
        mm(nk, nrp, d, Kr, ldk, std::size_t{1}, QT, brp, St, brp);  // Sᵀ = K Qᵀ
        // scale, bias, masks; the running max and sum; P = exp(s − m) over Sᵀ; O rescaled
        const T* bias = sc.has_bias ? sc.bias.row(b, h, i0) + j0 * sc.bias.stride(3) : nullptr;
        mm.softmax(fwd_tile<T>{St, brp, nk, nr, nrp, scale, bias, sc.bias.stride(2), sc.bias.stride(3),
                               sc.keep ? sc.keep + b * sc.keep_stride + j0 : nullptr, sc.is_causal,
                               static_cast<long>(j0) - static_cast<long>(i0) - off, m, l, alpha, mref, Oa, dvp, drop,
                               thr, inv, rk, static_cast<std::uint32_t>(j0)});
        mm(nr, dvp, nk, St, std::size_t{1}, brp, Vr, ldv, Oa, dvp);  // O += P V (P = (Sᵀ)ᵀ in place)
        ++my_tiles;
      }
      for (std::size_t r = 0; r < nr; ++r) {
        T* out = O.row(b, h, i0 + r);
        const std::size_t os = O.stride(3);
        // l = 0: no visible key (O = 0, lse = −inf); l = NaN: a NaN or +inf score (the running max
        // passes over NaN, exp(+inf − +inf) is NaN): O and lse NaN, as the naive formula gives
        const bool empty = l[r] == T(0);
        const T inv = empty ? T(0) : T(1) / l[r];
        if (empty)  // 0 itself, whatever Oa holds
          for (std::size_t c = 0; c < dv; ++c) out[c * os] = T(0);
        else
          for (std::size_t c = 0; c < dv; ++c) out[c * os] = Oa[r * dvp + c] * inv;
        if (lse) lse[(bh * Tq) + i0 + r] = empty ? neg_inf<T>() : m[r] + math::log(l[r]);
      }
    }
    tiles.fetch_add(my_tiles, std::memory_order_relaxed);
  });

  return pass_stats(t0, budget, acc, p, Br, BC, d, tiles.load(), mm, forward_schedule);
}

/// Backward: dQ, dK, dV from dO, O and lse (the forward's), recomputing the scores tile by tile.
/// One pass when there are heads enough for the workers: a worker owns a (b, h) head at a time (its
/// dQ, dK, dV), so no two workers write one output. Else (when ceil(S / P₁) · G · 5 products per
/// tile > 7 · B·H / P₂, P₁ and P₂ the workers the budget and threads allow either way, S the slices
/// below and G their heads: S = B·H, G = 1 without dBias) two passes:
/// (b, h, key block) items accumulate dK, dV (four products per tile), then (b, h, row block)
/// items accumulate dQ (three; a tile's exps and masks are recomputed in both passes, so at d = 64
/// two passes on two threads took 0.83–0.86 of one pass's time on one). Every entry is the same sum
/// in the same order either way (dK, dV over the query rows in order, dQ over the key blocks in
/// order), so the results are bitwise those of one pass.
/// dBias (null: not wanted; else the bias's extents) gets dS summed over the heads that share
/// each bias slice: a work item is then a slice (one pass) or a (slice, key block) (pass 1), whose
/// heads it runs in order, (b, h) ascending, adding their dS — so no two workers write one entry
/// and the sums have one order.
template <class T>
eval_stats backward(const attention_expr<T>& a, heads_view<const T> O, const T* lse, heads_view<const T> dO,
                    heads_view<T> dQ, heads_view<T> dK, heads_view<T> dV, const heads_view<T>* dB,
                    const options& o) {
  const double t0 = monotonic_seconds();
  const attention_scores<T>& sc = a.s;
  const std::size_t B = a.batch(), H = a.heads(), Tq = a.queries(), Tk = a.keys(), d = a.dim(), dv = a.value_dim();
  const std::size_t budget = resolve_budget(o.budget);
  const std::size_t BH = B * H, nkb = (Tk + BC - 1) / BC;
  const bool want_db = dB != nullptr;
  const heads_view<T> dBias = want_db ? *dB : dQ;  // dQ: never written as dBias (want_db is false)
  const kernel mm = kernel::choose();
  const bwd_plan bp = plan_backward(a, want_db, budget, memsafe::plan::resolve_threads(o.threads));
  const attn_plan& p = bp.p;
  if (no_scores(a)) {  // no row sees a key: every gradient is 0
    fill_heads(dQ, T(0));
    fill_heads(dK, T(0));
    fill_heads(dV, T(0));
    if (want_db) fill_heads(dBias, T(0));
    return pass_stats(t0, budget, accountant(budget), p, 0, BC, d, 0, mm, bp.schedule());
  }
  const bool two_pass = bp.two_pass;
  const std::size_t Bs = bp.Bs, Hs = bp.Hs, S = bp.S;
  accountant acc(budget);
  const std::size_t Br = p.Br, dp = round_up(d, NR<T>), dvp = round_up(dv, NR<T>), nrb = (Tq + Br - 1) / Br;
  std::vector<temp_buffer<T>> ws;
  ws.reserve(p.threads);
  for (std::size_t t = 0; t < p.threads; ++t) ws.emplace_back(acc, p.per_thread_bytes / sizeof(T));
  std::atomic<std::size_t> next{0}, tiles{0};
  const long off = static_cast<long>(Tk) - static_cast<long>(Tq);
  const T scale = static_cast<T>(sc.scale);
  const bool drop = a.drop.p > 0;
  const std::uint32_t thr = dropout_threshold(a.drop.p);
  const T inv = static_cast<T>(1 / (1 - a.drop.p));

  // One worker's pieces of its workspace and the steps every schedule is made of.
  struct worker {
    T *KT, *Kp, *VT, *dVa, *dKa, *Qp, *dOp, *P, *dP, *dQt, *L, *D;
    std::size_t tiles = 0;
  };
  auto carve = [&](std::size_t t) {
    carver<T> cv{ws[t].data()};
    worker w;
    w.KT = cv.take(d * BC);
    w.Kp = cv.take(BC * dp);
    w.VT = cv.take(dv * BC);
    w.dVa = cv.take(BC * dvp);
    w.dKa = cv.take(BC * dp);
    w.Qp = cv.take(Br * dp);
    w.dOp = cv.take(Br * dvp);
    w.P = cv.take(Br * BC);
    w.dP = cv.take(Br * BC);
    w.dQt = cv.take(Br * dp);
    w.L = cv.take(2 * Br);
    w.D = w.L + Br;
    return w;
  };
  // the first query row that sees key j0 (j0 ≤ i + off)
  auto first_row = [&](std::size_t j0) {
    return sc.is_causal ? static_cast<std::size_t>(std::max<long>(static_cast<long>(j0) - off, 0)) : std::size_t{0};
  };
  // Kᵀ, K and Vᵀ of keys [j0, j0 + nk), zero-padded to BC keys and dp columns. K (what dQ = dS·K
  // takes) holds 0 for a non-finite element: a key a row does not see meets it with dS = 0 inside
  // a shared tile, and 0·NaN would put NaN into that row's dQ, in some rows and not others as the
  // tiles fall; a row that does see such a key has a NaN or −inf score there (Kᵀ, what the scores
  // are recomputed from, keeps the element), so its dS is NaN (the row is NaN) or 0 (the key's
  // weight is 0, and its term 0).
  auto pack_keys = [&](worker& w, std::size_t b, std::size_t h, std::size_t j0, std::size_t nk) {
    const std::size_t ks = sc.k.stride(3), vs = a.v.stride(3);
    for (std::size_t j = 0; j < BC; ++j) {
      const bool in = j < nk;
      const T* k = in ? sc.k.row(b, h, j0 + j) : nullptr;
      const T* v = in ? a.v.row(b, h, j0 + j) : nullptr;
      for (std::size_t c = 0; c < d; ++c) {
        const T e = in ? k[c * ks] : T(0);
        w.KT[c * BC + j] = e;
        w.Kp[j * dp + c] = libm::isfinite(e) ? e : T(0);
      }
      for (std::size_t c = d; c < dp; ++c) w.Kp[j * dp + c] = 0;
      for (std::size_t c = 0; c < dv; ++c) w.VT[c * BC + j] = in ? v[c * vs] : T(0);
    }
  };
  // Q and dO of query rows [i0, i0 + nr), zero-padded, with D_i = dO_i·O_i and the rows' lse.
  auto pack_rows = [&](worker& w, std::size_t b, std::size_t h, std::size_t i0, std::size_t nr) {
    const std::size_t bh = b * H + h, qs = sc.q.stride(3), gs = dO.stride(3), os = O.stride(3);
    for (std::size_t r = 0; r < nr; ++r) {
      const T* q = sc.q.row(b, h, i0 + r);
      const T* go = dO.row(b, h, i0 + r);
      T* qr = w.Qp + r * dp;
      T* gr = w.dOp + r * dvp;
      if (qs == 1) std::copy(q, q + d, qr);
      else for (std::size_t c = 0; c < d; ++c) qr[c] = q[c * qs];
      std::fill(qr + d, qr + dp, T(0));
      if (gs == 1) std::copy(go, go + dv, gr);
      else for (std::size_t c = 0; c < dv; ++c) gr[c] = go[c * gs];
      std::fill(gr + dv, gr + dvp, T(0));
      w.L[r] = lse[bh * Tq + i0 + r];
      if (w.L[r] == -std::numeric_limits<T>::infinity()) {
        // a row that sees no key: P = 0 on every tile (probs_tile), and its Q, dO and D zeroed so
        // that a NaN or inf there (dO of a padded position, a Q that is 0/0) cannot reach dK, dV or
        // dS through a 0 weight: its gradients are exactly zero
        std::fill(qr, qr + d, T(0));
        std::fill(gr, gr + dv, T(0));
        w.D[r] = 0;
      } else {
        w.D[r] = dot_lanes(gr, O.row(b, h, i0 + r), os, dv);
      }
    }
  };
  // One tile: query rows [i0 + r0, i0 + nr) of the packed rows (packed from i0) against the packed
  // keys [j0, j0 + nk): P, dP, dS recomputed; dV += Pᵀ dO and dK += dSᵀ Q when kv, dQ += scale·dS K
  // when q.
  auto tile = [&](worker& w, std::size_t b, std::size_t h, std::size_t i0, std::size_t r0, std::size_t nr,
                  std::size_t j0, std::size_t nk, bool kv, bool q) {
    const std::size_t n = nr - r0;
    const T* Q = w.Qp + r0 * dp;
    const T* G = w.dOp + r0 * dvp;
    std::fill(w.P, w.P + n * BC, T(0));
    mm(n, BC, d, Q, dp, 1, w.KT, BC, w.P, BC);
    const T* bias = sc.has_bias ? sc.bias.row(b, h, i0 + r0) + j0 * sc.bias.stride(3) : nullptr;
    std::uint32_t rk[BR_MAX];  // dropout: the rows' keys
    if (drop)
      for (std::size_t r = 0; r < n; ++r) rk[r] = dropout_row_key(a.drop.seed, b, h, i0 + r0 + r);
    const bwd_tile<T> bt{w.P, n, nk, scale, bias, sc.bias.stride(2), sc.bias.stride(3),
                         sc.keep ? sc.keep + b * sc.keep_stride + j0 : nullptr, sc.is_causal,
                         static_cast<long>(i0 + r0) + off - static_cast<long>(j0), w.L + r0, drop, thr, inv, rk,
                         static_cast<std::uint32_t>(j0)};
    mm.probs(bt);
    std::fill(w.dP, w.dP + n * BC, T(0));
    mm(n, BC, dv, G, dvp, 1, w.VT, BC, w.dP, BC);
    mm.dscores(bt, w.dP, w.D + r0);  // dS = P ∘ (dP − D); with dropout dP, and P, through its mask
    if (kv) mm(nk, dvp, n, w.P, 1, BC, G, dvp, w.dVa, dvp);  // dV += Pᵀ dO (Pᵀ read in place)
    if (kv && want_db) {  // dBias += dS (the slice zeroed by the work item)
      const std::size_t bs = dBias.stride(3);
      for (std::size_t r = 0; r < n; ++r) {
        T* g = dBias.row(Bs == 1 ? 0 : b, Hs == 1 ? 0 : h, i0 + r0 + r) + j0 * bs;
        const T* src = w.dP + r * BC;
        for (std::size_t j = 0; j < nk; ++j) g[j * bs] += src[j];
      }
    }
    if (kv) mm(nk, dp, n, w.dP, 1, BC, Q, dp, w.dKa, dp);     // dK += dSᵀ Q (× scale when written)
    if (q) {
      std::fill(w.dQt, w.dQt + n * dp, T(0));
      mm(n, dp, nk, w.dP, BC, 1, w.Kp, dp, w.dQt, dp);  // dQ tile = dS K
      const std::size_t gs = dQ.stride(3);
      for (std::size_t r = 0; r < n; ++r) {
        T* g = dQ.row(b, h, i0 + r0 + r);
        const T* src = w.dQt + r * dp;
        if (gs == 1)
          for (std::size_t c = 0; c < d; ++c) g[c] += scale * src[c];
        else
          for (std::size_t c = 0; c < d; ++c) g[c * gs] += scale * src[c];
      }
    }
    ++w.tiles;
  };
  auto zero_dq = [&](std::size_t b, std::size_t h, std::size_t i0, std::size_t n) {
    for (std::size_t i = i0; i < i0 + n; ++i) {
      T* g = dQ.row(b, h, i);
      for (std::size_t c = 0; c < d; ++c) g[c * dQ.stride(3)] = 0;
    }
  };
  // Slice s's dBias columns [j0, j1) zeroed, before its heads add their dS.
  auto zero_db = [&](std::size_t s, std::size_t j0, std::size_t j1) {
    if (!want_db) return;
    for (std::size_t i = 0; i < Tq; ++i) {
      T* g = dBias.row(s / Hs, s % Hs, i);
      for (std::size_t j = j0; j < j1; ++j) g[j * dBias.stride(3)] = 0;
    }
  };
  // fn(b, h) for the heads of slice s, (b, h) ascending.
  auto for_heads = [&](std::size_t s, auto&& fn) {
    const std::size_t bs = s / Hs, hs = s % Hs;
    for (std::size_t b = (Bs == B ? bs : 0); b < (Bs == B ? bs + 1 : B); ++b)
      for (std::size_t h = (Hs == H ? hs : 0); h < (Hs == H ? hs + 1 : H); ++h) fn(b, h);
  };
  // dK, dV of keys [j0, j0 + nk) from every query row that sees them (dQ too when q).
  auto key_block = [&](worker& w, std::size_t b, std::size_t h, std::size_t j0, bool q) {
    const std::size_t nk = std::min(BC, Tk - j0), first = first_row(j0);
    std::fill(w.dVa, w.dVa + BC * dvp, T(0));
    std::fill(w.dKa, w.dKa + BC * dp, T(0));
    if (first < Tq) pack_keys(w, b, h, j0, nk);
    for (std::size_t i0 = first; i0 < Tq; i0 += Br) {
      const std::size_t nr = std::min(Br, Tq - i0);
      pack_rows(w, b, h, i0, nr);
      tile(w, b, h, i0, 0, nr, j0, nk, true, q);
    }
    for (std::size_t j = 0; j < nk; ++j) {
      T* gk = dK.row(b, h, j0 + j);
      T* gv = dV.row(b, h, j0 + j);
      for (std::size_t c = 0; c < d; ++c) gk[c * dK.stride(3)] = scale * w.dKa[j * dp + c];
      for (std::size_t c = 0; c < dv; ++c) gv[c * dV.stride(3)] = w.dVa[j * dvp + c];
    }
  };

  if (!two_pass) {
    memsafe::host::parallel(p.threads, [&](std::size_t t) {
      worker w = carve(t);
      for (std::size_t s; (s = next.fetch_add(1, std::memory_order_relaxed)) < S;) {
        zero_db(s, 0, Tk);
        for_heads(s, [&](std::size_t b, std::size_t h) {
          zero_dq(b, h, 0, Tq);
          for (std::size_t j0 = 0; j0 < Tk; j0 += BC) key_block(w, b, h, j0, true);
        });
      }
      tiles.fetch_add(w.tiles, std::memory_order_relaxed);
    });
  } else {
    // pass 1: dK, dV (and dBias) by (slice, key block), the first key blocks (the most rows when
    // causal) first
    memsafe::host::parallel(p.threads, [&](std::size_t t) {
      worker w = carve(t);
      for (std::size_t it; (it = next.fetch_add(1, std::memory_order_relaxed)) < S * nkb;) {
        const std::size_t s = it % S, j0 = (it / S) * BC;
        zero_db(s, j0, std::min(j0 + BC, Tk));
        for_heads(s, [&](std::size_t b, std::size_t h) { key_block(w, b, h, j0, false); });
      }
      tiles.fetch_add(w.tiles, std::memory_order_relaxed);
    });
    // pass 2: dQ by (head, row block), the key blocks in order as one pass adds them (each from the
    // first row that sees it); causal: the last row blocks (the most keys) first
    next.store(0, std::memory_order_relaxed);
    memsafe::host::parallel(p.threads, [&](std::size_t t) {
      worker w = carve(t);
      for (std::size_t it; (it = next.fetch_add(1, std::memory_order_relaxed)) < BH * nrb;) {
        const std::size_t bh = it % BH, rb = sc.is_causal ? nrb - 1 - it / BH : it / BH;
        const std::size_t b = bh / H, h = bh % H, i0 = rb * Br, nr = std::min(Br, Tq - i0);
        zero_dq(b, h, i0, nr);
        pack_rows(w, b, h, i0, nr);
        for (std::size_t j0 = 0; j0 < Tk; j0 += BC) {
          const std::size_t first = first_row(j0);
          if (first >= i0 + nr) break;  // no row of the block sees this key block nor any later one
          pack_keys(w, b, h, j0, std::min(BC, Tk - j0));
          tile(w, b, h, i0, first > i0 ? first - i0 : 0, nr, j0, std::min(BC, Tk - j0), false, true);
        }
      }
      tiles.fetch_add(w.tiles, std::memory_order_relaxed);
    });
  }

  return pass_stats(t0, budget, acc, p, Br, BC, d, tiles.load(), mm, bp.schedule());
}

}  // namespace memsafe::detail::attn
