// memsafe/backend/host/simd.hpp — the few vector operations the fused host kernels use.
//
// One 64-byte register of T (16 floats or 8 doubles). The AVX-512 specialisations are compiled
// when the translation unit targets AVX-512 (-march=native on such a CPU, or -mavx512f);
// `host::simd_fast` says whether they exist. Without them the fused kernels are not compiled
// and every expression takes the portable tile path (tile.hpp + monoids.hpp), which
// is also the reference the fused kernels are tested against.
#pragma once
#include <cstdint>

#if defined(__AVX512F__) && !defined(MEMSAFE_NO_SIMD) && !defined(__CUDACC__)
#include <immintrin.h>
#define MEMSAFE_SIMD_AVX512 1
#endif

namespace memsafe::host {

#if defined(MEMSAFE_SIMD_AVX512)
inline constexpr bool simd_fast = true;

template <class T>
struct simd;

template <>
struct simd<float> {
  using reg = __m512;
  static constexpr int W = 16;
  static reg load(const float* p) { return _mm512_load_ps(p); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, reg a) { _mm512_storeu_ps(p, a); }
  static reg set1(float v) { return _mm512_set1_ps(v); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg abs(reg a) { return _mm512_abs_ps(a); }
  static reg min(reg a, reg b) { return _mm512_maskz_min_ps(__mmask16(0xFFFF), a, b); }  // maskz: GCC 12 warns on the unmasked form
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }    ///< a·b + c
  static reg fnmadd(reg a, reg b, reg c) { return _mm512_fnmadd_ps(a, b, c); }  ///< c − a·b
  /// Lanes where !(a >= b): a < b, or either is NaN.
  static std::uint32_t not_ge(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_NGE_UQ); }
};

template <>
struct simd<double> {
  using reg = __m512d;
  static constexpr int W = 8;
  static reg load(const double* p) { return _mm512_load_pd(p); }
  static reg loadu(const double* p) { return _mm512_loadu_pd(p); }
  static void storeu(double* p, reg a) { _mm512_storeu_pd(p, a); }
  static reg set1(double v) { return _mm512_set1_pd(v); }
  static reg zero() { return _mm512_setzero_pd(); }
  static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_pd(a, b); }
  static reg abs(reg a) { return _mm512_abs_pd(a); }
  static reg min(reg a, reg b) { return _mm512_maskz_min_pd(__mmask8(0xFF), a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm512_fnmadd_pd(a, b, c); }
  static std::uint32_t not_ge(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_NGE_UQ); }
};
#else
inline constexpr bool simd_fast = false;
#endif

}  // namespace memsafe::host
