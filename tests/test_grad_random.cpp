// Randomised gradients: vector–Jacobian products of reductions of lazy kernel matrices, drawn at
// random sizes, dimensions, data scales, parameters, budgets and threads, in float and double, on
// the dispatched kernels and with MEMSAFE_ISA=portable, against an independent dense reference.
//
// test_grad.cpp checks every formula and reduction against finite differences at fixed small
// sizes (9×7, d = 3: less than one panel of columns). This file draws what those cannot reach:
// sizes across the kernels' panel widths (8 doubles / 16 floats) and row blocks, 1 to 40
// dimensions, float, many column tiles at the plan's minimum budget, several threads, and the
// translation unit's own kernels against the AVX2 copies a default-flags build dispatches to.
//
// The reference (namespace gref) uses nothing of memsafe: each formula's value and its analytic
// derivatives with respect to x, y and the parameters, written out here in long double from the
// values the library sees (inputs and parameters rounded to T); the reduction's ∂L/∂K_ij for
// L = ⟨upstream, output⟩ densely; ∂L/∂x_i = Σ_j ∂L/∂K_ij ∂K_ij/∂x_i and the like, each entry with
// its Σ|terms| — the scale its rounding error is measured against. The analytic derivatives are
// themselves checked against central differences of the reference's own values (first case).
//
// Per case: the forward values and every requested gradient within tol·Σ|terms| + floor of the
// reference, entry by entry (double: tol 1e-11, floor 1e-13 × the largest entry of that gradient;
// float: 2e-5 and 1e-6 — the floor allows for a difference x_k − y_k of scaled coordinates, which
// loses digits relative to itself); peak ≤ budget and ≤ planned at the plan's minimum, at a random
// larger budget and unlimited, with 1–3 threads; the results budget-independent (double: 1e-13 of
// Σ|terms| + the floor; float: 1e-6 — float terms are summed in double, but a term's own rounding
// may depend on its lane); the portable kernels (MEMSAFE_ISA=portable) within the same tolerance
// of the reference; a budget of the minimum − 1 a budget_error naming the minimum.
//
// Time-bounded: MEMSAFE_GRAD_FUZZ_SECONDS (default 8) from MEMSAFE_GRAD_FUZZ_SEED; each case has its
// own generator (seed, index); MEMSAFE_GRAD_FUZZ_CASE=i runs only case i (a failure names it).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memsafe/grad.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "grad_check.hpp"
#include "reference.hpp"

namespace gref {
using ld = long double;

enum class kf { sqdist, dist, dot, rbf, m12, m32, m52, rq, linear };
enum class red { sum_j, sum_i, kv, km, vk, lse, softmax };

inline const char* name(kf f) {
  switch (f) {
    case kf::sqdist: return "sqdist";
    case kf::dist: return "dist";
    case kf::dot: return "dot";
    case kf::rbf: return "rbf";
    case kf::m12: return "matern12";
    case kf::m32: return "matern32";
    case kf::m52: return "matern52";
    case kf::rq: return "rq";
    case kf::linear: return "linear";
  }
  return "?";
}
inline const char* name(red r) {
  switch (r) {
    case red::sum_j: return "sum";
    case red::sum_i: return "sum over i";
    case red::kv: return "K*v";
    case red::km: return "K*M";
    case red::vk: return "v*K";
    case red::lse: return "logsumexp";
    case red::softmax: return "softmax_sum";
  }
  return "?";
}
constexpr bool stationary(kf f) { return f != kf::dot && f != kf::linear; }
constexpr bool has_lengthscale(kf f) { return stationary(f) && f != kf::sqdist && f != kf::dist; }
constexpr bool has_operand(red r) { return r == red::kv || r == red::km || r == red::vk || r == red::softmax; }

/// One formula with its parameters, in long double. θ (flat, as gradients' params): the
/// lengthscale(s), the variance(s), α.
struct formula {
  kf f;
  std::size_t d;
  bool ard;
  std::vector<ld> th;
  std::size_t nls() const { return has_lengthscale(f) ? (ard ? d : 1) : 0; }
  std::size_t nvar() const {
    if (f == kf::linear) return ard ? d : 1;
    return has_lengthscale(f) ? 1 : 0;
  }
  std::size_t np() const { return nls() + nvar() + (f == kf::rq ? 1 : 0); }
  ld ls(std::size_t k) const { return has_lengthscale(f) ? (ard ? th[k] : th[0]) : 1; }
  ld var() const { return th[nls()]; }
  ld alpha() const { return th[nls() + 1]; }

  /// ψ(u) and ψ'(u) of a stationary formula, u = Σ ((x_k − y_k)/ℓ_k)².
  void psi(ld u, ld& v, ld& dv) const {
    const ld s2 = has_lengthscale(f) ? var() : 1;
    switch (f) {
      case kf::sqdist: v = u, dv = 1; return;
      case kf::dist: v = std::sqrt(u), dv = 1 / (2 * std::sqrt(u)); return;
      case kf::rbf: v = s2 * std::exp(-u / 2), dv = -v / 2; return;
      case kf::m12: {
        const ld r = std::sqrt(u);
        v = s2 * std::exp(-r), dv = -v / (2 * r);
        return;
      }
      case kf::m32: {
        const ld a = std::sqrt(3 * u), e = std::exp(-a);
        v = s2 * (1 + a) * e, dv = -s2 * ld(1.5) * e;
        return;
      }
      case kf::m52: {
        const ld a = std::sqrt(5 * u), e = std::exp(-a);
        v = s2 * (1 + a + a * a / 3) * e, dv = -s2 * (ld(5) / 6) * (1 + a) * e;
        return;
      }
      case kf::rq: {
        const ld al = alpha(), b = 1 + u / (2 * al);
        v = s2 * std::pow(b, -al), dv = -(s2 / 2) * std::pow(b, -al - 1);
        return;
      }
      default: v = dv = 0;
    }
  }
  /// K(x, y) and its derivatives: dx, dy (d each), dth (np()).
  ld pair(const ld* x, const ld* y, ld* dx, ld* dy, ld* dth) const {
    if (!stationary(f)) {
      ld K = 0, s = 0;
      for (std::size_t k = 0; k < d; ++k) {
        const ld w = f == kf::linear ? (ard ? th[k] : th[0]) : 1;
        K += w * x[k] * y[k];
        s += x[k] * y[k];
        dx[k] = w * y[k];
        dy[k] = w * x[k];
        if (f == kf::linear && ard) dth[k] = x[k] * y[k];
      }
      if (f == kf::linear && !ard) dth[0] = s;
      return K;
    }
    ld u = 0;
    for (std::size_t k = 0; k < d; ++k) {
      const ld t = (x[k] - y[k]) / ls(k);
      u += t * t;
    }
    ld v, dv;
    psi(u, v, dv);
    for (std::size_t k = 0; k < d; ++k) {
      const ld l = ls(k);
      dx[k] = dv * 2 * (x[k] - y[k]) / (l * l);
      dy[k] = -dx[k];
      if (has_lengthscale(f) && ard) dth[k] = dv * -2 * (x[k] - y[k]) * (x[k] - y[k]) / (l * l * l);
    }
    if (has_lengthscale(f)) {
      if (!ard) dth[0] = dv * -2 * u / th[0];
      dth[nls()] = v / var();
      if (f == kf::rq) {
        const ld al = alpha(), q = u / (2 * al);
        dth[nls() + 1] = v * (-std::log1p(q) + q / (1 + q));
      }
    }
    return v;
  }
};

/// The reference: the output, and every gradient with its per-entry Σ|terms|.
struct result {
  std::vector<ld> out, out_abs, gx, ax, gy, ay, gth, ath, gop, aop;
};

/// x: n×d, y: m×d; op: the reduction's operand (v: m or n, M / V: m×c); up: the upstream, in the
/// output's shape.
inline result reference(const formula& F, red R, const std::vector<ld>& x, const std::vector<ld>& y, std::size_t n,
                        std::size_t m, std::size_t c, const std::vector<ld>& op, const std::vector<ld>& up) {
  const std::size_t d = F.d, np = F.np();
  std::vector<ld> K(n * m), dx(d), dy(d), dth(np);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) K[i * m + j] = F.pair(&x[i * d], &y[j * d], dx.data(), dy.data(), dth.data());
  result r;
  // ∂L/∂K_ij (G) and its scale (Gs: a bound on |G| that its rounding is measured against), the
  // output, and the operand's gradient.
  std::vector<ld> G(n * m, 0), Gs(n * m, 0);
  auto rows_out = [&](std::size_t cols) {
    r.out.assign(n * cols, 0);
    r.out_abs.assign(n * cols, 0);
  };
  switch (R) {
    case red::sum_j:
      rows_out(1);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
          r.out[i] += K[i * m + j], r.out_abs[i] += std::fabs(K[i * m + j]);
          G[i * m + j] = up[i];
        }
      break;
    case red::sum_i:
      r.out.assign(m, 0), r.out_abs.assign(m, 0);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
          r.out[j] += K[i * m + j], r.out_abs[j] += std::fabs(K[i * m + j]);
          G[i * m + j] = up[j];
        }
      break;
    case red::kv:
      rows_out(1);
      r.gop.assign(m, 0), r.aop.assign(m, 0);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
          const ld k = K[i * m + j];
          r.out[i] += k * op[j], r.out_abs[i] += std::fabs(k * op[j]);
          G[i * m + j] = up[i] * op[j];
          r.gop[j] += up[i] * k, r.aop[j] += std::fabs(up[i] * k);
        }
      break;
    case red::km:
      rows_out(c);
      r.gop.assign(m * c, 0), r.aop.assign(m * c, 0);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
          const ld k = K[i * m + j];
          for (std::size_t q = 0; q < c; ++q) {
            r.out[i * c + q] += k * op[j * c + q], r.out_abs[i * c + q] += std::fabs(k * op[j * c + q]);
            G[i * m + j] += up[i * c + q] * op[j * c + q];
            Gs[i * m + j] += std::fabs(up[i * c + q] * op[j * c + q]);
            r.gop[j * c + q] += k * up[i * c + q], r.aop[j * c + q] += std::fabs(k * up[i * c + q]);
          }
        }
      break;
    case red::vk:
      r.out.assign(m, 0), r.out_abs.assign(m, 0);
      r.gop.assign(n, 0), r.aop.assign(n, 0);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) {
          const ld k = K[i * m + j];
          r.out[j] += op[i] * k, r.out_abs[j] += std::fabs(op[i] * k);
          G[i * m + j] = op[i] * up[j];
          r.gop[i] += k * up[j], r.aop[i] += std::fabs(k * up[j]);
        }
      break;
    case red::lse:
    case red::softmax: {
      rows_out(R == red::lse ? 1 : c);
      if (R == red::softmax) r.gop.assign(m * c, 0), r.aop.assign(m * c, 0);
      std::vector<ld> p(m);
      for (std::size_t i = 0; i < n; ++i) {
        ld mx = -INFINITY, s = 0;
        for (std::size_t j = 0; j < m; ++j) mx = std::max(mx, K[i * m + j]);
        for (std::size_t j = 0; j < m; ++j) s += p[j] = std::exp(K[i * m + j] - mx);
        for (std::size_t j = 0; j < m; ++j) p[j] /= s;
        if (R == red::lse) {
          r.out[i] = mx + std::log(s);
          r.out_abs[i] = std::fabs(mx) + std::fabs(std::log(s));
          for (std::size_t j = 0; j < m; ++j) G[i * m + j] = up[i] * p[j], Gs[i * m + j] = std::fabs(up[i]) * p[j];
          continue;
        }
        ld uo = 0, uo_abs = 0;  // Σ_q U_iq out_iq
        for (std::size_t q = 0; q < c; ++q) {
          ld o = 0, oa = 0;
          for (std::size_t j = 0; j < m; ++j) o += p[j] * op[j * c + q], oa += p[j] * std::fabs(op[j * c + q]);
          r.out[i * c + q] = o, r.out_abs[i * c + q] = oa;
          uo += up[i * c + q] * o, uo_abs += std::fabs(up[i * c + q]) * oa;
        }
        for (std::size_t j = 0; j < m; ++j) {
          ld uv = 0, uv_abs = 0;
          for (std::size_t q = 0; q < c; ++q) {
            uv += up[i * c + q] * op[j * c + q], uv_abs += std::fabs(up[i * c + q] * op[j * c + q]);
            r.gop[j * c + q] += up[i * c + q] * p[j], r.aop[j * c + q] += std::fabs(up[i * c + q]) * p[j];
          }
          G[i * m + j] = p[j] * (uv - uo), Gs[i * m + j] = p[j] * (uv_abs + uo_abs);
        }
      }
      break;
    }
  }
  for (std::size_t q = 0; q < n * m; ++q)
    if (Gs[q] == 0) Gs[q] = std::fabs(G[q]);
  // the chain rule, pair by pair
  r.gx.assign(n * d, 0), r.ax.assign(n * d, 0), r.gy.assign(m * d, 0), r.ay.assign(m * d, 0);
  r.gth.assign(np, 0), r.ath.assign(np, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      const ld g = G[i * m + j], gs = Gs[i * m + j];
      if (gs == 0) continue;
      F.pair(&x[i * d], &y[j * d], dx.data(), dy.data(), dth.data());
      for (std::size_t k = 0; k < d; ++k) {
        r.gx[i * d + k] += g * dx[k], r.ax[i * d + k] += gs * std::fabs(dx[k]);
        r.gy[j * d + k] += g * dy[k], r.ay[j * d + k] += gs * std::fabs(dy[k]);
      }
      for (std::size_t q = 0; q < np; ++q) r.gth[q] += g * dth[q], r.ath[q] += gs * std::fabs(dth[q]);
    }
  return r;
}

/// The analytic derivatives of `pair` against central differences of its own values (4th order,
/// long double), at random points: the reference's check of itself.
inline ld self_check(const formula& F, std::mt19937_64& g) {
  std::normal_distribution<double> N;
  const std::size_t d = F.d, np = F.np();
  std::vector<ld> x(d), y(d), dx(d), dy(d), dth(np), tx(d), ty(d), tt(np);
  for (std::size_t k = 0; k < d; ++k) x[k] = N(g), y[k] = N(g);
  formula G = F;
  auto val = [&] { return G.pair(x.data(), y.data(), tx.data(), ty.data(), tt.data()); };
  val();
  F.pair(x.data(), y.data(), dx.data(), dy.data(), dth.data());
  auto fd = [&](ld& v) {
    const ld s = v, h = ld(1e-4) * std::max<ld>(1, std::fabs(s));
    v = s + 2 * h;
    const ld a2 = val();
    v = s + h;
    const ld a1 = val();
    v = s - h;
    const ld b1 = val();
    v = s - 2 * h;
    const ld b2 = val();
    v = s;
    return (-a2 + 8 * a1 - 8 * b1 + b2) / (12 * h);
  };
  ld err = 0, scale = 0;
  auto cmp = [&](ld a, ld b) { err = std::max(err, std::fabs(a - b)), scale = std::max(scale, std::fabs(b)); };
  for (std::size_t k = 0; k < d; ++k) cmp(dx[k], fd(x[k])), cmp(dy[k], fd(y[k]));
  for (std::size_t q = 0; q < np; ++q) cmp(dth[q], fd(G.th[q]));
  return scale == 0 ? err : err / scale;
}
}  // namespace gref

namespace {
using gref::kf;
using gref::ld;
using gref::red;

/// What one case draws.
struct draw {
  std::size_t n, m, d, c;
  double scale;
  bool ard;
  bool want_x, want_y, want_params, want_operand;
  std::size_t extra_budget;
  unsigned threads_min, threads_mid;
};

std::size_t pick(std::mt19937_64& g, std::initializer_list<std::size_t> v) {
  std::uniform_int_distribution<std::size_t> U(0, v.size() - 1);
  return *(v.begin() + U(g));
}

/// The lazy matrix of formula F over X, Y with parameters θ (T values: the ARD vector is read
/// through a pointer into th).
template <kf F, bool ARD, class XV, class T>
auto lazy(const XV& X, const XV& Y, const std::vector<T>& th, std::size_t d) {
  if constexpr (F == kf::sqdist) return memsafe::sqdist(X, Y);
  else if constexpr (F == kf::dist) return memsafe::dist(X, Y);
  else if constexpr (F == kf::dot) return memsafe::dot(X, Y);
  else if constexpr (F == kf::linear) {
    if constexpr (ARD) return memsafe::linear(X, Y, memsafe::ard(th.data(), d));
    else return memsafe::linear(X, Y, double(th[0]));
  } else {
    const std::size_t nl = ARD ? d : 1;
    auto ls = [&] {
      if constexpr (ARD) return memsafe::ard(th.data(), d);
      else return double(th[0]);
    }();
    const double var = double(th[nl]);
    if constexpr (F == kf::rbf) return memsafe::rbf(X, Y, ls, var);
    else if constexpr (F == kf::m12) return memsafe::matern12(X, Y, ls, var);
    else if constexpr (F == kf::m32) return memsafe::matern32(X, Y, ls, var);
    else if constexpr (F == kf::m52) return memsafe::matern52(X, Y, ls, var);
    else return memsafe::rq(X, Y, ls, var, double(th[nl + 1]));
  }
}

template <red R, class E, class T>
auto reduce(const E& K, const T* op, std::size_t n, std::size_t m, std::size_t c) {
  if constexpr (R == red::sum_j) return memsafe::sum(K);
  else if constexpr (R == red::sum_i) return memsafe::sum(K, memsafe::over_i);
  else if constexpr (R == red::kv) return K * memsafe::vec(op, m);
  else if constexpr (R == red::km) return K * memsafe::matrix(op, m, c);
  else if constexpr (R == red::vk) return memsafe::vec(op, n) * K;
  else if constexpr (R == red::lse) return memsafe::logsumexp(K);
  else return memsafe::softmax_sum(K, memsafe::matrix(op, m, c));
}

template <class T>
std::vector<ld> as_ld(const std::vector<T>& v) {
  return std::vector<ld>(v.begin(), v.end());
}

/// got within tol·scale + floor_rel·(want's largest entry) of want, entry by entry (the floor: a
/// difference x_k − y_k of scaled coordinates loses digits relative to itself, not to the output);
/// the worst entry in `why` when not.
template <class T>
bool close(const std::vector<T>& got, const std::vector<ld>& want, const std::vector<ld>& scale, double tol,
           double floor_rel, std::string& why) {
  if (got.size() != want.size()) {
    why = "size " + std::to_string(got.size()) + " instead of " + std::to_string(want.size());
    return false;
  }
  ld top = 0;
  for (ld w : want) top = std::max(top, std::fabs(w));
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t q = 0; q < got.size(); ++q) {
    const ld g = static_cast<ld>(got[q]);
    if (!std::isfinite(static_cast<double>(g))) {
      why = "entry " + std::to_string(q) + " is not finite";
      return false;
    }
    const ld bound = tol * scale[q] + floor_rel * top + ld(1e-300);
    const double r = static_cast<double>(std::fabs(g - want[q]) / bound);
    if (r > worst) worst = r, at = q;
  }
  if (worst <= 1) return true;
  std::ostringstream s;
  s.precision(12);
  s << "entry " << at << ": " << static_cast<double>(got[at]) << " against " << static_cast<double>(want[at])
    << " (scale " << static_cast<double>(scale[at]) << ", largest entry " << static_cast<double>(top) << "), "
    << worst << " × the tolerance";
  why = s.str();
  return false;
}

/// One case of slot (T, F, ARD, R): draws, runs, checks. Returns an empty string or what failed.
template <class T, kf F, bool ARD, red R>
std::string run_case(std::mt19937_64& g) {
  std::normal_distribution<double> N;
  std::uniform_real_distribution<double> U(0.5, 2.0), A(0.5, 3.0);
  draw w{};
  w.n = pick(g, {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 33, 47, 64, 65, 97, 130});
  w.m = pick(g, {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 33, 63, 64, 65, 100, 129, 160});
  w.d = pick(g, {1, 1, 2, 3, 3, 4, 5, 6, 8, 9, 12, 17, 33});
  w.c = R == red::km || R == red::softmax ? pick(g, {1, 2, 3, 5}) : 1;
  w.scale = static_cast<double>(pick(g, {1, 3, 10})) / 3.0;
  const std::size_t n = w.n, m = w.m, d = w.d, c = w.c;
  gref::formula Fm{F, d, ARD, {}};
  // parameters: lengthscales of the data's scale (so that r is of order 1), variances, α
  std::vector<T> th(Fm.np());
  for (std::size_t q = 0; q < Fm.nls(); ++q) th[q] = T(w.scale * std::sqrt(double(d)) * U(g));
  for (std::size_t q = Fm.nls(); q < Fm.nls() + Fm.nvar(); ++q) th[q] = T(U(g) / (F == kf::linear ? double(d) : 1.0));
  if (F == kf::rq) th.back() = T(A(g));
  Fm.th = as_ld(th);
  std::vector<T> x(n * d), y(m * d);
  for (auto& a : x) a = T(w.scale * N(g));
  for (auto& a : y) a = T(w.scale * N(g));
  const std::size_t op_size = R == red::vk ? n : (gref::has_operand(R) ? m * c : 0);
  std::vector<T> op(op_size);
  for (auto& a : op) a = T(N(g));
  const std::size_t out_size = R == red::sum_i || R == red::vk ? m : n * c;
  std::vector<T> up(out_size);
  for (auto& a : up) a = T(N(g));
  // what to differentiate: a random non-empty subset
  do {
    w.want_x = g() & 1, w.want_y = g() & 1;
    w.want_params = Fm.np() > 0 && (g() & 1);
    w.want_operand = gref::has_operand(R) && (g() & 1);
  } while (!(w.want_x || w.want_y || w.want_params || w.want_operand));
  w.threads_min = 1 + static_cast<unsigned>(g() % 3);
  w.threads_mid = 1 + static_cast<unsigned>(g() % 3);

  std::ostringstream what;
  what << (sizeof(T) == 4 ? "float " : "double ") << gref::name(F) << (ARD ? "-ard" : "") << " / " << gref::name(R)
       << ": n " << n << ", m " << m << ", d " << d << ", c " << c << ", data scale " << w.scale << ", wrt"
       << (w.want_x ? " X" : "") << (w.want_y ? " Y" : "") << (w.want_params ? " params" : "")
       << (w.want_operand ? " operand" : "");
  auto fail = [&](const std::string& s) { return what.str() + ": " + s; };

  const auto X = memsafe::points(static_cast<const T*>(x.data()), n, d);
  const auto Y = memsafe::points(static_cast<const T*>(y.data()), m, d);
  const auto e = reduce<R>(lazy<F, ARD>(X, Y, th, d), static_cast<const T*>(op.data()), n, m, c);
  if (e.rows() * e.cols() != out_size) return fail("output shape " + std::to_string(e.rows()) + "×" + std::to_string(e.cols()));

  const auto want = gref::reference(Fm, R, as_ld(x), as_ld(y), n, m, c, as_ld(op), as_ld(up));
  constexpr bool dbl = sizeof(T) == 8;
  const double tol = dbl ? 1e-11 : 2e-5, floor_rel = dbl ? 1e-13 : 1e-6, indep = dbl ? 1e-13 : 1e-6;
  std::string why;
  {  // the forward values
    const auto r = memsafe::eval(e, memsafe::options{memsafe::unlimited, 1});
    if (!close(r.values, want.out, want.out_abs, tol, floor_rel, why)) return fail("forward: " + why);
  }
  memsafe::wrt_set<T> ws;
  if (w.want_x) ws.points.push_back(X);
  if (w.want_y) ws.points.push_back(Y);
  ws.params = w.want_params;
  ws.operand = w.want_operand;
  auto bw = [&] {
    if (e.cols() == 1) return memsafe::vjp(e, memsafe::vec(static_cast<const T*>(up.data()), e.rows()), ws);
    return memsafe::vjp(e, memsafe::matrix(static_cast<const T*>(up.data()), e.rows(), e.cols()), ws);
  };
  const std::size_t mn = memsafe::plan_for(bw(), memsafe::options{memsafe::unlimited, 1}).min_bytes;
  w.extra_budget = static_cast<std::size_t>(g() % (4 * mn + 4096));

  // The requested gradients, in the one order every comparison uses: what each is compared with,
  // and the library's values in that order (float values widened, exactly).
  struct part {
    const char* name;
    const std::vector<ld>* want;
    const std::vector<ld>* scale;  ///< Σ|terms|, what its rounding is measured against
  };
  std::vector<part> parts;
  if (w.want_x) parts.push_back({"∂/∂X", &want.gx, &want.ax});
  if (w.want_y) parts.push_back({"∂/∂Y", &want.gy, &want.ay});
  if (w.want_params) parts.push_back({"∂/∂θ", &want.gth, &want.ath});
  if (w.want_operand) parts.push_back({"∂/∂operand", &want.gop, &want.aop});
  auto got = [&](const memsafe::gradients<T>& r) {
    std::vector<std::vector<double>> v;
    for (const auto& pts : r.points) v.push_back(gradcheck::as_double(pts));
    if (w.want_params) v.push_back(gradcheck::flat_params(r));
    if (w.want_operand) v.push_back(gradcheck::as_double(r.operand));
    return v;
  };
  // every requested gradient against the reference
  auto check = [&](const std::vector<std::vector<double>>& v, const std::string& run) -> std::string {
    if (v.size() != parts.size())
      return run + ": " + std::to_string(v.size()) + " gradients instead of " + std::to_string(parts.size());
    for (std::size_t q = 0; q < parts.size(); ++q)
      if (!close(v[q], *parts[q].want, *parts[q].scale, tol, floor_rel, why)) return run + ": " + parts[q].name + " " + why;
    return {};
  };
  struct run_opt {
    std::size_t budget;
    unsigned threads;
    const char* label;
  };
  const run_opt runs[] = {{memsafe::unlimited, 1, "unlimited budget"},
                          {std::max<std::size_t>(mn, 1), w.threads_min, "the minimum budget"},
                          {mn + w.extra_budget, w.threads_mid, "a larger budget"}};
  std::vector<std::vector<double>> first;
  for (const auto& o : runs) {
    const auto r = memsafe::grad(bw(), memsafe::options{o.budget, o.threads});
    const std::string at = std::string(o.label) + " (" + std::to_string(o.budget) + " B, " + std::to_string(o.threads) +
                           " threads)";
    if (r.stats.peak_temp_bytes > o.budget) return fail(at + ": peak " + std::to_string(r.stats.peak_temp_bytes));
    if (r.stats.peak_temp_bytes > r.stats.planned_temp_bytes)
      return fail(at + ": peak " + std::to_string(r.stats.peak_temp_bytes) + " above the plan's " +
                  std::to_string(r.stats.planned_temp_bytes));
    if (r.stats.min_budget_bytes != mn) return fail(at + ": minimum " + std::to_string(r.stats.min_budget_bytes));
    const auto v = got(r);
    if (auto s = check(v, at); !s.empty()) return fail(s);
    if (first.empty()) {
      first = v;
    } else {
      for (std::size_t q = 0; q < v.size(); ++q)
        if (!close(v[q], as_ld(first[q]), *parts[q].scale, indep, floor_rel, why))
          return fail(at + ": gradient #" + std::to_string(q) + " differs from the unlimited run's: " + why);
    }
  }
  {  // the translation unit's own kernels (in a default-flags build: not the AVX2 copies)
    ref::scoped_env portable("MEMSAFE_ISA", "portable");
    const auto r = memsafe::grad(bw(), memsafe::options{std::max<std::size_t>(mn, 1), w.threads_min});
    if (r.stats.peak_temp_bytes > std::max<std::size_t>(mn, 1)) return fail("portable: peak above the minimum budget");
    if (auto s = check(got(r), "MEMSAFE_ISA=portable"); !s.empty()) return fail(s);
  }
  if (mn > 0) {  // below the minimum: budget_error naming it, before any work
    try {
      (void)memsafe::plan_for(bw(), memsafe::budget_bytes(mn - 1));
      return fail("no budget_error at the minimum − 1");
    } catch (const memsafe::budget_error& err) {
      if (err.minimum_bytes != mn || std::string(err.what()).find(std::to_string(mn)) == std::string::npos)
        return fail(std::string("budget_error does not name the minimum: ") + err.what());
    }
  }
  return {};
}

using slot_fn = std::string (*)(std::mt19937_64&);
struct slot {
  slot_fn fn;
  const char* name;
};
// Every formula and reduction in both value types, not every combination (each is a type, and
// each type costs compile time).
const slot slots[] = {
    {run_case<double, kf::rbf, true, red::sum_j>, "f64 rbf-ard sum"},
    {run_case<double, kf::rbf, false, red::kv>, "f64 rbf K*v"},
    {run_case<double, kf::rbf, true, red::softmax>, "f64 rbf-ard softmax_sum"},
    {run_case<double, kf::m12, true, red::kv>, "f64 matern12-ard K*v"},
    {run_case<double, kf::m32, false, red::km>, "f64 matern32 K*M"},
    {run_case<double, kf::m32, true, red::vk>, "f64 matern32-ard v*K"},
    {run_case<double, kf::m52, true, red::sum_i>, "f64 matern52-ard sum over i"},
    {run_case<double, kf::m52, false, red::lse>, "f64 matern52 logsumexp"},
    {run_case<double, kf::rq, true, red::kv>, "f64 rq-ard K*v"},
    {run_case<double, kf::rq, false, red::sum_j>, "f64 rq sum"},
    {run_case<double, kf::sqdist, false, red::kv>, "f64 sqdist K*v"},
    {run_case<double, kf::dist, false, red::sum_j>, "f64 dist sum"},
    {run_case<double, kf::dot, false, red::vk>, "f64 dot v*K"},
    {run_case<double, kf::linear, true, red::km>, "f64 linear-ard K*M"},
    {run_case<double, kf::linear, false, red::lse>, "f64 linear logsumexp"},
    {run_case<float, kf::rbf, false, red::kv>, "f32 rbf K*v"},
    {run_case<float, kf::m12, false, red::sum_j>, "f32 matern12 sum"},
    {run_case<float, kf::m32, true, red::kv>, "f32 matern32-ard K*v"},
    {run_case<float, kf::m52, false, red::km>, "f32 matern52 K*M"},
    {run_case<float, kf::rq, true, red::vk>, "f32 rq-ard v*K"},
    {run_case<float, kf::dist, false, red::kv>, "f32 dist K*v"},
    {run_case<float, kf::linear, false, red::sum_i>, "f32 linear sum over i"},
};
constexpr std::size_t n_slots = sizeof(slots) / sizeof(slots[0]);

double env_double(const char* name, double def) {
  const char* e = std::getenv(name);
  return e && *e ? std::strtod(e, nullptr) : def;
}
}  // namespace

TEST_SUITE("grad") {
TEST_CASE("grad random: the reference's derivatives against its own finite differences") {
  std::mt19937_64 g(7);
  for (kf f : {kf::sqdist, kf::dist, kf::dot, kf::rbf, kf::m12, kf::m32, kf::m52, kf::rq, kf::linear})
    for (bool ard : {false, true}) {
      if (ard && !gref::has_lengthscale(f) && f != kf::linear) continue;
      gref::formula F{f, 4, ard, {}};
      std::uniform_real_distribution<double> U(0.6, 1.8);
      F.th.resize(F.np());
      for (auto& t : F.th) t = U(g);
      CAPTURE(gref::name(f));
      CAPTURE(ard);
      for (int k = 0; k < 5; ++k) CHECK(gref::self_check(F, g) < 1e-12);
    }
}

TEST_CASE("grad random: sizes, dimensions, float and double, budgets, threads and kernels against a dense reference") {
  const double seconds = env_double("MEMSAFE_GRAD_FUZZ_SECONDS", 8);
  const auto seed = static_cast<std::uint64_t>(env_double("MEMSAFE_GRAD_FUZZ_SEED", 20261128));
  const char* only = std::getenv("MEMSAFE_GRAD_FUZZ_CASE");
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t cases = 0, failed = 0;
  std::vector<std::size_t> per_slot(n_slots, 0);
  for (std::size_t i = only ? std::strtoull(only, nullptr, 10) : 0;; ++i) {
    // every slot at least twice, then until the time is up
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!only && cases >= 2 * n_slots && el > seconds) break;
    std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull + i);
    const std::size_t s = i % n_slots;
    const std::string err = slots[s].fn(g);
    ++cases, ++per_slot[s];
    if (!err.empty()) {
      ++failed;
      FAIL_CHECK("case " << i << " (MEMSAFE_GRAD_FUZZ_CASE=" << i << "), " << err);
      if (failed >= 8) break;
    }
    if (only) break;
  }
  MESSAGE("grad random: " << cases << " cases over " << n_slots << " slots, " << failed << " failed");
  CHECK(failed == 0);
  if (!only)
    for (std::size_t s = 0; s < n_slots; ++s) {
      CAPTURE(slots[s].name);
      CHECK(per_slot[s] >= 2);
    }
}
}  // TEST_SUITE("grad")
