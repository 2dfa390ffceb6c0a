// memsafe/core/libm.hpp — the dozen <cmath> functions the host code calls, without <cmath>.
//
// Under C++17 and later libstdc++'s <cmath> declares the mathematical special functions too
// (<bits/specfun.h>): on top of the other standard headers memsafe.hpp includes it cost ≈ 425 M
// compiler instructions (g++ 12 -O2; ≈ 0.1 s), 13 % of what including memsafe.hpp cost
// (docs/design.md, "Compile time"). libstdc++ implements std::sqrt(float), std::isfinite and the others as these
// same compiler builtins, so the code, the rounding and the errno behaviour are those of the
// std:: functions: a builtin that is not expanded inline becomes the same libm call.
//
// Elsewhere — nvcc (whose device code needs its own <cmath> overloads), compilers other than GCC
// and Clang — the functions are std::'s, from <cmath>.
//
// A translation unit that includes <cmath> itself pays for it there: the saving is what the
// library adds on top of the user's own headers.
#pragma once

#if defined(__CUDACC__) || !(defined(__GNUC__) || defined(__clang__))
#include <cmath>
namespace memsafe::libm {
using std::exp;
using std::expm1;
using std::fabs;
using std::floor;
using std::fma;
using std::ilogb;
using std::isfinite;
using std::ldexp;
using std::log;
using std::log1p;
using std::nextafter;
using std::pow;
using std::round;
using std::sqrt;
}  // namespace memsafe::libm
#else
namespace memsafe::libm {

#define MEMSAFE_LIBM_1(name)                                                              \
  inline float name(float x) noexcept { return __builtin_##name##f(x); }                  \
  inline double name(double x) noexcept { return __builtin_##name(x); }                   \
  inline long double name(long double x) noexcept { return __builtin_##name##l(x); }
#define MEMSAFE_LIBM_2(name)                                                                           \
  inline float name(float x, float y) noexcept { return __builtin_##name##f(x, y); }                   \
  inline double name(double x, double y) noexcept { return __builtin_##name(x, y); }                   \
  inline long double name(long double x, long double y) noexcept { return __builtin_##name##l(x, y); }

MEMSAFE_LIBM_1(sqrt)
MEMSAFE_LIBM_1(exp)
MEMSAFE_LIBM_1(log)
MEMSAFE_LIBM_1(expm1)
MEMSAFE_LIBM_1(log1p)
MEMSAFE_LIBM_1(fabs)
MEMSAFE_LIBM_1(floor)
MEMSAFE_LIBM_1(round)
MEMSAFE_LIBM_2(pow)
MEMSAFE_LIBM_2(nextafter)
#undef MEMSAFE_LIBM_1
#undef MEMSAFE_LIBM_2

inline float fma(float a, float b, float c) noexcept { return __builtin_fmaf(a, b, c); }
inline double fma(double a, double b, double c) noexcept { return __builtin_fma(a, b, c); }
inline long double fma(long double a, long double b, long double c) noexcept { return __builtin_fmal(a, b, c); }

inline float ldexp(float x, int e) noexcept { return __builtin_ldexpf(x, e); }
inline double ldexp(double x, int e) noexcept { return __builtin_ldexp(x, e); }
inline long double ldexp(long double x, int e) noexcept { return __builtin_ldexpl(x, e); }

inline int ilogb(float x) noexcept { return __builtin_ilogbf(x); }
inline int ilogb(double x) noexcept { return __builtin_ilogb(x); }
inline int ilogb(long double x) noexcept { return __builtin_ilogbl(x); }

/// False for ±inf and NaN; the type-generic builtin, as libstdc++'s std::isfinite.
template <class T>
inline bool isfinite(T x) noexcept {
  return __builtin_isfinite(x);
}

}  // namespace memsafe::libm
#endif
