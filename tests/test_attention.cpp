// Attention (<memsafe/attention.hpp>): forward and backward against an independent dense
// implementation written here (f64 tight, f32 within 5e-5), causal and not, key padding, bias,
// the [B, T, H, d] layout of a fused QKV buffer, T not a multiple of the tile, T = 1, d = 1,
// fully masked rows (O = 0, lse = −inf, zero gradients, no NaN), gradients (the bias's too, for
// every broadcast of it; with dropout too) against central finite differences (f64, relative error
// ≤ 1e-6), dropout's keep rate and mask, peak ≤ budget at several budgets, results bitwise
// independent of the budget, the threads and the backward's schedule (one or two passes), a
// randomised case over all of it, explain against the runs' plans, budget_error below the minimum,
// shape errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memsafe/attention.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using memsafe::heads_view;

/// One attention problem: Q, K, V (and the outputs) in either layout, optional masks and bias.
template <class T>
struct att_problem {
  std::size_t B, H, Tq, Tk, d, dv;
  bool causal = false, pad = false, bias = false, fused = false;  // fused: one [B, T, 3, H, d] buffer
  std::size_t bB = 1, bH;  // the bias's extents: [1 or B, 1 or H, Tq, Tk] (set_bias_extents)
  double drop_p = 0;       // dropout on the weights (0: none), with drop_seed
  std::uint64_t drop_seed = 0;
  double scale;
  std::vector<T> qkv, q, k, v, bias_buf;
  std::vector<unsigned char> keep;

  att_problem(std::size_t B_, std::size_t H_, std::size_t Tq_, std::size_t Tk_, std::size_t d_, std::size_t dv_,
              unsigned seed, bool causal_ = false, bool pad_ = false, bool bias_ = false, bool fused_ = false)
      : B(B_), H(H_), Tq(Tq_), Tk(Tk_), d(d_), dv(dv_), causal(causal_), pad(pad_), bias(bias_), fused(fused_),
        bH(H_) {
    std::mt19937 g(seed);
    std::normal_distribution<double> n01(0.0, 1.0);
    auto fill = [&](std::vector<T>& x, std::size_t n) {
      x.resize(n);
      for (auto& e : x) e = static_cast<T>(n01(g));
    };
    scale = 1.0 / std::sqrt(static_cast<double>(d));
    if (fused) {
      REQUIRE(Tq == Tk);
      REQUIRE(d == dv);
      fill(qkv, B * Tq * 3 * H * d);
    } else {
      fill(q, B * H * Tq * d);
      fill(k, B * H * Tk * d);
      fill(v, B * H * Tk * dv);
    }
    if (bias) fill(bias_buf, H * Tq * Tk);  // [1, H, Tq, Tk]: broadcast over the batch (by default)
    if (pad) {
      keep.resize(B * Tk);
      std::bernoulli_distribution coin(0.7);
      for (auto& e : keep) e = coin(g) ? 1 : 0;
    }
  }
  /// A bias of extents [bB_, bH_, Tq, Tk] instead, N(0, 1) from seed.
  void set_bias_extents(std::size_t bB_, std::size_t bH_, unsigned seed) {
    bB = bB_;
    bH = bH_;
    std::mt19937 g(seed);
    std::normal_distribution<double> n01(0.0, 1.0);
    bias_buf.resize(bB * bH * Tq * Tk);
    for (auto& e : bias_buf) e = static_cast<T>(n01(g));
  }
  std::size_t bias_index(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    return (((bB == 1 ? 0 : b) * bH + (bH == 1 ? 0 : h)) * Tq + i) * Tk + j;
  }
  heads_view<const T> Q() const {
    return fused ? memsafe::heads_bthd(static_cast<const T*>(qkv.data()), B, Tq, H, d, 3 * H * d)
                 : memsafe::heads(static_cast<const T*>(q.data()), B, H, Tq, d);
  }
  heads_view<const T> K() const {
    return fused ? memsafe::heads_bthd(static_cast<const T*>(qkv.data()) + H * d, B, Tk, H, d, 3 * H * d)
                 : memsafe::heads(static_cast<const T*>(k.data()), B, H, Tk, d);
  }
  heads_view<const T> V() const {
    return fused ? memsafe::heads_bthd(static_cast<const T*>(qkv.data()) + 2 * H * d, B, Tk, H, dv, 3 * H * d)
                 : memsafe::heads(static_cast<const T*>(v.data()), B, H, Tk, dv);
  }
  /// The naive spelling, with whatever masks this problem has.
  auto expr() const {
    auto s = scale * memsafe::dot(Q(), K());
    if (bias) s = s + memsafe::heads(static_cast<const T*>(bias_buf.data()), bB, bH, Tq, Tk);
    if (pad) s = s + memsafe::key_padding(keep.data(), B, Tk);
    if (causal) s = s + memsafe::causal;
    if (drop_p > 0) return memsafe::softmax_sum(s, V(), memsafe::dropout(drop_p, drop_seed));
    return memsafe::softmax_sum(s, V());
  }
  /// The dropout's factor on weight (b, h, i, j) as the reference applies it: 1/(1 − p) or 0.
  double drop_factor(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    if (drop_p == 0) return 1.0;
    return memsafe::dropout_keeps(memsafe::dropout(drop_p, drop_seed), b, h, i, j) ? 1.0 / (1.0 - drop_p) : 0.0;
  }
  /// The mask as the dense reference sees it.
  bool visible(std::size_t b, std::size_t i, std::size_t j) const {
    if (pad && !keep[b * Tk + j]) return false;
    if (causal && static_cast<long>(j) > static_cast<long>(i) + static_cast<long>(Tk) - static_cast<long>(Tq))
      return false;
    return true;
  }
  double score(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    auto Qv = Q();
    auto Kv = K();
    double s = 0;
    for (std::size_t c = 0; c < d; ++c) s += double(Qv(b, h, i, c)) * double(Kv(b, h, j, c));
    s *= scale;
    if (bias) s += double(bias_buf[bias_index(b, h, i, j)]);
    return s;
  }
};

/// Dense reference forward in double: O ([B, H, Tq, dv] contiguous) and lse.
template <class T>
void dense_forward(const att_problem<T>& p, std::vector<double>& O, std::vector<double>& lse) {
  O.assign(p.B * p.H * p.Tq * p.dv, 0.0);
  lse.assign(p.B * p.H * p.Tq, -std::numeric_limits<double>::infinity());
  auto V = p.V();
  for (std::size_t b = 0; b < p.B; ++b)
    for (std::size_t h = 0; h < p.H; ++h)
      for (std::size_t i = 0; i < p.Tq; ++i) {
        std::vector<double> s(p.Tk, -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < p.Tk; ++j)
          if (p.visible(b, i, j)) {
            s[j] = p.score(b, h, i, j);
            m = std::max(m, s[j]);
          }
        if (m == -std::numeric_limits<double>::infinity()) continue;
        double l = 0;
        for (std::size_t j = 0; j < p.Tk; ++j) l += std::exp(s[j] - m);
        const std::size_t row = (b * p.H + h) * p.Tq + i;
        lse[row] = m + std::log(l);
        for (std::size_t j = 0; j < p.Tk; ++j) {
          const double w = std::exp(s[j] - m) / l * p.drop_factor(b, h, i, j);
          for (std::size_t c = 0; c < p.dv; ++c) O[row * p.dv + c] += w * double(V(b, h, j, c));
        }
      }
}

/// Dense reference backward in double (P from the dense softmax, D = Σ_j P dP).
template <class T>
void dense_backward(const att_problem<T>& p, const std::vector<T>& dO, std::vector<double>& dQ,
                    std::vector<double>& dK, std::vector<double>& dV, std::vector<double>* dBias = nullptr) {
  if (dBias) dBias->assign(p.bias_buf.size(), 0.0);
  auto Q = p.Q();
  auto K = p.K();
  auto V = p.V();
  dQ.assign(p.B * p.H * p.Tq * p.d, 0.0);
  dK.assign(p.B * p.H * p.Tk * p.d, 0.0);
  dV.assign(p.B * p.H * p.Tk * p.dv, 0.0);
  for (std::size_t b = 0; b < p.B; ++b)
    for (std::size_t h = 0; h < p.H; ++h)
      for (std::size_t i = 0; i < p.Tq; ++i) {
        const std::size_t row = (b * p.H + h) * p.Tq + i;
        std::vector<double> P(p.Tk, 0.0), dP(p.Tk, 0.0);
        double m = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < p.Tk; ++j)
          if (p.visible(b, i, j)) m = std::max(m, p.score(b, h, i, j));
        if (m == -std::numeric_limits<double>::infinity()) continue;
        double l = 0;
        for (std::size_t j = 0; j < p.Tk; ++j)
          if (p.visible(b, i, j)) l += (P[j] = std::exp(p.score(b, h, i, j) - m));
        double D = 0;
        std::vector<double> z(p.Tk);  // the dropout's factors (1 without)
        for (std::size_t j = 0; j < p.Tk; ++j) {
          P[j] /= l;
          z[j] = p.drop_factor(b, h, i, j);
          for (std::size_t c = 0; c < p.dv; ++c) dP[j] += double(dO[row * p.dv + c]) * double(V(b, h, j, c));
          dP[j] *= z[j];  // ∂L/∂P_ij: O_i = Σ_j P_ij z_ij V_j
          D += P[j] * dP[j];
        }
        for (std::size_t j = 0; j < p.Tk; ++j) {
          const double ds = P[j] * (dP[j] - D);
          if (dBias) (*dBias)[p.bias_index(b, h, i, j)] += ds;
          const std::size_t krow = (b * p.H + h) * p.Tk + j;
          for (std::size_t c = 0; c < p.dv; ++c) dV[krow * p.dv + c] += P[j] * z[j] * double(dO[row * p.dv + c]);
          for (std::size_t c = 0; c < p.d; ++c) {
            dQ[row * p.d + c] += p.scale * ds * double(K(b, h, j, c));
            dK[krow * p.d + c] += p.scale * ds * double(Q(b, h, i, c));
          }
        }
      }
}

/// memsafe's forward into contiguous O, lse.
template <class T>
memsafe::eval_stats run_forward(const att_problem<T>& p, std::vector<T>& O, std::vector<T>& lse,
                                memsafe::options o = {}) {
  O.assign(p.B * p.H * p.Tq * p.dv, T(-7));
  lse.assign(p.B * p.H * p.Tq, T(-7));
  return memsafe::eval_into(p.expr(), memsafe::heads(O.data(), p.B, p.H, p.Tq, p.dv), lse.data(), o);
}
template <class T>
memsafe::eval_stats run_backward(const att_problem<T>& p, const std::vector<T>& O, const std::vector<T>& lse,
                                 const std::vector<T>& dO, std::vector<T>& dQ, std::vector<T>& dK,
                                 std::vector<T>& dV, memsafe::options o = {}, std::vector<T>* dBias = nullptr) {
  dQ.assign(p.B * p.H * p.Tq * p.d, T(-7));
  dK.assign(p.B * p.H * p.Tk * p.d, T(-7));
  dV.assign(p.B * p.H * p.Tk * p.dv, T(-7));
  const auto Ov = memsafe::heads(O.data(), p.B, p.H, p.Tq, p.dv);
  const auto dOv = memsafe::heads(dO.data(), p.B, p.H, p.Tq, p.dv);
  const auto dQv = memsafe::heads(dQ.data(), p.B, p.H, p.Tq, p.d);
  const auto dKv = memsafe::heads(dK.data(), p.B, p.H, p.Tk, p.d);
  const auto dVv = memsafe::heads(dV.data(), p.B, p.H, p.Tk, p.dv);
  if (!dBias) return memsafe::attention_backward(p.expr(), Ov, lse.data(), dOv, dQv, dKv, dVv, o);
  dBias->assign(p.bias_buf.size(), T(-7));  // every entry must be written
  return memsafe::attention_backward(p.expr(), Ov, lse.data(), dOv, dQv, dKv, dVv,
                                     memsafe::heads(dBias->data(), p.bB, p.bH, p.Tq, p.Tk), o);
}

template <class T>
std::vector<T> upstream(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::vector<T> x(n);
  for (auto& e : x) e = static_cast<T>(n01(g));
  return x;
}

/// max |a − b| over finite entries; infinities must match exactly; no NaN anywhere.
template <class A>
double max_abs_diff(const std::vector<A>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(!std::isnan(double(a[i])));
    if (std::isinf(b[i]) || std::isinf(double(a[i]))) {
      REQUIRE(double(a[i]) == b[i]);
      continue;
    }
    e = std::max(e, std::fabs(double(a[i]) - b[i]));
  }
  return e;
}

/// Forward and backward of p against the dense reference within tol.
template <class T>
void check_against_dense(const att_problem<T>& p, double tol, memsafe::options o = {}) {
  std::vector<T> O, lse, dQ, dK, dV;
  auto st = run_forward(p, O, lse, o);
  CHECK(st.peak_temp_bytes <= st.budget_bytes);
  CHECK(st.peak_temp_bytes == st.planned_temp_bytes);
  std::vector<double> Or, lr, dQr, dKr, dVr;
  dense_forward(p, Or, lr);
  CHECK(max_abs_diff(O, Or) <= tol);
  CHECK(max_abs_diff(lse, lr) <= tol);
  const auto dO = upstream<T>(O.size(), 99);
  std::vector<T> dB;
  auto sb = run_backward(p, O, lse, dO, dQ, dK, dV, o, p.bias ? &dB : nullptr);
  CHECK(sb.peak_temp_bytes <= sb.budget_bytes);
  CHECK(sb.peak_temp_bytes == sb.planned_temp_bytes);
  std::vector<double> dBr;
  dense_backward(p, dO, dQr, dKr, dVr, p.bias ? &dBr : nullptr);
  CHECK(max_abs_diff(dQ, dQr) <= tol);
  CHECK(max_abs_diff(dK, dKr) <= tol);
  CHECK(max_abs_diff(dV, dVr) <= tol);
  if (p.bias) CHECK(max_abs_diff(dB, dBr) <= tol * double(p.B * p.H));  // a sum over the heads sharing it
}

}  // namespace

TEST_SUITE("attention") {
TEST_CASE("attention: forward and backward against dense, f64") {
  struct shape { std::size_t B, H, Tq, Tk, d, dv; };
  const shape shapes[] = {{1, 1, 1, 1, 1, 1},   {2, 3, 5, 5, 3, 2},    {1, 2, 64, 64, 8, 8}, {1, 2, 70, 70, 4, 5},
                          {2, 1, 130, 130, 1, 3}, {1, 1, 7, 150, 6, 6}, {1, 2, 150, 9, 5, 17}};
  unsigned seed = 1;
  for (const auto& s : shapes)
    for (int causal = 0; causal < 2; ++causal)
      for (int masks = 0; masks < 2; ++masks) {
        CAPTURE(s.Tq);
        CAPTURE(s.Tk);
        CAPTURE(s.d);
        CAPTURE(causal);
        CAPTURE(masks);
        att_problem<double> p(s.B, s.H, s.Tq, s.Tk, s.d, s.dv, seed++, causal, masks, masks);
        check_against_dense(p, 1e-12);
      }
}

TEST_CASE("attention: forward and backward against dense, f32 (tolerance 5e-5)") {
  for (int causal = 0; causal < 2; ++causal)
    for (int masks = 0; masks < 2; ++masks) {
      CAPTURE(causal);
      CAPTURE(masks);
      att_problem<float> p(2, 2, 100, 100, 16, 16, 7 + causal + 2 * masks, causal, masks, masks);
      check_against_dense(p, 5e-5);
      att_problem<float> p1(1, 3, 1, 1, 1, 1, 3, causal, false, masks);
      check_against_dense(p1, 5e-5);
    }
}

TEST_CASE("attention: the [B, T, H, d] layout of a fused QKV buffer, no copies") {
  for (int causal = 0; causal < 2; ++causal) {
    att_problem<double> p(2, 3, 67, 67, 5, 5, 11 + causal, causal, true, false, /*fused=*/true);
    check_against_dense(p, 1e-12);
    // the output written in the [B, T, H, dv] layout too
    std::vector<double> O(p.B * p.Tq * p.H * p.dv), lse(p.B * p.H * p.Tq), Oref, lref;
    memsafe::eval_into(p.expr(), memsafe::heads_bthd(O.data(), p.B, p.Tq, p.H, p.dv), lse.data());
    dense_forward(p, Oref, lref);
    double e = 0;
    for (std::size_t b = 0; b < p.B; ++b)
      for (std::size_t h = 0; h < p.H; ++h)
        for (std::size_t i = 0; i < p.Tq; ++i)
          for (std::size_t c = 0; c < p.dv; ++c)
            e = std::max(e, std::fabs(O[((b * p.Tq + i) * p.H + h) * p.dv + c] -
                                      Oref[((b * p.H + h) * p.Tq + i) * p.dv + c]));
    CHECK(e <= 1e-12);
  }
}

TEST_CASE("attention: fully masked rows give O = 0, lse = -inf and zero gradients, no NaN") {
  // batch 1's keys all masked; causal with Tq > Tk hides every key from the first Tq − Tk rows
  att_problem<double> p(2, 2, 20, 12, 3, 4, 5, /*causal=*/true, /*pad=*/true);
  for (std::size_t j = 0; j < p.Tk; ++j) p.keep[1 * p.Tk + j] = 0;
  std::vector<double> O, lse, dQ, dK, dV;
  run_forward(p, O, lse);
  const double ninf = -std::numeric_limits<double>::infinity();
  for (std::size_t h = 0; h < p.H; ++h)
    for (std::size_t i = 0; i < p.Tq; ++i) {
      CHECK(lse[(1 * p.H + h) * p.Tq + i] == ninf);
      for (std::size_t c = 0; c < p.dv; ++c) CHECK(O[((1 * p.H + h) * p.Tq + i) * p.dv + c] == 0.0);
    }
  for (std::size_t i = 0; i < p.Tq - p.Tk; ++i) CHECK(lse[i] == ninf);
  check_against_dense(p, 1e-12);
  const auto dO = upstream<double>(O.size(), 3);
  run_backward(p, O, lse, dO, dQ, dK, dV);
  for (std::size_t h = 0; h < p.H; ++h) {
    for (std::size_t x = 0; x < p.Tq * p.d; ++x) CHECK(dQ[(1 * p.H + h) * p.Tq * p.d + x] == 0.0);
    for (std::size_t x = 0; x < p.Tk * p.d; ++x) CHECK(dK[(1 * p.H + h) * p.Tk * p.d + x] == 0.0);
  }
  // all keys masked everywhere (and Tk = 0): no NaN
  att_problem<float> e(1, 1, 3, 0, 2, 2, 1);
  std::vector<float> Oe, le;
  run_forward(e, Oe, le);
  for (float x : Oe) CHECK(x == 0.0f);
  for (float x : le) CHECK(x == -std::numeric_limits<float>::infinity());
}

TEST_CASE("attention: a NaN at a hidden position leaves the gradients of rows and keys that never see it unchanged") {
  // Key padding: batch 0's padded keys hold NaN in K; batch 1 has every key padded, and NaN in one
  // row of Q and one row of dO. Gradients equal a run with finite values there, bit for bit (the
  // hidden values cannot matter), and batch 1's are exactly zero.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  att_problem<double> p(2, 2, 9, 9, 3, 4, 11, /*causal=*/false, /*pad=*/true);
  for (std::size_t j = 0; j < p.Tk; ++j) p.keep[1 * p.Tk + j] = 0;
  p.keep[0 * p.Tk + 2] = 0;
  p.keep[0 * p.Tk + 6] = 0;
  std::vector<double> O, lse, dQ, dK, dV, O2, lse2, dQ2, dK2, dV2;
  run_forward(p, O, lse);
  auto dO = upstream<double>(O.size(), 4);
  run_backward(p, O, lse, dO, dQ, dK, dV);
  auto q = p;
  for (std::size_t h = 0; h < p.H; ++h) {
    q.k[((0 * p.H + h) * p.Tk + 2) * p.d + 1] = nan;
    q.k[((0 * p.H + h) * p.Tk + 6) * p.d + 0] = nan;
    q.q[((1 * p.H + h) * p.Tq + 4) * p.d + 2] = nan;
  }
  run_forward(q, O2, lse2);
  CHECK(O2 == O);
  CHECK(lse2 == lse);
  for (std::size_t h = 0; h < p.H; ++h) dO[((1 * p.H + h) * p.Tq + 5) * p.dv + 1] = nan;
  run_backward(q, O2, lse2, dO, dQ2, dK2, dV2);
  const std::size_t half_q = p.H * p.Tq * p.d, half_k = p.H * p.Tk * p.d, half_v = p.H * p.Tk * p.dv;
  for (std::size_t x = 0; x < half_q; ++x) CHECK(dQ2[x] == dQ[x]);
  for (std::size_t x = 0; x < half_k; ++x) CHECK(dK2[x] == dK[x]);
  for (std::size_t x = 0; x < half_v; ++x) CHECK(dV2[x] == dV[x]);
  for (std::size_t x = half_q; x < dQ2.size(); ++x) CHECK(dQ2[x] == 0.0);
  for (std::size_t x = half_k; x < dK2.size(); ++x) CHECK(dK2[x] == 0.0);
  for (std::size_t x = half_v; x < dV2.size(); ++x) CHECK(dV2[x] == 0.0);

  // Causal, T = 130: NaN in key 70's K. Rows 0..69 never see it (their forward is finite), though
  // rows 64..69 share key 70's 64-key tile: their dQ equals the run with key 70 finite.
  att_problem<float> c(1, 1, 130, 130, 5, 3, 12, /*causal=*/true);
  std::vector<float> Oc, lc, dQc, dKc, dVc, Oc2, lc2, dQc2, dKc2, dVc2;
  run_forward(c, Oc, lc);
  const auto dOc = upstream<float>(Oc.size(), 6);
  run_backward(c, Oc, lc, dOc, dQc, dKc, dVc);
  auto cn = c;
  cn.k[70 * c.d + 3] = std::numeric_limits<float>::quiet_NaN();
  for (const std::size_t budget : {std::size_t{1} << 20, std::size_t{200000}}) {
    memsafe::options o;
    o.budget = budget;
    run_forward(cn, Oc2, lc2, o);
    for (std::size_t i = 0; i < 70; ++i) CHECK(lc2[i] == lc[i]);
    CHECK(std::isnan(lc2[70]));
    run_backward(cn, Oc2, lc2, dOc, dQc2, dKc2, dVc2, o);
    for (std::size_t x = 0; x < 70 * c.d; ++x) CHECK(dQc2[x] == dQc[x]);
    CHECK(std::isnan(dQc2[70 * c.d]));
  }
}

TEST_CASE("attention: gradients against central finite differences (f64, relative error <= 1e-6)") {
  // masks: key padding and a bias (its gradient checked too), [1, H, Tq, Tk] or the extents given
  struct cfg {
    std::size_t B, H, Tq, Tk, d, dv;
    bool causal, masks;
    std::size_t bias_b = 0, bias_h = 0;
    double drop = 0;
  };
  const cfg cfgs[] = {{1, 2, 9, 9, 3, 2, true, true},        {1, 1, 70, 70, 2, 3, false, false},
                      {1, 1, 5, 66, 3, 3, true, true},       {2, 2, 7, 9, 2, 2, false, true, 1, 1},
                      {2, 2, 8, 6, 2, 3, true, true, 2, 2},  {3, 2, 6, 70, 2, 2, true, true, 1, 2},
                      {1, 2, 9, 70, 3, 2, false, true, 0, 0, 0.3}, {2, 1, 66, 66, 2, 2, true, false, 0, 0, 0.5}};
  unsigned seed = 40;
  for (const auto& c : cfgs) {
    CAPTURE(c.B);
    CAPTURE(c.Tq);
    CAPTURE(c.causal);
    CAPTURE(c.bias_b);
    att_problem<double> p(c.B, c.H, c.Tq, c.Tk, c.d, c.dv, seed++, c.causal, c.masks, c.masks);
    if (c.bias_b) p.set_bias_extents(c.bias_b, c.bias_h, seed + 100);
    p.drop_p = c.drop;  // a fixed mask (the seed's): the loss is smooth in Q, K, V and the bias
    p.drop_seed = seed;
    CAPTURE(c.drop);
    std::vector<double> O, lse, dQ, dK, dV, dB;
    run_forward(p, O, lse);
    const auto G = upstream<double>(O.size(), seed++);
    run_backward(p, O, lse, G, dQ, dK, dV, {}, c.masks ? &dB : nullptr);
    auto loss = [&] {
      std::vector<double> o2, l2;
      run_forward(p, o2, l2);
      double L = 0;
      for (std::size_t x = 0; x < o2.size(); ++x) L += G[x] * o2[x];
      return L;
    };
    auto fd_check = [&](std::vector<double>& x, const std::vector<double>& g) {
      std::vector<double> fd(x.size());
      const double h = 1e-5;
      for (std::size_t e = 0; e < x.size(); ++e) {
        const double x0 = x[e];
        x[e] = x0 + h;
        const double lp = loss();
        x[e] = x0 - h;
        const double lm = loss();
        x[e] = x0;
        fd[e] = (lp - lm) / (2 * h);
      }
      double err = 0, sc = 0;
      for (std::size_t e = 0; e < x.size(); ++e) {
        err = std::max(err, std::fabs(g[e] - fd[e]));
        sc = std::max(sc, std::fabs(fd[e]));
      }
      CHECK(err / sc <= 1e-6);
    };
    fd_check(p.q, dQ);
    fd_check(p.k, dK);
    fd_check(p.v, dV);
    if (c.masks) fd_check(p.bias_buf, dB);
  }
}

TEST_CASE("attention: peak <= budget, results independent of the budget and threads, budget_error") {
  for (int causal = 0; causal < 2; ++causal) {
    att_problem<float> p(1, 3, 200, 200, 16, 8, 21 + causal, causal, true, true);
    std::vector<float> O0, l0, dQ0, dK0, dV0;
    auto s0 = run_forward(p, O0, l0, {memsafe::unlimited, 1});
    const auto dO = upstream<float>(O0.size(), 5);
    auto b0 = run_backward(p, O0, l0, dO, dQ0, dK0, dV0, {memsafe::unlimited, 1});
    CHECK(s0.tile_rows == 64);
    const std::size_t fmin = s0.min_budget_bytes, bmin = b0.min_budget_bytes;
    CHECK(fmin > 0);
    CHECK(bmin > fmin);
    // the minimums, asked before any work, are the ones the passes report and refuse below
    const memsafe::attention_minimums mins = memsafe::attention_minimum_bytes(p.expr());
    CHECK(mins.forward == fmin);
    CHECK(mins.backward == bmin);
    for (std::size_t budget : {fmin, fmin + 1000, 3 * fmin, bmin, bmin * 3, std::size_t(1) << 20, memsafe::unlimited})
      for (unsigned threads : {1u, 2u, 3u}) {
        CAPTURE(budget);
        CAPTURE(threads);
        std::vector<float> O, l, dQ, dK, dV;
        auto s = run_forward(p, O, l, {budget, threads});
        CHECK(s.peak_temp_bytes <= budget);
        CHECK(s.peak_temp_bytes == s.planned_temp_bytes);
        CHECK(O == O0);
        CHECK(l == l0);
        if (budget < bmin) {
          CHECK_THROWS_AS(run_backward(p, O0, l0, dO, dQ, dK, dV, {budget, threads}), memsafe::budget_error);
          continue;
        }
        auto sb = run_backward(p, O0, l0, dO, dQ, dK, dV, {budget, threads});
        CHECK(sb.peak_temp_bytes <= budget);
        CHECK(dQ == dQ0);
        CHECK(dK == dK0);
        CHECK(dV == dV0);
      }
    // below the minimum: budget_error naming it, before any output is written
    std::vector<float> O(O0.size(), 42.0f), l(l0.size(), 42.0f);
    try {
      memsafe::eval_into(p.expr(), memsafe::heads(O.data(), p.B, p.H, p.Tq, p.dv), l.data(), {fmin - 1, 2});
      FAIL("no budget_error");
    } catch (const memsafe::budget_error& e) {
      CHECK(e.minimum_bytes == fmin);
      CHECK(e.budget_bytes == fmin - 1);
    }
    for (float x : O) CHECK(x == 42.0f);
    std::vector<float> dQ, dK, dV;
    try {
      run_backward(p, O0, l0, dO, dQ, dK, dV, {bmin - 1, 2});
      FAIL("no budget_error");
    } catch (const memsafe::budget_error& e) {
      CHECK(e.minimum_bytes == bmin);
    }
  }
}

TEST_CASE("attention: fewer heads than threads: the backward's two passes give one pass's bits") {
  struct shape { std::size_t H, Tq, Tk; };
  // one head (Tq = Tk, more queries than keys, fewer), and two heads on up to four threads
  const shape shapes[] = {{1, 200, 200}, {1, 150, 70}, {1, 40, 300}, {2, 130, 130}};
  unsigned seed = 40;
  for (const auto& sh : shapes)
    for (int causal = 0; causal < 2; ++causal) {
      CAPTURE(sh.H);
      CAPTURE(sh.Tq);
      CAPTURE(sh.Tk);
      CAPTURE(causal);
      att_problem<double> p(1, sh.H, sh.Tq, sh.Tk, 16, 8, seed++, causal, true, true);
      std::vector<double> O, l, dQ0, dK0, dV0;
      const auto sf = run_forward(p, O, l, {memsafe::unlimited, 1});
      const auto dO = upstream<double>(O.size(), seed);
      const auto s1 = run_backward(p, O, l, dO, dQ0, dK0, dV0, {memsafe::unlimited, 1});
      CHECK(s1.plan.reduction.find("one pass") != std::string::npos);
      CHECK(!s1.plan.isa.empty());
      CHECK(s1.plan.isa == sf.plan.isa);
      // the one-pass result against the dense reference
      std::vector<double> dQr, dKr, dVr;
      dense_backward(p, dO, dQr, dKr, dVr);
      CHECK(max_abs_diff(dQ0, dQr) <= 1e-12);
      CHECK(max_abs_diff(dK0, dKr) <= 1e-12);
      CHECK(max_abs_diff(dV0, dVr) <= 1e-12);
      const std::size_t bmin = s1.min_budget_bytes;
      for (std::size_t budget : {bmin, 2 * bmin + 100, memsafe::unlimited})
        for (unsigned threads : {2u, 3u, 4u}) {
          CAPTURE(budget);
          CAPTURE(threads);
          std::vector<double> dQ, dK, dV;
          const auto s = run_backward(p, O, l, dO, dQ, dK, dV, {budget, threads});
          CHECK(s.peak_temp_bytes <= budget);
          CHECK(s.peak_temp_bytes == s.planned_temp_bytes);
          // two passes exactly when they are cheaper: ceil(H / P1) · 5 > 7 · H / P2 (P1 ≤ H workers
          // in one pass, P2 in two); one worker fits the minimum budget, so it stays one pass there
          const bool two = s.plan.reduction.find("two passes") != std::string::npos;
          CHECK(two == (budget != bmin && s.threads > sh.H));
          if (budget == bmin) CHECK(s.threads == 1);
          CHECK(dQ == dQ0);
          CHECK(dK == dK0);
          CHECK(dV == dV0);
        }
    }
}

TEST_CASE("attention: the bias gradient, summed over the heads that share the bias, the same bits at every budget") {
  struct ext { std::size_t b, h; };
  const ext exts[] = {{1, 1}, {1, 3}, {2, 1}, {2, 3}};  // [1 or B, 1 or H, Tq, Tk] for B = 2, H = 3
  unsigned seed = 70;
  for (const auto& e : exts)
    for (int causal = 0; causal < 2; ++causal) {
      CAPTURE(e.b);
      CAPTURE(e.h);
      CAPTURE(causal);
      att_problem<double> p(2, 3, 100, 130, 8, 4, seed++, causal, true, true);
      p.set_bias_extents(e.b, e.h, seed++);
      p.bias_buf[p.bias_index(0, 0, 5, 7)] = -std::numeric_limits<double>::infinity();  // a masking bias entry
      std::vector<double> O, l, dQ0, dK0, dV0, dB0;
      run_forward(p, O, l, {memsafe::unlimited, 1});
      const auto dO = upstream<double>(O.size(), seed);
      const auto s1 = run_backward(p, O, l, dO, dQ0, dK0, dV0, {memsafe::unlimited, 1}, &dB0);
      std::vector<double> dQr, dKr, dVr, dBr;
      dense_backward(p, dO, dQr, dKr, dVr, &dBr);
      CHECK(max_abs_diff(dB0, dBr) <= 1e-12);
      CHECK(max_abs_diff(dQ0, dQr) <= 1e-12);
      CHECK(dB0[p.bias_index(0, 0, 5, 7)] == 0.0);
      if (causal) CHECK(dB0[p.bias_index(0, 0, 0, p.Tk - 1)] == 0.0);  // key Tk − 1 hidden from query 0
      // the gradients of Q, K and V do not depend on whether dBias is asked for
      std::vector<double> dQ, dK, dV, dB;
      run_backward(p, O, l, dO, dQ, dK, dV, {memsafe::unlimited, 1});
      CHECK(dQ == dQ0);
      CHECK(dK == dK0);
      CHECK(dV == dV0);
      for (std::size_t budget : {s1.min_budget_bytes, 3 * s1.min_budget_bytes, memsafe::unlimited})
        for (unsigned threads : {2u, 3u, 4u}) {
          CAPTURE(budget);
          CAPTURE(threads);
          const auto s = run_backward(p, O, l, dO, dQ, dK, dV, {budget, threads}, &dB);
          CHECK(s.peak_temp_bytes <= budget);
          CHECK(dB == dB0);
          CHECK(dQ == dQ0);
          CHECK(dK == dK0);
          CHECK(dV == dV0);
        }
    }
  // misuse: no bias in the scores, or dBias of other extents than the bias's
  att_problem<double> nb(1, 2, 5, 6, 3, 3, 1);
  std::vector<double> O, l, dQ, dK, dV, dB(2 * 5 * 6);
  run_forward(nb, O, l);
  const auto dO = upstream<double>(O.size(), 2);
  dQ.resize(nb.B * nb.H * nb.Tq * nb.d);
  dK.resize(nb.B * nb.H * nb.Tk * nb.d);
  dV.resize(nb.B * nb.H * nb.Tk * nb.dv);
  auto call = [&](const att_problem<double>& p, std::size_t bb, std::size_t bh) {
    memsafe::attention_backward(p.expr(), memsafe::heads(O.data(), p.B, p.H, p.Tq, p.dv), l.data(),
                                memsafe::heads(dO.data(), p.B, p.H, p.Tq, p.dv),
                                memsafe::heads(dQ.data(), p.B, p.H, p.Tq, p.d),
                                memsafe::heads(dK.data(), p.B, p.H, p.Tk, p.d),
                                memsafe::heads(dV.data(), p.B, p.H, p.Tk, p.dv),
                                memsafe::heads(dB.data(), bb, bh, p.Tq, p.Tk));
  };
  CHECK_THROWS_WITH_AS(call(nb, 1, 2), doctest::Contains("no bias"), memsafe::argument_error);
  att_problem<double> wb(1, 2, 5, 6, 3, 3, 1, false, false, true);  // bias [1, 2, 5, 6]
  CHECK_NOTHROW(call(wb, 1, 2));
  CHECK_THROWS_WITH_AS(call(wb, 1, 1), doctest::Contains("dBias is [1, 1, 5, 6] but must be [1, 2, 5, 6]"),
                       memsafe::shape_error);
}

TEST_CASE("attention: randomised shapes, masks, biases, layouts, budgets and threads against dense (f64)") {
  // Drawn per case: B (1–2), H (1–3), Tq and Tk (across the 64-key blocks and the row blocks; Tk = 0
  // too), d and dv (1–20), causal, key padding, a bias of random extents [1 or B, 1 or H, Tq, Tk]
  // (sometimes with −inf entries), dropout (0, 0.1, 0.5), the fused [B, T, 3, H, d] layout where it applies, the budget
  // (the minimum, a random larger one, unlimited) and 1–4 threads. Checked: O, lse, dQ, dK, dV and
  // dBias against the dense reference; peak ≤ budget; every result bitwise equal to the same case
  // at one thread and no limit. MEMSAFE_ATTENTION_FUZZ_SECONDS (default 2) bounds the time after 16
  // cases; MEMSAFE_ATTENTION_FUZZ_CASE=i runs case i alone (a failure names it).
  const char* env_s = std::getenv("MEMSAFE_ATTENTION_FUZZ_SECONDS");
  const double seconds = env_s && *env_s ? std::strtod(env_s, nullptr) : 2.0;
  const char* only = std::getenv("MEMSAFE_ATTENTION_FUZZ_CASE");
  const bool one = only && *only;
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t cases = 0;
  for (unsigned i = one ? static_cast<unsigned>(std::strtoul(only, nullptr, 10)) : 0;; ++i) {
    if (one ? cases == 1
            : cases >= 16 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds)
      break;
    ++cases;
    std::mt19937_64 g(0x3c6ef372u + i);
    auto pick = [&g](std::initializer_list<std::size_t> v) { return *(v.begin() + g() % v.size()); };
    auto coin = [&g](unsigned in) { return g() % in == 0; };  // true with probability 1/in
    const std::size_t B = pick({1, 2}), H = pick({1, 2, 3});
    const std::size_t Tq = pick({1, 2, 5, 63, 64, 65, 100, 129, 150});
    const std::size_t Tk = pick({0, 1, 3, 63, 64, 65, 128, 130, 150});
    const std::size_t d = pick({1, 2, 3, 7, 16, 20}), dv = pick({1, 2, 5, 8, 17, 20});
    const bool causal = coin(2), pad = coin(2), bias = coin(2);
    const bool fused = Tq == Tk && d == dv && coin(3);
    att_problem<double> p(B, H, Tq, Tk, d, dv, 500 + i, causal, pad, bias, fused);
    p.drop_p = pick({0, 0, 1, 5}) / 10.0;  // dropout 0, 0.1 or 0.5
    p.drop_seed = g();
    if (bias) {
      p.set_bias_extents(coin(2) ? 1 : B, coin(2) ? 1 : H, 900 + i);
      if (!p.bias_buf.empty() && coin(3))
        for (std::size_t e = 0; e < p.bias_buf.size(); e += 1 + g() % 7) p.bias_buf[e] = -std::numeric_limits<double>::infinity();
    }
    CAPTURE(i);
    CAPTURE(B);
    CAPTURE(H);
    CAPTURE(Tq);
    CAPTURE(Tk);
    CAPTURE(d);
    CAPTURE(dv);
    CAPTURE(causal);
    CAPTURE(pad);
    CAPTURE(p.bB);
    CAPTURE(p.bH);
    CAPTURE(fused);
    CAPTURE(p.drop_p);
    std::vector<double> O0, l0, dQ0, dK0, dV0, dB0;
    const auto sf = run_forward(p, O0, l0, {memsafe::unlimited, 1});
    const auto dO = upstream<double>(O0.size(), 7 + i);
    const auto sb = run_backward(p, O0, l0, dO, dQ0, dK0, dV0, {memsafe::unlimited, 1}, bias ? &dB0 : nullptr);
    std::vector<double> Or, lr, dQr, dKr, dVr, dBr;
    dense_forward(p, Or, lr);
    dense_backward(p, dO, dQr, dKr, dVr, bias ? &dBr : nullptr);
    CHECK(max_abs_diff(O0, Or) <= 1e-12);
    CHECK(max_abs_diff(l0, lr) <= 1e-12);
    CHECK(max_abs_diff(dQ0, dQr) <= 1e-12);
    CHECK(max_abs_diff(dK0, dKr) <= 1e-12);
    CHECK(max_abs_diff(dV0, dVr) <= 1e-12);
    if (bias) CHECK(max_abs_diff(dB0, dBr) <= 1e-11);
    const unsigned threads = 1 + static_cast<unsigned>(g() % 4);
    const int which = static_cast<int>(g() % 3);
    // a minimum of 0 (Tk = 0: no temporaries) is run at the smallest budget there is, 1 byte
    const std::size_t fmin = std::max<std::size_t>(sf.min_budget_bytes, 1), bmin = std::max<std::size_t>(sb.min_budget_bytes, 1);
    const std::size_t fb = which == 0 ? fmin : which == 1 ? fmin + g() % (4 * fmin) : memsafe::unlimited;
    const std::size_t bb = which == 0 ? bmin : which == 1 ? bmin + g() % (4 * bmin) : memsafe::unlimited;
    CAPTURE(threads);
    CAPTURE(fb);
    CAPTURE(bb);
    std::vector<double> O, l, dQ, dK, dV, dB;
    const auto sf2 = run_forward(p, O, l, {fb, threads});
    const auto sb2 = run_backward(p, O, l, dO, dQ, dK, dV, {bb, threads}, bias ? &dB : nullptr);
    CHECK(sf2.peak_temp_bytes <= fb);
    CHECK(sb2.peak_temp_bytes <= bb);
    CHECK(O == O0);
    CHECK(l == l0);
    CHECK(dQ == dQ0);
    CHECK(dK == dK0);
    CHECK(dV == dV0);
    CHECK(dB == dB0);
  }
  MESSAGE(cases << " random attention cases");
}

TEST_CASE("attention: dropout keeps 1 - p of the weights, the same mask in the forward and the backward") {
  // the keep rate over 2·3·300·300 = 540,000 weights, within 5 standard deviations
  for (double pd : {0.1, 0.5, 0.9}) {
    const auto dr = memsafe::dropout(pd, 12345);
    std::size_t kept = 0, total = 0;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t h = 0; h < 3; ++h)
        for (std::size_t i = 0; i < 300; ++i)
          for (std::size_t j = 0; j < 300; ++j, ++total) kept += memsafe::dropout_keeps(dr, b, h, i, j);
    const double rate = double(kept) / double(total), sd = std::sqrt(pd * (1 - pd) / double(total));
    CAPTURE(pd);
    CHECK(std::fabs(rate - (1 - pd)) <= 5 * sd);
  }
  // another seed, another mask: about p·(1 − p)·2 of the decisions differ
  {
    const auto d1 = memsafe::dropout(0.5, 1), d2 = memsafe::dropout(0.5, 2);
    std::size_t diff = 0;
    for (std::size_t i = 0; i < 200; ++i)
      for (std::size_t j = 0; j < 200; ++j) diff += memsafe::dropout_keeps(d1, 0, 0, i, j) != memsafe::dropout_keeps(d2, 0, 0, i, j);
    CHECK(diff > 19000);
    CHECK(diff < 21000);
  }
  // f32, causal, padding and bias with dropout against the dense reference (same mask by dropout_keeps)
  att_problem<float> p(2, 2, 100, 100, 16, 16, 77, true, true, true);
  p.drop_p = 0.2;
  p.drop_seed = 99;
  check_against_dense(p, 5e-5);
  // p = 0 is no dropout, bit for bit
  att_problem<double> q(1, 2, 70, 90, 4, 3, 5, false, true, true);
  std::vector<double> O0, l0, dQ0, dK0, dV0, O1, l1, dQ1, dK1, dV1;
  run_forward(q, O0, l0);
  const auto dO = upstream<double>(O0.size(), 4);
  run_backward(q, O0, l0, dO, dQ0, dK0, dV0);
  std::vector<double> O2(O0.size()), l2(l0.size());
  memsafe::eval_into(memsafe::softmax_sum(q.scale * memsafe::dot(q.Q(), q.K()) +
                                              memsafe::heads(static_cast<const double*>(q.bias_buf.data()), 1, 2, 70, 90) +
                                              memsafe::key_padding(q.keep.data(), 1, 90),
                                          q.V(), memsafe::dropout(0.0, 7)),
                     memsafe::heads(O2.data(), 1, 2, 70, 3), l2.data());
  CHECK(O2 == O0);
  CHECK(l2 == l0);
  // the logsumexp is the undropped one: dropout changes O, not lse
  q.drop_p = 0.5;
  run_forward(q, O1, l1);
  CHECK(l1 == l0);
  CHECK(O1 != O0);
  // p outside [0, 1): argument_error
  for (double bad : {-0.1, 1.0, 1.5, std::nan("")}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(memsafe::dropout(bad, 1), memsafe::argument_error);
  }
  CHECK_THROWS_WITH_AS(memsafe::softmax_sum(q.scale * memsafe::dot(q.Q(), q.K()), q.V(), memsafe::dropout_spec{1.0, 1}),
                       doctest::Contains("p must be in [0, 1)"), memsafe::argument_error);
}

TEST_CASE("attention: explain shows the kernels and the forward and backward plans, or why they do not fit") {
  att_problem<float> p(2, 3, 300, 300, 16, 16, 3, true, false, true);  // bias [1, 3, 300, 300]
  const std::string e = memsafe::explain(p.expr(), {memsafe::unlimited, 2});
  CAPTURE(e);
  CHECK(e.find("as written:   softmax_sum(") != std::string::npos);
  CHECK(e.find("+ causal") != std::string::npos);
  CHECK(e.find("kernels:      ") != std::string::npos);
  CHECK(e.find("forward:      online softmax") != std::string::npos);
  CHECK(e.find("backward:     recomputed tiles in one pass per head") != std::string::npos);
  CHECK(e.find("with dBias:   ") != std::string::npos);
  CHECK(e.find("3 bias slices of 2 heads each") != std::string::npos);
  // the plans explain shows are the ones that run
  std::vector<float> O, l, dQ, dK, dV, dB;
  const auto sf = run_forward(p, O, l, {memsafe::unlimited, 2});
  CHECK(e.find("kernels:      " + sf.plan.isa) != std::string::npos);
  CHECK(e.find("minimum " + memsafe::format_bytes(sf.min_budget_bytes)) != std::string::npos);
  CHECK(e.find("temporaries " + memsafe::format_bytes(sf.planned_temp_bytes) + " planned") != std::string::npos);
  const auto dO = upstream<float>(O.size(), 1);
  const auto sb = run_backward(p, O, l, dO, dQ, dK, dV, {memsafe::unlimited, 2});
  CHECK(e.find("temporaries " + memsafe::format_bytes(sb.planned_temp_bytes) + " planned") != std::string::npos);
  // one head on two threads: two passes
  att_problem<float> one(1, 1, 300, 300, 16, 16, 3);
  CHECK(memsafe::explain(one.expr(), {memsafe::unlimited, 2}).find("backward:     recomputed tiles in two passes") !=
        std::string::npos);
  // below the minimum: no plan, the minimum named, nothing thrown
  const std::string small = memsafe::explain(p.expr(), {1000, 2});
  CAPTURE(small);
  CHECK(small.find("forward:      does not fit") != std::string::npos);
  CHECK(small.find("backward:     does not fit") != std::string::npos);
  CHECK(small.find(memsafe::format_bytes(sf.min_budget_bytes)) != std::string::npos);
}

TEST_CASE("attention: causal tiles above the diagonal are skipped") {
  att_problem<float> full(1, 2, 640, 640, 8, 8, 3), causal(1, 2, 640, 640, 8, 8, 3, true);
  std::vector<float> O, l;
  auto sf = run_forward(full, O, l, {memsafe::unlimited, 1});
  auto sc = run_forward(causal, O, l, {memsafe::unlimited, 1});
  CHECK(sf.num_tiles == 2 * 10 * 10);
  CHECK(sc.num_tiles == 2 * 55);  // row block r meets key blocks 0..r
}

TEST_CASE("attention: shape and argument errors") {
  std::vector<double> a(2 * 3 * 5 * 4), b(2 * 3 * 6 * 4), o(2 * 3 * 5 * 4), lse(2 * 3 * 5);
  auto Q = memsafe::heads(a.data(), 2, 3, 5, 4);
  auto K = memsafe::heads(b.data(), 2, 3, 6, 4);
  auto Kd = memsafe::heads(b.data(), 2, 3, 4, 6);       // d = 6
  auto Vbad = memsafe::heads(a.data(), 2, 3, 5, 4);     // 5 keys, K has 6
  CHECK_THROWS_AS(memsafe::dot(Q, Kd), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::softmax_sum(memsafe::dot(Q, K), Vbad), memsafe::shape_error);
  auto A = memsafe::softmax_sum(memsafe::dot(Q, K), memsafe::heads(b.data(), 2, 3, 6, 4));
  CHECK_THROWS_AS(memsafe::eval_into(A, memsafe::heads(o.data(), 2, 3, 4, 5), lse.data()), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::dot(Q, K) + memsafe::heads(o.data(), 1, 3, 5, 4), memsafe::shape_error);  // bias Tk
  std::vector<unsigned char> keep(2 * 5, 1);
  CHECK_THROWS_AS(memsafe::dot(Q, K) + memsafe::key_padding(keep.data(), 2, 5), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::dot(Q, K) + memsafe::causal + memsafe::causal, memsafe::argument_error);
  std::vector<double> bias(3 * 5 * 6);
  auto biased = memsafe::dot(Q, K) + memsafe::heads(bias.data(), 1, 3, 5, 6);
  CHECK_THROWS_AS(2.0 * biased, memsafe::argument_error);  // the scale goes on the product
  CHECK_THROWS_AS(memsafe::attention_backward(A, memsafe::heads(o.data(), 2, 3, 5, 4), nullptr,
                                              memsafe::heads(o.data(), 2, 3, 5, 4),
                                              memsafe::heads(o.data(), 2, 3, 5, 4),
                                              memsafe::heads(b.data(), 2, 3, 6, 4),
                                              memsafe::heads(b.data(), 2, 3, 6, 4)),
                  memsafe::argument_error);
  std::vector<double> dk(2 * 3 * 5 * 4);
  CHECK_THROWS_AS(memsafe::attention_backward(A, memsafe::heads(o.data(), 2, 3, 5, 4), lse.data(),
                                              memsafe::heads(o.data(), 2, 3, 5, 4),
                                              memsafe::heads(o.data(), 2, 3, 5, 4),
                                              memsafe::heads(dk.data(), 2, 3, 5, 4),  // dK needs Tk = 6
                                              memsafe::heads(b.data(), 2, 3, 6, 4)),
                  memsafe::shape_error);
}

TEST_CASE("attention: self-overlapping outputs, a non-finite V and a scale too large for T are refused") {
  std::vector<double> q(2 * 2 * 5 * 4, 0.25), k(2 * 2 * 6 * 4, 0.5), v(2 * 2 * 6 * 3, 1.0), o(2 * 2 * 5 * 3, 7.0),
      lse(2 * 2 * 5, 7.0);
  auto Q = memsafe::heads(q.data(), 2, 2, 5, 4);
  auto K = memsafe::heads(k.data(), 2, 2, 6, 4);
  auto V = memsafe::heads(v.data(), 2, 2, 6, 3);
  auto A = memsafe::softmax_sum(0.5 * memsafe::dot(Q, K) + memsafe::causal, V);
  const memsafe::options two{.budget = {}, .threads = 2};
  // O with a batch stride of 0: both batches' rows would be written into one place by two workers
  const memsafe::heads_view<double> Obcast(o.data(), 2, 2, 5, 3, 0, 5 * 3, 3, 1);
  CHECK_THROWS_WITH_AS(memsafe::eval_into(A, Obcast, lse.data(), two),
                       doctest::Contains("the output O's elements share memory with one another"),
                       memsafe::argument_error);
  // rows folded onto each other (row stride 1 < d = 3): refused too; nothing was written
  const memsafe::heads_view<double> Ofold(o.data(), 2, 2, 5, 3, 2 * 5 * 3, 5 * 3, 1, 1);
  CHECK_THROWS_AS(memsafe::eval_into(A, Ofold, lse.data(), two), memsafe::argument_error);
  for (double x : o) CHECK(x == 7.0);
  for (double x : lse) CHECK(x == 7.0);
  // V non-finite at a key the first rows cannot see (causal, Tk − Tq = 1: row 0 sees keys 0 and 1):
  // refused, named, before any work
  v[((1 * 2 + 1) * 6 + 5) * 3 + 2] = std::numeric_limits<double>::infinity();
  auto O = memsafe::heads(o.data(), 2, 2, 5, 3);
  CHECK_THROWS_WITH_AS(memsafe::eval_into(A, O, lse.data()), doctest::Contains("V[1, 1, 5, 2] is inf"),
                       memsafe::argument_error);
  v[((1 * 2 + 1) * 6 + 5) * 3 + 2] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(memsafe::eval_into(A, O, lse.data()), memsafe::argument_error);
  for (double x : o) CHECK(x == 7.0);
  v[((1 * 2 + 1) * 6 + 5) * 3 + 2] = 1.0;
  memsafe::eval_into(A, O, lse.data());
  for (double x : o) CHECK(x == doctest::Approx(1.0));  // every value 1: O = 1 wherever a key is seen
  // the backward: a non-finite V is refused there too; a dQ whose heads share memory too
  std::vector<double> dO(o.size(), 0.5), dq(q.size()), dk(k.size()), dv(v.size());
  auto dQ = memsafe::heads(dq.data(), 2, 2, 5, 4);
  auto dK = memsafe::heads(dk.data(), 2, 2, 6, 4);
  auto dV = memsafe::heads(dv.data(), 2, 2, 6, 3);
  const auto backward = [&](memsafe::heads_view<double> dq_view) {
    memsafe::attention_backward(A, memsafe::heads(o.data(), 2, 2, 5, 3), lse.data(),
                                memsafe::heads(dO.data(), 2, 2, 5, 3), dq_view, dK, dV, two);
  };
  backward(dQ);
  v[7] = -std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH_AS(backward(dQ), doctest::Contains("V[0, 0, 2, 1] is -inf"), memsafe::argument_error);
  v[7] = 1.0;
  CHECK_THROWS_AS(backward(memsafe::heads_view<double>(dq.data(), 2, 2, 5, 4, 2 * 5 * 4, 0, 4, 1)),
                  memsafe::argument_error);
  // the scale: each factor finite and so is their product, in the value type
  CHECK_THROWS_AS(1e200 * (1e200 * memsafe::dot(Q, K)), memsafe::argument_error);
  std::vector<float> qf(2 * 2 * 5 * 4), kf(2 * 2 * 6 * 4);
  auto Qf = memsafe::heads(qf.data(), 2, 2, 5, 4);
  auto Kf = memsafe::heads(kf.data(), 2, 2, 6, 4);
  CHECK_THROWS_AS(1e39 * memsafe::dot(Qf, Kf), memsafe::argument_error);  // finite as a double, not a float
  CHECK_NOTHROW(3e38 * memsafe::dot(Qf, Kf));
  CHECK_THROWS_AS(memsafe::dot(Qf, Kf) / 1e-40, memsafe::argument_error);
}
}  // TEST_SUITE

TEST_CASE("attention: the AVX-512 and AVX2 kernels give the same bits, the portable loop agrees to rounding") {
  namespace host = memsafe::host;
  const char* old = std::getenv("MEMSAFE_ISA");
  const std::string saved = old ? old : "";
  const auto restore = [&] {
    if (old) ::setenv("MEMSAFE_ISA", saved.c_str(), 1);
    else ::unsetenv("MEMSAFE_ISA");
  };
  // d = 40, dv = 24: 64-byte column blocks in odd numbers (the AVX-512 kernel's one-register tail).
  att_problem<float> p(1, 2, 150, 150, 40, 24, 31, true, true, true);
  struct out {
    std::vector<float> O, l, dQ, dK, dV;
  };
  std::vector<std::pair<std::string, out>> runs;
  for (host::isa i : {host::isa::avx512, host::isa::avx2, host::isa::portable}) {
    if (i != host::isa::portable && !(host::isa_compiled & host::cpu_isas() & host::isa_bit(i))) {
      MESSAGE("skipped: the " << std::string(host::isa_name(i)) << " attention kernel (not on this CPU / build)");
      continue;
    }
    ::setenv("MEMSAFE_ISA", host::isa_name(i), 1);
    out o;
    run_forward(p, o.O, o.l, {memsafe::unlimited, 2});
    const auto dO = upstream<float>(o.O.size(), 9);
    run_backward(p, o.O, o.l, dO, o.dQ, o.dK, o.dV, {memsafe::unlimited, 2});
    runs.emplace_back(host::isa_name(i), std::move(o));
  }
  restore();
  REQUIRE(!runs.empty());
  const out& ref = runs.back().second;  // portable
  for (const auto& run : runs) {
    const std::string& name = run.first;  // not a structured binding: CAPTURE's lambda takes it
    const out& o = run.second;
    CAPTURE(name);
    const auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
      REQUIRE(a.size() == b.size());
      for (std::size_t q = 0; q < a.size(); ++q)
        if (std::isfinite(b[q])) CHECK(std::fabs(a[q] - b[q]) <= 2e-5f * (1 + std::fabs(b[q])));
        else CHECK(a[q] == b[q]);
    };
    close(o.O, ref.O);
    close(o.l, ref.l);
    close(o.dQ, ref.dQ);
    close(o.dK, ref.dK);
    close(o.dV, ref.dV);
  }
  if (runs.size() == 3) {  // avx512 and avx2: every product one FMA in the same order
    CHECK(runs[0].second.O == runs[1].second.O);
    CHECK(runs[0].second.l == runs[1].second.l);
    CHECK(runs[0].second.dQ == runs[1].second.dQ);
    CHECK(runs[0].second.dK == runs[1].second.dK);
    CHECK(runs[0].second.dV == runs[1].second.dV);
  }
}
