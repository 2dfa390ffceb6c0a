// memsafe/backend/host/simd.hpp — the fused selection's screening kernels, once per instruction set.
//
// Each instruction set of isa.hpp but portable gets a namespace (host::avx512, host::avx2) holding
// the few vector operations the kernels use (`simd<T>`: the width-generic ones from simd_ops.inc,
// the builtins and broadcasts of its width here), its register block, and the kernels of
// screen_kernel.inc and sum_kernel.inc, included there. The namespace is compiled for its instruction set whatever
// the translation unit's -march: GCC `#pragma GCC target`, Clang `#pragma clang attribute
// (target)`, so every function defined in it — the kernel templates and whatever they instantiate
// — is generated for that target, and a plain `-O2` build carries all of them. Nothing outside
// a namespace calls into it except through the function pointers of screen_kernels_for (the
// run-time choice); nothing inside it calls code compiled for another target in the hot loop
// (the exact re-evaluation is a call back into the driver, compiled for the translation unit's
// target, so it rounds as the portable path does — see select.hpp).
//
// The operations are GCC/Clang vector extensions (arithmetic, compares, blends) plus four
// x86 builtins both compilers provide (fused multiply-add, compare with a predicate, mask
// extraction, mask compare): no <immintrin.h>, whose parsing alone costs a g++ translation unit
// ≈ 0.6 s. Only under MEMSAFE_SIMD_DISPATCH (isa.hpp); elsewhere screen_kernels_for gives none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "isa.hpp"
#include "kernels.hpp"
#include "select.hpp"
#include "sums.hpp"

#if defined(MEMSAFE_SIMD_DISPATCH)

#if defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_fma)
#define MEMSAFE_ELEMENTWISE_FMA 1  // newer Clang: one generic fused multiply-add for every vector type
#endif
#endif

namespace memsafe::host::vec {
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef double f64x8 __attribute__((vector_size(64)));
typedef std::int32_t i32x8 __attribute__((vector_size(32)));
typedef std::int64_t i64x4 __attribute__((vector_size(32)));
typedef std::int32_t i32x16 __attribute__((vector_size(64)));
typedef std::int64_t i64x8 __attribute__((vector_size(64)));
typedef short i16x16 __attribute__((vector_size(32)));
typedef float f32x4 __attribute__((vector_size(16)));
typedef std::int32_t i32x4 __attribute__((vector_size(16)));
}  // namespace memsafe::host::vec

// ---- AVX-512F: 16 floats / 8 doubles, one register per 64-byte panel ------------------------------
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#pragma clang attribute push(__attribute__((min_vector_width(512))), apply_to = function)  // full-width zmm
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
namespace memsafe::host::avx512 {

/// Register block: 6 rows × 4 panels = 24 accumulators (+ 4 panel loads + 1 broadcast of 32
/// registers). Measured on Zen 4 against 8×2, 4×4, 8×3 and 5×5: best or tied at d = 3 and 100.
inline constexpr int block_rows = 6, block_panels = 4;

#include "simd_ops.inc"

template <class T>
struct simd;

template <>
struct simd<float> : simd_ops<float, vec::f32x16, vec::i32x16> {
  static reg set1(float v) { return reg{v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v}; }
  /// √a per lane, correctly rounded (the same values as std::sqrt, with no errno to keep)
  static reg sqrt(reg a) {
#if defined(__clang__)
    return __builtin_ia32_sqrtps512(a, 4);
#else
    return __builtin_ia32_sqrtps512_mask(a, a, (unsigned short)-1, 4);
#endif
  }
  /// a·b + c, one rounding
  static reg fmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(a, b, c);
#else
    return __builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)-1, 4);
#endif
  }
  /// c − a·b, one rounding
  static reg fnmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(-a, b, c);
#elif defined(__clang__)
    return __builtin_ia32_vfmaddps512_mask(-a, b, c, (unsigned short)-1, 4);  // the negation folds into vfnmadd
#else
    return __builtin_ia32_vfnmaddps512_mask(a, b, c, (unsigned short)-1, 4);
#endif
  }
  /// Lanes where !(a >= b): a < b, or either is NaN (predicate NGE_UQ).
  static std::uint32_t not_ge(reg a, reg b) { return __builtin_ia32_cmpps512_mask(a, b, 0x19, (unsigned short)-1, 4); }
  // The bfloat16 screen (select.hpp): 16 lanes of two bfloat16 each, held in a float register.
  static reg load_bits(const std::uint32_t* p) {
    reg r;
    __builtin_memcpy(&r, p, sizeof r);
    return r;
  }
  static reg set1_bits(std::uint32_t b) { return (reg)(vec::i32x16{} + static_cast<std::int32_t>(b)); }
  /// acc + x₀y₀ + x₁y₁ per lane (VDPBF16PS, AVX512-BF16). Written as assembly: the compilers'
  /// builtins for it changed type between releases, and the instruction needs no other support
  /// (the caller checks the CPU, select_driver.hpp).
  static reg dpbf16(reg acc, reg x, reg y) {
    __asm__("vdpbf16ps {%2, %1, %0|%0, %1, %2}" : "+v"(acc) : "v"(x), "v"(y));
    return acc;
  }
};

template <>
struct simd<double> : simd_ops<double, vec::f64x8, vec::i64x8> {
  static reg set1(double v) { return reg{v, v, v, v, v, v, v, v}; }
  static reg sqrt(reg a) {
#if defined(__clang__)
    return __builtin_ia32_sqrtpd512(a, 4);
#else
    return __builtin_ia32_sqrtpd512_mask(a, a, (unsigned char)-1, 4);
#endif
  }
  /// a·b + c, one rounding
  static reg fmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(a, b, c);
#else
    return __builtin_ia32_vfmaddpd512_mask(a, b, c, (unsigned char)-1, 4);
#endif
  }
  static reg fnmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(-a, b, c);
#elif defined(__clang__)
    return __builtin_ia32_vfmaddpd512_mask(-a, b, c, (unsigned char)-1, 4);  // the negation folds into vfnmadd
#else
    return __builtin_ia32_vfnmaddpd512_mask(a, b, c, (unsigned char)-1, 4);
#endif
  }
  static std::uint32_t not_ge(reg a, reg b) { return __builtin_ia32_cmppd512_mask(a, b, 0x19, (unsigned char)-1, 4); }
};

#include "screen_kernel.inc"
#include "sum_kernel.inc"
#include "amx_kernel.inc"

}  // namespace memsafe::host::avx512
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// ---- AVX2 + FMA: 8 floats / 4 doubles, two registers per 64-byte panel ----------------------------
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace memsafe::host::avx2 {

/// Register block: 6 rows × 1 panel (2 registers) = 12 accumulators (+ 2 panel loads kept in
/// registers + 1 broadcast of 16 registers), the classic 6 × 16 shape: enough independent FMA
/// chains for a 4–5 cycle latency on two pipes. Measured on Zen 3 (single-thread CPU time,
/// n = 10⁵, m = 1000): 6×1, 5×1 and 4×1 tie at the FMA peak at d = 100 (4×1 and 5×1 ≤ 5 % faster
/// at d = 3); 3×2 needs 17 registers, so one panel load is folded into the FMAs — fine with generic
/// tuning, 25 % slower under -march=znver3, which folds every load.
inline constexpr int block_rows = 6, block_panels = 1;

#include "simd_ops.inc"

template <class T>
struct simd;

template <>
struct simd<float> : simd_ops<float, vec::f32x8, vec::i32x8> {
  static reg set1(float v) { return reg{v, v, v, v, v, v, v, v}; }
  static reg sqrt(reg a) { return __builtin_ia32_sqrtps256(a); }
  /// a·b + c, one rounding
  static reg fmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(a, b, c);
#else
    return __builtin_ia32_vfmaddps256(a, b, c);
#endif
  }
  static reg fnmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(-a, b, c);
#elif defined(__clang__)
    return __builtin_ia32_vfmaddps256(-a, b, c);  // the negation folds into vfnmadd
#else
    return __builtin_ia32_vfnmaddps256(a, b, c);
#endif
  }
  static std::uint32_t not_ge(reg a, reg b) {
    return static_cast<std::uint32_t>(__builtin_ia32_movmskps256(__builtin_ia32_cmpps256(a, b, 0x19)));
  }
  // The int16 screen (select.hpp): 8 lanes of two int16 each, summed in int32 lanes (ireg).
  using ireg = vec::i32x8;
  static ireg load_i(const std::uint32_t* p) {
    ireg r;
    __builtin_memcpy(&r, p, sizeof r);
    return r;
  }
  static ireg keep_i(ireg a) {
    __asm__("" : "+v"(a));
    return a;
  }
  static ireg set1_i(std::uint32_t b) { return ireg{} + static_cast<std::int32_t>(b); }
  /// acc + x₀y₀ + x₁y₁ per lane in int32: VPMADDWD, then VPADDD; or, Vnni (the CPU has AVX-VNNI),
  /// VPDPWSSD, one instruction computing the same sums with the same wrap-around modulo 2³² (the
  /// same bits in every case; the margin keeps the sums inside int32 anyway). Inline assembly, as
  /// the AMX kernel's, so that no function needs an avxvnni target; `{vex}` because the mnemonic
  /// with ymm registers otherwise assembles to AVX512-VNNI's EVEX form.
  template <bool Vnni = false>
  static ireg madd16(ireg acc, ireg x, ireg y) {
    if constexpr (Vnni) {
      __asm__("{%{vex%} vpdpwssd %2, %1, %0|%{vex%} vpdpwssd %0, %1, %2}" : "+x"(acc) : "x"(x), "xm"(y));
      return acc;
    } else {
      return acc + (ireg)__builtin_ia32_pmaddwd256((vec::i16x16)x, (vec::i16x16)y);
    }
  }
  /// The int32 lanes as floats (VCVTDQ2PS, rounded to nearest).
  static reg cvt_i32(ireg a) { return __builtin_convertvector(a, vec::f32x8); }
};

template <>
struct simd<double> : simd_ops<double, vec::f64x4, vec::i64x4> {
  static reg set1(double v) { return reg{v, v, v, v}; }
  static reg sqrt(reg a) { return __builtin_ia32_sqrtpd256(a); }
  /// a·b + c, one rounding
  static reg fmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(a, b, c);
#else
    return __builtin_ia32_vfmaddpd256(a, b, c);
#endif
  }
  static reg fnmadd(reg a, reg b, reg c) {
#if defined(MEMSAFE_ELEMENTWISE_FMA)
    return __builtin_elementwise_fma(-a, b, c);
#elif defined(__clang__)
    return __builtin_ia32_vfmaddpd256(-a, b, c);  // the negation folds into vfnmadd
#else
    return __builtin_ia32_vfnmaddpd256(a, b, c);
#endif
  }
  static std::uint32_t not_ge(reg a, reg b) {
    return static_cast<std::uint32_t>(__builtin_ia32_movmskpd256(__builtin_ia32_cmppd256(a, b, 0x19)));
  }
};

#include "screen_kernel.inc"
#include "sum_kernel.inc"
#include "tile_prep.inc"

}  // namespace memsafe::host::avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // MEMSAFE_SIMD_DISPATCH

namespace memsafe::host {

#if defined(MEMSAFE_SIMD_DISPATCH)
/// The column tiles' preparation (tile_prep.inc: AVX2 code, for the AVX-512 kernels too) for
/// kernels `s`, when there are any.
template <class T>
void with_tile_prep(screen_kernels<T>& s) {
  if (!s.group) return;
  s.sqnorms = &avx2::panel_sqnorms<T>;
  if constexpr (std::is_same_v<T, float>) {
    s.max_abs = &avx2::max_abs_finite;
    s.pack_i16 = &avx2::pack_i16_panels;
    s.center_bf16 = &avx2::center_bf16_panels;
  }
}
#endif

/// The screening kernels of (T, K) for instruction set `i` and screen mode `m` (none for portable,
/// or where the translation unit has no SIMD kernels, or the mode does not run there), with the
/// column tiles' preparation (with_tile_prep). The paired
/// modes are float's only: bf16 and amx on AVX-512 for sqdist, cosine and dot, i16 on AVX2 for
/// sqdist (select_driver.hpp's choice).
template <class T, select_kind K>
screen_kernels<T> screen_kernels_for([[maybe_unused]] isa i, [[maybe_unused]] screen_mode m = screen_mode::native) {
  screen_kernels<T> s;
#if defined(MEMSAFE_SIMD_DISPATCH)
  if (m != screen_mode::native) {
    if constexpr (std::is_same_v<T, float> && K != select_kind::l1) {
      if (m == screen_mode::bf16 && i == isa::avx512)
        s = {avx512::block_rows, &avx512::screen_rows<T, K, avx512::block_rows, screen_mode::bf16>,
             &avx512::screen_rows<T, K, 1, screen_mode::bf16>};
      else if (m == screen_mode::amx && i == isa::avx512)
        // 32 rows on the tiles (a row block's last rows as a block overlapping the one before);
        // a row block of fewer than 32 rows one row at a time by VDPBF16PS (the same packed
        // pairs, values and margin).
        s = {avx512::amx_block_rows, &avx512::amx_screen_rows, &avx512::screen_rows<T, K, 1, screen_mode::bf16>};
      else if constexpr (K == select_kind::sqdist) {
        if (m == screen_mode::i16 && i == isa::avx2)
          // A block's last rows, one at a time, by T's own screen (one kernel fewer to compile): the
          // offsets and thresholds it reads then carry the int16 margin too, which only loosens them.
          s = {avx2::block_rows,
               cpu_has_avx_vnni() ? &avx2::screen_rows<T, K, avx2::block_rows, screen_mode::i16, true>
                                  : &avx2::screen_rows<T, K, avx2::block_rows, screen_mode::i16>,
               &avx2::screen_rows<T, K, 1>};
      }
    }
  } else if (i == isa::avx512) {
    s = {avx512::block_rows, &avx512::screen_rows<T, K, avx512::block_rows>, &avx512::screen_rows<T, K, 1>};
  } else if (i == isa::avx2) {
    s = {avx2::block_rows, &avx2::screen_rows<T, K, avx2::block_rows>, &avx2::screen_rows<T, K, 1>};
  }
  with_tile_prep(s);
#endif
  return s;
}


/// The fused kernel-sum kernels of formula F (then `Op`, void for none) over T, mode M and C
/// (1: one right-hand column, 0: a.c columns, 2: one column, symmetric) for instruction set `i` (none for portable, or where
/// the translation unit has no SIMD kernels).
template <class F, class Op, class T, fsum_mode M, int C>
fsum_kernels<T> fsum_kernels_for([[maybe_unused]] isa i) {
  fsum_kernels<T> s;
#if defined(MEMSAFE_SIMD_DISPATCH)
  if (i == isa::avx512) s = {4, &avx512::fsum_rows<F, Op, T, 4, M, C>, avx512::simd<double>::W};
  else if (i == isa::avx2) s = {4, &avx2::fsum_rows<F, Op, T, 4, M, C>, avx2::simd<double>::W};
#endif
  return s;
}

}  // namespace memsafe::host
