// The fused k-nearest selection (backend/host/select_driver.hpp, backend/host/select.hpp) against the portable
// tile path (MEMSAFE_KERNELS=reference) and against an independent dense reference in double:
// indices equal, values bitwise equal, at every budget, on awkward data (ties, NaN, inf, values
// whose squares overflow, zero vectors), for every formula × reduction the fused kernels cover,
// both precisions, and on every instruction set of the kernels this CPU runs (forced with
// MEMSAFE_ISA; the others are skipped with a message, tests/test_isa.cpp) — with the FP32 screen
// and, on AVX-512 where the CPU has AVX512-BF16, with the bfloat16 screen forced at every d
// (MEMSAFE_SCREEN=bf16) and where it has AMX-BF16 with the AMX screen (MEMSAFE_SCREEN=amx; a case
// of its own has the ≥ 32 query rows its blocks need), on AVX2 with the int16 screen forced at
// every d (MEMSAFE_SCREEN=i16; on AVX-VNNI where the CPU has it, and a case compares that kernel
// with VPMADDWD's) —
// both for float sqdist; the other formulas and double keep the FP32 screen.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memsafe/memsafe.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "reference.hpp"
#include "sweep.hpp"

using namespace ref;

namespace {

namespace host = memsafe::host;

using ref::scoped_env;

/// Evaluate with the portable tile path only (restores the environment afterwards).
template <class X>
auto eval_reference(const X& x, const memsafe::options& o) {
  scoped_env e("MEMSAFE_KERNELS", "reference");
  return memsafe::eval(x, o);
}

bool fused(const memsafe::tile_plan& p) { return p.reduction.find("fused: screened") != std::string::npos; }

/// The instruction sets of the fused kernels this CPU (and this build) runs, best first.
std::vector<host::isa> fused_isas() {
  std::vector<host::isa> v;
  for (host::isa i : {host::isa::avx512, host::isa::avx2})
    if (host::isa_compiled & host::cpu_isas() & host::isa_bit(i)) v.push_back(i);
  return v;
}

/// The screens to force on instruction set i: fp32, bf16 and amx where this CPU runs them
/// (AVX-512), i16 on AVX2.
std::vector<const char*> screens(host::isa i) {
  std::vector<const char*> v{"fp32"};
  if (i == host::isa::avx512 && host::cpu_has_avx512bf16()) v.push_back("bf16");
  if (i == host::isa::avx512 && host::cpu_has_amx_bf16()) v.push_back("amx");
  if (i == host::isa::avx2) v.push_back("i16");
  return v;
}

/// The fused result equals the reference path's at every budget, on every instruction set this CPU
/// runs (and is taken when one is available, the best by default), with every screen it runs.
template <class X>
void same_as_reference(const X& x, const std::string& what) {
  INFO(what);
  scoped_env unset("MEMSAFE_ISA", nullptr);
  const auto want = eval_reference(x, memsafe::options{memsafe::unlimited, 1});
  CHECK_FALSE(fused(want.stats.plan));
  CHECK(want.stats.plan.isa == "portable");
  const host::isa best = host::best_isa(host::isa_compiled & host::cpu_isas());
  const auto dflt = memsafe::plan_for(x);
  CHECK(fused(dflt) == (best != host::isa::portable));
  CHECK(dflt.isa == host::isa_name(best));
  for (host::isa i : fused_isas()) {
    INFO("MEMSAFE_ISA=" << std::string(host::isa_name(i)));
    scoped_env force("MEMSAFE_ISA", host::isa_name(i));
    CHECK(memsafe::plan_for(x).isa == host::isa_name(i));
    for (const char* s : screens(i)) {
      INFO("MEMSAFE_SCREEN=" << std::string(s));
      scoped_env screen("MEMSAFE_SCREEN", s);
      // bf16 and amx apply to float sqdist, cosine and dot, i16 to float sqdist only
      const std::string sn(s);
      const bool paired = sn != "fp32" && std::is_same_v<typename X::value_type, float> &&
                          (what.find("sqdist") != std::string::npos ||
                           (sn != "i16" && (what.find("cosine") != std::string::npos ||
                                            what.find("dot") != std::string::npos)));
      const std::size_t fmin = fused_min_budget(x);
      CHECK(fmin > 0);
      for (const auto& r : eval_all(x)) {
        CHECK(fused(r.stats.plan) == r.stats.plan.fused);
        if (ran_fused(r, fmin)) {  // below the fused kernels' minimum the tile loop runs: the same bits
          CHECK(r.stats.plan.isa == host::isa_name(i));
          const char* own = sizeof(typename X::value_type) == 8 ? "fp64" : "fp32";  // the value type's precision
          CHECK(r.stats.plan.screen == (paired ? s : own));
        }
        CHECK(r.indices == want.indices);
        CHECK(identical(r.values, want.values));
      }
    }
  }
}

/// Scatter special values over a data set.
template <class T>
void spoil(std::vector<T>& v, std::size_t d, unsigned seed) {
  const T specials[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::max() / T(8), T(1e18), T(0)};
  const std::size_t rows = v.size() / d;
  for (std::size_t q = 0; q < 12; ++q) {
    const std::size_t i = (seed * 7919u + q * 104729u) % rows;
    v[i * d + (q % d)] = specials[q % 6];
    if (q % 3 == 0)
      for (std::size_t k = 0; k < d; ++k) v[i * d + k] = T(0);  // zero vectors (cosine: distance 1)
  }
}

/// A data set of the selection tests, n query rows and m points of dimension d, and its name.
/// `offset`: added to every coordinate (data far from the origin: the sqdist screen runs about each
/// row block's centre, select.hpp); `scale`: then multiplied with it.
template <class T>
struct data_set {
  std::vector<T> x, y;
  std::string tag;
  data_set(std::size_t n, std::size_t m, std::size_t d, std::size_t k, bool integer, bool special, double offset,
           double scale = 1)
      : x(cast<T>(data(n, d, 3 + unsigned(d), integer))), y(cast<T>(data(m, d, 5 + unsigned(d), integer))) {
    for (T& v : x) v = T((v + offset) * scale);
    for (T& v : y) v = T((v + offset) * scale);
    if (special) {
      spoil(x, d, 1);
      spoil(y, d, 2);
    }
    tag = std::string(sizeof(T) == 4 ? "f32" : "f64") + " n=" + std::to_string(n) + " m=" + std::to_string(m) +
          " d=" + std::to_string(d) + " k=" + std::to_string(k) + (integer ? " integer" : "") +
          (special ? " special" : "") + (offset != 0 ? " offset=" + std::to_string(offset) : "") +
          (scale != 1 ? " scale=" + std::to_string(scale) : "");
  }
};

template <class T>
void all_formulas(std::size_t n, std::size_t m, std::size_t d, std::size_t k, bool integer, bool special,
                  double offset = 0) {
  const data_set<T> s(n, m, d, k, integer, special, offset);
  auto X = memsafe::points(s.x.data(), n, d), Y = memsafe::points(s.y.data(), m, d);
  const std::string& tag = s.tag;
  // Every formula × reduction the fused kernels serve: {argkmin, argmin, min} × {sqdist, l1, cosine},
  // {argkmax, argmax, max} × dot.
  same_as_reference(memsafe::argkmin(memsafe::sqdist(X, Y), k), "sqdist " + tag);
  same_as_reference(memsafe::argkmin(memsafe::l1(X, Y), k), "l1 " + tag);
  same_as_reference(memsafe::argkmin(memsafe::cosine(X, Y), k), "cosine " + tag);
  same_as_reference(memsafe::argkmax(memsafe::dot(X, Y), k), "dot " + tag);
  same_as_reference(memsafe::argmin(memsafe::sqdist(X, Y)), "argmin sqdist " + tag);
  same_as_reference(memsafe::argmin(memsafe::l1(X, Y)), "argmin l1 " + tag);
  same_as_reference(memsafe::argmin(memsafe::cosine(X, Y)), "argmin cosine " + tag);
  same_as_reference(memsafe::min(memsafe::sqdist(X, Y)), "min sqdist " + tag);
  same_as_reference(memsafe::min(memsafe::l1(X, Y)), "min l1 " + tag);
  same_as_reference(memsafe::min(memsafe::cosine(X, Y)), "min cosine " + tag);
  same_as_reference(memsafe::argmax(memsafe::dot(X, Y)), "argmax dot " + tag);
  same_as_reference(memsafe::max(memsafe::dot(X, Y)), "max dot " + tag);
}

/// One MESSAGE per instruction set of the kernels this CPU cannot run (its tests are skipped).
void report_skipped() {
  for (host::isa i : {host::isa::avx512, host::isa::avx2})
    if (!(host::isa_compiled & host::cpu_isas() & host::isa_bit(i)))
      MESSAGE("skipped: the " << std::string(host::isa_name(i)) << " kernels (this CPU and build run: "
                              << host::isa_list(host::isa_compiled & host::cpu_isas()) << ")");
}

}  // namespace

TEST_CASE("select: fused k-nearest equals the reference path, every formula, both precisions") {
  report_skipped();
  if (!host::cpu_has_avx512bf16()) MESSAGE("skipped: the bfloat16 screen (this CPU has no AVX512-BF16)");
  if (!host::cpu_has_amx_bf16()) MESSAGE("skipped: the AMX screen (this CPU or OS offers no AMX-BF16 tiles)");
  for (std::size_t d : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{32}, std::size_t{100}}) {
    all_formulas<float>(29, 517, d, 10, false, false);
    all_formulas<double>(29, 517, d, 10, false, false);
  }
}

TEST_CASE("select: ties (integer data) and large k are exact") {
  all_formulas<float>(13, 300, 2, 1, true, false);
  all_formulas<float>(13, 300, 2, 64, true, false);
  all_formulas<double>(7, 300, 4, 299, true, false);
}

TEST_CASE("select: sizes that fill no register block: k = m, m below one panel, single rows") {
  all_formulas<float>(11, 23, 5, 23, false, false);   // k = m (k > m is an argument_error): never screened out
  all_formulas<double>(7, 5, 3, 4, false, true);      // m < one register of lanes, special values
  all_formulas<float>(1, 33, 9, 3, true, false);      // one query row, ties
  all_formulas<double>(13, 131, 2, 130, true, false);  // k = m − 1
}

TEST_CASE("select: NaN, inf, overflowing squares and zero vectors take the same answers") {
  for (std::size_t d : {std::size_t{1}, std::size_t{3}, std::size_t{20}}) {
    all_formulas<float>(23, 211, d, 5, false, true);
    all_formulas<double>(23, 211, d, 5, false, true);
  }
}

/// Points on near-equal spheres around queries far from the origin: the exact distances differ in
/// the last bits while the screening form's rounding (≈ u·(‖x‖² + ‖y‖²)) is larger than the distances
/// themselves, so only the proven margin — not luck — keeps every true neighbour from being screened out.
template <class T>
void near_ties(std::size_t d, std::size_t n = 9) {
  const std::size_t m = 400;
  const double c = 1000;
  auto dirs = data(m, d, 97), noise = data(n, d, 98);
  std::vector<T> x(n * d), y(m * d);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < d; ++k) x[i * d + k] = T(c + 1e-3 * noise[i * d + k]);
  for (std::size_t j = 0; j < m; ++j) {
    double nrm = 0;
    for (std::size_t k = 0; k < d; ++k) nrm += dirs[j * d + k] * dirs[j * d + k];
    const double r = 1 + 4 * double(std::numeric_limits<T>::epsilon()) * double(j % 13);
    for (std::size_t k = 0; k < d; ++k) y[j * d + k] = T(c + r * dirs[j * d + k] / std::sqrt(nrm));
  }
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const std::string tag = std::string(sizeof(T) == 4 ? "f32" : "f64") + " d=" + std::to_string(d);
  same_as_reference(memsafe::argkmin(memsafe::sqdist(X, Y), 10), "near ties sqdist " + tag);
  same_as_reference(memsafe::argkmin(memsafe::cosine(X, Y), 10), "near ties cosine " + tag);
  same_as_reference(memsafe::argkmax(memsafe::dot(X, Y), 10), "near ties dot " + tag);
  same_as_reference(memsafe::argmin(memsafe::sqdist(X, Y)), "near ties argmin sqdist " + tag);
}

TEST_CASE("select: values at extreme scales take the same answers (the int16 screen's scales, or T's screen beyond them)") {
  // The int16 screen scales each row block and column tile by a power of two; where the product of
  // the two leaves [2^-100, 2^100] the tile falls back to T's own screen. Tiny, huge and mixed data
  // (a tile of huge points among normal ones), with near ties, at d = 8 (its smallest default d) and 64.
  for (std::size_t d : {std::size_t{8}, std::size_t{64}}) {
    for (double scale : {1e-30, 1e-12, 1e12, 1e30}) {
      auto x = cast<float>(data(19, d, 41)), y = cast<float>(data(700, d, 42));
      for (auto& v : x) v = float(v * scale);
      for (auto& v : y) v = float(v * scale);
      auto X = memsafe::points(x.data(), 19, d), Y = memsafe::points(y.data(), 700, d);
      same_as_reference(memsafe::argkmin(memsafe::sqdist(X, Y), 7),
                        "extreme scale sqdist d=" + std::to_string(d) + " scale " + std::to_string(scale));
    }
    auto x = cast<float>(data(19, d, 43)), y = cast<float>(data(700, d, 44));
    for (std::size_t j = 300; j < 364; ++j)
      for (std::size_t k = 0; k < d; ++k) y[j * d + k] *= 1e33f;  // one column tile's worth of huge points
    for (std::size_t j = 500; j < 540; ++j) y[j * d] = x[(j % 19) * d] + 1e-3f;  // near ties
    auto X = memsafe::points(x.data(), 19, d), Y = memsafe::points(y.data(), 700, d);
    same_as_reference(memsafe::argkmin(memsafe::sqdist(X, Y), 7), "mixed scales sqdist d=" + std::to_string(d));
  }
}

/// float sqdist, cosine and dot (the AMX screen's formulas): argkmin, argmin and min (argkmax,
/// argmax and max for dot).
void amx_formulas(std::size_t n, std::size_t m, std::size_t d, std::size_t k, bool integer, bool special,
                  double offset = 0, double scale = 1) {
  const data_set<float> s(n, m, d, k, integer, special, offset, scale);
  auto X = memsafe::points(s.x.data(), n, d), Y = memsafe::points(s.y.data(), m, d);
  same_as_reference(memsafe::argkmin(memsafe::sqdist(X, Y), k), "sqdist " + s.tag);
  same_as_reference(memsafe::argmin(memsafe::sqdist(X, Y)), "argmin sqdist " + s.tag);
  same_as_reference(memsafe::min(memsafe::sqdist(X, Y)), "min sqdist " + s.tag);
  same_as_reference(memsafe::argkmin(memsafe::cosine(X, Y), k), "cosine " + s.tag);
  same_as_reference(memsafe::argmin(memsafe::cosine(X, Y)), "argmin cosine " + s.tag);
  same_as_reference(memsafe::min(memsafe::cosine(X, Y)), "min cosine " + s.tag);
  same_as_reference(memsafe::argkmax(memsafe::dot(X, Y), k), "dot " + s.tag);
  same_as_reference(memsafe::argmax(memsafe::dot(X, Y)), "argmax dot " + s.tag);
  same_as_reference(memsafe::max(memsafe::dot(X, Y)), "max dot " + s.tag);
}

TEST_CASE("select: the AMX screen's 32-row blocks take the same answers (random, special, ties, far, tiny, huge)") {
  if (!host::cpu_has_amx_bf16()) {
    MESSAGE("skipped: the AMX screen (this CPU or its OS offers no AMX-BF16 tiles)");
    return;
  }
  {  // the tiles run: 32-row blocks fit (the other cases have fewer than 32 query rows)
    scoped_env isa("MEMSAFE_ISA", "avx512");
    scoped_env screen("MEMSAFE_SCREEN", "amx");
    std::vector<float> x(75 * 33, 0.5f), y(300 * 33, 0.25f);
    const auto p = memsafe::plan_for(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), 75, 33),
                                                                      memsafe::points(y.data(), 300, 33)), 3));
    CHECK(p.screen == "amx");
    CHECK(p.tile_rows >= 32);
    // Row blocks up to 4096 queries tall on the tiles (1024 on the other screens); over threads,
    // evened out in multiples of 32.
    std::vector<float> xt(5000 * 33, 0.5f);
    const auto tall = memsafe::argkmin(memsafe::sqdist(memsafe::points(xt.data(), 5000, 33),
                                                       memsafe::points(y.data(), 300, 33)), 3);
    const auto one = memsafe::plan_for(tall, memsafe::options{memsafe::unlimited, 1});
    CHECK(one.screen == "amx");
    CHECK(one.tile_rows == 4096);
    const auto two = memsafe::plan_for(tall, memsafe::options{memsafe::unlimited, 2});
    CHECK(two.tile_rows == 2528);  // two blocks, 5000 / 2 rounded up to 32
    scoped_env fp32("MEMSAFE_SCREEN", "fp32");
    CHECK(memsafe::plan_for(tall, memsafe::options{memsafe::unlimited, 1}).tile_rows == 1024);
  }
  // 75 rows in one row block: two blocks of 32 on the tiles, then rows 43–74 as a block that skips
  // the 21 already screened. d = 32, 64: whole steps of 16 pairs; 3, 17, 33, 100: the last step
  // padded with zeros.
  for (std::size_t d : {std::size_t{3}, std::size_t{17}, std::size_t{32}, std::size_t{33}, std::size_t{64},
                        std::size_t{100}})
    amx_formulas(75, 300, d, 10, false, false);
  amx_formulas(75, 300, 20, 5, false, true);         // NaN, inf, overflowing squares, zero vectors
  amx_formulas(70, 300, 12, 40, true, false);        // ties, large k
  amx_formulas(70, 300, 40, 5, false, false, 1000);  // far from the origin
  amx_formulas(70, 300, 40, 5, false, false, 0, 1e-30);  // squares below float's normal range
  amx_formulas(70, 300, 40, 5, false, false, 0, 1e30);   // squares beyond float's range
  amx_formulas(2600, 90, 33, 5, false, false);            // row blocks taller than 1024
  near_ties<float>(101, 70);
  {  // cosine near ties: scaled copies of the queries (distance 0 up to rounding) among random points
    auto x = cast<float>(data(70, 40, 61)), y = cast<float>(data(300, 40, 62));
    for (std::size_t j = 0; j < 140; ++j)
      for (std::size_t k = 0; k < 40; ++k) y[j * 40 + k] = x[(j % 70) * 40 + k] * (j < 70 ? 3.0f : 0.37f);
    auto X = memsafe::points(x.data(), 70, 40), Y = memsafe::points(y.data(), 300, 40);
    same_as_reference(memsafe::argkmin(memsafe::cosine(X, Y), 5), "cosine scaled copies d=40");
  }
}

/// normalize_panel against normalize, point by point, bit for bit, and the unit length of the result.
template <class T>
void normalize_panel_case(std::size_t d, std::size_t nl, unsigned seed) {
  constexpr std::size_t W = host::lanes<T>;
  auto src = cast<T>(data(W, d, seed));
  const T big = std::numeric_limits<T>::max() / T(4), tiny = std::numeric_limits<T>::denorm_min();
  for (std::size_t k = 0; k < d; ++k) {  // lane by lane: special points
    src[1 * d + k] = T(0);                                           // zero
    src[2 * d + k] *= T(1e-38) * T(1e-5);                            // tiny (float: subnormal coordinates)
    src[3 * d + k] = k == d / 2 ? big : src[3 * d + k];              // one huge coordinate
    src[5 * d + k] = k == 0 ? tiny : T(0);                           // the smallest subnormal alone
    if constexpr (std::is_same_v<T, double>) {
      src[6 * d + k] *= 1e-305;  // beyond unit_scale_max_e: normalize's division
      src[7 * d + k] *= 1e305;
    }
  }
  src[4 * d + d - 1] = std::numeric_limits<T>::quiet_NaN();
  if (W > 8) src[9 * d] = -std::numeric_limits<T>::infinity();
  std::vector<T> panel(W * d), want(W * d);
  std::vector<T> w(W, T(-7)), want_w(W);
  for (std::size_t l = 0; l < W; ++l)
    for (std::size_t k = 0; k < d; ++k) panel[k * W + l] = l < nl ? src[l * d + k] : T(0);
  want = panel;
  for (std::size_t l = 0; l < nl; ++l) want_w[l] = host::normalize(want.data() + l, d, W);
  host::normalize_panel(panel.data(), d, nl, w.data());
  INFO(sizeof(T) * 8 << "-bit d=" << d << " nl=" << nl);
  CHECK(std::memcmp(panel.data(), want.data(), panel.size() * sizeof(T)) == 0);
  for (std::size_t l = 0; l < W; ++l) {
    if (l >= nl) {
      CHECK(w[l] == T(-7));  // not written past nl
      continue;
    }
    CHECK(std::memcmp(&w[l], &want_w[l], sizeof(T)) == 0);
    double n2 = 0;
    for (std::size_t k = 0; k < d; ++k) n2 += double(panel[k * W + l]) * double(panel[k * W + l]);
    if (w[l] == T(1)) CHECK(std::fabs(std::sqrt(n2) - 1.0) <= 4.0 * double(std::numeric_limits<T>::epsilon()));
    else if (w[l] == T(0)) CHECK(n2 == 0.0);
    else CHECK(std::isnan(double(w[l])));
  }
  CHECK(std::isnan(double(w[4])));
  CHECK(w[1] == T(0));
  CHECK(w[5] == T(1));
  CHECK(std::fabs(double(panel[0 * W + 5]) - 1.0) <= double(std::numeric_limits<T>::epsilon()));
}

TEST_CASE("select: a packed panel's points are made unit vectors as normalize makes each (normalize_panel)") {
  for (std::size_t d : {std::size_t{1}, std::size_t{3}, std::size_t{40}, std::size_t{101}})
    for (std::size_t nl : {std::size_t{8}, std::size_t{16}}) {
      normalize_panel_case<float>(d, nl, unsigned(d + nl));
      normalize_panel_case<double>(d, std::min<std::size_t>(nl, 8), unsigned(d + nl));
    }
}

TEST_CASE("select: near ties far from the origin are exact (the margin at work)") {
  for (std::size_t d : {std::size_t{2}, std::size_t{16}, std::size_t{101}}) {
    near_ties<float>(d);
    near_ties<double>(d);
  }
}

TEST_CASE("select: data far from the origin (screened about the row block's centre) takes the same answers") {
  for (std::size_t d : {std::size_t{1}, std::size_t{3}, std::size_t{20}, std::size_t{100}}) {
    all_formulas<float>(23, 211, d, 5, false, false, 1000.0);
    all_formulas<double>(23, 211, d, 5, false, false, 1e6);
  }
  all_formulas<float>(23, 211, 3, 5, false, true, 1e4);  // with NaN, inf and overflowing rows
  all_formulas<double>(23, 211, 17, 5, true, true, -1e3);  // ties
}

#if defined(MEMSAFE_SIMD_DISPATCH)
/// Whether the FP32/FP64 screen of the first row block of argkmin(sqdist(X, Y), k) runs about its
/// centre (select_worker::start): the decision the speed on offset data rests on.
template <class T>
bool first_block_centred(const std::vector<T>& x, const std::vector<T>& y, std::size_t d,
                         host::screen_mode sm = host::screen_mode::native) {
  const std::size_t n = x.size() / d, m = y.size() / d, k = 3;
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto e = memsafe::sqdist(X, Y);
  using E = std::remove_cvref_t<decltype(e)>;
  using Mon = host::topk_monoid<T, false>;
  const host::isa i = host::best_isa(host::isa_compiled & host::cpu_isas());
  std::vector<std::byte> ws(host::select_bytes(e, Mon{k}, n, m, sm) + 64);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(ws.data()) + 63) & ~std::uintptr_t{63});
  std::vector<T> v(n * k);
  const auto out = memsafe::jobs::row_major_out<T>(v.data(), nullptr, k);
  const host::isa wi = sm == host::screen_mode::bf16 || sm == host::screen_mode::amx ? host::isa::avx512
                       : sm == host::screen_mode::i16                                ? host::isa::avx2
                                                                                     : i;
  host::select_worker<E, Mon> w(e, k, base, n, m, out, wi, sm);
  w.start(0, n);
  return w.centred;
}

TEST_CASE("select: the FP32/FP64 screen centres a row block exactly when its queries are far from the origin") {
  if (host::best_isa(host::isa_compiled & host::cpu_isas()) == host::isa::portable) {
    MESSAGE("skipped: no fused kernels on this CPU");
    return;
  }
  const std::size_t d = 7;
  for (double off : {0.0, 0.1, 3.0, 1000.0}) {
    auto x = data(40, d, 11), y = data(300, d, 12);
    for (double& v : x) v += off;
    for (double& v : y) v += off;
    // data() is N(0, 1): per coordinate E x² = 1 + off² and E (x − c)² ≈ 1, so centring at least
    // halves the margin's N once off² > 1 (the cases stay clear of that edge).
    const bool want = off > 1;
    INFO("offset " << off);
    CHECK(first_block_centred(cast<float>(x), cast<float>(y), d) == want);
    CHECK(first_block_centred(x, y, d) == want);
    // The bfloat16 screen runs about the centre whatever the offset (its margin is relative to ‖x − c‖).
    if (host::best_isa(host::isa_compiled & host::cpu_isas()) == host::isa::avx512 && host::cpu_has_avx512bf16())
      CHECK(first_block_centred(cast<float>(x), cast<float>(y), d, host::screen_mode::bf16));
    // The int16 screen centres as the FP32 screen does (its scale then follows the largest |x − c|).
    if (host::isa_compiled & host::cpu_isas() & host::isa_bit(host::isa::avx2))
      CHECK(first_block_centred(cast<float>(x), cast<float>(y), d, host::screen_mode::i16) == want);
  }
}
#endif

/// Values in bfloat16's subnormal range (flushed by its screen) and just above it, near ties among
/// them, and ordinary points: the bfloat16 screen's absolute term η at work (select.hpp).
template <class T>
void tiny_values(std::size_t d, double scale) {
  const std::size_t n = 17, m = 300;
  auto x = data(n, d, 131), y = data(m, d, 132);
  std::vector<T> xs(n * d), ys(m * d);
  for (std::size_t q = 0; q < n * d; ++q) xs[q] = T(x[q] * scale);
  for (std::size_t q = 0; q < m * d; ++q) ys[q] = T(y[q] * scale * (q % 7 == 0 ? 1e3 : 1.0));
  for (std::size_t j = 0; j + 1 < m; j += 9)
    for (std::size_t k = 0; k < d; ++k) ys[(j + 1) * d + k] = ys[j * d + k];  // duplicates: ties
  auto X = memsafe::points(xs.data(), n, d), Y = memsafe::points(ys.data(), m, d);
  char sc[32];
  std::snprintf(sc, sizeof sc, "%g", scale);
  const std::string tag = "tiny d=" + std::to_string(d) + " scale=" + sc;
  same_as_reference(memsafe::argkmin(memsafe::sqdist(X, Y), 10), "sqdist " + tag);
  same_as_reference(memsafe::argmin(memsafe::sqdist(X, Y)), "argmin sqdist " + tag);
  same_as_reference(memsafe::argkmax(memsafe::dot(X, Y), 10), "dot " + tag);  // dot_max's η
}

TEST_CASE("select: values near and below the smallest normal float are exact (subnormals flushed by the bfloat16 screen)") {
  for (std::size_t d : {std::size_t{2}, std::size_t{33}, std::size_t{64}})
    for (double s : {1e-36, 1e-39, 1e-43}) tiny_values<float>(d, s);
  tiny_values<double>(40, 1e-300);
}

TEST_CASE("select: data whose products underflow gradually (subnormal, not zero) are exact on every screen") {
  // The products x_k·y_k and the squares land in the subnormal range, where rounding errs by up to
  // half the smallest subnormal absolutely: beyond the relative margins, covered by η_T (select.hpp,
  // "Underflow"). Before it, float d = 10 at scale 6.4e-24 gave results that changed with the budget
  // on the AVX2 kernels (a fuzz case).
  for (std::size_t d : {std::size_t{3}, std::size_t{10}, std::size_t{33}})
    for (double s : {6.4e-24, 1e-22, 3e-21}) tiny_values<float>(d, s);
  for (double s : {4e-163, 1e-160}) tiny_values<double>(7, s);
}

TEST_CASE("select: independent dense reference (indices of the k nearest, exact)") {
  const std::size_t n = 40, m = 900, d = 6, k = 12;
  auto x = data(n, d, 41), y = data(m, d, 42);
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  auto K = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  auto C = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return cosd(a, b, dd); });
  for (const auto& r : eval_all(memsafe::argkmin(memsafe::sqdist(X, Y), k)))
    check_ranked(r, K, n, m, k, false, true, "sqdist");
  for (const auto& r : eval_all(memsafe::argkmin(memsafe::cosine(X, Y), k)))
    check_ranked(r, C, n, m, k, false, true, "cosine");
}

TEST_CASE("select: few rows, threads split the columns and merge exactly") {
  const std::size_t n = 5, m = 20000, d = 3;
  auto x = cast<float>(data(n, d, 61)), y = cast<float>(data(m, d, 62));
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, Y), 50);
  const memsafe::options four{std::size_t{1} << 20, 4};
  const auto p = memsafe::plan_for(e, four);
  CHECK(p.split_columns);
  const auto a = memsafe::eval(e, four), b = eval_reference(e, memsafe::options{memsafe::unlimited, 1});
  CHECK(a.indices == b.indices);
  CHECK(identical(a.values, b.values));
  CHECK(a.stats.peak_temp_bytes <= *four.budget);
}

TEST_CASE("select: the broadcast form and per-dimension scaling take the fused path too") {
  const std::size_t n = 31, m = 400, d = 5;
  auto x = cast<float>(data(n, d, 71)), y = cast<float>(data(m, d, 72));
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto naive = memsafe::argkmin(
      memsafe::sum<2>(memsafe::square(memsafe::unsqueeze<1>(X) - memsafe::unsqueeze<0>(Y))), 7);
  same_as_reference(naive, "broadcast sqdist");
  const auto direct = memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, Y), 7), memsafe::options{memsafe::unlimited, 2});
  CHECK(memsafe::eval(naive, memsafe::options{memsafe::unlimited, 2}).indices == direct.indices);
}

TEST_CASE("select: too small a budget names the minimum before any work") {
  const std::size_t n = 10, m = 100, d = 64;
  auto x = cast<float>(data(n, d, 81)), y = cast<float>(data(m, d, 82));
  auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, Y), 4);
  const std::size_t mn = memsafe::plan_for(e, memsafe::options{memsafe::unlimited, 1}).min_bytes;
  CHECK_THROWS_AS((void)memsafe::eval(e, memsafe::options{mn - 1, 1}), memsafe::budget_error);
  CHECK(memsafe::eval(e, memsafe::options{mn, 1}).stats.peak_temp_bytes <= mn);
}

#if defined(MEMSAFE_SIMD_DISPATCH)
namespace {
// The scalar definitions tile_prep.inc's comments give, written out as references.
double max_abs_finite_ref(const float* v, std::size_t n) {
  double m = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::isfinite(v[i])) m = std::max(m, double(std::fabs(v[i])));
  return m;
}
std::int32_t i16_round_ref(float v, int e) {
  return std::isfinite(v) ? static_cast<std::int32_t>(std::nearbyint(std::ldexp(double(v), -e))) : 0;
}
}  // namespace

TEST_CASE("select: the column tiles' vector preparation equals its scalar definition") {
  if (!(host::cpu_isas() & host::isa_bit(host::isa::avx2))) {
    MESSAGE("skipped: this CPU has no AVX2 (tile_prep.inc runs only beside the AVX2/AVX-512 kernels)");
    return;
  }
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 33);
  };
  auto normal = [&] { return float((double(next()) / 2147483648.0 - 1.0) * 3.0); };
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -0.0f, std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::denorm_min(), 1e-39f};
  for (std::size_t d : {1u, 2u, 3u, 7u, 16u, 33u, 100u}) {
    const std::size_t np = 3, P = 16, n = np * P * d;
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(d);
      CAPTURE(variant);
      std::vector<float> y(n);
      for (auto& v : y) v = normal();
      if (variant == 1)  // non-finite and extreme values sprinkled in
        for (std::size_t i = 0; i < n; i += 7) y[i] = specials[(i / 7) % (sizeof specials / sizeof *specials)];
      if (variant == 2)  // a tiny scale: the int16 scale's exponent far below zero
        for (auto& v : y) v *= 1e-30f;
      // the largest finite |value|, also over every length (the vector loop's tails)
      for (std::size_t len : {n, n - 1, std::size_t(13), std::size_t(8), std::size_t(1), std::size_t(0)})
        CHECK(host::avx2::max_abs_finite(y.data(), len) == max_abs_finite_ref(y.data(), len));
      // squared norms: the same sum in double, up to the rounding of fused multiply-adds
      std::vector<double> sq(np * P);
      host::avx2::panel_sqnorms(y.data(), d, np, sq.data());
      for (std::size_t j = 0; j < np * P; ++j) {
        double r = 0;
        for (std::size_t k = 0; k < d; ++k) r += double(y[(j / P) * d * P + k * P + j % P]) * y[(j / P) * d * P + k * P + j % P];
        if (std::isnan(r)) CHECK(std::isnan(sq[j]));
        else if (std::isinf(r)) CHECK(sq[j] == r);
        else CHECK(sq[j] == doctest::Approx(r).epsilon(1e-14));
      }
      // the int16 panels and accumulator starts, bit for bit
      const double mx = max_abs_finite_ref(y.data(), n);
      const int e = host::i16_exponent(mx, host::i16_qmax(d));
      const std::size_t dp = (d + 1) / 2;
      std::vector<std::uint32_t> pack2(np * dp * P);
      std::vector<std::int32_t> acc0(np * P);
      host::avx2::pack_i16_panels(y.data(), d, np, e, pack2.data(), acc0.data());
      bool same = true;
      for (std::size_t p = 0; p < np; ++p)
        for (std::size_t w = 0; w < P; ++w) {
          std::int64_t l1 = 0;
          for (std::size_t q = 0; q < dp; ++q) {
            const std::int32_t a = i16_round_ref(y[(p * d + 2 * q) * P + w], e);
            const std::int32_t b = 2 * q + 1 < d ? i16_round_ref(y[(p * d + 2 * q + 1) * P + w], e) : 0;
            CHECK(std::abs(a) <= host::i16_qmax(d));
            l1 += std::abs(a) + std::abs(b);
            const std::uint32_t want = (std::uint32_t(a) & 0xffffu) | (std::uint32_t(b) << 16);
            same = same && pack2[(p * dp + q) * P + w] == want;
          }
          same = same && acc0[p * P + w] == std::int32_t(std::ceil(0.5 * double(l1) * (1.0 + 0x1p-20)));
        }
      CHECK(same);
      // the bfloat16 panels about a centre, with the float panels less the centre, bit for bit: ⌈d/2⌉
      // pairs and the AMX screen's padding to whole steps of 16
      std::vector<float> c(d);
      for (std::size_t k = 0; k < d; ++k) c[k] = variant == 1 && k == 0 ? std::numeric_limits<float>::infinity() : normal();
      // And without a centre (cosine, dot): the pairs of the panels themselves, cpack untouched.
      for (const bool centred : {true, false}) {
        for (const host::screen_mode sm : {host::screen_mode::bf16, host::screen_mode::amx}) {
          const std::size_t bp = host::bf16_pairs(d, sm);
          std::vector<float> cpack(n, -1.0f), cref(n);
          std::vector<std::uint32_t> b2(np * bp * P, 0xdeadbeefu);
          host::avx2::center_bf16_panels(y.data(), d, np, centred ? c.data() : nullptr, centred ? cpack.data() : nullptr,
                                         bp, b2.data());
          if (centred) {
            host::center_panels(y.data(), d, np, P, c.data(), cref.data());
            CHECK(std::memcmp(cpack.data(), cref.data(), n * sizeof(float)) == 0);
          } else {
            cref = y;
            CHECK(std::count(cpack.begin(), cpack.end(), -1.0f) == std::ptrdiff_t(n));
          }
          bool same2 = true;
          for (std::size_t p = 0; p < np; ++p)
            for (std::size_t q = 0; q < bp; ++q)
              for (std::size_t w = 0; w < P; ++w) {
                const std::uint32_t lo = 2 * q < d ? host::bf16_bits(cref[(p * d + 2 * q) * P + w]) : 0u;
                const std::uint32_t hi = 2 * q + 1 < d ? host::bf16_bits(cref[(p * d + 2 * q + 1) * P + w]) : 0u;
                same2 = same2 && b2[(p * bp + q) * P + w] == (lo | hi << 16);
              }
          CHECK(same2);
        }
      }
    }
    // double panels (8 points each): the same squared norms
    std::vector<double> yd(np * 8 * d), sq(np * 8);
    for (auto& v : yd) v = normal();
    host::avx2::panel_sqnorms(yd.data(), d, np, sq.data());
    for (std::size_t j = 0; j < np * 8; ++j) {
      double r = 0;
      for (std::size_t k = 0; k < d; ++k) r += yd[(j / 8) * d * 8 + k * 8 + j % 8] * yd[(j / 8) * d * 8 + k * 8 + j % 8];
      CHECK(sq[j] == doctest::Approx(r).epsilon(1e-14));
    }
  }
}

namespace {
/// The blocks screen_rows hands to its call back: (first panel, panels, their masks).
struct hit_log {
  std::vector<std::uint32_t> calls;
  static void record(void* ctx, std::size_t pnl, std::size_t nb, const std::uint32_t* masks) {
    auto& v = static_cast<hit_log*>(ctx)->calls;
    v.push_back(std::uint32_t(pnl));
    v.push_back(std::uint32_t(nb));
    v.insert(v.end(), masks, masks + host::avx2::block_rows * nb);
  }
};
}  // namespace

TEST_CASE("select: the int16 screen is chosen only where d leaves an int16 magnitude") {
  // Beyond i16_screen_max_d, q = i16_qmax(d) is 0 and no scale 2^e makes a value fit: the screen
  // would search forever for one. (Rows of 2 GiB: checked on the choice, not on data.)
  CHECK(host::i16_qmax(host::i16_screen_max_d) >= 1);
  CHECK(host::i16_qmax(host::i16_screen_max_d + 1) == 0);
  if (std::getenv("MEMSAFE_SCREEN")) {
    MESSAGE("skipped the default choice: MEMSAFE_SCREEN is set");
    return;
  }
  using host::select_kind, host::screen_mode, host::isa;
  CHECK(host::choose_screen<float, select_kind::sqdist>(isa::avx2, 100) == screen_mode::i16);
  CHECK(host::choose_screen<float, select_kind::sqdist>(isa::avx2, host::i16_screen_max_d) == screen_mode::i16);
  CHECK(host::choose_screen<float, select_kind::sqdist>(isa::avx2, host::i16_screen_max_d + 1) == screen_mode::native);
}

TEST_CASE("select: the int16 screen passes the same lanes with AVX-VNNI (VPDPWSSD) as with VPMADDWD") {
  if (!(host::cpu_isas() & host::isa_bit(host::isa::avx2)) || !host::cpu_has_avx_vnni()) {
    MESSAGE("skipped: this CPU has no AVX-VNNI (the int16 screen runs on VPMADDWD alone, tested with the selections)");
    return;
  }
  constexpr int R = host::avx2::block_rows;
  constexpr std::size_t P = 16;
  std::uint64_t state = 0x2545f4914f6cdd1dull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 32);
  };
  for (std::size_t dp : {1u, 2u, 50u}) {
    const std::size_t np = 5;  // five blocks of avx2::block_panels (one panel each)
    std::vector<std::uint32_t> x2(R * dp), y2(np * dp * P);
    for (auto& v : x2) v = next();
    for (auto& v : y2) v = next();
    for (std::size_t i = 0; i < y2.size(); i += 5) y2[i] = 0x80008000u;  // (−2¹⁵)² twice: the sum wraps
    for (std::size_t i = 0; i < x2.size(); i += 3) x2[i] = 0x80008000u;
    // pack: the float panels screen_rows steps through (2·dp features each); the int16 screen reads none
    std::vector<float> init(np * P, 0.0f), pack(np * 2 * dp * P, 0.0f), qscale(R, 0x1p-31f), thr(R);
    std::vector<std::int32_t> acc0(np * P);
    for (auto& v : acc0) v = std::int32_t(next());
    for (int r = 0; r < R; ++r) thr[r] = r % 3 == 2 ? -std::numeric_limits<float>::infinity() : 0.0f;  // half the lanes, or none
    for (bool clean : {true, false}) {
      CAPTURE(dp);
      CAPTURE(clean);
      host::screen_args<float> a;
      a.xs = init.data();  // not read by the int16 screen
      a.d = 2 * dp;
      a.pack = pack.data();
      a.init = init.data();
      a.thr = thr.data();
      a.np = np;
      a.clean = clean;
      a.dp = dp;
      a.xs2 = x2.data();
      a.pack2 = y2.data();
      a.qscale = qscale.data();
      a.acc0 = acc0.data();
      a.hit = &hit_log::record;
      hit_log plain, vnni;
      a.ctx = &plain;
      host::avx2::screen_rows<float, host::select_kind::sqdist, R, host::screen_mode::i16>(a);
      a.ctx = &vnni;
      host::avx2::screen_rows<float, host::select_kind::sqdist, R, host::screen_mode::i16, true>(a);
      CHECK(plain.calls.size() > 2 * np);  // every block passed lanes (rows with threshold 0)
      CHECK(plain.calls == vnni.calls);
    }
  }
}
#endif

// core/algo.hpp's selection and sort (the tile path's per-row top-k merge) against std::nth_element
// and std::sort, on the orders that trouble a quickselect or a heap: random, ascending, descending,
// few distinct values (ties broken by index: a total order, so the results must be equal), and
// organ-pipe; sizes around the insertion-sort and depth limits.
TEST_CASE("algo: select_nth, sort_range and sort_best agree with nth_element and sort") {
  struct item {
    float v;
    long i;
  };
  const auto before = [](const item& a, const item& b) { return a.v != b.v ? a.v < b.v : a.i < b.i; };
  std::uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 33);
  };
  for (int order = 0; order < 5; ++order)
    for (std::size_t n : {1u, 2u, 3u, 8u, 9u, 16u, 17u, 33u, 100u, 1000u, 4196u}) {
      std::vector<item> base(n);
      for (std::size_t j = 0; j < n; ++j) {
        const float v = order == 0   ? float(next() % 100000)
                        : order == 1 ? float(j)
                        : order == 2 ? float(n - j)
                        : order == 3 ? float(next() % 3)
                                     : float(j < n / 2 ? j : n - j);
        base[j] = {v, static_cast<long>(next() % 1000003) * 4096 + static_cast<long>(j)};
      }
      std::vector<item> want = base;
      std::sort(want.begin(), want.end(), before);
      std::vector<item> got = base;
      memsafe::detail::sort_range(got.data(), n, before);
      bool same = true;
      for (std::size_t j = 0; j < n; ++j) same = same && got[j].i == want[j].i;
      CHECK_MESSAGE(same, "sort_range, order " << order << ", n = " << n);
      got = base;  // keeping at least all: all of them, sorted
      CHECK(memsafe::detail::sort_best(got.data(), n, n + 1, before) == n);
      same = true;
      for (std::size_t j = 0; j < n; ++j) same = same && got[j].i == want[j].i;
      CHECK_MESSAGE(same, "sort_best keeping all, order " << order << ", n = " << n);
      for (int depth : {0, 1}) {  // the heap sort after no partition, or after one
        got = base;
        memsafe::detail::sort_range(got.data(), n, before, depth);
        same = true;
        for (std::size_t j = 0; j < n; ++j) same = same && got[j].i == want[j].i;
        CHECK_MESSAGE(same, "sort_range, depth " << depth << ", order " << order << ", n = " << n);
      }
      for (std::size_t k : {std::size_t{0}, std::size_t{1}, n / 3, n / 2, n > 1 ? n - 1 : 0}) {
        if (k >= n) continue;
        for (int depth : {-1, 0, 1}) {  // the quickselect, its heap selection at once, after one partition
          got = base;
          memsafe::detail::select_nth(got.data(), n, k, before, depth);
          bool ok = got[k].i == want[k].i;
          for (std::size_t j = 0; j < k; ++j) ok = ok && !before(got[k], got[j]);
          for (std::size_t j = k + 1; j < n; ++j) ok = ok && !before(got[j], got[k]);
          CHECK_MESSAGE(ok, "select_nth, order " << order << ", n = " << n << ", k = " << k << ", depth " << depth);
        }
        got = base;
        CHECK(memsafe::detail::sort_best(got.data(), n, k, before) == k);
        bool best = true;
        for (std::size_t j = 0; j < k; ++j) best = best && got[j].i == want[j].i;
        CHECK_MESSAGE(best, "sort_best, order " << order << ", n = " << n << ", k = " << k);
      }
    }
}

// The two stand-ins the GP module calls (the pivoted Cholesky's pivot, the reversed-order solve):
// std::reverse and std::max_element, ties included (the first largest), empty and single ranges.
TEST_CASE("algo: reverse_range and max_element agree with reverse and max_element") {
  std::uint64_t state = 777;
  for (std::size_t n : {0u, 1u, 2u, 3u, 4u, 7u, 100u}) {
    for (int order = 0; order < 3; ++order) {
      std::vector<int> base(n);
      for (std::size_t j = 0; j < n; ++j) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        base[j] = order == 0 ? static_cast<int>(state >> 60) : order == 1 ? static_cast<int>(j) : 5;  // ties, ascending, all equal
      }
      std::vector<int> got = base, want = base;
      memsafe::detail::reverse_range(got.begin(), got.end());
      std::reverse(want.begin(), want.end());
      CHECK(got == want);
      CHECK(memsafe::detail::max_element(base.data(), base.data() + n) - base.data() ==
            std::max_element(base.begin(), base.end()) - base.begin());
    }
  }
}
