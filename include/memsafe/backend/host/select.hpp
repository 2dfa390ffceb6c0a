// memsafe/backend/host/select.hpp — fused nearest-neighbour selection: screening values, margins,
// exact re-evaluation, and the interface of the screening kernels (simd.hpp, screen_kernel.inc).
//
// k-smallest (or largest) selection over a pairwise distance never needs the distance tile: a
// block of R query rows × NP packed panels of P = 64/sizeof(T) points accumulates a cheap
// *screening* value in registers — the dot-product form of the distance, one FMA per feature —
// and compares it with a per-row threshold; only lanes that pass (a bitmask, almost always
// empty) are looked at again.
//
// Screening is conservative and the answer exact: a lane passes when its screening value is
// within a proven rounding margin of the row's current k-th best *exact* value, and every lane
// that passes is re-evaluated with `exact_values`, the same arithmetic as the portable tile path
// (tile.hpp's pairwise_rows), before it may enter the top k. So the indices and values equal the
// reference path's bit for bit, at every tile size and budget, on every instruction set.
//
//   kind     exact value v̂               screening value ŝ (per lane)    passes when ŝ < thr, thr =      margin
//   sqdist   Σ (x_k − y_k)²              ½(1−δ)‖y‖² − Σ x_k y_k           ½(w − (1−δ)‖x‖²)                δN
//   l1       Σ |x_k − y_k|               the exact value itself            w                               0
//   cosine   1 − x̂·ŷ (unit vectors)       −(x̂·ŷ)·w_y                        (w − 1 + δ)·1                   δ
//   dot_max  x·y (largest first)         −½δ‖y‖² − x·y                     −w + ½δ‖x‖²                     ½δN
//
// w is the row's current k-th best exact value, N = ‖x‖² + ‖y‖², u the unit roundoff of T
// (2⁻²⁴, 2⁻⁵³), γ_n = nu/(1 − nu), δ = 8(d+4)u (select_margin).
//
// How each instruction set computes ŝ. Every lane is one point, so a lane's value is the same
// sequential chain on every instruction set (16 lanes a register on AVX-512, 8 on AVX2, the
// 64-byte panel being one or two registers): s₀ = the point's offset (`init`, rounded to T), then
// s_k = fl(s_{k−1} − x_k y_k) for k = 1..d in feature order, one rounding each (a fused
// multiply-add; for cosine s₁ = −fl(x₁y₁) from s₀ = 0), then for cosine one product with w_y. Register
// width, block shape, the min over a row's registers (exact: it returns one of its inputs) and
// the unordered compare (exact) do not round, so ŝ is bit-identical across instruction sets and
// the bounds below hold for each. (l1 has no product: |fl(x_k − y_k)| added in order, as the
// exact value.)
//
// How v̂ is computed. exact_values runs in the driver, compiled for the translation unit's own
// target — never inside a kernel's target region — with `madd` (kernels.hpp): one rounding per
// step where that target has FMA, two where it has not, as the tile path it must equal.
//
// Proof that v̂ < w (v̂ > w for dot_max) implies ŝ < thr, for finite data. Ties need not pass: a row
// meets its columns in increasing j, so an equal value never displaces the lower index it ties with.
// T* and S below are thr and ŝ in exact arithmetic; thr is computed in double (unit roundoff ≤ u)
// and rounded up, which only helps.
// * sqdist. t_k = fl(x_k − y_k) = (x_k − y_k)(1 + ε_k) and D = ‖x − y‖² ≤ 2N: the sum of the t_k²,
//   with or without FMA, has |v̂ − D| ≤ γ_{d+3}D ≤ 2γ_{d+3}N. init (‖y‖² summed in double, times
//   ½(1−δ), rounded to T) is within γ_{d+3}·½‖y‖² of ½(1−δ)‖y‖², and the chain adds at most
//   γ_d(|init| + Σ|x_k y_k|) ≤ γ_d N(1 + γ_{d+3}) (2Σ|x_k y_k| ≤ N): 2|ŝ − S| ≤ (γ_{d+3} + 2γ_d)N(1 + γ_{d+3}).
//   2(thr − T*) ≥ −γ_d‖x‖² − 4u(w + ‖x‖²), and 4u·w ≤ 4u(w − v̂) + 8uN(1 + γ_{d+3}) as 0 ≤ v̂ < w.
//   With 2(T* − S) = w − D + δN = (w − v̂) + (v̂ − D) + δN:
//   2(thr − ŝ) ≥ δN − (3γ_{d+3} + 3γ_d + 12u)N(1 + γ_{d+3}) ≈ (8d + 32 − 6d − 21)uN > 0 when N > 0;
//   when N = 0, ŝ = 0 < w/2 ≤ thr.
// * sqdist, centred (select_driver.hpp: a row block whose queries' mean c is far from the origin,
//   worth_centring). The screen runs on x' = fl(x − c), y' = fl(y − c) — init and thr from ‖y'‖², ‖x'‖²,
//   N' = ‖x'‖² + ‖y'‖² — while v̂ is still computed from x and y. The bound above holds for x', y' with
//   D' = ‖x' − y'‖² in place of D, and D' is close to D: x' − y' = (x − y) + e with
//   ‖e‖ ≤ u(‖x − c‖ + ‖y − c‖) ≤ u√(2N_c), N_c = ‖x − c‖² + ‖y − c‖² ≤ N'/(1 − u)², so
//   |D' − D| ≤ 2√D‖e‖ + ‖e‖² ≤ (4u + 2u²)N_c (D ≤ 2N_c), and |v̂ − D| ≤ 2γ_{d+3}N_c as before.
//   The same δ covers the extra term: (6d + 21 + 4)u < 8(d + 4)u. Distances do not change, so the
//   margin δN' is small where δN (N = ‖x‖² + ‖y‖²) would let every lane through: N(0, 1) + 1000 at
//   d = 3, n = 2·10⁵, m = 1000: 18× slower uncentred. (N' = 0 means x = c = y exactly: v̂ = 0.)
// * dot_max. The madd chain: |v̂ − x·y| ≤ γ_{d+1}·½N. ŝ is within γ_d(|init| + ½N) + γ_{d+3}|init| of
//   S = −½δ‖y‖² − x·y, |init| ≤ ½δ‖y‖²(1 + γ_{d+3}). thr's double arithmetic errs by at most
//   2u(|w| + ‖x‖²), and 2u|w| ≤ (v̂ − w) + 2uN when w < v̂ ≤ ½N(1 + γ_{d+1}). With T* − S =
//   (x·y − v̂) + (v̂ − w) + ½δN: thr − ŝ ≥ ½δN − (½γ_{d+1} + ½γ_d + 3u)N(1 + δ) ≈ (4d + 16 − d − 3.5)uN > 0.
// * cosine. x̂, ŷ are unit vectors (normalize; ‖x̂‖‖ŷ‖ ≤ 1 + 3u) with weights w_x, w_y ∈ {1, 0 for a
//   zero vector, NaN for a non-finite one}. For w_x = w_y = 1: ŝ is the FMA chain of x̂·ŷ negated
//   (negation is exact), v̂ = fl(1 − dot̂) with dot̂ the madd chain; both chains are within
//   γ_{d+1}(1 + 3u) of x̂·ŷ, so ŝ ≤ v̂ − 1 + 2.1u + 2γ_{d+1}(1 + 3u) < w − 1 + δ − 7u ≤ thr
//   (v̂ < w ≤ 2 + 2u; thr's double arithmetic errs by < 7u). w_y = 0 screens a zero point at 0: it
//   passes whenever its exact value 1 can enter (w > 1); a zero query (w_x = 0) accepts everything.
// * l1. ŝ = v̂ bit for bit (the same operations in the same order, nothing to contract), thr = w.
// * sqdist, bfloat16 screen (float data, AVX512-BF16: select_driver.hpp chooses it, MEMSAFE_SCREEN).
//   The chain runs on x̃, ỹ — x, y rounded to bfloat16 to nearest (8 significant bits, u_b = 2⁻⁸),
//   values in bfloat16's subnormal range flushed to zero — two features per step: VDPBF16PS adds
//   the exact FP32 products −x̃_k ỹ_k (the query's signs flipped, exactly) to the FP32 lane, at most
//   one rounding per product (the same chain, or fewer roundings where a CPU fuses the pair), with
//   subnormal results flushed. For normal values |x̃_k ỹ_k − x_k y_k| ≤ (2u_b + u_b²)|x_k y_k|; a
//   flushed value errs by < 2⁻¹²⁶ in absolute terms. So ŝ is within (2u_b + u_b²)(1 + γ_d)·½N +
//   2⁻¹²⁶(d + √(2d)·√N) of the FP32 chain's S-bound above, and the sqdist proof holds with
//   δ_b = (2u_b + u_b²)(1 + 2⁻¹⁰) + 9(d + 4)u (select_margin_bf16; ≈ 7.9e-3 at d = 100, against
//   δ = 5.0e-5) and η = 2⁻¹⁰⁰ added to thr for the flushed values (≥ 2⁻¹²⁶(d + √(2d)) for
//   d < 2²⁵ when N < 1; when N ≥ 1 the slack 9(d + 4)u − (6d + 21)u covers them). Points within
//   ≈ δ_b·N of the row's k-th value pass and are re-evaluated: many more than with the FP32 screen,
//   but still few (random N(0, 1) data, d = 100, n = 10⁶: ≈ 160 per query), for half the
//   instructions per feature (32 products per VDPBF16PS against 16 per FMA). The exact values are
//   the FP32 path's (the float panels are packed too, for exact_values). Centred, always (its panels and
//   query pairs are packed from the same centred copies the FP32/FP64 screen uses): the screen runs on
//   x − c and y − c, c the mean of the row block's queries (block_center; distances do not change), so N is
//   ‖x − c‖² + ‖y − c‖² — small for data far from the origin, where ‖x‖² + ‖y‖² would let every
//   lane through (N(0, 1) + 10 at d = 100: 62× slower uncentred). fl(x_k − c_k) errs by ≤ u|x_k − c_k|,
//   so ỹ_k = bf16(fl(y_k − c_k)) is within u_b' = u_b + u(1 + u_b) of y_k − c_k and
//   2u_b' + u_b'² < (2u_b + u_b²)(1 + 2⁻¹⁰): the same δ_b holds; init = ½(1 − δ_b)‖fl(y − c)‖² and
//   thr's ‖x − c‖² are those of the rounded differences (within γ of the exact ones, covered as
//   before).
// * cosine, bfloat16 screen (float data; by default as sqdist's: on AMX tiles, amx_kernel.inc, or
//   on VDPBF16PS where it pays). The chain runs on x̃, ỹ, the unit vectors x̂, ŷ rounded to
//   bfloat16 (never centred: they are unit vectors), from init = 0 (−inf for a non-finite point,
//   screening_init; the VDPBF16PS kernel starts at 0 and multiplies by w_y, as the FP32 screen).
//   For w_x = w_y = 1: |x̃_kỹ_k − x̂_kŷ_k| ≤ (2u_b + u_b²)|x̂_kŷ_k| and Σ|x̂_kŷ_k| ≤ ‖x̂‖‖ŷ‖ ≤ 1 + 3u,
//   the chain adds at most γ_d(1 + 2u_b + u_b²)(1 + 3u), and flushed values < 3d·2⁻¹²⁶, so
//   ŝ ≤ −x̂·ŷ + E_b with E_b = (2u_b + u_b²)(1 + 3u) + γ_d(1 + 2u_b + u_b²)(1 + 3u) + 3d·2⁻¹²⁶.
//   As for the FP32 screen, 1 − x̂·ŷ ≤ v̂ + 2.1u + γ_{d+1}(1 + 3u), so
//   ŝ < w − 1 + E_b + 2.1u + γ_{d+1}(1 + 3u) ≤ w − 1 + δ_b − 7u ≤ thr, thr = (w − 1 + δ_b)·1 with
//   δ_b of sqdist's bfloat16 screen: its (2u_b + u_b²)(1 + 2⁻¹⁰) exceeds the first term of E_b by
//   ≈ 128u, and 9(d + 4)u covers γ_d + γ_{d+1} + 9.1u with room (≈ (2d + 10)u). The values are
//   unit-scale, so the flushed values' absolute error needs no η. w_y = 0 (ŷ = 0): ŝ = 0, which
//   passes whenever the exact value 1 can enter (w > 1 − δ_b); w_y NaN: init −inf (AMX) or the
//   product with NaN (VDPBF16PS): the lane passes. Random N(0, 1) data, d = 100, n = 10⁶: the
//   margin δ_b ≈ 7.9e-3 on cosine distances lets few lanes beyond the k best through.
// * dot_max, bfloat16 screen (float data; by default as sqdist's, on AMX tiles or VDPBF16PS). The
//   chain runs on x̃, ỹ (not centred: x·y changes under a translation) from init = −½δ_b‖y‖², thr =
//   −w + ½δ_b‖x‖² + η. The products err by at most (2u_b + u_b²)Σ|x_k y_k| ≤ (2u_b + u_b²)·½N and
//   the flushed values as for sqdist, so dot_max's proof above holds with δ_b for δ: its
//   ½δ_b N = ½(2u_b + u_b²)(1 + 2⁻¹⁰)N + 4.5(d + 4)uN covers the products' error (with the chain's
//   γ_d on it) by the first term and (½γ_{d+1} + ½γ_d + 3u)N(1 + δ_b) ≈ (d + 3.5)uN by the second;
//   η covers the flushed values when N < 1, the slack otherwise.
// * sqdist, int16 screen (float data, the AVX2 kernels: select_driver.hpp chooses it, MEMSAFE_SCREEN).
//   Each query row and each column tile (less the block's centre when it is centred) is scaled by a
//   power of two, 2^−e_x for the row, 2^−e_y for the tile (i16_exponent: the largest finite |value|
//   maps to at most q = i16_qmax(d)), and rounded to integers: x_k = 2^e_x(x̃_k + ε_k),
//   y_k = 2^e_y(ỹ_k + ε'_k), |ε|, |ε'| ≤ ½. With s = 2^(e_x+e_y) (a normal float: the tile takes T's
//   own screen when some row's e_x + e_y leaves [−100, 100]),
//     |x·y − sΣx̃_kỹ_k| ≤ s(½Σ|x̃_k| + ½Σ|ỹ_k| + d/4) = E_x + E_y,  E_x = s(½Σ|x̃_k| + d/4), E_y = ½sΣ|ỹ_k|.
//   The kernel starts a lane's int32 sum at A = ⌈½Σ|ỹ_k|(1 + 2⁻²⁰)⌉ (pack_i16_panels, tile_prep.inc) and adds the
//   products with VPMADDWD/VPADDD — exactly: every partial sum is at most A + d·q² < 2³¹ — then
//   ŝ = fl(init − s·fl(Q + A)) (one conversion, one FMA; init the FP32 screen's offset), and the row's
//   threshold is thr' = thr + E_x(1 + 2⁻²⁰) rounded up (select_worker::threshold). So
//   init − s(Q + A) ≤ (init − x·y) + E_x − 2⁻²⁰E_y, and ŝ − thr' ≤ (S_init − thr) + ρ − 2⁻²⁰(E_x + E_y),
//   S_init = init − x·y the FP32 chain's exact value, whose distance below thr the sqdist proof
//   bounds with the chain's rounding allowance (2|ŝ − S| ≤ 2γ_d·N(1 + γ_{d+3}) of it) unused here;
//   ρ, the lane's two roundings, is at most u(2s|Q + A| + |init|)(1 + u) ≤ u(1.5N + 2(E_x + E_y) + 2s)(1 + u).
//   Its N part, 3uN(1 + u) in 2ρ, fits the chain's allowance for d ≥ 2 (the int16 screen's default
//   is d ≥ 16); forced at d = 1 it exceeds it by uN, inside the proof's final slack (2d + 7)uN. Its
//   E part fits 2⁻²⁰(E_x + E_y) = 16u(E_x + E_y), and 2us(1 + u) the d/4 in E_x's own widening. So
//   v̂ < w still implies ŝ < thr'. The column part is in the sum, so each row pays it on its own scale:
//   a query with huge values coarsens no other row. Non-finite inputs quantise to 0: such a lane's
//   init is −inf (it passes), such a row's threshold NaN (everything passes). The margin is absolute,
//   E_x + E_y ≈ (2^e_y‖x‖₁ + 2^e_x‖y‖₁)/2: on N(0, 1) data at d = 100 (q = 4633, 2^e ≈ 2⁻¹⁰) ≈ 0.08
//   on the halved squared distances of ≈ 100 the screen compares, far tighter than bfloat16's
//   δ_b·N/2 ≈ 0.8. VPMADDWD does 16 products per instruction against an AVX2 FMA's 8.
//
// Underflow. The bounds above are relative: they hold while no operation's result is subnormal.
// Data at a tiny scale (coordinates ≈ 1e-24 in float, whose squares underflow) breaks them: a
// product or sum rounded into the subnormal range errs by up to half the smallest subnormal,
// u_min = 2⁻¹⁵⁰ (float) or 2⁻¹⁰⁷⁵ (double), absolutely, whatever its size — far above δN when N is
// itself tiny, so a lane whose exact value beats w could be screened out (seen: the results of
// such data changed with the budget on the AVX2 kernels). Gradual underflow keeps the errors
// additive: ŝ has d + 1 roundings (init and the chain), v̂ ≤ 2d (the differences are exact when
// subnormal, the d squares and sums are not), thr ≤ 2d + 3 (‖x‖² and thr's own arithmetic in double:
// double data only), so the sqdist inequality loses at most (6d + 8)u_min in 2(thr − ŝ), dot_max's
// at most (3d + 6)u_min in thr − ŝ. Adding η_T = 2⁻¹⁰⁰ (float) or 2⁻¹⁰⁰⁰ (double) to thr covers them for d < 2⁴⁸
// (detail::screen_eta); it matters only where N is below ≈ 2⁻⁸⁰ (float), and there it lets the lanes
// through: tiny data costs time, never correctness. (The bfloat16 screen's η, the same 2⁻¹⁰⁰,
// covers its flushed values and this alike; the int16 screen's threshold adds its own absolute margin, ≥ 2⁻¹⁰²d, and
// η_T too. Cosine compares unit vectors against an absolute margin δ: nothing to add. Flushing
// to zero — a program built with -ffast-math — is not gradual underflow and is not covered.)
//
// Non-finite data. Lanes whose screening inputs are not finite (overflowing norms, NaN, inf) always
// pass (their init is −inf, or the row threshold is NaN), so unusual data costs time, never
// correctness. A row holding fewer than k values, or whose k-th value is NaN (NaN ranks last), has
// threshold NaN and screens nothing out (`not_ge` is an unordered compare: every lane passes a NaN
// threshold, and NaN lanes pass any threshold).
#pragma once
#include "../../core/libm.hpp"
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels.hpp"

namespace memsafe::host {

enum class select_kind { sqdist, l1, cosine, dot_max };

/// The precision a fused selection screens in: T's own (the FP32/FP64 chain), bfloat16 pairs
/// (AVX-512 with AVX512-BF16), the same bfloat16 pairs on AMX tiles (amx_kernel.inc: the
/// bfloat16 screen's values and margin, many more products per instruction) or int16 pairs (AVX2),
/// the last three for float only: bfloat16 and AMX for sqdist, cosine and dot_max, int16 for sqdist.
enum class screen_mode { native, bf16, i16, amx };

/// δ of the table above for T and feature dimension d.
template <class T>
double select_margin(std::size_t d) {
  return 8.0 * double(d + 4) * double(std::numeric_limits<T>::epsilon()) * 0.5;
}

/// δ_b of the bfloat16 screen (the table above) for feature dimension d.
inline double select_margin_bf16(std::size_t d) {
  return (0x1p-7 + 0x1p-16) * (1.0 + 0x1p-10) + 9.0 * double(d + 4) * 0x1p-24;
}
// η_T, every screen's absolute term (gradual underflow, "Underflow" above, and for the bfloat16
// screen, float only, its values flushed to zero, the table above), is detail::screen_eta<T>()
// (core/config.hpp), shared with the CUDA screen.

/// float → bfloat16 bits, rounded to nearest even; results in bfloat16's subnormal range flushed
/// to zero. (NaN and ±inf need no care: their lanes always pass, see "Non-finite data".)
inline std::uint32_t bf16_bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  std::uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  if ((r & 0x7f80u) == 0) r &= 0x8000u;
  return r;
}

/// The centre of a row block's screen: the mean of its ni query rows (xs, ni × d) whose
/// coordinates are all below 2⁶⁰ in magnitude (0 where there are none), rounded to T. Distances do
/// not change under a translation, but the screen's margin grows with ‖x − c‖² + ‖y − c‖²:
/// screening about the queries' mean keeps it small for data far from the origin (the table
/// above). `sum`: d doubles of scratch.
template <class T>
void block_center(const T* xs, std::size_t d, std::size_t ni, T* c, double* sum) {
  std::size_t used = 0;
  for (std::size_t k = 0; k < d; ++k) sum[k] = 0.0;
  for (std::size_t r = 0; r < ni; ++r) {
    const T* x = xs + r * d;
    bool ok = true;
    for (std::size_t k = 0; k < d; ++k) ok = ok && libm::fabs(x[k]) < T(0x1p60);  // false for NaN too
    if (!ok) continue;
    ++used;
    for (std::size_t k = 0; k < d; ++k) sum[k] += double(x[k]);
  }
  for (std::size_t k = 0; k < d; ++k) c[k] = used ? static_cast<T>(sum[k] / double(used)) : T(0);
}

/// ‖x‖² of a row of d values, in double.
template <class T>
double row_sqnorm(const T* x, std::size_t d) {
  double n2 = 0;
  for (std::size_t k = 0; k < d; ++k) n2 += double(x[k]) * double(x[k]);
  return n2;
}

/// A query row about the centre c for the FP32/FP64 screen: xc = fl(x − c). Returns ‖fl(x − c)‖² (double).
template <class T>
double center_row(const T* x, std::size_t d, const T* c, T* xc) {
  for (std::size_t k = 0; k < d; ++k) xc[k] = x[k] - c[k];
  return row_sqnorm(xc, d);
}

/// Packed panels about the centre c: cpack = fl(pack − c), feature k of every lane less c_k
/// (np panels of W points, the layout of pack_panels).
template <class T>
void center_panels(const T* pack, std::size_t d, std::size_t np, std::size_t W, const T* c, T* cpack) {
  for (std::size_t p = 0; p < np; ++p)
    for (std::size_t k = 0; k < d; ++k) {
      const T* src = pack + (p * d + k) * W;
      T* dst = cpack + (p * d + k) * W;
      const T ck = c[k];
      for (std::size_t w = 0; w < W; ++w) dst[w] = src[w] - ck;
    }
}

/// Whether the FP32/FP64 screen of a row block runs about its queries' centre (block_center): when
/// the queries' mean is farther from the origin than their spread, Σ‖x − c‖² < ½Σ‖x‖², so the
/// margin δN at least halves; otherwise centring would only cost a copy of each column tile.
/// `centred_sum`: Σ_r ‖fl(x_r − c)‖², `raw_sum`: Σ_r ‖x_r‖² over the rows.
inline bool worth_centring(double centred_sum, double raw_sum) {
  return libm::isfinite(raw_sum) && libm::isfinite(centred_sum) && 2 * centred_sum < raw_sum;
}

/// The 32-bit pairs per query row and per point of the bfloat16 screen's packing: ⌈d/2⌉, rounded
/// up to whole AMX steps of 16 for the AMX screen (the extra pairs are zeros, which add nothing:
/// fl(s + (−0)·0) = s).
inline std::size_t bf16_pairs(std::size_t d, screen_mode m) {
  const std::size_t dp = (d + 1) / 2;
  return m == screen_mode::amx ? (dp + 15) / 16 * 16 : dp;
}

/// The bfloat16 screen's panels are packed about the row block's centre c (the bfloat16 screen
/// always runs about c) with the centred float panels in one pass: tile_prep.inc's
/// center_bf16_panels, np panels of W points and dp (bf16_pairs) feature pairs,
/// pack2[(p·dp + q)·W + w] = ỹ_2q | ỹ_2q+1 << 16 with ỹ_k = bf16_bits(fl(y_k − c_k)) (0 past d), each
/// lane's pair one 32-bit element as VDPBF16PS and TDPBF16PS read it.

/// A query row for the bfloat16 screen from the row less the block's centre, xc = fl(x − c)
/// (center_row): the pairs of bf16(xc) with both signs flipped (the kernel adds −x̃·ỹ, exactly the
/// negated products), dp (bf16_pairs) of them, zeros past d.
inline void pack_bf16_row(const float* xc, std::size_t d, std::size_t dp, std::uint32_t* x2) {
  for (std::size_t q = 0; q < dp; ++q)
    x2[q] = 2 * q < d ? (bf16_bits(xc[2 * q]) | (2 * q + 1 < d ? bf16_bits(xc[2 * q + 1]) << 16 : 0u)) ^ 0x80008000u
                      : 0u;
}

/// The int16 screen's largest quantised magnitude at d features: d·(q + 1)² ≤ 2³¹ − 1, so that no
/// partial sum of the products, from a start of at most ½d·q(1 + 2⁻²⁰) + 1 (the column's margin,
/// pack_i16_panels in tile_prep.inc), leaves int32; a pair's sum 2q² ≤ 2³¹ − 1 too (q ≤ 32766, never −32768).
inline std::int32_t i16_qmax(std::size_t d) {
  const double q = libm::floor(libm::sqrt(2147483647.0 / double(d > 0 ? d : 1))) - 1.0;
  return static_cast<std::int32_t>(q < 32766.0 ? q : 32766.0);
}

/// The exponent e of the int16 screen's scale 2^e for values of magnitude ≤ maxabs: the smallest
/// with maxabs ≤ qmax·2^e (0 when maxabs is 0), so every |v|·2^−e rounds to at most qmax.
inline int i16_exponent(double maxabs, std::int32_t qmax) {
  if (!(maxabs > 0)) return 0;
  int e = libm::ilogb(maxabs) - libm::ilogb(double(qmax)) - 2;
  while (libm::ldexp(double(qmax), e) < maxabs) ++e;
  return e;
}

/// 2^e as a float, for e in the normal range [−126, 127] (std::ldexp is a libm call: ≈ 5 % of a
/// d = 100 kNN on AVX2 when it ran per row and column tile).
inline float pow2f(int e) {
  const std::uint32_t u = static_cast<std::uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// round(v·inv) to nearest even, inv = 2^−e (i16_exponent: |v·inv| ≤ 32767, and the product is
/// exact in double); 0 for a non-finite v (its lane or row passes anyway). The rounding adds and
/// removes 1.5·2⁵², exact in double for |v·inv| < 2⁵¹ (no libm call, no SSE4.1 needed; like
/// core/math.hpp, not for -ffast-math, which would fold it away).
inline std::int32_t i16_round(float v, double inv) {
  const bool fin = libm::fabs(v) <= std::numeric_limits<float>::max();
  const double shifted = double(fin ? v : 0.0f) * inv + 0x1.8p52;
  return static_cast<std::int32_t>(shifted - 0x1.8p52);
}

/// Two quantised features as one 32-bit pair (a in the low half, b in the high), their magnitudes
/// added to l1.
inline std::uint32_t i16_pair(std::int32_t a, std::int32_t b, std::int64_t& l1) {
  l1 += (a < 0 ? -a : a) + (b < 0 ? -b : b);
  return (static_cast<std::uint32_t>(a) & 0xffffu) | (static_cast<std::uint32_t>(b) << 16);
}

/// A query row for the int16 screen (the row less the block's centre when it is centred): the
/// pairs of round(x_k·2^−e) (zeros for a row with a non-finite value: its threshold passes
/// everything). Returns the row half of its margin in units of the scales' product: ½Σ_k|x̃_k| + d/4.
inline double pack_i16_row(const float* x, std::size_t d, int e, bool finite, std::uint32_t* x2) {
  const double inv = libm::ldexp(1.0, -e);
  std::int64_t l1 = 0;
  for (std::size_t q = 0; q < (d + 1) / 2; ++q) {
    const std::int32_t a = finite ? i16_round(x[2 * q], inv) : 0;
    const std::int32_t b = finite && 2 * q + 1 < d ? i16_round(x[2 * q + 1], inv) : 0;
    x2[q] = i16_pair(a, b, l1);
  }
  return 0.5 * double(l1) + 0.25 * double(d);
}

/// Round a double to T upwards (so a threshold is never tightened by the conversion).
template <class T>
T round_up(double v) {
  T t = static_cast<T>(v);
  if (libm::isfinite(v) && double(t) < v) t = libm::nextafter(t, std::numeric_limits<T>::infinity());
  return t;
}

/// Screening offsets for the `np` packed panels of a column tile (np·W values, `nj` real points)
/// from their squared norms sq (np·W, in double: panel_sqnorms, tile_prep.inc). Padding lanes get
/// +inf (they never pass; callers check j < nj regardless). Returns whether every point is finite
/// with a representable squared norm (the tile is "clean": no NaN can arise in its screening values).
template <class T, select_kind K>
bool screening_init(const double* sq, std::size_t nj, std::size_t np, std::size_t W, T* init, double delta) {
  const double big = double(std::numeric_limits<T>::max()) / 4;
  bool clean = true;
  for (std::size_t j = 0; j < np * W; ++j) {
    T& o = init[j];
    if (j >= nj) {
      o = std::numeric_limits<T>::infinity();
      continue;
    }
    const double s = sq[j];
    const bool fin = libm::isfinite(s) && s < big;
    clean = clean && fin;
    if constexpr (K == select_kind::l1) {
      o = T(0);
    } else if constexpr (K == select_kind::cosine) {
      // Read by the paired screens only (the FP32/FP64 chain starts from 0 and multiplies by the
      // weight): a non-finite point (NaN coordinates) starts at −inf, so its lane always passes.
      o = fin ? T(0) : -std::numeric_limits<T>::infinity();
    } else {
      // Not representable (or NaN/inf data): screen nothing out for this point.
      o = fin ? static_cast<T>(K == select_kind::sqdist ? 0.5 * (1.0 - delta) * s : -0.5 * delta * s)
              : -std::numeric_limits<T>::infinity();
    }
  }
  return clean;
}

/// Per-row constants of the screening threshold.
template <class T>
struct row_screen {
  double xn2 = 0;   ///< ‖x‖² (sqdist, dot_max)
  double xnorm = 0; ///< ‖x‖ (cosine; +inf when x is zero)
  bool finite = true;  ///< the screen's inputs are finite (the bfloat16 screen: about the block's centre)
};

template <class T, select_kind K>
row_screen<T> screen_row(const T* x, std::size_t d, T xinv) {
  row_screen<T> s;
  const double n2 = row_sqnorm(x, d);
  s.xn2 = n2;
  s.xnorm = xinv > T(0) ? 1.0 / double(xinv) : std::numeric_limits<double>::infinity();
  s.finite = libm::isfinite(n2) && n2 < double(std::numeric_limits<T>::max()) / 4;  // also: no NaN/inf in x
  return s;
}

/// The screening threshold of a row whose current k-th best exact value is `worst`
/// (`full` false: fewer than k values held → accept everything: the threshold is NaN), for the
/// screen's margin δ (select_margin, or select_margin_bf16) and absolute term η (detail::screen_eta, plus
/// the int16 screen's row margin).
template <class T, select_kind K>
T screen_threshold(bool full, T worst, const row_screen<T>& rs, double delta, double eta) {
  constexpr T all = std::numeric_limits<T>::quiet_NaN();  // !(v >= NaN) holds for every v, +inf and NaN too
  if (!full || worst != worst || !rs.finite) return all;
  const double w = double(worst);
  if constexpr (K == select_kind::l1) return worst;
  // Computed in double: its rounding is far below the margin δ, which is at least 40 units of T's.
  if constexpr (K == select_kind::sqdist) return round_up<T>(0.5 * (w - (1.0 - delta) * rs.xn2) + eta);
  if constexpr (K == select_kind::cosine) return libm::isfinite(rs.xnorm) ? round_up<T>((w - 1.0 + delta) * rs.xnorm) : all;
  if constexpr (K == select_kind::dot_max) return round_up<T>(-w + 0.5 * delta * rs.xn2 + eta);
  return all;
}

#if defined(__GNUC__) && !defined(__CUDACC__)
#define MEMSAFE_UNROLL_PAIRS _Pragma("GCC unroll 16")  // the N accumulators in registers (exact_values)
#else
#define MEMSAFE_UNROLL_PAIRS  // nvcc's front end does not know the pragma (and never runs exact_values)
#endif

/// The exact values of N pairs (x[i] against y[i]), each with the portable tile kernel's
/// arithmetic (pairwise_rows): x[i] contiguous, y[i] with stride W (a packed panel column). Every
/// pair runs its own chain of exactly the operations below, in feature order; the N chains are
/// only interleaved, so that their latencies overlap (a chain of d dependent multiply-adds is what
/// an exact value costs), and each value has the bits it would have alone.
template <class T, select_kind K, std::size_t N>
void exact_values(const T* const (&x)[N], const T* const (&y)[N], std::size_t d, std::size_t W,
                  const T (&xinv)[N], const T (&yinv)[N], T (&out)[N]) {
  T acc[N] = {};
  for (std::size_t k = 0; k < d; ++k)
    MEMSAFE_UNROLL_PAIRS
    for (std::size_t i = 0; i < N; ++i) {
      if constexpr (K == select_kind::sqdist) {
        const T t = x[i][k] - y[i][k * W];
        acc[i] = madd(t, t, acc[i]);
      } else if constexpr (K == select_kind::l1) {
        const T t = x[i][k] - y[i][k * W];
        acc[i] += t < T(0) ? -t : t;
      } else {
        acc[i] = madd(x[i][k], y[i][k * W], acc[i]);
      }
    }
  for (std::size_t i = 0; i < N; ++i) {
    if constexpr (K == select_kind::cosine) acc[i] = cosine_finish(acc[i], xinv[i], yinv[i]);
    out[i] = acc[i];
  }
}

/// What a screening kernel reads: one group of R query rows against the np packed panels of a
/// column tile (simd.hpp). After each block of panels where a lane passes, the kernel calls
/// hit(ctx, pnl, nb, masks) — masks[q·nb + p]: the lanes of row q, panel pnl + p — which
/// re-evaluates those lanes exactly and may lower thr[q] before the next block is screened. hit
/// is the driver's, compiled for the translation unit's target (never inlined into a kernel).
template <class T>
struct screen_args {
  const T* xs = nullptr;    ///< R rows × d, contiguous
  std::size_t d = 0;
  const T* pack = nullptr;  ///< np panels of P = lanes<T> points, panel stride d·P
  const T* init = nullptr;  ///< screening offsets, np·P
  const T* yinv = nullptr;  ///< cosine: the points' weights, np·P; else null
  const T* thr = nullptr;   ///< the R rows' thresholds
  std::size_t np = 0;
  bool clean = false;       ///< every screening input finite (screen_kernel.inc)
  std::size_t dp = 0;                    ///< bfloat16 / int16 screen: pairs per row and point (bf16_pairs; int16: ⌈d/2⌉)
  const std::uint32_t* xs2 = nullptr;    ///< bfloat16 / int16 screen: the R rows' pairs, R × dp
  const std::uint32_t* pack2 = nullptr;  ///< bfloat16 / int16 screen: np panels of dp × P pairs
  const T* qscale = nullptr;             ///< int16 screen: the R rows' 2^(e_x + e_y), the products of the scales
  const std::int32_t* acc0 = nullptr;    ///< int16 screen: the points' accumulator starts, np·P (pack_i16_panels)
  int skip = 0;  ///< AMX screen: the block's first rows, screened already, whose lanes are not reported
  void (*hit)(void* ctx, std::size_t pnl, std::size_t nb, const std::uint32_t* masks) = nullptr;
  void* ctx = nullptr;
};

/// One instruction set's screening kernels for (T, K): `rows` rows at a time (`group`) or one
/// (`single`), and the column tiles' preparation in vectors (tile_prep.inc): the panels' squared
/// norms, and for float the largest finite |value| and the int16 screen's panels. Null pointers:
/// no kernels.
template <class T>
struct screen_kernels {
  using fn = void (*)(const screen_args<T>&);
  int rows = 0;
  fn group = nullptr;
  fn single = nullptr;
  void (*sqnorms)(const T* pack, std::size_t d, std::size_t np, double* sq) = nullptr;
  double (*max_abs)(const float* v, std::size_t n) = nullptr;
  void (*pack_i16)(const float* ypack, std::size_t d, std::size_t np, int e, std::uint32_t* pack2,
                   std::int32_t* acc0) = nullptr;
  void (*center_bf16)(const float* pack, std::size_t d, std::size_t np, const float* c, float* cpack, std::size_t dp,
                      std::uint32_t* pack2) = nullptr;
};

}  // namespace memsafe::host
