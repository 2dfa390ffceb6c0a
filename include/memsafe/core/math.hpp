// memsafe/core/math.hpp — branch-free, auto-vectorisable exp / log / pow / sqrt for float and double.
//
// libm's std::exp / std::log are opaque calls, so a loop such as
//     for (j...) out[j] = var * std::exp(-0.5 * r2[j]);
// never vectorises without -ffast-math (and then only through libmvec). The functions here are
// plain inline arithmetic on values: no table look-ups, no data-dependent branches, no
// float<->int64 conversions (which AVX2 lacks). Special cases are selects between values that are
// always computed, written as bit blends (detail::select, see there why not ?:), so g++ -O3
// vectorises such loops with no -ffast-math: with -march=native (AVX-512), -mavx2 and
// -march=x86-64-v2; with plain SSE2 only the float functions (the double bool->mask blend needs
// SSE4.2's pcmpgtq). GCC 12 at -O2 uses the "very cheap" cost model, which refuses loops needing
// a scalar epilogue: use -O3, -O2 -fvect-cost-model=dynamic, or `#pragma omp simd` with
// -fopenmp-simd on the loop.
//
// The tricks must survive strict IEEE semantics only: (v + 2^52) - 2^52 is a round-to-nearest,
// which -ffast-math / -fassociative-math would fold away: core/config.hpp refuses such builds
// (FMA contraction, -ffp-contract=fast, is fine).
//
// Accuracy (measured by tests/test_math.cpp against long double references):
//   exp, log:  < 1 ulp for double, log float; <= 1.06 ulp for exp float (exhaustive over all floats);
//              over the whole range, subnormal inputs / outputs included. In CUDA device code exp
//              is CUDA's expf (≤ 2 ulp) / exp (≤ 1 ulp), their documented bounds: the polynomials
//              were the fused kernel sums' dominant cost there.
//   pow(b, p): float computed in double internally, <= 1 ulp. double = exp(p*log(b)) in double, so
//              the roundings of log b and p*log b are magnified by |y| = |p log b|: about 2|y| ulp
//              (measured <= 2.1|y| + 1), i.e. ~1e-15 relative for results near 1 but up to ~300 ulp
//              (~6e-14 relative) for results near DBL_MAX or DBL_MIN.
//
// Special values:
//   exp:  exp(NaN) = NaN, exp(+inf) = +inf, exp(-inf) = +0, overflow -> +inf, underflow -> subnormal / 0.
//   log:  log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(NaN) = NaN, log(1) = +0 exactly.
//   pow:  pow(b, +-0) = 1 (any b, NaN too), pow(1, p) = 1 (any p, NaN too), pow(-1, +-inf) = 1,
//         pow(b, 1) = b, pow(+-0, p > 0) = +0 (-0 for odd integer p and b = -0),
//         pow(+-0, p < 0) = +inf (-inf for odd integer p and b = -0),
//         negative b: NaN unless p is an exact integer, then |b|^p with the sign from p's parity
//         (b = -inf and p not an odd integer: +inf for p > 0, +0 for p < 0, as std::pow),
//         |b| < 1 / |b| > 1 with p = +-inf -> 0 or +inf as IEEE 754 says, otherwise NaN in -> NaN out.
//
// sqrt is __builtin_sqrt / __builtin_sqrtf. It only vectorises (vsqrtpd / vsqrtps) with
// -fno-math-errno, otherwise GCC keeps a scalar errno path for negative inputs; the project compiles
// its targets and tests with -fno-math-errno (memsafe_target_options in CMakeLists.txt). sqrt_n takes
// a row of roots in a form that vectorises either way (the formulas' finalise use it).
//
// Every function is MEMSAFE_HD (__host__ __device__ under nvcc), so the same code can run in a
// CUDA kernel.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "config.hpp"  // MEMSAFE_HD

namespace memsafe::math {

namespace detail {

// Infinity and NaN from compiler builtins: std::numeric_limits members are host-only constexpr
// functions for nvcc, and these functions are also compiled for the device.
template <class T>
MEMSAFE_HD constexpr T inf_v() {
  if constexpr (sizeof(T) == 4) return __builtin_huge_valf();
  else return __builtin_huge_val();
}
template <class T>
MEMSAFE_HD constexpr T nan_v() {
  if constexpr (sizeof(T) == 4) return __builtin_nanf("");
  else return __builtin_nan("");
}

template <class T>
inline constexpr bool is_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class To, class From>
MEMSAFE_HD inline To bitcast(From v) noexcept {
  static_assert(sizeof(To) == sizeof(From));
#if defined(__CUDACC__)
  To t;
  std::memcpy(&t, &v, sizeof t);
  return t;
#else
  return std::bit_cast<To>(v);
#endif
}

template <class T>
using uint_t = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;

// c ? a : b on values, as a bit blend. A plain ?: is gimplified to a branch; GCC then sinks the
// computation feeding one arm into that branch (or jump-threads a clamp and constant-folds a
// cloned body), and with the default -ftrapping-math if-conversion may not speculate FP
// arithmetic back out of a branch unless the target has masked vector ops (AVX-512): the loop
// stays scalar on AVX2. A bit blend has no branch to sink into; the vectoriser turns it into
// and/andnot/or (or a blend).
template <class T>
MEMSAFE_HD inline T select(bool c, T a, T b) noexcept {
  using U = uint_t<T>;
  const U m = U(0) - U(c);
  return bitcast<T>(static_cast<U>((bitcast<U>(a) & m) | (bitcast<U>(b) & ~m)));
}

// log's special cases, shared by the float and double kernels: +inf -> +inf, +-0 -> -inf,
// negative -> NaN, NaN -> NaN; `r` is the polynomial result, kept for every other x.
template <class T>
MEMSAFE_HD inline T log_special_cases(T x, T r) noexcept {
  r = select(x == inf_v<T>(), inf_v<T>(), r);
  r = select(x == T(0), -inf_v<T>(), r);
  r = select(x < T(0), nan_v<T>(), r);
  return select(x != x, x, r);
}

// ----------------------------------------------------------------------------------------------
// exp
// ----------------------------------------------------------------------------------------------

// x = n ln2 + r, |r| <= ln2/2 (plus a rounding), e^x = e^r * 2^n1 * 2^n2 with n1 = round(n/2),
// n2 = n - n1: both halves stay normal powers of two for every |x| <= 750, so the product rounds
// once into the subnormal range and overflows to +inf by itself.

MEMSAFE_HD inline double exp_impl(double x) noexcept {
#if defined(__CUDA_ARCH__)
  // On the GPU, CUDA's exp (≤ 1 ulp by CUDA's documentation): fewer FP64 instructions than the
  // degree-11 polynomial below, the f64 kernel sums' dominant cost there.
  return ::exp(x);
#else
  constexpr double shift = 0x1.8p52;                     // (v + shift) - shift = round-to-nearest(v)
  constexpr double log2e = 1.44269504088896338700e+00;
  constexpr double ln2_hi = 6.93147180369123816490e-01;  // 32 significant bits: n*ln2_hi is exact
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  const double n = (x * log2e + shift) - shift;          // |n| <= 1083 for |x| <= 750
  const double r = (x - n * ln2_hi) - n * ln2_lo;        // x - n*ln2_hi is exact (Sterbenz)

  // 2^n1, 2^n2 from the low mantissa bits of (k + shift): bits(shift + k) = bits(shift) + k for
  // |k| < 2^51 and bits(shift) has its low 12 bits clear, so ((bits + 1023) << 52) is the IEEE
  // encoding of 2^k for -1022 <= k <= 1023 (here |k| <= 542).
  const double h1 = n * 0.5 + shift;
  const double n1 = h1 - shift;
  const double h2 = (n - n1) + shift;
  const double s1 = bitcast<double>((bitcast<std::uint64_t>(h1) + 1023u) << 52);
  const double s2 = bitcast<double>((bitcast<std::uint64_t>(h2) + 1023u) << 52);

  // e^r = 1 + r + r²·q(r), q of degree 9 minimax for the relative error of e^r on |r| ≤ 0.34658
  // (Remez in 50 digits, c2..c4 rounded to double one at a time and the rest refitted: 3.7e-18
  // relative with these double coefficients, against 5e-18 for the degree-13 Taylor polynomial it
  // replaced; two FMAs fewer — the f64 kernel sums' dominant cost).
  constexpr double c2 = 0x1.000000000000ap-1, c3 = 0x1.5555555555503p-3, c4 = 0x1.5555555550605p-5,
                   c5 = 0x1.1111111124d26p-7, c6 = 0x1.6c16c184b5d42p-10, c7 = 0x1.a01a013d6454dp-13,
                   c8 = 0x1.a019988adcea0p-16, c9 = 0x1.71def3b92a7e0p-19, c10 = 0x1.28aedda79108cp-22,
                   c11 = 0x1.add8e2304afdep-26;
  double q = c11;
  q = q * r + c10;
  q = q * r + c9;
  q = q * r + c8;
  q = q * r + c7;
  q = q * r + c6;
  q = q * r + c5;
  q = q * r + c4;
  q = q * r + c3;
  q = q * r + c2;
  const double p = 1.0 + (r + (r * r) * q);  // the small part first, then the exact 1

  const double y = (p * s1) * s2;
  // Outside [-750, 750] the scale bits wrap: select the limits (also for +-inf). NaN fails both
  // tests and propagates through p.
  const double big = select(x > 0.0, inf_v<double>(), 0.0);
  return select((x > 750.0) | (x < -750.0), big, y);
#endif
}

MEMSAFE_HD inline float exp_impl(float x) noexcept {
#if defined(__CUDA_ARCH__)
  // On the GPU, CUDA's expf (range reduction + the hardware 2^x, ≤ 2 ulp by CUDA's documentation):
  // a third of the instructions of the polynomial below, which made it the fused kernel sums' cost.
  return ::expf(x);
#else
  constexpr float shift = 0x1.8p23f;
  constexpr float log2e = 0x1.715476p0f;
  constexpr float ln2_hi = 0x1.62e4p-1f;                 // 15 significant bits: n*ln2_hi exact
  constexpr float ln2_lo = 1.42860682030941723212e-6f;   // ln2 - ln2_hi
  const float n = (x * log2e + shift) - shift;           // |n| <= 159
  const float r = (x - n * ln2_hi) - n * ln2_lo;

  // bits(shift) has its low 9 bits clear; (k + 127) << 23 keeps 9 bits, k+127 in [47, 207].
  const float h1 = n * 0.5f + shift;
  const float n1 = h1 - shift;
  const float h2 = (n - n1) + shift;
  const float s1 = bitcast<float>((bitcast<std::uint32_t>(h1) + 127u) << 23);
  const float s2 = bitcast<float>((bitcast<std::uint32_t>(h2) + 127u) << 23);

  // Taylor to degree 7: truncation |r|^8/8! < 6e-9 for |r| <= 0.347.
  constexpr float c2 = 1.0f / 2, c3 = 1.0f / 6, c4 = 1.0f / 24, c5 = 1.0f / 120, c6 = 1.0f / 720,
                  c7 = 1.0f / 5040;
  float q = c7;
  q = q * r + c6;
  q = q * r + c5;
  q = q * r + c4;
  q = q * r + c3;
  q = q * r + c2;
  const float p = 1.0f + (r + (r * r) * q);

  const float y = (p * s1) * s2;
  const float big = select(x > 0.0f, inf_v<float>(), 0.0f);
  return select((x > 110.0f) | (x < -110.0f), big, y);
#endif
}

// ----------------------------------------------------------------------------------------------
// log
// ----------------------------------------------------------------------------------------------

// x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f/(2+f),
// log(1+f) = 2 atanh(s) = f - (f²/2 - s (f²/2 + R(s²))),  R(z) = 2z/3 + 2z²/5 + 2z³/7 + ...
// (the fdlibm arrangement: the large term f is exact, only a small correction is rounded).
MEMSAFE_HD inline double log_impl(double x) noexcept {
  constexpr double ln2_hi = 6.93147180369123816490e-01;  // e*ln2_hi exact for |e| < 2^11
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  constexpr std::uint64_t sqrt_half = 0x3fe6a09e667f3bcdull;  // bits of sqrt(1/2)

  // Subnormal (and zero / negative, whose result is replaced below): scale into the normal range.
  const bool tiny = x < 0x1p-1022;
  const double xs = x * select(tiny, 0x1p54, 1.0);
  const double ebias = select(tiny, 54.0, 0.0);

  // Adding (bits(1) - bits(sqrt(1/2))) moves the exponent boundary from 1 to sqrt(1/2).
  const std::uint64_t ix = bitcast<std::uint64_t>(xs) + (0x3ff0000000000000ull - sqrt_half);
  const std::uint64_t k = ix >> 52;  // biased exponent, < 2^12
  // int -> double without cvtqq2pd: bits(2^52 + k) = bits(2^52) | k.
  const double e = ((bitcast<double>(0x4330000000000000ull | k) - 0x1p52) - 1023.0) - ebias;
  const double m = bitcast<double>((ix & 0x000fffffffffffffull) + sqrt_half);

  const double f = m - 1.0;  // exact, |f| < 0.42
  const double s = f / (2.0 + f);
  const double z = s * s;    // <= 0.0295
  // R to z^9: the first omitted term is ~ f * z^10/21 < 2.5e-17 |f|.
  constexpr double k1 = 2.0 / 3, k2 = 2.0 / 5, k3 = 2.0 / 7, k4 = 2.0 / 9, k5 = 2.0 / 11,
                   k6 = 2.0 / 13, k7 = 2.0 / 15, k8 = 2.0 / 17, k9 = 2.0 / 19;
  double R = k9;
  R = R * z + k8;
  R = R * z + k7;
  R = R * z + k6;
  R = R * z + k5;
  R = R * z + k4;
  R = R * z + k3;
  R = R * z + k2;
  R = R * z + k1;
  R = R * z;
  const double hfsq = 0.5 * f * f;
  double r = e * ln2_hi - ((hfsq - (s * (hfsq + R) + e * ln2_lo)) - f);

  return log_special_cases(x, r);
}

MEMSAFE_HD inline float log_impl(float x) noexcept {
  constexpr float ln2_hi = 0x1.62e4p-1f;                 // e*ln2_hi exact for |e| < 2^8
  constexpr float ln2_lo = 1.42860682030941723212e-6f;
  constexpr std::uint32_t sqrt_half = 0x3f3504f3u;

  const bool tiny = x < 0x1p-126f;
  const float xs = x * select(tiny, 0x1p24f, 1.0f);
  const float ebias = select(tiny, 24.0f, 0.0f);

  const std::uint32_t ix = bitcast<std::uint32_t>(xs) + (0x3f800000u - sqrt_half);
  const std::uint32_t k = ix >> 23;  // < 2^9
  const float e = ((bitcast<float>(0x4b000000u | k) - 0x1p23f) - 127.0f) - ebias;
  const float m = bitcast<float>((ix & 0x007fffffu) + sqrt_half);

  const float f = m - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s;
  // R to z^4: first omitted term ~ f * z^5/11 < 2e-9 |f|.
  constexpr float k1 = 2.0f / 3, k2 = 2.0f / 5, k3 = 2.0f / 7, k4 = 2.0f / 9;
  float R = k4;
  R = R * z + k3;
  R = R * z + k2;
  R = R * z + k1;
  R = R * z;
  const float hfsq = 0.5f * f * f;
  float r = e * ln2_hi - ((hfsq - (s * (hfsq + R) + e * ln2_lo)) - f);

  return log_special_cases(x, r);
}

// ----------------------------------------------------------------------------------------------
// pow helpers
// ----------------------------------------------------------------------------------------------

template <class T>
MEMSAFE_HD inline T fabs_bits(T x) noexcept {
  using U = uint_t<T>;
  constexpr U mask = ~(U(1) << (sizeof(U) * 8 - 1));
  return bitcast<T>(bitcast<U>(x) & mask);
}

template <class T>
MEMSAFE_HD inline bool signbit_bits(T x) noexcept {
  using U = uint_t<T>;
  return (bitcast<U>(x) >> (sizeof(U) * 8 - 1)) != 0;
}

// a >= 0 (or NaN) is an integer: every a >= 2^(digits-1) is; below, (a + big) - big rounds to
// the nearest integer. Computed unconditionally (no FP arithmetic inside a ?: arm).
template <class T>
MEMSAFE_HD inline bool is_int_abs(T a) noexcept {
  constexpr T big = std::is_same_v<T, float> ? T(0x1p23f) : T(0x1p52);
  return (a >= big) | (((a + big) - big) == a);
}

}  // namespace detail

// ------------------------------------------------------------------------------------------------
// Public functions
// ------------------------------------------------------------------------------------------------

/// e^x. float / double only; < 1 ulp (double), <= 1.06 ulp (float); see the header comment for special values.
template <class T>
MEMSAFE_HD inline T exp(T x) noexcept {
  static_assert(detail::is_real_v<T>, "memsafe::math::exp: float or double only");
  return detail::exp_impl(x);
}

/// Natural logarithm. float / double only; < 1 ulp; log(1) = +0 exactly.
template <class T>
MEMSAFE_HD inline T log(T x) noexcept {
  static_assert(detail::is_real_v<T>, "memsafe::math::log: float or double only");
  return detail::log_impl(x);
}

/// log(1 + x), accurate where 1 + x rounds: log(u)·x/(u − 1) with u = fl(1 + x) (Goldberg's
/// correction: the rounding of u cancels between the log and the quotient), within a few ulp;
/// x itself where u − 1 = 0 (|x| below half an ulp of 1). log1p(+inf) = +inf, log1p(−1) = −inf,
/// NaN below −1 and for NaN.
template <class T>
MEMSAFE_HD inline T log1p(T x) noexcept {
  static_assert(detail::is_real_v<T>, "memsafe::math::log1p: float or double only");
  const T u = T(1) + x, d = u - T(1);
  const T l = detail::log_impl(u);
  return detail::select(d == T(0), x, detail::select(d == detail::inf_v<T>(), l, l * (x / d)));
}

/// base^p = exp(p log|base|) with IEEE special cases (see the header comment).
/// For a negative base the result is NaN unless p is an exact integer; then the sign comes from
/// the parity of p. float is evaluated in double (<= 1 ulp); double has an error of about
/// 2 |p log(base)| ulp (no extra-precision log).
template <class T>
MEMSAFE_HD inline T pow(T base, T p) noexcept {
  static_assert(detail::is_real_v<T>, "memsafe::math::pow: float or double only");
  constexpr T inf = detail::inf_v<T>();
  constexpr T nan = detail::nan_v<T>();
  const T ab = detail::fabs_bits(base);
  const T ap = detail::fabs_bits(p);

  T r;
  if constexpr (std::is_same_v<T, float>) {
    r = static_cast<float>(detail::exp_impl(static_cast<double>(p) * detail::log_impl(static_cast<double>(ab))));
  } else {
    r = detail::exp_impl(p * detail::log_impl(ab));
  }

  // Parity of p (inf and every |p| >= 2^(digits) count as even integers; NaN as non-integer).
  const bool is_int = detail::is_int_abs(ap);
  const bool is_odd = is_int & !detail::is_int_abs(ap * T(0.5));

  r = detail::select(detail::signbit_bits(base) & is_odd, -r, r);
  // base = −inf, p not an integer: r = exp(p·log(+inf)) = +inf or +0 already, as std::pow
  r = detail::select((base < T(0)) & !is_int & (ab != inf), nan, r);
  r = detail::select(p == T(1), base, r);
  r = detail::select((p == T(0)) | (base == T(1)) | ((ab == T(1)) & (ap == inf)), T(1), r);
  return r;
}

/// Square root through the compiler builtin: one vsqrtpd/vsqrtps in a vectorised loop provided
/// the TU is compiled with -fno-math-errno (the project's targets and tests are).
template <class T>
MEMSAFE_HD inline T sqrt(T x) noexcept {
  static_assert(detail::is_real_v<T>, "memsafe::math::sqrt: float or double only");
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);  // CUDA's device overloads (float and double)
#else
  if constexpr (std::is_same_v<T, float>) {
    return __builtin_sqrtf(x);
  } else {
    return __builtin_sqrt(x);
  }
#endif
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
// sqrt_n_avx, errno kept or not: the AVX2 regions' roots (MEMSAFE_ROOTS_N). With errno off, those
// regions took the plain loop (a translation unit without -march, built with -fno-math-errno;
// -ffast-math is refused by core/config.hpp): the VJP of a Matérn-3/2 K·v f32 (n = 10⁴, d = 3,
// one thread, Zen 4) took 0.385 s at plain -O2 -fno-math-errno against 0.157 s at plain -O2, and
// 0.148 s through sqrt_n_avx.
#define MEMSAFE_SQRT_AVX 1
#if !defined(__NO_MATH_ERRNO__)
#define MEMSAFE_SQRT_BUILTINS 1  // sqrt_n itself through the builtins (errno kept)
#endif
namespace detail {
/// The roots VB bytes at a time by the packed square root of that width (SSE sqrtps / sqrtpd, AVX
/// vsqrtps / vsqrtpd), the rest one at a time: sqrt_n's body where errno is kept, and sqrt_n_avx's.
#define MEMSAFE_SQRT_N_BODY(VB, SQRTPS, SQRTPD)                                                     \
  typedef T vt __attribute__((vector_size(VB)));                                                 \
  constexpr std::size_t L = VB / sizeof(T);                                                      \
  std::size_t j = 0;                                                                             \
  for (; j + L <= n; j += L) {                                                                   \
    /* Element by element in and out (GCC merges them into one load and store): a vector-typed  \
       memcpy into a caller's local array keeps GCC from vectorising the caller's later loops. */ \
    vt t{};                                                                                      \
    for (std::size_t k = 0; k < L; ++k) t[k] = x[j + k];                                         \
    t *= s;                                                                                      \
    if constexpr (std::is_same_v<T, float>) t = SQRTPS(t);                                      \
    else t = SQRTPD(t);                                                                          \
    for (std::size_t k = 0; k < L; ++k) a[j + k] = t[k];                                         \
  }                                                                                              \
  /* The rest one at a time. Where n is a multiple of L known after inlining (a panel's lanes),  \
     GCC 12 warns that this dead loop's 2⁶²-th iteration would be undefined: silenced here. */   \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Waggressive-loop-optimizations\"") \
  for (; j < n; ++j) a[j] = sqrt(s * x[j]);                                                      \
  _Pragma("GCC diagnostic pop")

template <class T>
[[gnu::always_inline]] inline void sqrt_n_sse(const T* x, T s, T* a, std::size_t n) noexcept {
  MEMSAFE_SQRT_N_BODY(16, __builtin_ia32_sqrtps, __builtin_ia32_sqrtpd)
}
}  // namespace detail
#pragma GCC push_options
#pragma GCC target("avx")
/// sqrt_n for code compiled for AVX or later — the translation unit's target, or a region of the
/// host backend's or GP module's second copies (backend/host/avx2_begin.inc: MEMSAFE_ROOTS_N): 32
/// bytes at a time, so that a caller's 32-byte loads of the roots are forwarded from whole stores.
/// With 16-byte roots, each 32-byte load read two stores, which the CPU cannot forward: a plain -O2
/// build's gp::sgpr Matérn-3/2 bound + gradient (n = 2·10⁴, m = 1000, d = 8, Zen 3) took 2.6 s
/// instead of 2.2 s, its forward part 0.98 s instead of 0.78 s (the RBF's, which takes no roots).
template <class T>
[[gnu::always_inline]] inline void sqrt_n_avx(const T* x, T s, T* a, std::size_t n) noexcept {
  static_assert(detail::is_real_v<T>, "memsafe::math::sqrt_n_avx: float or double only");
  MEMSAFE_SQRT_N_BODY(32, __builtin_ia32_sqrtps256, __builtin_ia32_sqrtpd256)
}
#pragma GCC pop_options
#undef MEMSAFE_SQRT_N_BODY
#endif  // x86-64 GCC

/// a[j] = √(s·x[j]) for j < n (a may be x): the values of sqrt(s·x[j]), in a form that vectorises
/// without -fno-math-errno. Where errno is kept (a consumer's default flags), GCC gives each
/// __builtin_sqrt a scalar libm call for negative arguments, which keeps the whole loop around it
/// scalar — a Matérn K·v ran 6–7× slower in a plain -O2 build than with -fno-math-errno. There,
/// on x86-64, the roots are taken by the packed square-root builtins — 32 bytes at a time where
/// the translation unit targets AVX (sqrt_n_avx), else 16 — which set no errno and round as sqrt
/// does; elsewhere (errno off, CUDA, other compilers) it is the plain loop.
template <class T>
MEMSAFE_HD inline void sqrt_n(const T* x, T s, T* a, std::size_t n) noexcept {
  static_assert(detail::is_real_v<T>, "memsafe::math::sqrt_n: float or double only");
#if defined(MEMSAFE_SQRT_BUILTINS) && defined(__AVX__)
  sqrt_n_avx(x, s, a, n);
#elif defined(MEMSAFE_SQRT_BUILTINS)
  detail::sqrt_n_sse(x, s, a, n);
#else
  for (std::size_t j = 0; j < n; ++j) a[j] = sqrt(s * x[j]);
#endif
}

}  // namespace memsafe::math

/// The row-of-roots function for the code being compiled: math::sqrt_n, and inside the AVX2
/// regions of the host backend's and GP module's second copies (backend/host/avx2_begin.inc), whose
/// translation unit may not target AVX, math::sqrt_n_avx — the roots as wide as the loads after them.
#define MEMSAFE_ROOTS_N ::memsafe::math::sqrt_n
