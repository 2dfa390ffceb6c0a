// memsafe/backend/host/attention.hpp — attention on the host: the online-softmax forward and the
// recomputing backward (the FlashAttention-2 scheme), tiled, budgeted and multi-threaded.
//
// Tiles: a block of Br query rows (Br chosen by the planner from the budget, ≤ 64) against
// blocks of BC = 64 keys, products by a register-blocked micro-kernel (6 rows × 2 SIMD registers
// of accumulators, AVX-512 or AVX2+FMA intrinsics compiled for those targets in every x86-64
// translation unit and chosen at run time by host::choose_isa — the CPU, MEMSAFE_ISA; a plain
// loop otherwise; the two vector kernels give the same bits). Forward: the score tile is computed transposed, Sᵀ = K_blk · Q_blkᵀ (64 × Br):
// K's rows feed the kernel in place (packed only when their elements are strided), Qᵀ is packed
// once per row block, and the softmax runs down the key axis with the query rows as SIMD lanes
// (running max m, sum l, output accumulator rescaled by exp(m_old − m_new)); then O += P·V with
// P read in place from Sᵀ and V's rows in place (packed when strided or dv is not a multiple of
// the kernel width). Causal: a key block wholly above a row block's last visible key is never
// touched; a block that crosses the diagonal is computed and its hidden entries masked.
// Backward (FlashAttention-2): one worker per (b, h) head; per key block Kᵀ, K, Vᵀ are packed
// once and every row block that can see it recomputes S, P = exp(S − lse), dP = dO·Vᵀ,
// dS = P ∘ (dP − D), and accumulates dV += Pᵀ dO, dK += dSᵀ Q (Pᵀ, dSᵀ read in place), dQ += dS K.
//
// Byte model (elements of T, each piece rounded up to 64 bytes; one workspace per worker;
// d', dv', Br' = d, dv, Br rounded up to the kernel width of 64 bytes):
//   forward   d·Br' (Qᵀ) + 64·d (K) + 64·dv' (V) + 64·Br' (Sᵀ) + Br·dv' (O acc) + 4·Br' (m, l, α, m_ref)
//   backward  d·64 (Kᵀ) + 64·d' (K) + dv·64 (Vᵀ) + 64·dv' (dV acc) + 64·d' (dK acc) + Br·d' (Q)
//             + Br·dv' (dO) + 2·Br·64 (P, dP) + Br·d' (dQ tile) + 2·Br (lse, D)
// Peak = threads × workspace; the plan is made before anything is allocated and a budget below
// one worker at Br = 1 is a budget_error naming that minimum.
//
// Every row's result is computed in the same order whatever Br and the threads are (keys in
// blocks of 64 from the left; the backward's dK, dV sums run over rows in order): results are
// bitwise independent of the budget and the thread count.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../../core/accounting.hpp"
#include "../../core/budget.hpp"
#include "../../core/error.hpp"
#include "../../core/math.hpp"
#include "../../expr/attention.hpp"
#include "../../plan/options.hpp"
#include "../../plan/plan.hpp"
#include "executor.hpp"

#include "isa.hpp"

#if defined(MEMSAFE_SIMD_DISPATCH)
#include <immintrin.h>
#endif

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

#if defined(MEMSAFE_SIMD_DISPATCH)
// The AVX2 + FMA and AVX-512 kernels (attention_kernel.inc, written once), each compiled for its
// target whatever the translation unit's -march (as simd.hpp's kernels) and chosen at run time
// (host::choose_isa: the CPU, MEMSAFE_ISA).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
inline __m256 vld(const float* p) { return _mm256_loadu_ps(p); }
inline __m256d vld(const double* p) { return _mm256_loadu_pd(p); }
inline void vst(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void vst(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
inline __m256 vbc(float a) { return _mm256_set1_ps(a); }
inline __m256d vbc(double a) { return _mm256_set1_pd(a); }
inline __m256 vfma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256d vfma(__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); }
#include "attention_kernel.inc"
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
inline __m512 vld(const float* p) { return _mm512_loadu_ps(p); }
inline __m512d vld(const double* p) { return _mm512_loadu_pd(p); }
inline void vst(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline void vst(double* p, __m512d v) { _mm512_storeu_pd(p, v); }
inline __m512 vbc(float a) { return _mm512_set1_ps(a); }
inline __m512d vbc(double a) { return _mm512_set1_pd(a); }
inline __m512 vfma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline __m512d vfma(__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); }
#include "attention_kernel.inc"
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
    throw budget_error(std::string("memsafe: ") + what + ": the budget " + format_bytes(budget) +
                           " cannot hold the smallest plan (one worker, 1 query row × " + std::to_string(BC) +
                           " keys), which needs " + format_bytes(best.min_bytes),
                       budget, best.min_bytes);
  std::size_t top = std::min(BR_MAX, std::max<std::size_t>(rows, 1)), score = 0;
  for (std::size_t Br = top;; Br = Br > 1 ? (Br + 1) / 2 : 0) {
    if (Br == 0) break;
    const std::size_t b = bytes_at(Br);
    if (b <= budget) {
      std::size_t P = std::min({max_threads, std::max<std::size_t>(items_at(Br), 1), budget / b});
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

template <class T>
inline T neg_inf() {
  return -std::numeric_limits<T>::infinity();
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

/// The masks and bias of one tile, applied in place to the scaled scores s[0, BC) of query row i
/// against keys [j0, j0 + nk) (entries past nk are padding and masked too).
template <class T>
struct tile_masks {
  const attention_scores<T>& sc;
  std::size_t b, h;
  long off;  // Tk − Tq
  void apply(T* s, std::size_t i, std::size_t j0, std::size_t nk) const {
    const T scale = static_cast<T>(sc.scale);
    for (std::size_t j = 0; j < BC; ++j) s[j] *= scale;
    if (sc.has_bias) {
      const T* bias = sc.bias.row(b, h, i);
      const std::size_t bs = sc.bias.stride(3);
      for (std::size_t j = 0; j < nk; ++j) s[j] += bias[(j0 + j) * bs];
    }
    for (std::size_t j = nk; j < BC; ++j) s[j] = neg_inf<T>();
    if (sc.keep) {
      const unsigned char* keep = sc.keep + b * sc.keep_stride + j0;
      for (std::size_t j = 0; j < nk; ++j)
        if (!keep[j]) s[j] = neg_inf<T>();
    }
    if (sc.is_causal) {
      // key j0 + j visible iff j0 + j ≤ i + off
      const long last = static_cast<long>(i) + off - static_cast<long>(j0);  // last visible j in this tile
      for (std::size_t j = static_cast<std::size_t>(std::max<long>(last + 1, 0)); j < nk; ++j) s[j] = neg_inf<T>();
    }
  }
};

/// What a forward or backward pass reports: its time, the budget and the accountant's peak, the
/// plan's bytes, minimum and threads, the tile shape (Br × BC over d) and the tiles it computed.
template <class Plan>
eval_stats pass_stats(std::chrono::steady_clock::time_point t0, std::size_t budget, const accountant& acc,
                      const Plan& p, std::size_t Br, std::size_t BC, std::size_t d, std::size_t tiles) {
  eval_stats st;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  const auto t0 = std::chrono::steady_clock::now();
  const attention_scores<T>& sc = a.s;
  const std::size_t B = a.batch(), H = a.heads(), Tq = a.queries(), Tk = a.keys(), d = a.dim(), dv = a.value_dim();
  const std::size_t budget = resolve_budget(o.budget);
  const std::size_t BH = B * H;
  auto bytes_at = [&](std::size_t Br) { return forward_elems<T>(Br, d, dv) * sizeof(T); };
  auto items_at = [&](std::size_t Br) { return BH * ((Tq + Br - 1) / Br); };
  const kernel mm = kernel::choose();
  const attn_plan p = choose("attention", budget, memsafe::plan::resolve_threads(o.threads), Tq, bytes_at, items_at);
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
      std::fill(Oa, Oa + nr * dvp, T(0));
      const std::size_t kend = sc.is_causal ? static_cast<std::size_t>(std::clamp<long>(
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
        // scale, bias, masks; the column max in alpha
        for (std::size_t r = 0; r < nrp; ++r) alpha[r] = neg_inf<T>();
        for (std::size_t j = 0; j < nk; ++j) {
          T* row = St + j * brp;
          for (std::size_t r = 0; r < nrp; ++r) row[r] *= scale;
          if (sc.has_bias) {
            const std::size_t bs = sc.bias.stride(2);
            const T* bias = sc.bias.row(b, h, i0) + (j0 + j) * sc.bias.stride(3);
            for (std::size_t r = 0; r < nr; ++r) row[r] += bias[r * bs];
          }
          if (sc.keep && !sc.keep[b * sc.keep_stride + j0 + j]) std::fill(row, row + nrp, neg_inf<T>());
          if (sc.is_causal) {  // query i0 + r sees key j0 + j iff j0 + j ≤ i0 + r + off
            const long lim = static_cast<long>(j0 + j) - static_cast<long>(i0) - off;
            const std::size_t hide = static_cast<std::size_t>(std::clamp<long>(lim, 0, static_cast<long>(nrp)));
            std::fill(row, row + hide, neg_inf<T>());
          }
          for (std::size_t r = 0; r < nrp; ++r) alpha[r] = row[r] > alpha[r] ? row[r] : alpha[r];
        }
        for (std::size_t r = 0; r < nrp; ++r) {
          const T mnew = alpha[r] > m[r] ? alpha[r] : m[r];
          mref[r] = mnew == neg_inf<T>() ? T(0) : mnew;  // no visible key yet: every p is 0
          alpha[r] = math::exp(m[r] - mref[r]);
          m[r] = mnew;
          l[r] *= alpha[r];
        }
        for (std::size_t j = 0; j < nk; ++j) {
          T* row = St + j * brp;
          for (std::size_t r = 0; r < nrp; ++r) row[r] = math::exp(row[r] - mref[r]);
          for (std::size_t r = 0; r < nrp; ++r) l[r] += row[r];
        }
        for (std::size_t r = 0; r < nr; ++r)
          if (alpha[r] != T(1))
            for (std::size_t c = 0; c < dvp; ++c) Oa[r * dvp + c] *= alpha[r];
        mm(nr, dvp, nk, St, std::size_t{1}, brp, Vr, ldv, Oa, dvp);  // O += P V (P = (Sᵀ)ᵀ in place)
        ++my_tiles;
      }
      for (std::size_t r = 0; r < nr; ++r) {
        T* out = O.row(b, h, i0 + r);
        const std::size_t os = O.stride(3);
        const bool empty = !(l[r] > 0);
        const T inv = empty ? T(0) : T(1) / l[r];
        for (std::size_t c = 0; c < dv; ++c) out[c * os] = Oa[r * dvp + c] * inv;
        if (lse) lse[(bh * Tq) + i0 + r] = empty ? neg_inf<T>() : m[r] + math::log(l[r]);
      }
    }
    tiles.fetch_add(my_tiles, std::memory_order_relaxed);
  });

  return pass_stats(t0, budget, acc, p, Br, BC, d, tiles.load());
}

/// Backward: dQ, dK, dV from dO, O and lse (the forward's), recomputing the scores tile by tile.
/// One worker owns a (b, h) head at a time (its dQ, dK, dV), so no two workers write one output.
template <class T>
eval_stats backward(const attention_expr<T>& a, heads_view<const T> O, const T* lse, heads_view<const T> dO,
                    heads_view<T> dQ, heads_view<T> dK, heads_view<T> dV, const options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const attention_scores<T>& sc = a.s;
  const std::size_t B = a.batch(), H = a.heads(), Tq = a.queries(), Tk = a.keys(), d = a.dim(), dv = a.value_dim();
  const std::size_t budget = resolve_budget(o.budget);
  const std::size_t BH = B * H;
  auto bytes_at = [&](std::size_t Br) { return backward_elems<T>(Br, d, dv) * sizeof(T); };
  auto items_at = [&](std::size_t) { return BH; };
  const kernel mm = kernel::choose();
  const attn_plan p = choose("attention backward", budget, memsafe::plan::resolve_threads(o.threads), Tq, bytes_at, items_at);
  accountant acc(budget);
  const std::size_t Br = p.Br, dp = round_up(d, NR<T>), dvp = round_up(dv, NR<T>);
  std::vector<temp_buffer<T>> ws;
  ws.reserve(p.threads);
  for (std::size_t t = 0; t < p.threads; ++t) ws.emplace_back(acc, p.per_thread_bytes / sizeof(T));
  std::atomic<std::size_t> next{0}, tiles{0};
  const long off = static_cast<long>(Tk) - static_cast<long>(Tq);
  const T scale = static_cast<T>(sc.scale);

  memsafe::host::parallel(p.threads, [&](std::size_t t) {
    carver<T> cv{ws[t].data()};
    T* KT = cv.take(d * BC);
    T* Kp = cv.take(BC * dp);
    T* VT = cv.take(dv * BC);
    T* dVa = cv.take(BC * dvp);
    T* dKa = cv.take(BC * dp);
    T* Qp = cv.take(Br * dp);
    T* dOp = cv.take(Br * dvp);
    T* P = cv.take(Br * BC);
    T* dP = cv.take(Br * BC);
    T* dQt = cv.take(Br * dp);
    T* L = cv.take(2 * Br);
    T* D = L + Br;
    std::size_t my_tiles = 0;
    for (std::size_t bh; (bh = next.fetch_add(1, std::memory_order_relaxed)) < BH;) {
      const std::size_t b = bh / H, h = bh % H;
      const tile_masks<T> mk{sc, b, h, off};
      for (std::size_t i = 0; i < Tq; ++i) {
        T* g = dQ.row(b, h, i);
        for (std::size_t c = 0; c < d; ++c) g[c * dQ.stride(3)] = 0;
      }
      for (std::size_t j0 = 0; j0 < Tk; j0 += BC) {
        const std::size_t nk = std::min(BC, Tk - j0);
        // the first query row that sees key j0: j0 ≤ i + off
        std::size_t first = 0;
        if (sc.is_causal) first = static_cast<std::size_t>(std::max<long>(static_cast<long>(j0) - off, 0));
        std::fill(dVa, dVa + BC * dvp, T(0));
        std::fill(dKa, dKa + BC * dp, T(0));
        if (first < Tq) {
          for (std::size_t j = 0; j < BC; ++j) {
            const bool in = j < nk;
            const T* k = in ? sc.k.row(b, h, j0 + j) : nullptr;
            const T* v = in ? a.v.row(b, h, j0 + j) : nullptr;
            const std::size_t ks = sc.k.stride(3), vs = a.v.stride(3);
            for (std::size_t c = 0; c < d; ++c) KT[c * BC + j] = Kp[j * dp + c] = in ? k[c * ks] : T(0);
            for (std::size_t c = d; c < dp; ++c) Kp[j * dp + c] = 0;
            for (std::size_t c = 0; c < dv; ++c) VT[c * BC + j] = in ? v[c * vs] : T(0);
          }
        }
        for (std::size_t i0 = first; i0 < Tq; i0 += Br) {
          const std::size_t nr = std::min(Br, Tq - i0);
          for (std::size_t r = 0; r < nr; ++r) {
            const T* q = sc.q.row(b, h, i0 + r);
            const T* go = dO.row(b, h, i0 + r);
            const T* ov = O.row(b, h, i0 + r);
            const std::size_t qs = sc.q.stride(3), gs = dO.stride(3), os = O.stride(3);
            T* qr = Qp + r * dp;
            T* gr = dOp + r * dvp;
            if (qs == 1) std::copy(q, q + d, qr);
            else for (std::size_t c = 0; c < d; ++c) qr[c] = q[c * qs];
            std::fill(qr + d, qr + dp, T(0));
            if (gs == 1) std::copy(go, go + dv, gr);
            else for (std::size_t c = 0; c < dv; ++c) gr[c] = go[c * gs];
            std::fill(gr + dv, gr + dvp, T(0));
            D[r] = dot_lanes(gr, ov, os, dv);
            L[r] = lse[bh * Tq + i0 + r];
          }
          std::fill(P, P + nr * BC, T(0));
          mm(nr, BC, d, Qp, dp, 1, KT, BC, P, BC);
          for (std::size_t r = 0; r < nr; ++r) {
            T* s = P + r * BC;
            mk.apply(s, i0 + r, j0, nk);
            if (L[r] == neg_inf<T>()) {
              std::fill(s, s + BC, T(0));
              continue;
            }
            const T lr = L[r];  // a local: the loop then vectorises (no aliasing with s)
            for (std::size_t j = 0; j < BC; ++j) s[j] = math::exp(s[j] - lr);
          }
          std::fill(dP, dP + nr * BC, T(0));
          mm(nr, BC, dv, dOp, dvp, 1, VT, BC, dP, BC);
          mm(nk, dvp, nr, P, 1, BC, dOp, dvp, dVa, dvp);  // dV += Pᵀ dO (Pᵀ read in place)
          for (std::size_t r = 0; r < nr; ++r) {
            T* g = dP + r * BC;
            const T* pr = P + r * BC;
            const T dr = D[r];
            for (std::size_t j = 0; j < BC; ++j) g[j] = pr[j] * (g[j] - dr);  // dS
          }
          mm(nk, dp, nr, dP, 1, BC, Qp, dp, dKa, dp);  // dK += dSᵀ Q (× scale below)
          std::fill(dQt, dQt + nr * dp, T(0));
          mm(nr, dp, nk, dP, BC, 1, Kp, dp, dQt, dp);  // dQ tile = dS K
          for (std::size_t r = 0; r < nr; ++r) {
            T* g = dQ.row(b, h, i0 + r);
            const T* src = dQt + r * dp;
            const std::size_t gs = dQ.stride(3);
            if (gs == 1)
              for (std::size_t c = 0; c < d; ++c) g[c] += scale * src[c];
            else
              for (std::size_t c = 0; c < d; ++c) g[c * gs] += scale * src[c];
          }
          ++my_tiles;
        }
        for (std::size_t j = 0; j < nk; ++j) {
          T* gk = dK.row(b, h, j0 + j);
          T* gv = dV.row(b, h, j0 + j);
          for (std::size_t c = 0; c < d; ++c) gk[c * dK.stride(3)] = scale * dKa[j * dp + c];
          for (std::size_t c = 0; c < dv; ++c) gv[c * dV.stride(3)] = dVa[j * dvp + c];
        }
      }
    }
    tiles.fetch_add(my_tiles, std::memory_order_relaxed);
  });

  return pass_stats(t0, budget, acc, p, Br, BC, d, tiles.load());
}

}  // namespace memsafe::detail::attn
