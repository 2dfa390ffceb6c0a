// tests/test_math.cpp — memsafe::math exp / log / pow / sqrt against long double libm references.
#include <doctest/doctest.h>

#include <memsafe/core/libm.hpp>
#include <memsafe/core/math.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

namespace mm = memsafe::math;

// |got - ref| in units of ulp(ref) of T; ulp(ref) = 2^(exponent(ref) - digits + 1), never below
// the subnormal spacing. ref is finite here (long double has the range to hold values beyond
// T's max, so an overflow boundary is measured properly); got = +-inf counts as exact when ref
// rounds to it and as a huge error otherwise.
template <class T>
long double ulp_error(T got, long double ref) {
  using L = std::numeric_limits<T>;
  if (std::isnan(ref)) return std::isnan(got) ? 0.0L : 1e30L;
  if (std::isnan(got)) return 1e30L;
  if (std::isinf(got)) return static_cast<T>(ref) == got ? 0.0L : 1e30L;
  if (std::isinf(ref)) return 1e30L;
  int e = 0;
  (void)std::frexp(ref, &e);  // |ref| = f 2^e, f in [0.5, 1)
  const long double u = std::ldexp(1.0L, std::max(e - L::digits, L::min_exponent - L::digits));
  return std::fabs(static_cast<long double>(got) - ref) / u;
}

struct worst {
  long double err = 0;
  long double at = 0;
  void add(long double e, long double x) {
    if (e > err) {
      err = e;
      at = x;
    }
  }
};

// Evaluate through a plain loop over arrays, as the library's finalise loops do, so the
// vectorised code path is the one under test when the build vectorises.
template <class T>
void apply_exp(const std::vector<T>& x, std::vector<T>& y) {
  y.resize(x.size());
  const T* a = x.data();
  T* b = y.data();
  for (std::size_t i = 0, n = x.size(); i < n; ++i) b[i] = mm::exp(a[i]);
}
template <class T>
void apply_log(const std::vector<T>& x, std::vector<T>& y) {
  y.resize(x.size());
  const T* a = x.data();
  T* b = y.data();
  for (std::size_t i = 0, n = x.size(); i < n; ++i) b[i] = mm::log(a[i]);
}
template <class T>
void apply_pow(const std::vector<T>& x, T p, std::vector<T>& y) {
  y.resize(x.size());
  const T* a = x.data();
  T* b = y.data();
  for (std::size_t i = 0, n = x.size(); i < n; ++i) b[i] = mm::pow(a[i], p);
}

template <class T>
worst check_exp(const std::vector<T>& x) {
  std::vector<T> y;
  apply_exp(x, y);
  worst w;
  for (std::size_t i = 0; i < x.size(); ++i) w.add(ulp_error(y[i], std::exp(static_cast<long double>(x[i]))), x[i]);
  return w;
}
template <class T>
worst check_log(const std::vector<T>& x) {
  std::vector<T> y;
  apply_log(x, y);
  worst w;
  for (std::size_t i = 0; i < x.size(); ++i) w.add(ulp_error(y[i], std::log(static_cast<long double>(x[i]))), x[i]);
  return w;
}

template <class T>
std::vector<T> linspace(double lo, double hi, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(lo + (hi - lo) * (static_cast<double>(i) / static_cast<double>(n - 1)));
  return v;
}

template <class T>
std::vector<T> uniform(double lo, double hi, std::size_t n, std::mt19937_64& g) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(g));
  return v;
}

// Uniform over the bit patterns of positive finite T: every binade equally, subnormals included.
template <class T>
std::vector<T> positive_bits(std::size_t n, std::mt19937_64& g) {
  using U = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;
  const U top = std::bit_cast<U>(std::numeric_limits<T>::infinity());
  std::vector<T> v(n);
  for (auto& x : v) x = std::bit_cast<T>(static_cast<U>(g() % top));
  return v;
}

template <class T>
bool same(T a, T b) {  // bitwise-equal or both NaN
  return std::isnan(a) ? std::isnan(b) : (a == b && std::signbit(a) == std::signbit(b));
}

constexpr double dinf = std::numeric_limits<double>::infinity();
constexpr double dnan = std::numeric_limits<double>::quiet_NaN();
constexpr float finf = std::numeric_limits<float>::infinity();
constexpr float fnan = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("math: exp double, max error <= 2 ulp incl. subnormal results") {
  std::mt19937_64 g(20240601);
  // Dense sweep over everything between 0 and overflow (subnormal results below -708.4).
  auto w = check_exp(linspace<double>(-746.0, 709.79, 600001));
  INFO("dense: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_exp(uniform<double>(-746.0, -708.0, 100000, g));  // subnormal / gradual underflow
  INFO("subnormal: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_exp(uniform<double>(700.0, 709.7827, 50000, g));  // up to DBL_MAX
  INFO("top: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_exp(uniform<double>(-2.0, 2.0, 100000, g));
  INFO("small: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  std::vector<double> tiny(2000);
  for (std::size_t i = 0; i < tiny.size(); ++i) tiny[i] = std::ldexp((i % 2 ? -1.0 : 1.0) * (1.0 + 0.37 * static_cast<double>(i % 7)), -static_cast<int>(i % 1000) - 1);
  w = check_exp(tiny);
  INFO("tiny: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
}

TEST_CASE("math: exp float, max error <= 2 ulp incl. subnormal results") {
  std::mt19937_64 g(7);
  auto w = check_exp(linspace<float>(-104.0, 88.72, 300001));
  INFO("dense: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_exp(uniform<float>(-104.0, -87.0, 50000, g));
  INFO("subnormal: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_exp(uniform<float>(-1.0, 1.0, 50000, g));
  INFO("small: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
}

TEST_CASE("math: exp special values") {
  CHECK(same(mm::exp(0.0), 1.0));
  CHECK(same(mm::exp(-0.0), 1.0));
  CHECK(std::isnan(mm::exp(dnan)));
  CHECK(same(mm::exp(dinf), dinf));
  CHECK(same(mm::exp(-dinf), 0.0));
  CHECK(same(mm::exp(709.79), dinf));
  CHECK(same(mm::exp(1000.0), dinf));
  CHECK(same(mm::exp(std::numeric_limits<double>::max()), dinf));
  CHECK(same(mm::exp(-746.0), 0.0));
  CHECK(same(mm::exp(-1e300), 0.0));
  CHECK(same(mm::exp(-std::numeric_limits<double>::max()), 0.0));
  CHECK(std::isfinite(mm::exp(709.78)));
  CHECK(mm::exp(709.78) > 1.7e308);
  CHECK(mm::exp(-745.0) == std::numeric_limits<double>::denorm_min());  // e^-745 = 0.57 * 2^-1074
  CHECK(mm::exp(-700.0) > 0.0);

  CHECK(same(mm::exp(0.0f), 1.0f));
  CHECK(same(mm::exp(-0.0f), 1.0f));
  CHECK(std::isnan(mm::exp(fnan)));
  CHECK(same(mm::exp(finf), finf));
  CHECK(same(mm::exp(-finf), 0.0f));
  CHECK(same(mm::exp(88.73f), finf));
  CHECK(same(mm::exp(200.0f), finf));
  CHECK(same(mm::exp(-104.0f), 0.0f));
  CHECK(same(mm::exp(-1e30f), 0.0f));
  CHECK(std::isfinite(mm::exp(88.72f)));
  CHECK(mm::exp(-103.0f) > 0.0f);
  CHECK(mm::exp(-103.0f) < std::numeric_limits<float>::min());
}

TEST_CASE("math: log double, max error <= 2 ulp incl. subnormal inputs") {
  std::mt19937_64 g(99);
  auto w = check_log(positive_bits<double>(400000, g));  // every binade, subnormals included
  INFO("all binades: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_log(linspace<double>(0.5, 2.0, 200001));  // around the sqrt(2) split and 1
  INFO("[0.5, 2]: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_log(uniform<double>(1.0 - 1e-6, 1.0 + 1e-6, 50000, g));
  INFO("near 1: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_log(uniform<double>(0.0, 1e-310, 50000, g));  // subnormal
  INFO("subnormal: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
}

TEST_CASE("math: log float, max error <= 2 ulp incl. subnormal inputs") {
  std::mt19937_64 g(5);
  auto w = check_log(positive_bits<float>(200000, g));
  INFO("all binades: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_log(linspace<float>(0.5, 2.0, 100001));
  INFO("[0.5, 2]: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
  w = check_log(uniform<float>(0.999, 1.001, 50000, g));
  INFO("near 1: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 2.0L);
}

TEST_CASE_TEMPLATE("math: log1p within 4 ulp from -0.9 to 1e6 and at tiny arguments, its special values", T, float,
                   double) {
  std::mt19937_64 g(17);
  worst w;
  std::vector<T> xs = linspace<T>(-0.9, 2.0, 100001);
  for (T v : uniform<T>(T(-1e-6), T(1e-6), 50000, g)) xs.push_back(v);
  for (T v : uniform<T>(T(1e-30), T(1e-20), 1000, g)) xs.push_back(v);  // where 1 + x rounds to 1
  for (T v : uniform<T>(T(2), T(1e6), 20000, g)) xs.push_back(v);
  for (T x : xs) w.add(ulp_error(mm::log1p(x), std::log1p(static_cast<long double>(x))), x);
  INFO("log1p: ", static_cast<double>(w.err), " ulp at x = ", static_cast<double>(w.at));
  CHECK(w.err <= 4.0L);
  const T inf = std::numeric_limits<T>::infinity();
  CHECK(mm::log1p(inf) == inf);
  CHECK(mm::log1p(T(-1)) == -inf);
  CHECK(std::isnan(mm::log1p(T(-2))));
  CHECK(std::isnan(mm::log1p(std::numeric_limits<T>::quiet_NaN())));
  CHECK(mm::log1p(T(0)) == T(0));
}

TEST_CASE("math: log special values") {
  CHECK(same(mm::log(1.0), 0.0));  // +0 exactly
  CHECK(same(mm::log(0.0), -dinf));
  CHECK(same(mm::log(-0.0), -dinf));
  CHECK(std::isnan(mm::log(-1.0)));
  CHECK(std::isnan(mm::log(-std::numeric_limits<double>::denorm_min())));
  CHECK(std::isnan(mm::log(-dinf)));
  CHECK(std::isnan(mm::log(dnan)));
  CHECK(same(mm::log(dinf), dinf));
  CHECK(ulp_error(mm::log(std::numeric_limits<double>::denorm_min()), std::log(static_cast<long double>(std::numeric_limits<double>::denorm_min()))) <= 1.0L);
  CHECK(ulp_error(mm::log(std::numeric_limits<double>::max()), std::log(static_cast<long double>(std::numeric_limits<double>::max()))) <= 1.0L);
  CHECK(same(mm::log(2.0), 0x1.62e42fefa39efp-1));  // correctly rounded ln 2

  CHECK(same(mm::log(1.0f), 0.0f));
  CHECK(same(mm::log(0.0f), -finf));
  CHECK(same(mm::log(-0.0f), -finf));
  CHECK(std::isnan(mm::log(-1.0f)));
  CHECK(std::isnan(mm::log(-finf)));
  CHECK(std::isnan(mm::log(fnan)));
  CHECK(same(mm::log(finf), finf));
  CHECK(ulp_error(mm::log(std::numeric_limits<float>::denorm_min()), std::log(static_cast<long double>(std::numeric_limits<float>::denorm_min()))) <= 1.0L);
  CHECK(ulp_error(mm::log(std::numeric_limits<float>::max()), std::log(static_cast<long double>(std::numeric_limits<float>::max()))) <= 1.0L);

  // exp(log(x)) round trip over a few decades
  for (double x = 1e-300; x < 1e300; x *= 7.77) CHECK(ulp_error(mm::exp(mm::log(x)), x) <= 800.0L);
}

TEST_CASE("math: pow special cases") {
  // pow(x, +-0) = 1 for every x, pow(1, y) = 1 for every y, pow(-1, +-inf) = 1
  for (double b : {0.0, -0.0, 2.0, -3.0, dinf, -dinf, dnan}) {
    CHECK(same(mm::pow(b, 0.0), 1.0));
    CHECK(same(mm::pow(b, -0.0), 1.0));
  }
  for (double p : {0.0, 2.5, -7.0, dinf, -dinf, dnan}) CHECK(same(mm::pow(1.0, p), 1.0));
  CHECK(same(mm::pow(-1.0, dinf), 1.0));
  CHECK(same(mm::pow(-1.0, -dinf), 1.0));
  // zero base
  CHECK(same(mm::pow(0.0, 2.5), 0.0));
  CHECK(same(mm::pow(0.0, 3.0), 0.0));
  CHECK(same(mm::pow(0.0, -2.5), dinf));
  CHECK(same(mm::pow(0.0, -3.0), dinf));
  CHECK(same(mm::pow(-0.0, 3.0), -0.0));   // odd integer keeps the sign of zero
  CHECK(same(mm::pow(-0.0, 2.0), 0.0));
  CHECK(same(mm::pow(-0.0, 0.5), 0.0));
  CHECK(same(mm::pow(-0.0, -3.0), -dinf));
  CHECK(same(mm::pow(-0.0, -2.0), dinf));
  // infinite base / exponent
  CHECK(same(mm::pow(dinf, 2.0), dinf));
  CHECK(same(mm::pow(dinf, -2.0), 0.0));
  CHECK(same(mm::pow(-dinf, 3.0), -dinf));
  CHECK(same(mm::pow(-dinf, 2.0), dinf));
  CHECK(same(mm::pow(-dinf, -3.0), -0.0));
  CHECK(same(mm::pow(2.0, dinf), dinf));
  CHECK(same(mm::pow(2.0, -dinf), 0.0));
  CHECK(same(mm::pow(0.5, dinf), 0.0));
  CHECK(same(mm::pow(0.5, -dinf), dinf));
  CHECK(same(mm::pow(-2.0, dinf), dinf));
  CHECK(same(mm::pow(-0.5, dinf), 0.0));
  // negative base: NaN unless p is an integer, then the sign from p's parity
  CHECK(std::isnan(mm::pow(-2.0, 0.5)));
  CHECK(std::isnan(mm::pow(-8.0, 1.0 / 3.0)));
  CHECK(mm::pow(-2.0, 3.0) == doctest::Approx(-8.0).epsilon(1e-15));
  CHECK(mm::pow(-2.0, 2.0) == doctest::Approx(4.0).epsilon(1e-15));
  CHECK(mm::pow(-2.0, -3.0) == doctest::Approx(-0.125).epsilon(1e-15));
  CHECK(mm::pow(-1.0, 0x1p52 + 1.0) == -1.0);  // odd, 2^52 + 1
  CHECK(mm::pow(-1.0, 0x1p53) == 1.0);         // every |p| >= 2^53 is even
  CHECK(mm::pow(-1.0, 1e300) == 1.0);
  // NaN
  CHECK(std::isnan(mm::pow(dnan, 2.0)));
  CHECK(std::isnan(mm::pow(2.0, dnan)));
  CHECK(std::isnan(mm::pow(-1.0, dnan)));
  // p = 1 is the identity
  for (double b : {0.1, -3.7, 1e-310, 1e300, -0.0}) CHECK(same(mm::pow(b, 1.0), b));
  // overflow / underflow
  CHECK(same(mm::pow(10.0, 400.0), dinf));
  CHECK(same(mm::pow(10.0, -400.0), 0.0));
  CHECK(same(mm::pow(-10.0, 401.0), -dinf));

  CHECK(same(mm::pow(fnan, 0.0f), 1.0f));
  CHECK(same(mm::pow(1.0f, fnan), 1.0f));
  CHECK(same(mm::pow(0.0f, 2.5f), 0.0f));
  CHECK(same(mm::pow(0.0f, -2.5f), finf));
  CHECK(same(mm::pow(-0.0f, -3.0f), -finf));
  CHECK(same(mm::pow(-2.0f, 3.0f), -8.0f));
  CHECK(same(mm::pow(-2.0f, 2.0f), 4.0f));
  CHECK(std::isnan(mm::pow(-2.0f, 0.5f)));
  CHECK(same(mm::pow(-1.0f, finf), 1.0f));
  CHECK(same(mm::pow(10.0f, 39.0f), finf));
  CHECK(same(mm::pow(10.0f, -46.0f), 0.0f));
  CHECK(same(mm::pow(2.0f, 10.0f), 1024.0f));
  CHECK(same(mm::pow(2.0f, -149.0f), std::numeric_limits<float>::denorm_min()));
}

TEST_CASE("math: pow accuracy") {
  std::mt19937_64 g(3);
  // float: evaluated in double, so within 1 ulp of the long double reference.
  {
    worst w;
    std::vector<float> y;
    for (float p : {-3.0f, -2.5f, -1.0f, -0.5f, 0.3f, 0.5f, 1.5f, 2.0f, 7.0f, 20.0f}) {
      const auto x = positive_bits<float>(5000, g);
      apply_pow(x, p, y);
      for (std::size_t i = 0; i < x.size(); ++i) w.add(ulp_error(y[i], std::pow(static_cast<long double>(x[i]), static_cast<long double>(p))), x[i]);
    }
    INFO("float pow: ", static_cast<double>(w.err), " ulp at base ", static_cast<double>(w.at));
    CHECK(w.err <= 1.0L);
  }
  // double: exp(p log b) in double; the rounding of log b and of p*log b is magnified by
  // |y| = |p log b|: measured <= ~2.1|y| ulp (+ the exp/log errors), bound 2 + 3|y|.
  {
    long double worst_excess = 0;
    std::vector<double> y;
    for (double p : {-3.0, -2.5, -1.0, -0.5, 0.3, 0.5, 1.5, 2.0, 7.0, 20.0}) {
      const auto x = uniform<double>(1e-3, 1e3, 5000, g);
      apply_pow(x, p, y);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const long double ref = std::pow(static_cast<long double>(x[i]), static_cast<long double>(p));
        const long double bound = 2.0L + 3.0L * std::fabs(std::log(ref));
        worst_excess = std::max(worst_excess, ulp_error(y[i], ref) - bound);
      }
    }
    CHECK(worst_excess <= 0.0L);
  }
  // negative bases with integer exponents through the loop
  {
    std::vector<double> x{-0.5, -1.5, -2.0, -3.0, -10.0}, y;
    apply_pow(x, 3.0, y);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == doctest::Approx(x[i] * x[i] * x[i]).epsilon(1e-14));
    apply_pow(x, -2.0, y);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == doctest::Approx(1.0 / (x[i] * x[i])).epsilon(1e-14));
    apply_pow(x, 0.5, y);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::isnan(y[i]));
  }
}

#if defined(MEMSAFE_SQRT_AVX)
/// sqrt_n_avx is always_inline under target("avx"): called from code compiled for AVX, as the AVX2
/// regions do (MEMSAFE_ROOTS_N).
template <class T>
__attribute__((target("avx"))) void roots_avx(const T* x, T s, T* a, std::size_t n) {
  mm::sqrt_n_avx(x, s, a, n);
}
#endif

TEST_CASE("math: sqrt_n equals sqrt of the scaled values, bit for bit, at every length and for special values") {
  // In a build that keeps errno (the default-flags tests: tests/CMakeLists.txt, memsafe_default_tests)
  // sqrt_n takes its roots through the packed square-root builtins (16 bytes at a time, 32 where the
  // target has AVX); elsewhere it is the plain loop. The AVX regions' sqrt_n_avx likewise, errno
  // kept or not (x86-64 GCC).
  auto run = [](auto zero, auto roots) {
    using T = decltype(zero);
    using L = std::numeric_limits<T>;
    std::vector<T> x = {T(0), -T(0), T(1), T(2), T(3.5), L::infinity(), -L::infinity(), L::quiet_NaN(), T(-1),
                        L::denorm_min(), L::min(), L::max(), T(1e-30), T(7), T(0.25), T(1e10), T(123.456)};
    std::mt19937_64 g(5);
    for (T v : uniform<T>(T(0), T(1e4), 21, g)) x.push_back(v);
    for (T s : {T(1), T(3), T(0.5)})
      for (std::size_t n = 0; n <= x.size(); ++n) {
        std::vector<T> a(n + 1, T(-7));
        roots(x.data(), s, a.data(), n);
        for (std::size_t j = 0; j < n; ++j) {
          CAPTURE(n);
          CAPTURE(j);
          const T want = std::sqrt(s * x[j]);
          CHECK(same(a[j], want));
        }
        CHECK(a[n] == T(-7));  // nothing written past n
        std::vector<T> in_place(x.begin(), x.begin() + std::ptrdiff_t(n));
        roots(in_place.data(), s, in_place.data(), n);
        for (std::size_t j = 0; j < n; ++j) CHECK(same(in_place[j], a[j]));
      }
  };
  auto plain = [](const auto* x, auto s, auto* a, std::size_t n) { mm::sqrt_n(x, s, a, n); };
  run(0.0f, plain);
  run(0.0, plain);
#if defined(MEMSAFE_SQRT_AVX)
  if (__builtin_cpu_supports("avx")) {
    auto wide = [](const auto* x, auto s, auto* a, std::size_t n) { roots_avx(x, s, a, n); };
    run(0.0f, wide);
    run(0.0, wide);
  } else {
    MESSAGE("no AVX on this CPU: math::sqrt_n_avx not run");
  }
#endif
}

TEST_CASE("math: sqrt and a finalise-style loop") {
  CHECK(mm::sqrt(4.0) == 2.0);
  CHECK(mm::sqrt(2.0f) == std::sqrt(2.0f));
  CHECK(same(mm::sqrt(-0.0), -0.0));
  CHECK(std::isnan(mm::sqrt(-1.0)));
  CHECK(same(mm::sqrt(dinf), dinf));

  // out[j] = var * exp(-0.5 * r2[j]) — the RBF finalise — against libm.
  std::mt19937_64 g(11);
  const auto r2 = uniform<double>(0.0, 1500.0, 4096, g);
  std::vector<double> out(r2.size());
  const double var = 1.7;
  for (std::size_t j = 0; j < r2.size(); ++j) out[j] = var * mm::exp(-0.5 * r2[j]);
  for (std::size_t j = 0; j < r2.size(); ++j) {
    const long double ref = 1.7L * std::exp(static_cast<long double>(-0.5 * r2[j]));
    CHECK(ulp_error(out[j], ref) <= 3.0L);
  }
}

// core/libm.hpp stands in for <cmath> in the library's headers: each function must be the std::
// one (the same builtin, the same libm call), bit for bit, special values included.
template <class T>
static void libm_equals_std() {
  namespace lm = memsafe::libm;
  using L = std::numeric_limits<T>;
  const std::vector<T> xs = {T(0),       -T(0),        T(1),         T(-1),       T(0.5),       T(-2.5),
                             T(2.5),     T(3.7),       T(-3.7),      T(1e-3),     T(700),       T(-700),
                             T(88.5),    T(-104),      L::min(),     L::denorm_min(), L::max(),  -L::max(),
                             L::infinity(), -L::infinity(), L::quiet_NaN(), T(1) / T(3), T(123456.789)};
  for (T x : xs) {
    CAPTURE(x);
    CHECK(same(lm::sqrt(x), std::sqrt(x)));
    CHECK(same(lm::exp(x), std::exp(x)));
    CHECK(same(lm::log(x), std::log(x)));
    CHECK(same(lm::expm1(x), std::expm1(x)));
    CHECK(same(lm::log1p(x), std::log1p(x)));
    CHECK(same(lm::fabs(x), std::fabs(x)));
    CHECK(same(lm::floor(x), std::floor(x)));
    CHECK(same(lm::round(x), std::round(x)));
    CHECK(lm::isfinite(x) == std::isfinite(x));
    CHECK(lm::ilogb(x) == std::ilogb(x));
    for (int e : {-1100, -30, -1, 0, 1, 30, 1100}) CHECK(same(lm::ldexp(x, e), std::ldexp(x, e)));
    for (T y : xs) {
      CHECK(same(lm::pow(x, y), std::pow(x, y)));
      CHECK(same(lm::nextafter(x, y), std::nextafter(x, y)));
      CHECK(same(lm::fma(x, y, T(0.25)), std::fma(x, y, T(0.25))));
    }
  }
}

TEST_CASE("math: the libm stand-ins equal the std functions bit for bit (float, double)") {
  libm_equals_std<float>();
  libm_equals_std<double>();
  const long double q = 2.5L;  // the byte parser's long double calls
  CHECK(memsafe::libm::pow(10.0L, q) == std::pow(10.0L, q));
  CHECK(memsafe::libm::round(q) == std::round(q));
  CHECK(memsafe::libm::floor(-q) == std::floor(-q));
  CHECK(memsafe::libm::fabs(-q) == std::fabs(-q));
}
