// GPU-only cases: the CUDA backend's paths (fused, tile + fold, cuBLAS GEMM tiles, top-k by block
// sort up to k = 2048), host-resident inputs streamed through the budget, device outputs, streams,
// the budget contract measured from outside (cudaMemGetInfo), and errors.
// The shared reference cases (test_distances.cpp, test_kernels.cpp, test_products.cpp) are compiled
// into the same executable with MEMSAFE_TEST_DEVICE: the same sweeps, on device memory.
#include <memsafe/cuda.cuh>

#include <sys/resource.h>

#include <array>
#include <numeric>
#include <random>

#include "../reference.hpp"
#include "device_vector.cuh"

using namespace ref;
namespace mc = memsafe::cuda;

namespace {


/// Reference k-nearest (L2) in double, ties to the lower index.
std::vector<std::int64_t> knn_ref(const std::vector<double>& x, const std::vector<double>& y, std::size_t n, std::size_t m,
                                  std::size_t d, std::size_t k) {
  const auto K = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  std::vector<std::int64_t> out(n * k);
  for (std::size_t i = 0; i < n; ++i) {
    auto s = row_sorted(K, m, i, false);
    for (std::size_t q = 0; q < k; ++q) out[i * k + q] = s[q].i;
  }
  return out;
}

/// m database points cycling through the `distinct` points of `base` (column j is point j % distinct):
/// every value ties with about m / distinct others.
std::vector<double> repeated(const std::vector<double>& base, std::size_t distinct, std::size_t m, std::size_t d) {
  std::vector<double> y(m * d);
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t c = 0; c < d; ++c) y[j * d + c] = base[(j % distinct) * d + c];
  return y;
}

/// The process's peak resident set, KiB.
long peak_rss_kib() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

std::size_t used_device_bytes() {
  std::size_t free = 0, total = 0;
  MEMSAFE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

}  // namespace

TEST_SUITE("gpu") {
TEST_CASE("fused, tile and GEMM paths give the reference k nearest on integer data, at every budget") {
  // d = 3 (fused, 4 rows/thread), 40 (fused, 64 registers), 100 (tile + cuBLAS GEMM + epilogue).
  for (std::size_t d : {3u, 40u, 100u}) {
    const std::size_t n = 300, m = 2000, k = 10;
    auto x = data(n, d, 21, true), y = data(m, d, 22, true);
    auto xf = cast<float>(x), yf = cast<float>(y);
    dvec<float> X(xf), Y(yf);
    const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), k);
    const auto want = knn_ref(x, y, n, m, d, k);
    for (const auto& r : eval_all(e)) {
      INFO("d = " << d << ", plan: " << r.stats.plan.reduction);
      CHECK(r.indices == want);
    }
  }
}

TEST_CASE("d = 100 far from the origin: cuBLAS only screens, values and ranks are the exact ones") {
  // Points at ‖x‖² ≈ 10⁶: the GEMM form ‖x‖² + ‖y‖² − 2x·y errs by ≈ 0.1 in FP32, which would turn a
  // duplicate's 0 into ~0.1 and hide differences of 2⁻¹⁶. Every query has, in Y, an exact duplicate
  // and three copies moved by q·2⁻⁸ (q = 1, 2, 3) along one coordinate, at scattered columns;
  // every value involved is exact in FP32, so the exact path gives them bit for bit.
  const std::size_t n = 64, m = 4096, d = 100;
  auto x = data(n, d, 51, true), y = data(m, d, 52, true);
  for (auto& a : x) a += 100;
  for (auto& a : y) a += 100;
  std::mt19937_64 g(53);
  std::vector<std::size_t> cols(m);
  std::iota(cols.begin(), cols.end(), std::size_t(0));
  std::shuffle(cols.begin(), cols.end(), g);
  std::vector<std::array<std::size_t, 4>> near(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t q = 0; q < 4; ++q) {
      const std::size_t j = cols[i * 4 + q];
      near[i][q] = j;
      for (std::size_t c = 0; c < d; ++c) y[j * d + c] = x[i * d + c];
      y[j * d + (i % d)] += double(q) / 256.0;
    }
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf), Y(yf);
  const auto P = [&] { return memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)); };
  const auto K = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return sq(a, b, dd); });
  // The direct kernels' FP32 values: the near copies' distances (q²/2¹⁶) are exact; a distance to
  // another query's shifted copy needs more than 24 bits and is rounded, as any FP32 evaluation
  // rounds it. So: the near entries exactly against the reference, every entry within FP32 rounding
  // of it with an index whose true distance is that value (ties under rounding either way), and the
  // screened runs bit for bit equal to the direct run (1 MiB: no cuBLAS), the screen's promise.
  const auto close = [](double got, double want) { return std::fabs(got - want) <= 1e-5 * (std::fabs(want) + 1); };
  const auto check_rows = [&](const memsafe::result<float>& r, std::size_t k, bool largest) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto s = row_sorted(K, m, i, largest);
      for (std::size_t q = 0; q < k; ++q) {
        const std::int64_t j = r.indices[i * k + q];
        const double v = double(r.values[i * k + q]);
        if (!largest && q < 4 && (j != std::int64_t(near[i][q]) || v != double(q * q) / 65536.0)) ++bad;
        if (!close(v, s[q].v) || j < 0 || j >= std::int64_t(m) || !close(K[i * m + std::size_t(j)], s[q].v)) ++bad;
      }
    }
    return bad;
  };
  // 1 MiB cannot hold cuBLAS's workspace: the exact semiring tile (the direct run); 8 and 64 MiB screen.
  const std::size_t direct_b = std::size_t(1) << 20;
  const auto check_run = [&](const memsafe::result<float>& r, std::size_t k, std::size_t b) {
    INFO("k = " << k << ", budget " << b << ", plan: " << r.stats.plan.reduction);
    CHECK((r.stats.plan.reduction.find("screen") != std::string::npos) == (b > direct_b));
    CHECK(r.stats.peak_temp_bytes <= b);
    CHECK(check_rows(r, k, false) == 0);
  };
  for (std::size_t k : {4u, 17u}) {  // tile + fold (k ≤ 16) and tile + block sort
    const auto e = memsafe::argkmin(P(), k);
    const auto direct = mc::eval(e, mc::options{direct_b});
    check_run(direct, k, direct_b);
    for (std::size_t b : {std::size_t(8) << 20, std::size_t(64) << 20}) {
      const auto r = mc::eval(e, mc::options{b});
      check_run(r, k, b);
      CHECK(r.indices == direct.indices);
      CHECK(r.values == direct.values);
    }
  }
  // argmin and the largest first (argkmax of the distance) take the same screen.
  const auto am = mc::eval(memsafe::argmin(P()), mc::options{std::size_t(64) << 20});
  const auto fk = mc::eval(memsafe::argkmax(P(), 3), mc::options{std::size_t(64) << 20});
  const auto fk_direct = mc::eval(memsafe::argkmax(P(), 3), mc::options{direct_b});
  CHECK(fk.stats.plan.reduction.find("screen") != std::string::npos);
  CHECK(fk_direct.stats.plan.reduction.find("screen") == std::string::npos);
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(am.indices[i] == std::int64_t(near[i][0]));
    CHECK(am.values[i] == 0.0f);
  }
  CHECK(check_rows(fk, 3, true) == 0);
  CHECK(fk.indices == fk_direct.indices);
  CHECK(fk.values == fk_direct.values);
  // A kernel sum of the same points is not screened: the semiring tile's exact distances, so each
  // query's duplicate contributes k(0) = 1 (a GEMM-form distance of 0.1 would give 0.73).
  std::vector<float> v(m, 0.0f);
  for (std::size_t i = 0; i < n; ++i) v[near[i][0]] = 1.0f;
  dvec<float> V(v);
  const auto mv = memsafe::matern12(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d), 1.0) *
                  memsafe::vec(V.p, m);
  const auto r = mc::eval(mv, mc::options{std::size_t(64) << 20});
  CHECK(r.stats.plan.reduction.find("cuBLAS") == std::string::npos);
  std::vector<double> want(n, 0.0), scale(n, 1.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t i2 = 0; i2 < n; ++i2) want[i] += std::exp(-std::sqrt(K[i * m + near[i2][0]]));
  expect_close(r.values, want, scale, "matern12 K*v at d = 100");
}

TEST_CASE("d = 100 at a tiny scale (products underflow): the screened runs equal the direct run") {
  // Coordinates ≈ 1e-22 (float) and 1e-160 (double): products and squares are subnormal, where
  // rounding errs absolutely, beyond the relative margin δN; the margin's η_T covers it
  // (kernels_screen.cuh, "Underflow"). Duplicates give ties at 0.
  const std::size_t n = 48, m = 4096, d = 100;
  const auto run = [&](auto zero, double scale) {
    using T = decltype(zero);
    auto x = data(n, d, 61), y = data(m, d, 62);
    for (std::size_t j = 0; j + 1 < m; j += 7)
      for (std::size_t c = 0; c < d; ++c) y[(j + 1) * d + c] = y[j * d + c];
    std::vector<T> xs(n * d), ys(m * d);
    for (std::size_t q = 0; q < n * d; ++q) xs[q] = T(x[q] * scale);
    for (std::size_t q = 0; q < m * d; ++q) ys[q] = T(y[q] * scale * (q % 5 == 0 ? 30.0 : 1.0));
    dvec<T> X(xs), Y(ys);
    const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), 10);
    const std::size_t direct_b = std::size_t(1) << 20;
    const auto direct = mc::eval(e, mc::options{direct_b});
    CHECK(direct.stats.plan.reduction.find("screen") == std::string::npos);
    for (std::size_t b : {std::size_t(8) << 20, std::size_t(64) << 20}) {
      INFO("scale " << scale << ", budget " << b);
      const auto r = mc::eval(e, mc::options{b});
      if constexpr (std::is_same_v<T, float>) CHECK(r.stats.plan.reduction.find("screen") != std::string::npos);
      CHECK(r.indices == direct.indices);
      CHECK(r.values == direct.values);
    }
  };
  for (double s : {1e-22, 3e-21}) run(0.0f, s);
  run(0.0, 1e-160);
}

TEST_CASE("cosine at d = 100: the TF32 screen keeps the direct run's values and ranks bit for bit") {
  // Each query i ≥ 1 has, at scattered columns, an exact duplicate, a copy scaled by 2 (cosine
  // distance 0 in exact arithmetic as well), and three copies moved by q·77/256 (q = 1, 2, 3) along
  // one coordinate: cosine distances ≈ 1.1e-4·q², closer together than a TF32 product's error
  // (≈ 2⁻¹⁰ of ‖x‖‖y‖), so the screen alone could not rank them; the exact re-evaluation must. Query
  // 0 is the zero vector (distance exactly 1 to everything: the lowest columns win), and column 1 is
  // zero too. Every coordinate is exact in FP32, so the double reference ranks what FP32 computes.
  const std::size_t n = 48, m = 6000, d = 100;
  auto x = data(n, d, 61, true), y = data(m, d, 62, true);
  for (std::size_t c = 0; c < d; ++c) x[c] = y[d + c] = 0;
  std::mt19937_64 g(63);
  std::vector<std::size_t> cols(m - 2);
  std::iota(cols.begin(), cols.end(), std::size_t(2));
  std::shuffle(cols.begin(), cols.end(), g);
  std::vector<std::array<std::size_t, 5>> near(n);
  for (std::size_t i = 1; i < n; ++i)
    for (std::size_t q = 0; q < 5; ++q) {
      const std::size_t j = cols[i * 5 + q];
      near[i][q] = j;
      for (std::size_t c = 0; c < d; ++c) y[j * d + c] = x[i * d + c] * (q == 1 ? 2.0 : 1.0);
      if (q >= 2) y[j * d + (i % d)] += double(q - 1) * 77.0 / 256.0;
    }
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf), Y(yf);
  const auto P = [&] { return memsafe::cosine(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)); };
  const auto K = dense(x, y, n, m, d, [](const double* a, const double* b, std::size_t dd) { return cosd(a, b, dd); });
  const std::size_t direct_b = std::size_t(1) << 20;  // no room for cuBLAS's workspace: the semiring tile
  const auto close = [](double got, double want) { return std::fabs(got - want) <= 2e-5; };
  for (std::size_t k : {4u, 17u}) {  // tile + fold (k ≤ 16) and tile + block sort
    const auto direct = mc::eval(memsafe::argkmin(P(), k), mc::options{direct_b});
    CHECK(direct.stats.plan.reduction.find("screen") == std::string::npos);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto s = row_sorted(K, m, i, false);
      const std::int64_t* r = direct.indices.data() + i * k;
      for (std::size_t q = 0; q < k; ++q) {
        const double v = double(direct.values[i * k + q]);
        if (i == 0 && (r[q] != std::int64_t(q) || v != 1.0)) ++bad;
        if (!close(v, s[q].v) || r[q] < 0 || r[q] >= std::int64_t(m) || !close(K[i * m + std::size_t(r[q])], s[q].v)) ++bad;
      }
      if (i == 0) continue;
      const bool pair = (r[0] == std::int64_t(near[i][0]) && r[1] == std::int64_t(near[i][1])) ||
                        (r[0] == std::int64_t(near[i][1]) && r[1] == std::int64_t(near[i][0]));
      if (!pair || r[2] != std::int64_t(near[i][2]) || r[3] != std::int64_t(near[i][3])) ++bad;
      if (k > 4 && r[4] != std::int64_t(near[i][4])) ++bad;
    }
    CHECK(bad == 0);
    for (std::size_t b : {std::size_t(8) << 20, std::size_t(64) << 20}) {
      const auto e = memsafe::argkmin(P(), k);
      const auto r = mc::eval(e, mc::options{b});
      INFO("k = " << k << ", budget " << b << ", plan: " << r.stats.plan.reduction);
      CHECK(r.stats.plan.reduction.find("screen") != std::string::npos);
      CHECK(r.stats.peak_temp_bytes <= b);
      CHECK(r.indices == direct.indices);
      CHECK(r.values == direct.values);
    }
  }
  // The farthest first (argkmax) and argmin take the same screen.
  for (const bool largest : {false, true}) {
    const auto run = [&](std::size_t b) {
      return largest ? mc::eval(memsafe::argkmax(P(), 3), mc::options{b}) : mc::eval(memsafe::argmin(P()), mc::options{b});
    };
    const auto a = run(std::size_t(64) << 20), a_direct = run(direct_b);
    CHECK(a.stats.plan.reduction.find("screen") != std::string::npos);
    CHECK(a.indices == a_direct.indices);
    CHECK(a.values == a_direct.values);
  }
}

TEST_CASE("warp-list selections at d = 100: tied duplicates go to the lowest indices, screened or not, at every budget") {
  // 16 distinct database points, each repeated across m = 20,000 columns (column j is point j % 16):
  // every value ties with ~1250 others, so the k kept are exactly the lowest columns of the nearest
  // point(s), and the lane filters' tie rule (a later column never displaces an equal value) and
  // the shift-by-one-lane insertion are both exercised, across column chunks and splits. Integer
  // coordinates: every distance is exact in FP32, so the values equal the host's bit for bit.
  const std::size_t n = 40, m = 20000, d = 100, distinct = 16;
  auto x = data(n, d, 71, true), y = repeated(data(distinct, d, 72, true), distinct, m, d);
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf), Y(yf);
  const auto Xd = memsafe::points(X.p, n, d), Yd = memsafe::points(Y.p, m, d);
  const auto Xh = memsafe::points(xf.data(), n, d), Yh = memsafe::points(yf.data(), m, d);
  const memsafe::options host{memsafe::unlimited, 1};
  const auto same = [&](const memsafe::result<float>& g, const memsafe::result<float>& h, const char* what,
                        std::size_t b) {
    INFO(what << ", budget " << b << ", plan: " << g.stats.plan.reduction);
    CHECK(g.indices == h.indices);
    CHECK(g.values == h.values);
    CHECK(g.stats.peak_temp_bytes <= b);
  };
  for (std::size_t b : {std::size_t(1) << 20, std::size_t(6) << 20, std::size_t(64) << 20}) {
    for (std::size_t k : {1u, 4u, 10u, 16u}) {
      same(mc::eval(memsafe::argkmin(memsafe::sqdist(Xd, Yd), k), mc::options{b}),
           memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xh, Yh), k), host), "argkmin sqdist", b);
      same(mc::eval(memsafe::argkmin(memsafe::l1(Xd, Yd), k), mc::options{b}),
           memsafe::eval(memsafe::argkmin(memsafe::l1(Xh, Yh), k), host), "argkmin l1", b);
    }
    // A decreasing map (the RBF kernel of the squared distance), the largest first: the device's
    // expf and the host's exp may differ in the last place, so the values within 1e-6.
    const auto kg = mc::eval(memsafe::argkmax(memsafe::rbf(Xd, Yd, 30.0, 1.0), 10), mc::options{b});
    const auto kh = memsafe::eval(memsafe::argkmax(memsafe::rbf(Xh, Yh, 30.0, 1.0), 10), host);
    CHECK(kg.indices == kh.indices);
    for (std::size_t q = 0; q < kh.values.size(); ++q) CHECK(std::fabs(kg.values[q] - kh.values[q]) <= 1e-6f);
    const auto am = mc::eval(memsafe::argmin(memsafe::sqdist(Xd, Yd)), mc::options{b});
    const auto amh = memsafe::eval(memsafe::argmin(memsafe::sqdist(Xh, Yh)), host);
    same(am, amh, "argmin sqdist", b);
    if (b > (std::size_t(4) << 20)) CHECK(am.stats.plan.reduction.find("screen") != std::string::npos);
  }
}

TEST_CASE("fused selections (d <= 64): tied duplicates, ragged row blocks, every coordinate width, f32 and f64") {
  // The fused selection kernel: a warp owns 8 query rows (45 rows: the last warp's rows partly past
  // the end), each row's k best spread over the lanes, the lanes splitting the columns; 16 distinct
  // database points repeated over m = 5000 columns, so every value ties ~312 times and the kept
  // keys are the lowest columns of the nearest points, across column chunks and splits. The widths
  // cover one and several chunks of four coordinates, the padded shared-memory columns (8, 16 and
  // 64 coordinates) and, in double at d = 64, a layout above 48 KiB (the raised launch limit).
  // Integer coordinates: every value is exact, so the device equals the host bit for bit.
  const std::size_t n = 45, m = 5000, distinct = 16;
  const auto check_type = [&](auto zero, std::size_t d) {
    using T = decltype(zero);
    auto x = data(n, d, 81 + unsigned(d), true), y = repeated(data(distinct, d, 82 + unsigned(d), true), distinct, m, d);
    auto xt = cast<T>(x), yt = cast<T>(y);
    dvec<T> X(xt), Y(yt);
    const auto Xd = memsafe::points(X.p, n, d), Yd = memsafe::points(Y.p, m, d);
    const auto Xh = memsafe::points(xt.data(), n, d), Yh = memsafe::points(yt.data(), m, d);
    const memsafe::options host{memsafe::unlimited, 1};
    const auto same = [&](const memsafe::result<T>& g, const memsafe::result<T>& h, const char* what, std::size_t b) {
      INFO(what << ", d = " << d << ", " << sizeof(T) * 8 << "-bit, budget " << b << ", plan: " << g.stats.plan.reduction);
      CHECK(g.stats.plan.reduction.find("fused") != std::string::npos);
      CHECK(g.indices == h.indices);
      CHECK(g.values == h.values);
      CHECK(g.stats.peak_temp_bytes <= b);
    };
    for (std::size_t b : {std::size_t(64) << 10, std::size_t(64) << 20}) {
      for (std::size_t k : {1u, 4u, 10u, 16u}) {
        same(mc::eval(memsafe::argkmin(memsafe::sqdist(Xd, Yd), k), mc::options{b}),
             memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xh, Yh), k), host), "argkmin sqdist", b);
        same(mc::eval(memsafe::argkmax(memsafe::l1(Xd, Yd), k), mc::options{b}),
             memsafe::eval(memsafe::argkmax(memsafe::l1(Xh, Yh), k), host), "argkmax l1", b);
      }
      same(mc::eval(memsafe::argmin(memsafe::sqdist(Xd, Yd)), mc::options{b}),
           memsafe::eval(memsafe::argmin(memsafe::sqdist(Xh, Yh)), host), "argmin sqdist", b);
      same(mc::eval(memsafe::max(memsafe::l1(Xd, Yd)), mc::options{b}),
           memsafe::eval(memsafe::max(memsafe::l1(Xh, Yh)), host), "max l1", b);
    }
  };
  for (std::size_t d : {1u, 3u, 5u, 8u, 10u, 16u, 33u, 64u}) {
    check_type(0.0f, d);
    check_type(0.0, d);
  }
}

TEST_CASE("RBF K*v in float by the hardware 2^x: d = 1..5 and 16, ARD, NaN and inf rows, within its error bound at every budget") {
  // fused_rows_kernel's exp2 form (kernels_pairwise.cuh): each entry 2^(l·r²) by ex2.approx.ftz
  // with l = −log2(e)/(2ℓ²) rounded once, the amplitude σ² once per tile partial, the exact
  // coordinate counts at d < 4. Bound on the float64 reference Σ_j σ² e^(−r²/2ℓ²) v_j (inputs as
  // rounded to float): per entry 2 ulp (the instruction) + the exponent's roundings, at most
  // (d + 3)·2^−24 relative, which move σ²·2^(l·r²) by at most (d + 3)·2^−25·σ² (max of e·2^−e·ln 2);
  // the tile's float partial sums of ≤ 128 terms; the amplitude and the final rounding.
  const std::size_t n = 200, m = 3000;
  const double ls = 0.9, var = 1.7;
  const double ls_ard[3] = {0.6, 1.4, 2.5};
  for (std::size_t d : {1u, 2u, 3u, 4u, 5u, 16u}) {
    for (bool ard : {false, true}) {
      if (ard && d != 3) continue;
      auto x = data(n, d, 91 + unsigned(d), false), y = data(m, d, 92 + unsigned(d), false), v = data(m, 1, 93, false);
      x[0] = std::nan("");                               // row 0: NaN
      for (std::size_t c = 0; c < d; ++c) x[d + c] = 1e30;  // row 1: beyond float: +inf
      auto xf = cast<float>(x), yf = cast<float>(y), vf = cast<float>(v);
      std::vector<float> lf(ls_ard, ls_ard + 3);
      const auto xs = seen<float>(x), ys = seen<float>(y), vs = seen<float>(v);
      float* Xd = on_device(xf);
      float* Yd = on_device(yf);
      float* Vd = on_device(vf);
      const auto X = memsafe::points(Xd, n, d), Y = memsafe::points(Yd, m, d);
      const auto run_all = [&](const auto& K) { return eval_all(K * memsafe::vec(Vd, m)); };
      const auto rs = ard ? run_all(memsafe::rbf(X, Y, memsafe::ard(lf.data(), 3), var)) : run_all(memsafe::rbf(X, Y, ls, var));
      double lsq[3];
      for (std::size_t c = 0; c < 3; ++c) lsq[c] = double(lf[c]);
      for (const auto& r : rs) {
        INFO("d = " << d << (ard ? " (ARD)" : "") << ", plan: " << r.stats.plan.reduction);
        CHECK(r.stats.plan.reduction.find("fused") != std::string::npos);
        REQUIRE(r.values.size() == n);
        CHECK(std::isnan(r.values[0]));
        CHECK(r.values[1] == 0.0f);
        int bad = 0;
        for (std::size_t i = 2; i < n; ++i) {
          double want = 0, mag = 0, vabs = 0;
          for (std::size_t j = 0; j < m; ++j) {
            const double r2 = ard ? sq(&xs[i * d], &ys[j * d], d, lsq) : sq(&xs[i * d], &ys[j * d], d) / (ls * ls);
            const double t = var * std::exp(-0.5 * r2) * vs[j];
            want += t, mag += std::abs(t), vabs += std::abs(vs[j]);
          }
          const double bound = (0x1p-22 + 132 * 0x1p-24) * mag + double(d + 3) * 0x1p-25 * var * vabs + 0x1p-24 * std::abs(want);
          if (!(std::abs(double(r.values[i]) - want) <= bound) && bad++ < 3)
            CHECK_MESSAGE(false, "row " << i << ": " << r.values[i] << " vs " << want << " (bound " << bound << ")");
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("symmetric K(X, X)*v (each pair once, in bands): ragged bands, every coordinate width, f32 exp2 and f64, against the reference and the plain form") {
  // fused_sym_kernel (kernels_pairwise.cuh) with rows.cuh's run_symmetric, forced on at sizes a
  // CPU reference can check (MEMSAFE_SYMMETRIC=on; by default it waits for n large enough to fill
  // the GPU, test_cuda_plan.cu). n = 3000 in float: three bands of 1024 rows, the last ragged, so
  // both bands before it fold pairs both ways, over ragged last tiles and 32-column groups.
  const double ls = 0.8, var = 1.3;
  const auto check_kv = [&](auto tag, std::size_t n, std::size_t d, int kernel) {
    using T = decltype(tag);
    INFO("T = " << (sizeof(T) == 4 ? "float" : "double") << ", n = " << n << ", d = " << d << ", kernel " << kernel);
    auto x = data(n, d, 300 + unsigned(d) + unsigned(kernel), false), v = data(n, 1, 301, false);
    auto xt = cast<T>(x), vt = cast<T>(v);
    const auto xs = seen<T>(x), vs = seen<T>(v);
    T* Xd = on_device(xt);
    T* Vd = on_device(vt);
    const auto X = memsafe::points(Xd, n, d);
    const auto run_kv = [&](const char* mode) {
      const ref::scoped_env e("MEMSAFE_SYMMETRIC", mode);
      if (kernel == 0) return eval_all(memsafe::rbf(X, X, ls, var) * memsafe::vec(Vd, n));
      return eval_all(memsafe::matern32(X, X, ls, var) * memsafe::vec(Vd, n));
    };
    const auto sym = run_kv("on"), plain = run_kv("off");
    std::vector<double> want(n), mag(n);
    double vabs = 0;
    for (std::size_t j = 0; j < n; ++j) vabs += std::abs(vs[j]);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const double r = std::sqrt(sq(&xs[i * d], &xs[j * d], d)) / ls;
        const double k = kernel == 0 ? var * std::exp(-0.5 * r * r) : var * (1 + std::sqrt(3.0) * r) * std::exp(-std::sqrt(3.0) * r);
        want[i] += k * vs[j], mag[i] += std::abs(k * vs[j]);
      }
    // Float: the exp2 form's bound (the RBF test above) — tile partials of ≤ 128 terms in T for the
    // rows, ≤ 8 + 32 + 4 roundings for a column sum of a row block; double: 1e-12 of the magnitudes.
    const double u = sizeof(T) == 4 ? 0x1p-24 : 0x1p-53;
    bool any_sym = false;
    for (std::size_t q = 0; q < sym.size(); ++q) {
      const auto& r = sym[q];
      INFO("plan: " << r.stats.plan.reduction << ", budget " << r.stats.plan.budget);
      any_sym |= r.stats.plan.symmetric;
      CHECK_FALSE(plain[q].stats.plan.symmetric);
      REQUIRE(r.values.size() == n);
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double bound = sizeof(T) == 4 ? (0x1p-22 + 136 * u) * mag[i] + double(d + 3) * 0x1p-25 * var * vabs + u * std::abs(want[i])
                                            : 1e-12 * mag[i];
        for (const T got : {r.values[i], plain[q].values[i]})
          if (!(std::abs(double(got) - want[i]) <= bound) && bad++ < 3)
            CHECK_MESSAGE(false, "row " << i << ": " << got << " vs " << want[i] << " (bound " << bound << ")");
      }
      CHECK(bad == 0);
    }
    CHECK(any_sym);
    // Deterministic: the same plan gives the same bits.
    const ref::scoped_env e("MEMSAFE_SYMMETRIC", "on");
    const auto again = kernel == 0 ? run(memsafe::rbf(X, X, ls, var) * memsafe::vec(Vd, n), {memsafe::unlimited, 1})
                                   : run(memsafe::matern32(X, X, ls, var) * memsafe::vec(Vd, n), {memsafe::unlimited, 1});
    CHECK(again.stats.plan.symmetric);
    CHECK(again.values == sym.back().values);
  };
  for (std::size_t d : {1u, 2u, 3u, 4u, 7u, 20u}) check_kv(float{}, 3000, d, 0);
  check_kv(float{}, 2100, 3, 1);
  check_kv(double{}, 1700, 3, 0);
  check_kv(double{}, 1300, 5, 1);
}

TEST_CASE("symmetric K(X, X)*v, small for the sanitizers: two bands, the second ragged, f32 and f64") {
  // n = 1100: a band of 1024 rows folding the 76 rows right of it both ways (one ragged tile, a
  // ragged 32-column group), then a band of 76 rows; against the plain form.
  const ref::scoped_env e("MEMSAFE_SYMMETRIC", "on");
  const std::size_t n = 1100, d = 3;
  const auto x = data(n, d, 321, false), v = data(n, 1, 322, false);
  const auto both = [&](auto tag) {
    using T = decltype(tag);
    auto xt = cast<T>(x), vt = cast<T>(v);
    const auto X = memsafe::points(on_device(xt), n, d);
    const auto kv = memsafe::rbf(X, X, 0.7, 1.1) * memsafe::vec(on_device(vt), n);
    const auto s = mc::eval(kv, mc::options{memsafe::unlimited});
    CHECK(s.stats.plan.symmetric);
    const ref::scoped_env off("MEMSAFE_SYMMETRIC", "off");
    const auto p = mc::eval(kv, mc::options{memsafe::unlimited});
    CHECK_FALSE(p.stats.plan.symmetric);
    REQUIRE(s.values.size() == n);
    double worst = 0, top = 0;
    for (std::size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::abs(double(s.values[i]) - double(p.values[i])));
      top = std::max(top, std::abs(double(p.values[i])));
    }
    CHECK(worst <= (sizeof(T) == 4 ? 1e-5 : 1e-13) * top);
  };
  both(float{});
  both(double{});
}

TEST_CASE("symmetric K(X, X)*v: a NaN point poisons every row; diagonal terms need v in host memory") {
  // k(x_i, x_0)·v_0 is NaN for every i, in both forms. (K + s·I)·v applies s·v on the host after
  // the device pass: with v in device memory that is an argument_error before any work (it used to
  // read device memory from the host: a crash); with v in host memory the plain form runs.
  const double ls = 0.8, var = 1.3;
  const std::size_t n = 2500, d = 3;
  auto x = data(n, d, 311, false), v = data(n, 1, 312, false);
  auto xf = cast<float>(x), vf = cast<float>(v);
  const auto xs = seen<float>(x), vs = seen<float>(v);
  float* Xd = on_device(xf);
  float* Vd = on_device(vf);
  const auto X = memsafe::points(Xd, n, d);
  const ref::scoped_env e("MEMSAFE_SYMMETRIC", "on");
  CHECK_THROWS_AS(mc::eval((memsafe::rbf(X, X, ls, var) + 0.5 * memsafe::identity(n)) * memsafe::vec(Vd, n),
                           mc::options{memsafe::unlimited}),
                  memsafe::argument_error);
  const auto Kn = mc::eval((memsafe::rbf(X, X, ls, var) + 0.5 * memsafe::identity(n)) * memsafe::vec(vf.data(), n),
                           mc::options{memsafe::unlimited});
  CHECK_FALSE(Kn.stats.plan.symmetric);
  for (std::size_t i = 0; i < n; i += 97) {
    double want = 0.5 * vs[i], mag = 0.5 * std::abs(vs[i]);
    for (std::size_t j = 0; j < n; ++j) {
      const double t = var * std::exp(-0.5 * sq(&xs[i * d], &xs[j * d], d) / (ls * ls)) * vs[j];
      want += t, mag += std::abs(t);
    }
    CHECK(std::abs(double(Kn.values[i]) - want) <= 1e-5 * mag);
  }
  const auto sym = mc::eval(memsafe::rbf(X, X, ls, var) * memsafe::vec(Vd, n), mc::options{memsafe::unlimited});
  CHECK(sym.stats.plan.symmetric);
  std::vector<float> xbad = xf;
  xbad[0] = std::nanf("");
  float* Xb = on_device(xbad);
  const auto Xn = memsafe::points(Xb, n, d);
  const auto nan_run = mc::eval(memsafe::rbf(Xn, Xn, ls, var) * memsafe::vec(Vd, n), mc::options{memsafe::unlimited});
  CHECK(nan_run.stats.plan.symmetric);
  int finite = 0;
  for (const float y : nan_run.values) finite += std::isfinite(y) ? 1 : 0;
  CHECK(finite == 0);
}

TEST_CASE("top-k by block sort: k = 17, 300 and 2048 equal the reference") {
  const std::size_t n = 40, m = 5000, d = 4;
  auto x = data(n, d, 31, true), y = data(m, d, 32, true);
  auto xd = cast<double>(x), yd = cast<double>(y);
  dvec<double> X(xd), Y(yd);
  for (std::size_t k : {17u, 300u, 2048u}) {
    const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), k);
    const auto r = mc::eval(e, mc::options{std::size_t(64) << 20});
    CHECK(r.stats.plan.reduction.find("block radix sort") != std::string::npos);
    CHECK(r.indices == knn_ref(x, y, n, m, d, k));
    CHECK(r.stats.peak_temp_bytes <= r.stats.budget_bytes);
  }
  const auto big = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), 2049);
  CHECK_THROWS_AS((void)mc::eval(big, mc::options{std::size_t(64) << 20}), memsafe::argument_error);
}

TEST_CASE("host-resident inputs are streamed through the budget: same answers, peak within the budget") {
  const std::size_t n = 500, m = 20000, d = 16, k = 5;
  auto x = data(n, d, 41, true), y = data(m, d, 42, true);
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf);
  const auto want = knn_ref(x, y, n, m, d, k);
  // Y stays in (pageable) host memory; a budget far smaller than Y forces many double-buffered chunks.
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(yf.data(), m, d)), k);
  for (std::size_t b : {std::size_t(256) << 10, std::size_t(1) << 20, std::size_t(64) << 20}) {
    const auto r = mc::eval(e, mc::options{b});
    CHECK(r.indices == want);
    CHECK(r.stats.peak_temp_bytes <= b);
    if (b < m * d * sizeof(float)) CHECK(r.stats.tile_cols < m);
  }
  // Both X and Y on the host, and K·v with v on the host.
  std::vector<float> v(m, 0.5f);
  const auto mv = memsafe::rbf(memsafe::points(xf.data(), n, d), memsafe::points(yf.data(), m, d), 4.0) * memsafe::vec(v.data(), m);
  const auto host = memsafe::eval(mv, memsafe::options{std::size_t(64) << 20, 2});
  const auto dev = mc::eval(mv, mc::options{std::size_t(512) << 10});
  std::vector<double> want_mv(host.values.begin(), host.values.end()), scale(n);
  for (std::size_t i = 0; i < n; ++i) scale[i] = 0.5 * double(m);
  expect_close(dev.values, want_mv, scale, "streamed K*v");
  CHECK(dev.stats.peak_temp_bytes <= std::size_t(512) << 10);
}

TEST_CASE("device outputs, a caller stream, and the budget seen from outside") {
  const std::size_t n = 2048, m = 4096, d = 8, k = 8;
  auto x = data(n, d, 51), y = data(m, d, 52);
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf), Y(yf), vals(n * k);
  dvec<memsafe::index_t> idx(n * k);
  cudaStream_t s;
  MEMSAFE_CUDA_CHECK(cudaStreamCreate(&s));
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), k);
  const std::size_t budget = std::size_t(8) << 20;
  const std::size_t before = used_device_bytes();
  const auto st = mc::eval_into(e, vals.p, idx.p, mc::options{budget, s});
  const std::size_t after = used_device_bytes();
  CHECK(st.peak_temp_bytes <= budget);
  CHECK(after <= before + budget);  // stream-ordered frees: nothing held after the call
  // The reference reads the host copies (the host backend dereferences its inputs' pointers).
  const auto host = memsafe::eval(
      memsafe::argkmin(memsafe::sqdist(memsafe::points(xf.data(), n, d), memsafe::points(yf.data(), m, d)), k),
      memsafe::options{std::size_t(64) << 20, 2});
  CHECK(idx.host() == host.indices);
  MEMSAFE_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("too small a budget is a budget_error before any device allocation, naming the minimum") {
  const std::size_t n = 100, m = 100, d = 3;
  std::vector<float> x(n * d, 1.0f);
  dvec<float> X(x);
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(X.p, m, d)), 3);
  const std::size_t mn = mc::plan_for(e, mc::options{memsafe::unlimited}).min_bytes;
  try {
    (void)mc::eval(e, mc::options{mn - 1});
    FAIL("no budget_error");
  } catch (const memsafe::budget_error& err) {
    CHECK(err.minimum_bytes == mn);
    CHECK(std::string(err.what()).find(std::to_string(mn)) != std::string::npos);
  }
  CHECK(mc::eval(e, mc::options{mn}).stats.peak_temp_bytes <= mn);

  // eval's result is the caller's memory, not a temporary, and may be far larger than the budget:
  // eval plans for host outputs first and allocates the result only for a plan that fits. A 4 GiB
  // result (dense 2^15 x 2^15 floats) under a 1-byte budget is a budget_error that leaves the
  // process's peak RSS where it was (before, the result was allocated and zeroed, then refused).
  const std::size_t big = std::size_t(1) << 15;
  std::vector<float> xb(big);
  for (std::size_t i = 0; i < big; ++i) xb[i] = float(i % 977);
  dvec<float> XB(xb);
  const auto P = memsafe::points(XB.p, big, 1);
  const long peak0 = peak_rss_kib();
  CHECK_THROWS_AS((void)mc::eval(memsafe::dense(memsafe::sqdist(P, P)), memsafe::budget_bytes(1)), memsafe::budget_error);
  CHECK_THROWS_AS((void)mc::eval(memsafe::argkmin(memsafe::sqdist(P, P), 2048), memsafe::budget_bytes(1)),
                  memsafe::budget_error);
  CHECK(peak_rss_kib() - peak0 < (1L << 20));  // KiB: less than 1 GiB more
}

TEST_CASE("plan_for plans with the device's resources, as eval does; a given device needs no GPU") {
  const std::size_t n = 5000, m = 3000, d = 3;
  std::vector<float> x(n * d, 1.0f), y(m * d, 2.0f);
  dvec<float> X(x), Y(y);
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), 3);
  const mc::options o{std::size_t(64) << 20};
  const mc::device_resources here = mc::device_resources::current();
  CHECK(here.sms > 0);
  CHECK(here.memory_bytes > 0);
  const auto planned = mc::plan_for(e, o);
  CHECK(planned.threads == mc::plan_for(e, o, here).threads);
  const auto st = mc::eval(e, o).stats;  // device inputs, host outputs: what plan_for assumes
  CHECK(st.plan.threads == planned.threads);
  CHECK(st.plan.tile_rows == planned.tile_rows);
  CHECK(st.plan.tile_cols == planned.tile_cols);
  // Fewer SMs, fewer column splits (4 blocks per SM); the budget model is the same.
  const auto small = mc::plan_for(e, o, mc::device_resources{1, std::size_t(1) << 30});
  CHECK(small.threads <= planned.threads);
  CHECK(small.min_bytes == planned.min_bytes);
  // The budget given the other two ways: a template parameter, budget_bytes in place of options.
  constexpr std::size_t b = std::size_t(64) << 20;
  CHECK(mc::plan_for<memsafe::budget<b>>(e).tile_cols == planned.tile_cols);
  CHECK(mc::plan_for(e, memsafe::budget_bytes(b)).tile_cols == planned.tile_cols);
  std::vector<float> v(n * 3);
  std::vector<memsafe::index_t> ix(n * 3);
  CHECK(mc::eval_into<memsafe::budget<b>>(e, v.data(), ix.data()).budget_bytes == b);
  CHECK(mc::eval_into(e, v.data(), ix.data(), memsafe::budget_bytes(b)).budget_bytes == b);
}

TEST_CASE("NaN ranks last and ties go to the lower index on the device, as on the host") {
  const std::size_t n = 3, m = 6, d = 1;
  std::vector<float> x = {0.f, 1.f, 2.f};
  std::vector<float> y = {1.f, NAN, 1.f, -1.f, 3.f, NAN};
  dvec<float> X(x), Y(y);
  const auto K = memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d));
  const auto g = mc::eval(memsafe::argkmin(K, 6), mc::options{std::size_t(1) << 20});
  const auto h = memsafe::eval(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)), 6),
                               memsafe::options{std::size_t(1) << 20, 1});
  CHECK(g.indices == h.indices);
  CHECK(g.indices[0] == 0);  // x = 0: y = 1 (index 0) ties y = −1 (3) and y = 1 (2): lowest index first
  CHECK(g.indices[4] == 1);  // then the NaNs, lower index first
  CHECK(g.indices[5] == 5);
  const auto lse = mc::eval(memsafe::logsumexp(K), mc::options{std::size_t(1) << 20});
  for (std::size_t i = 0; i < n; ++i) CHECK(std::isnan(lse.values[i]));
}

TEST_CASE("lazy x lazy (Kuf * transpose(Kuf)) by tiles and cuBLAS accumulation, device and host outputs") {
  const std::size_t n = 300, mz = 45, d = 3;
  auto x = data(n, d, 61), z = data(mz, d, 62);
  auto xf = cast<double>(x), zf = cast<double>(z);
  dvec<double> X(xf), Z(zf);
  const auto Kuf = memsafe::rbf(memsafe::points(Z.p, mz, d), memsafe::points(X.p, n, d), 1.3);
  const auto e = 2.0 * Kuf * memsafe::transpose(Kuf);
  const auto Kr = dense(seen<double>(z), seen<double>(x), mz, n, d,
                        [](const double* a, const double* b, std::size_t dd) { return std::exp(-0.5 * sq(a, b, dd) / (1.3 * 1.3)); });
  std::vector<double> want(mz * mz, 0), scale(mz * mz, 0);
  for (std::size_t p = 0; p < mz; ++p)
    for (std::size_t q = 0; q < mz; ++q)
      for (std::size_t t = 0; t < n; ++t) {
        want[p * mz + q] += 2.0 * Kr[p * n + t] * Kr[q * n + t];
        scale[p * mz + q] += std::fabs(2.0 * Kr[p * n + t] * Kr[q * n + t]);
      }
  for (const auto& r : eval_all(e)) expect_close(r.values, want, scale, "Kuf Kuf^T");
  dvec<double> out(mz * mz);
  const std::size_t budget = std::size_t(8) << 20;  // above the 4 MiB cuBLAS workspace the plan counts
  const auto st = mc::eval_into(e, out.p, nullptr, mc::options{budget});
  CHECK(st.peak_temp_bytes <= budget);
  expect_close(out.host(), want, scale, "Kuf Kuf^T into device memory");
}

TEST_CASE("symmetric_product on the device: the lower blocks computed, the upper ones their exact mirror") {
  const std::size_t n = 200, mz = 70, d = 4;
  auto x = data(n, d, 81), z = data(mz, d, 82);
  auto xf = cast<float>(x), zf = cast<float>(z);
  dvec<float> X(xf), Z(zf);
  const auto Kuf = memsafe::rbf(memsafe::points(Z.p, mz, d), memsafe::points(X.p, n, d), 0.8);
  const auto e = Kuf * memsafe::transpose(Kuf);
  const auto Kr = dense(seen<float>(z), seen<float>(x), mz, n, d,
                        [](const double* a, const double* b, std::size_t dd) { return std::exp(-0.5 * sq(a, b, dd) / 0.64); });
  std::vector<double> want(mz * mz, 0), scale(mz * mz, 0);
  for (std::size_t p = 0; p < mz; ++p)
    for (std::size_t q = 0; q < mz; ++q)
      for (std::size_t t = 0; t < n; ++t) {
        want[p * mz + q] += Kr[p * n + t] * Kr[q * n + t];
        scale[p * mz + q] += std::fabs(Kr[p * n + t] * Kr[q * n + t]);
      }
  const std::size_t mn = mc::plan_for(e, mc::options{memsafe::unlimited}).min_bytes;
  // The minimum (1×1 blocks), a budget for blocks that do not divide 70, and one block.
  for (std::size_t b : {mn, mn + (std::size_t(24) << 10), std::size_t(64) << 20}) {
    const auto p = mc::plan_for(e, mc::options{b});
    INFO("budget " << b << ": " << p.tile_rows << " x " << p.tile_cols << " blocks");
    CHECK(p.symmetric);
    CHECK(p.tile_rows == p.tile_cols);
    CHECK(p.num_tiles == p.row_blocks * (p.row_blocks + 1) / 2 * p.inner_blocks);
    const auto r = mc::eval(e, mc::options{b});  // host outputs: mirrored from the pinned copy
    CHECK(r.stats.plan.symmetric);
    CHECK(r.stats.peak_temp_bytes <= b);
    dvec<float> out(mz * mz);
    const auto st = mc::eval_into(e, out.p, nullptr, mc::options{b});  // device outputs: a transpose kernel
    CHECK(st.peak_temp_bytes <= b);
    for (const auto& v : {r.values, out.host()}) {
      expect_close(v, want, scale, "Kuf Kuf^T, symmetric");
      std::size_t asymmetric = 0;  // across blocks, one entry is the copy of the other
      for (std::size_t i = 0; i < mz; ++i)
        for (std::size_t j = 0; j < i; ++j)
          if (i / p.tile_rows != j / p.tile_rows) asymmetric += v[i * mz + j] != v[j * mz + i];
      CHECK(asymmetric == 0);
    }
  }
}

TEST_CASE("dense(E) straight into device memory equals the host's tiles") {
  const std::size_t n = 129, m = 257, d = 7;
  auto x = data(n, d, 71), y = data(m, d, 72);
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf), Y(yf), out(n * m);
  const auto e = memsafe::dense(memsafe::matern32(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d), 1.1));
  (void)mc::eval_into(e, out.p, nullptr, mc::options{std::size_t(1) << 20});
  const auto h = memsafe::eval(memsafe::dense(memsafe::matern32(memsafe::points(xf.data(), n, d), memsafe::points(yf.data(), m, d), 1.1)),
                               memsafe::options{std::size_t(1) << 20, 1});
  std::vector<double> want(h.values.begin(), h.values.end()), scale(want.size(), 1.0);
  expect_close(out.host(), want, scale, "dense on the device");
}

TEST_CASE("empty inputs on the device: every row gets its identity as on the host, at a one-byte budget") {
  // m = 0: sums and products 0, logsumexp -inf, min/max +-inf, softmax_sum NaN; inner extent 0 of a
  // lazy x lazy product: zeros. Host outputs (eval) and device outputs (eval_into), no temporaries.
  const std::size_t n = 37, d = 3;
  const auto xf = cast<float>(data(n, d, 81));
  dvec<float> X(xf), none(std::size_t(0));
  const std::vector<float> hnone;
  const mc::options tiny{std::size_t(1)};
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!(std::isnan(a[i]) && std::isnan(b[i]))) CHECK(a[i] == b[i]);
  };
  const auto check = [&](const auto& dev_e, const auto& host_e, const char* what) {
    CAPTURE(what);
    const auto want = memsafe::eval(host_e, memsafe::options{std::size_t(1), 1});
    const auto got = mc::eval(dev_e, tiny);
    same(got.values, want.values);
    CHECK(got.stats.peak_temp_bytes == 0);
    dvec<float> out(std::max<std::size_t>(want.values.size(), 1));
    MEMSAFE_CUDA_CHECK(cudaMemset(out.p, 0x7f, out.n * sizeof(float)));  // poisoned
    (void)mc::eval_into(dev_e, out.p, nullptr, tiny);
    auto o = out.host();
    o.resize(want.values.size());
    same(o, want.values);
  };
  const auto Xd = memsafe::points(X.p, n, d), Yd = memsafe::points(none.p, 0, d);
  const auto Xh = memsafe::points(xf.data(), n, d), Yh = memsafe::points(hnone.data(), 0, d);
  check(memsafe::sum(memsafe::rbf(Xd, Yd, 1.0)), memsafe::sum(memsafe::rbf(Xh, Yh, 1.0)), "sum");
  check(memsafe::min(memsafe::sqdist(Xd, Yd)), memsafe::min(memsafe::sqdist(Xh, Yh)), "min");
  check(memsafe::max(memsafe::rbf(Xd, Yd, 1.0)), memsafe::max(memsafe::rbf(Xh, Yh, 1.0)), "max");
  check(memsafe::logsumexp(memsafe::rbf(Xd, Yd, 1.0)), memsafe::logsumexp(memsafe::rbf(Xh, Yh, 1.0)), "logsumexp");
  check(memsafe::rbf(Xd, Yd, 1.0) * memsafe::vec(none.p, 0), memsafe::rbf(Xh, Yh, 1.0) * memsafe::vec(hnone.data(), 0),
        "K*v");
  check(2.0 * memsafe::rbf(Xd, Yd, 1.0) * memsafe::matrix(none.p, 0, 4),
        2.0 * memsafe::rbf(Xh, Yh, 1.0) * memsafe::matrix(hnone.data(), 0, 4), "2 K*M");
  check(memsafe::softmax_sum(memsafe::dot(Xd, Yd), memsafe::matrix(none.p, 0, 5)),
        memsafe::softmax_sum(memsafe::dot(Xh, Yh), memsafe::matrix(hnone.data(), 0, 5)), "softmax_sum");
  check(memsafe::rbf(Xd, Yd, 1.0) * memsafe::transpose(memsafe::rbf(Xd, Yd, 1.0)),
        memsafe::rbf(Xh, Yh, 1.0) * memsafe::transpose(memsafe::rbf(Xh, Yh, 1.0)), "lazy x lazy, inner 0");
  // no rows: nothing written, nothing allocated
  const auto none_rows = mc::eval(memsafe::argkmin(memsafe::sqdist(Yd, Xd), 5), tiny);
  CHECK(none_rows.values.empty());
  CHECK(none_rows.stats.peak_temp_bytes == 0);
}

TEST_CASE("CUDA errors become exceptions naming the call; a full GPU is reported as out of memory") {
  try {
    mc::detail::check(cudaErrorInvalidValue, "cudaMemcpyAsync(dst, src)", "file.cu", 7);
    FAIL("no exception");
  } catch (const mc::cuda_error& err) {
    CHECK(std::string(err.what()).find("cudaMemcpyAsync(dst, src)") != std::string::npos);
    CHECK(std::string(err.what()).find("cudaErrorInvalidValue") != std::string::npos);
  }
  CHECK_THROWS_AS(mc::detail::check(cudaErrorMemoryAllocation, "cudaMallocAsync", "f", 1), mc::device_out_of_memory);
  CHECK_THROWS_AS(mc::detail::check(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate", "f", 1), mc::device_out_of_memory);

  // Another allocation holds (almost) all device memory: the evaluation reports it, leaks nothing.
  // The input and the host output exist before the GPU is filled; the hog frees itself on every path.
  const std::size_t n = 1 << 16, d = 128;
  std::vector<float> x(n * d, 1.0f);
  dvec<float> X(x);
  const auto e = memsafe::dense(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(X.p, 4096, d)));
  std::vector<float> out(std::size_t(n) * 4096);
  // Once before the GPU is filled: what a process pays once and keeps (the kernels' modules, loaded
  // at their first launch; the device's cuBLAS handle, pooled) is then part of `before`.
  (void)mc::eval_into(e, out.data(), nullptr, mc::options{std::size_t(64) << 20});
  struct hog_t {
    void* p = nullptr;
    ~hog_t() {
      if (p) cudaFree(p);
    }
  } hog;
  std::size_t free = 0, total = 0;
  MEMSAFE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  std::size_t take = free > (std::size_t(64) << 20) ? free - (std::size_t(16) << 20) : 0;
  while (take && cudaMalloc(&hog.p, take) != cudaSuccess) {
    (void)cudaGetLastError();
    hog.p = nullptr;
    take = take > (std::size_t(64) << 20) ? take - (std::size_t(64) << 20) : 0;
  }
  REQUIRE(hog.p != nullptr);
  const std::size_t before = used_device_bytes();
  CHECK_THROWS_AS((void)mc::eval_into(e, out.data(), nullptr, mc::options{std::size_t(1) << 30}), mc::device_out_of_memory);
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  cudaMemPool_t pool = nullptr;  // stream-ordered frees go back to the pool: trim it to see them from outside
  int dev = 0;
  MEMSAFE_CUDA_CHECK(cudaGetDevice(&dev));
  MEMSAFE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  MEMSAFE_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  CHECK(used_device_bytes() <= before);  // nothing of the failed evaluation is held
  CHECK(cudaGetLastError() == cudaSuccess);  // and no error is left pending for the caller
}
/// Writes x[i] = i % 97 after spinning for about `ns` nanoseconds: a slow producer on a stream.
__global__ void slow_fill(float* x, std::int64_t n, unsigned long long ns) {
  const unsigned long long t0 = clock64();
  if (threadIdx.x == 0) {
    while (clock64() - t0 < ns) {
    }
  }
  __syncthreads();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    x[i] = float(i % 97);
}

TEST_CASE("inputs written on the default stream are complete before an evaluation on its internal stream reads them") {
  const std::size_t n = 512, m = 4096, d = 4;
  dvec<float> X(n * d), Y(m * d);
  MEMSAFE_CUDA_CHECK(cudaMemset(X.p, 0, n * d * sizeof(float)));
  MEMSAFE_CUDA_CHECK(cudaMemset(Y.p, 0, m * d * sizeof(float)));
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  // Queued on stream 0, still running (tens of milliseconds of spinning) when eval starts.
  slow_fill<<<8, 256, 0, 0>>>(X.p, std::int64_t(n * d), 200000000ull);
  slow_fill<<<8, 256, 0, 0>>>(Y.p, std::int64_t(m * d), 200000000ull);
  MEMSAFE_CUDA_CHECK(cudaGetLastError());
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), 4);
  const auto r = mc::eval(e, mc::options{std::size_t(8) << 20});
  std::vector<double> x(n * d), y(m * d);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = double(i % 97);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = double(i % 97);
  const auto want = knn_ref(x, y, n, m, d, 4);
  CHECK(std::vector<std::int64_t>(r.indices.begin(), r.indices.end()) == want);
}

TEST_CASE("a CUDA error left pending by the caller is reported as the caller's, then the next call runs") {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, std::size_t(1) << 60) != cudaSuccess);  // a non-sticky error nobody reads
  const std::size_t n = 64, m = 128, d = 3;
  auto x = data(n, d, 91), y = data(m, d, 92);
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf), Y(yf);
  const auto e = memsafe::argmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)));
  try {
    (void)mc::eval(e, mc::options{std::size_t(1) << 20});
    FAIL("the pending error was not reported");
  } catch (const mc::cuda_error& err) {
    CHECK(std::string(err.what()).find("pending before the call") != std::string::npos);
    CHECK(std::string(err.what()).find("cudaErrorMemoryAllocation") != std::string::npos);
  }
  const auto r = mc::eval(e, mc::options{std::size_t(1) << 20});  // reading it cleared it
  CHECK(r.indices == memsafe::eval(memsafe::argmin(memsafe::sqdist(memsafe::points(xf.data(), n, d),
                                                                   memsafe::points(yf.data(), m, d))),
                                   memsafe::options{std::size_t(1) << 20, 1})
                         .indices);
}

TEST_CASE("cuBLAS handles are reused across evaluations (none created or destroyed per call)") {
  const std::size_t mz = 96, n = 300, d = 5;
  auto z = data(mz, d, 93), x = data(n, d, 94);
  auto zf = cast<float>(z), xf = cast<float>(x);
  dvec<float> Z(zf), X(xf);
  const auto Kuf = memsafe::rbf(memsafe::points(Z.p, mz, d), memsafe::points(X.p, n, d), 1.3);
  const auto e = Kuf * memsafe::transpose(Kuf);
  const auto first = mc::eval(e, mc::options{std::size_t(16) << 20});
  const std::size_t after_first = used_device_bytes();
  for (int r = 0; r < 5; ++r) {
    const auto again = mc::eval(e, mc::options{std::size_t(16) << 20});
    CHECK(again.values == first.values);  // same plan, same handle settings: bit-identical
  }
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(used_device_bytes() <= after_first + (std::size_t(2) << 20));  // no handle or workspace left per call
}

TEST_CASE("a cuBLAS handle's own device memory, outside the budget, is paid once per device") {
  // What cublasCreate takes for itself (its default workspace pool), and whether giving the handle
  // a workspace of ours (as memsafe does, from the budget) returns it: printed, for the docs.
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::size_t before = used_device_bytes();
  cublasHandle_t h = nullptr;
  MEMSAFE_CUDA_CHECK(cublasCreate(&h));
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::size_t created = used_device_bytes();
  void* ws = nullptr;
  MEMSAFE_CUDA_CHECK(cudaMalloc(&ws, std::size_t(4) << 20));
  MEMSAFE_CUDA_CHECK(cublasSetWorkspace(h, ws, std::size_t(4) << 20));
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::size_t with_ours = used_device_bytes();
  MEMSAFE_CUDA_CHECK(cublasDestroy(h));
  MEMSAFE_CUDA_CHECK(cudaFree(ws));
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::size_t destroyed = used_device_bytes();
  MESSAGE("cublasCreate took " << (double(created) - double(before)) / 1048576.0 << " MiB; after cublasSetWorkspace(4 MiB of "
          "ours) the handle and ours hold " << (double(with_ours) - double(before)) / 1048576.0 << " MiB; after destroying "
          "both " << (double(destroyed) - double(before)) / 1048576.0 << " MiB");
  CHECK(destroyed <= created);
  // memsafe's evaluations share one pooled handle: a second evaluation adds nothing from outside.
  const std::size_t n = 64, m = 4096, d = 64;
  auto x = data(n, d, 95), y = data(m, d, 96);
  auto xf = cast<float>(x), yf = cast<float>(y);
  dvec<float> X(xf), Y(yf);
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), 5);
  (void)mc::eval(e, mc::options{std::size_t(64) << 20});
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::size_t one = used_device_bytes();
  (void)mc::eval(e, mc::options{std::size_t(64) << 20});
  MEMSAFE_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(used_device_bytes() <= one + (std::size_t(2) << 20));
}
}
