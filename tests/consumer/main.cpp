// A downstream program using memsafe's public names only. The expressions are written outside
// namespace memsafe with unqualified operators and functions: the nodes they build are
// implementation types (memsafe::detail), and argument-dependent lookup must still find the
// operators and builders (through the tag bases lazy_tag, tensor_tag and evaluable_tag, and, for
// identity(n), the operators of its symbol).
//
// It is built with the consumer's default flags (no -march): memsafe's fused
// k-nearest kernels still run on the best instruction set this CPU has (chosen at run time), and
// their answers are exactly the portable path's (MEMSAFE_ISA=portable) — here where the exact
// re-evaluation, compiled for baseline x86-64, rounds without FMA.
#include <memsafe/grad.hpp>
#include <memsafe/memsafe.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

bool close(double a, double b) { return std::fabs(a - b) <= 1e-12 * (1 + std::fabs(a) + std::fabs(b)); }

/// The best instruction set of memsafe's kernels on this CPU, asked independently of memsafe.
std::string expected_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f")) return "avx512";
  if (avx2) return "avx2";
#endif
  return "portable";
}

/// Uniform numbers in [−2, 2) with no special values.
template <class T>
std::vector<T> plain(std::size_t n, std::size_t d, unsigned seed) {
  std::vector<T> v(n * d);
  unsigned s = seed;
  for (auto& a : v) {
    s = s * 1664525u + 1013904223u;
    a = T(double(s >> 8) / double(1u << 24) * 4 - 2);
  }
  return v;
}

/// plain's numbers with special values in a few rows.
template <class T>
std::vector<T> numbers(std::size_t n, std::size_t d, unsigned seed) {
  std::vector<T> v = plain<T>(n, d, seed);
  for (std::size_t q = 0; q < 6; ++q) {  // NaN, ±inf, huge squares, a zero vector
    const std::size_t i = (seed * 31u + q * 17u) % n;
    const T specials[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                          -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::max() / T(8), T(0), T(0)};
    for (std::size_t k = 0; k < (q >= 4 ? d : 1); ++k) v[i * d + k] = specials[q];
  }
  return v;
}

bool failed = false;

/// run() twice: as dispatched (MEMSAFE_ISA unset), then with MEMSAFE_ISA=portable.
template <class F>
auto dispatched_and_portable_run(F&& run) {
  ::unsetenv("MEMSAFE_ISA");
  auto a = run();
  ::setenv("MEMSAFE_ISA", "portable", 1);
  auto b = run();
  ::unsetenv("MEMSAFE_ISA");
  return std::pair{std::move(a), std::move(b)};
}

/// e evaluated as dispatched and with MEMSAFE_ISA=portable.
template <class X>
auto dispatched_and_portable(const X& e) {
  return dispatched_and_portable_run([&] { return memsafe::eval(e, memsafe::options{memsafe::unlimited, 2}); });
}

template <class X>
void same_as_portable(const X& e, const char* what, const std::string& want) {
  // Built against memsafe::precompiled, each of these runs in the library (this unit compiles none).
  if constexpr (memsafe::precompiled_linked) static_assert(memsafe::precompiled_expr<X>);
  const auto [a, b] = dispatched_and_portable(e);
  const bool same = a.indices == b.indices && a.values.size() == b.values.size() &&
                    std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(a.values[0])) == 0;
  if (a.stats.plan.isa != want || b.stats.plan.isa != "portable" || !same) {
    std::fprintf(stderr, "memsafe consumer: %s: dispatched \"%s\" (expected \"%s\"), forced \"%s\", answers %s\n", what,
                 a.stats.plan.isa.c_str(), want.c_str(), b.stats.plan.isa.c_str(), same ? "equal" : "DIFFER");
    failed = true;
  }
}

/// e at the smallest budget (the tile loop, where the fused kernels' smallest plan does not fit) and
/// unlimited (the fused kernels): the same indices and the same value bits. This unit is built as a
/// consumer builds it (CMake's default -std=gnu++20, no -march), where GCC contracts a·b + c.
template <class X>
void budget_independent(const X& e, const char* what) {
  const std::size_t mn = memsafe::plan_for(e, memsafe::options{memsafe::unlimited, 1}).min_bytes;
  const auto a = memsafe::eval(e, memsafe::options{mn, 1});
  const auto b = memsafe::eval(e, memsafe::options{memsafe::unlimited, 2});
  const bool same = a.indices == b.indices && a.values.size() == b.values.size() &&
                    std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(a.values[0])) == 0;
  if (!same) {
    std::fprintf(stderr, "memsafe consumer: %s: the answers at %zu bytes (%s) and unlimited (%s) DIFFER\n", what, mn,
                 a.stats.plan.reduction.c_str(), b.stats.plan.reduction.c_str());
    failed = true;
  }
}

}  // namespace

/// Public names and argument-dependent lookup on the implementation types.
int adl_checks() {
  using namespace memsafe::literals;
  if (memsafe::parse_bytes("1MiB") != 1_MiB) return 1;

  const std::vector<double> x = {0, 0, 1, 0, 0, 1, 1, 1}, v = {1, -2, 3, 0.5};
  const auto X = memsafe::points(x.data(), 4, 2);
  const auto V = memsafe::vec(v.data(), 4);
  const auto S = memsafe::sqdist(X, X);
  const auto K = memsafe::rbf(X, X, 1.5);
  const memsafe::options o{.budget = 1_MiB, .threads = 1};

  // Elementwise operators, scalars, unary maps and a diagonal symbol, then a product with v.
  const auto E = 2.0 * K - S / 4.0 + exp(-S) + 0.5 * memsafe::identity(4);
  const auto ev = memsafe::eval(E * V, o);
  for (std::size_t i = 0; i < 4; ++i) {
    double want = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      double r2 = 0;
      for (std::size_t k = 0; k < 2; ++k) r2 += (x[i * 2 + k] - x[j * 2 + k]) * (x[i * 2 + k] - x[j * 2 + k]);
      const double e = 2.0 * std::exp(-0.5 * r2 / (1.5 * 1.5)) - r2 / 4.0 + std::exp(-r2) + (i == j ? 0.5 : 0.0);
      want += e * v[j];
    }
    if (!close(ev[i], want)) return 2;
  }

  // A broadcast tensor (NumPy form) equals the pairwise distance.
  const auto T = square(memsafe::unsqueeze<1>(X) - memsafe::unsqueeze<0>(X));
  const auto B = memsafe::eval(memsafe::dense(memsafe::sum<2>(T)), o);
  const auto D = memsafe::eval(dense(S), o);
  for (std::size_t q = 0; q < 16; ++q)
    if (!close(B.values[q], D.values[q])) return 3;

  // Reductions found by argument-dependent lookup, and a product chain with a pinned factor.
  const auto nn = memsafe::eval(argkmin(S + K, 2), o);
  if (nn.indices.size() != 8) return 4;
  const auto c1 = memsafe::eval(K * (transpose(K) * V), o);
  const auto c2 = memsafe::eval(memsafe::pin(K * transpose(K)) * V, o);
  for (std::size_t i = 0; i < 4; ++i)
    if (!close(c1[i], c2[i])) return 5;

  // A chain of dense factors only (its nodes carry no lazy operand).
  const std::vector<double> a = {1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0, 4};
  const auto A = memsafe::matrix(a.data(), 4, 4);
  const auto av = memsafe::eval(A * A * V, o);
  for (std::size_t i = 0; i < 4; ++i)
    if (!close(av[i], a[i * 5] * a[i * 5] * v[i])) return 6;
  return 0;
}

/// The run-time instruction-set choice of the fused kernels.
int isa_checks() {
  if (memsafe::parse_bytes("1MiB") != 1048576) return 1;
  ::unsetenv("MEMSAFE_KERNELS");
  const std::string want = expected_isa();
  auto x = numbers<float>(37, 19, 1), y = numbers<float>(1001, 19, 2);
  auto X = memsafe::points(x.data(), 37, 19), Y = memsafe::points(y.data(), 1001, 19);
  same_as_portable(memsafe::argkmin(memsafe::sqdist(X, Y), 10), "argkmin sqdist f32", want);
  same_as_portable(memsafe::argkmin(memsafe::l1(X, Y), 10), "argkmin l1 f32", want);
  same_as_portable(memsafe::argkmin(memsafe::cosine(X, Y), 10), "argkmin cosine f32", want);
  same_as_portable(memsafe::argkmax(memsafe::dot(X, Y), 10), "argkmax dot f32", want);
  auto xd = numbers<double>(23, 3, 3), yd = numbers<double>(300, 3, 4);
  same_as_portable(memsafe::argmin(memsafe::sqdist(memsafe::points(xd.data(), 23, 3), memsafe::points(yd.data(), 300, 3))),
                   "argmin sqdist f64", want);
  // Every budget the same answers, the tile loop's smallest plan included.
  budget_independent(memsafe::argkmin(memsafe::sqdist(X, Y), 10), "argkmin sqdist f32 at every budget");
  auto x3 = numbers<float>(23, 3, 5), y3 = numbers<float>(211, 3, 6);
  budget_independent(memsafe::min(memsafe::sqdist(memsafe::points(x3.data(), 23, 3), memsafe::points(y3.data(), 211, 3))),
                     "min sqdist f32 at every budget");
  std::printf("memsafe consumer: fused k-nearest kernels dispatched to %s (this CPU's best)%s%s\n", want.c_str(),
              memsafe::precompiled_linked ? ", run by memsafe::precompiled" : "", failed ? " — FAILED" : "");
  return failed ? 1 : 0;
}

/// One tile-path expression (no fused kernel takes it): the dispatched run against
/// MEMSAFE_ISA=portable's and against the naive values `want`, each within tol·scale.
template <class X>
bool tile_agrees(const X& e, const std::vector<double>& want, const std::vector<double>& scale, double tol,
                 const char* what) {
  const auto [a, b] = dispatched_and_portable(e);
  bool ok = a.values.size() == want.size() && b.values.size() == want.size();
  for (std::size_t q = 0; ok && q < want.size(); ++q)
    ok = std::fabs(double(a.values[q]) - want[q]) <= tol * scale[q] &&
         std::fabs(double(a.values[q]) - double(b.values[q])) <= tol * scale[q];
  if (!ok) std::fprintf(stderr, "memsafe consumer: tile path %s: the dispatched values DIFFER\n", what);
  return ok;
}

/// The tile path in this default-flags build: its micro-kernel runs as an AVX2 copy where the CPU
/// has AVX2 (memsafe/backend/host/tile_isa.hpp), the baseline one under MEMSAFE_ISA=portable. Every
/// base (squared difference, absolute difference, product, cosine) with 4-row blocks and a
/// remainder row.
int tile_checks() {
  const std::size_t n = 23, m = 301, d = 9;
  const auto x = plain<float>(n, d, 7), y = plain<float>(m, d, 8), v = plain<float>(m, 1, 9);
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  std::vector<double> cw(n, 0), cs(n, 0), sw(n, 0), ss(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double dot = 0, nx = 0, ny = 0, l1 = 0;
      for (std::size_t k = 0; k < d; ++k) {
        const double a = x[i * d + k], b = y[j * d + k];
        dot += a * b, nx += a * a, ny += b * b, l1 += std::fabs(a - b);
      }
      const double c = 1 - dot / std::sqrt(nx * ny), t = l1 + 0.5 * dot;
      cw[i] += c * v[j], cs[i] += std::fabs(c * v[j]) + 1;
      sw[i] += t, ss[i] += std::fabs(l1) + std::fabs(0.5 * dot) + 1;
    }
  bool ok = tile_agrees(memsafe::cosine(X, Y) * memsafe::vec(v.data(), m), cw, cs, 1e-5, "cosine K·v f32");
  ok = tile_agrees(memsafe::sum(memsafe::l1(X, Y) + memsafe::linear(X, Y, 0.5)), sw, ss, 1e-5, "sum(l1 + linear) f32") && ok;
  const auto xd = plain<double>(n, 3, 10), yd = plain<double>(m, 3, 11);
  std::vector<double> kd(n * m), ks(n * m, 1.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double r2 = 0;
      for (std::size_t k = 0; k < 3; ++k) r2 += (xd[i * 3 + k] - yd[j * 3 + k]) * (xd[i * 3 + k] - yd[j * 3 + k]);
      kd[i * m + j] = 2.0 * std::exp(-0.5 * r2 / (0.8 * 0.8));
    }
  ok = tile_agrees(memsafe::dense(memsafe::rbf(memsafe::points(xd.data(), n, 3), memsafe::points(yd.data(), m, 3), 0.8, 2.0)),
                   kd, ks, 1e-13, "dense rbf f64") && ok;
  std::printf("memsafe consumer: tile path (cosine, l1 + linear, dense rbf) agrees with the portable kernel%s\n",
              ok ? "" : " — FAILED");
  return ok ? 0 : 1;
}

/// max |a − b| / max(1, max |b|) over two vectors of the same size (else infinity).
template <class A, class B>
double rel_diff(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 1;
  for (std::size_t q = 0; q < a.size(); ++q) {
    num = std::max(num, std::fabs(double(a[q]) - double(b[q])));
    den = std::max(den, std::fabs(double(b[q])));
  }
  return num / den;
}

/// The gradients in this default-flags build: their row kernel (memsafe/backend/host/grad_kernel.inc)
/// runs as an AVX2 copy where the CPU has AVX2, the baseline one under MEMSAFE_ISA=portable; both
/// against naive double loops. A stationary formula with every output (rows, columns, parameters),
/// a dot-kind formula with a rank-3 W and a stationary one with the rows only (the kernel's loop
/// without the parameter sums); 301 columns, not a multiple of the kernel's 8-column blocks.
int grad_checks() {
  const std::size_t n = 23, m = 301, d = 3, c = 3;
  const double ls = 0.8, var = 2.0, s = 0.5;
  const auto x = plain<double>(n, d, 12), y = plain<double>(m, d, 13), v = plain<double>(m, 1, 14),
             g = plain<double>(n, 1, 15);
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  // L = Σ_ij g_i K_ij v_j, K = var·exp(−r²/(2ℓ²))
  std::vector<double> gx(n * d, 0), gy(m * d, 0), gp(2, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double r2 = 0;
      for (std::size_t k = 0; k < d; ++k) r2 += (x[i * d + k] - y[j * d + k]) * (x[i * d + k] - y[j * d + k]);
      const double w = g[i] * v[j] * var * std::exp(-0.5 * r2 / (ls * ls));
      for (std::size_t k = 0; k < d; ++k) {
        gx[i * d + k] -= w * (x[i * d + k] - y[j * d + k]) / (ls * ls);
        gy[j * d + k] += w * (x[i * d + k] - y[j * d + k]) / (ls * ls);
      }
      gp[0] += w / var;
      gp[1] += w * r2 / (ls * ls * ls);
    }
  const auto b = memsafe::vjp(memsafe::rbf(X, Y, ls, var) * memsafe::vec(v.data(), m), memsafe::vec(g.data(), n),
                              memsafe::wrt(X, Y, memsafe::params));
  const memsafe::options o{memsafe::unlimited, 2};
  const auto [a1, a2] = dispatched_and_portable_run([&] { return memsafe::grad(b, o); });
  bool ok = true;
  for (const auto* r : {&a1, &a2}) {
    const std::vector<double> p = {r->params.at(0).variance.at(0), r->params.at(0).lengthscale.at(0)};
    ok = ok && rel_diff(r->of(X), gx) <= 1e-12 && rel_diff(r->of(Y), gy) <= 1e-12 && rel_diff(p, gp) <= 1e-12;
  }
  // L = Σ_ic G_ic Σ_j K_ij M_jc, K = s·x_i·y_j: ∂L/∂x_ik = s Σ_j (Σ_c G_ic M_jc) y_jk
  const auto xf = plain<float>(n, d, 16), yf = plain<float>(m, d, 17), M = plain<float>(m, c, 18),
             G = plain<float>(n, c, 19);
  const auto Xf = memsafe::points(xf.data(), n, d), Yf = memsafe::points(yf.data(), m, d);
  std::vector<double> hx(n * d, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double w = 0;
      for (std::size_t q = 0; q < c; ++q) w += double(G[i * c + q]) * double(M[j * c + q]);
      for (std::size_t k = 0; k < d; ++k) hx[i * d + k] += s * w * double(yf[j * d + k]);
    }
  const auto bf = memsafe::vjp(memsafe::linear(Xf, Yf, s) * memsafe::matrix(M.data(), m, c),
                               memsafe::matrix(G.data(), n, c), memsafe::wrt(Xf));
  const auto [f1, f2] = dispatched_and_portable_run([&] { return memsafe::grad(bf, o); });
  ok = ok && rel_diff(f1.of(Xf), hx) <= 1e-5 && rel_diff(f2.of(Xf), hx) <= 1e-5 && rel_diff(f1.of(Xf), f2.of(Xf)) <= 1e-5;
  // Matérn-3/2 with the row points only: ∂L/∂x_i = Σ_j g_i v_j (−3σ²/ℓ²) exp(−√3 r/ℓ) (x_i − y_j)
  const auto vf = plain<float>(m, 1, 20), gf = plain<float>(n, 1, 21);
  std::vector<double> mx(n * d, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double r2 = 0;
      for (std::size_t k = 0; k < d; ++k) r2 += (double(xf[i * d + k]) - yf[j * d + k]) * (double(xf[i * d + k]) - yf[j * d + k]);
      const double w = double(gf[i]) * vf[j] * (-3 * var / (ls * ls)) * std::exp(-std::sqrt(3 * r2) / ls);
      for (std::size_t k = 0; k < d; ++k) mx[i * d + k] += w * (double(xf[i * d + k]) - yf[j * d + k]);
    }
  const auto bm = memsafe::vjp(memsafe::matern32(Xf, Yf, ls, var) * memsafe::vec(vf.data(), m),
                               memsafe::vec(gf.data(), n), memsafe::wrt(Xf));
  const auto [m1, m2] = dispatched_and_portable_run([&] { return memsafe::grad(bm, o); });
  ok = ok && rel_diff(m1.of(Xf), mx) <= 1e-5 && rel_diff(m2.of(Xf), mx) <= 1e-5 && rel_diff(m1.of(Xf), m2.of(Xf)) <= 1e-5;
  std::printf("memsafe consumer: gradients (rbf K·v f64, linear K·M f32, matern32 K·v f32) agree with naive loops, "
              "dispatched and portable%s\n",
              ok ? "" : " — FAILED");
  return ok ? 0 : 1;
}

int main() {
  if (const int r = adl_checks()) return r;
  if (const int r = isa_checks()) return r;
  if (const int r = tile_checks()) return r;
  return grad_checks();
}
