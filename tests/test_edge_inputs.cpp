// Inputs at the edges of what the API accepts, each case a defect found by probing the public API
// as a user would (2026-11-30): points with d = 0 under a parameter gradient, attention rows with
// a NaN or +inf score, attention with no work at a tiny budget, extents that would overflow the
// planners' byte counts (views with a stride of 0), a batch axis of extent 0, a result too large to
// address, the same point set named twice in wrt(...), element-wise min/max of NaN, pow of −inf
// and a negative budget string. Every case checks the values against an independent reference or
// the exact error the documentation promises.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include <memsafe/attention.hpp>
#include <memsafe/grad.hpp>
#include <memsafe/memsafe.hpp>

#include "reference.hpp"

namespace {

using ref::message_of;
bool has(const std::string& s, const char* part) { return ref::contains(s, part); }

}  // namespace

TEST_CASE("edge: parameter gradients of kernels over points with d = 0 (every distance 0)") {
  // K = σ² everywhere: ∂⟨u, K·1⟩/∂σ² = Σ_i u_i · m, ∂/∂ℓ = 0; the linear kernel is 0 with a zero gradient.
  std::vector<double> x(1), y(1), u = {1.0, 2.0, 3.0, 4.0};
  const auto X = memsafe::points(x.data(), 4, 0), Y = memsafe::points(y.data(), 5, 0);
  for (std::size_t budget : {std::size_t{1} << 12, std::size_t{1} << 20}) {
    auto g = memsafe::grad(
        memsafe::vjp(memsafe::sum(memsafe::rbf(X, Y, 1.5, 2.0)), memsafe::vec(u.data(), 4), memsafe::wrt<double>(memsafe::params)),
        memsafe::budget_bytes(budget));
    REQUIRE(g.params.size() == 1);
    CHECK(g.params[0].variance.at(0) == doctest::Approx(10.0 * 5.0));
    CHECK(g.params[0].lengthscale.at(0) == 0.0);
    CHECK(g.stats.peak_temp_bytes <= budget);
  }
  // K·M with a Matérn-3/2 and the points' gradients requested too (empty: 0 coordinates)
  std::vector<double> M = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, G = {1, -1, 2, 0.5, 0, 1, 3, 2};
  auto gm = memsafe::grad(memsafe::vjp(memsafe::matern32(X, Y, 0.7, 3.0) * memsafe::matrix_view<const double>(M.data(), 5, 2),
                                       memsafe::matrix_view<const double>(G.data(), 4, 2),
                                       memsafe::wrt<double>(X, memsafe::params)),
                          memsafe::budget_bytes(1 << 20));
  // ∂/∂σ² = Σ_ic G_ic Σ_j M_jc = (Σ_i G_i0)·25 + (Σ_i G_i1)·30
  CHECK(gm.params.at(0).variance.at(0) == doctest::Approx((1 + 2 + 0 + 3) * 25.0 + (-1 + 0.5 + 1 + 2) * 30.0));
  CHECK(gm.params.at(0).lengthscale.at(0) == 0.0);
  CHECK(gm.points.at(0).empty());
  auto gl = memsafe::grad(memsafe::vjp(memsafe::sum(memsafe::linear(X, Y, 2.0)), memsafe::vec(u.data(), 4),
                                       memsafe::wrt<double>(memsafe::params)),
                          memsafe::budget_bytes(1 << 20));
  CHECK(gl.params.at(0).variance.at(0) == 0.0);
}

TEST_CASE("edge: gradients through maps whose derivative is infinite where the padded columns sit are finite") {
  // The backward tiles pad their columns with zero points and zero weights to a multiple of the
  // lanes. A padded column's u is |x|^2 (stationary) or 0 (dot): sqrt's and log's derivatives are
  // infinite there when x is the origin, and 0 * inf would make the row's gradient NaN.
  const std::size_t n = 3, m = 5, d = 2;  // m = 5: three padded columns in every tile
  std::vector<double> x = {0, 0, 1, -1, 0.5, 2}, y = {1, 2, -1, 0.5, 3, -2, 0.25, 0.75, -1.5, -0.5},
                      u = {1.0, -2.0, 0.5};
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  for (std::size_t budget : {std::size_t{1} << 12, std::size_t{1} << 20}) {
    CAPTURE(budget);
    // L = sum_i u_i sum_j |x_i - y_j|: dL/dx_i = u_i sum_j (x_i - y_j) / |x_i - y_j|, dL/dy_j the opposite sums
    auto g = memsafe::grad(memsafe::vjp(memsafe::sum(memsafe::sqrt(memsafe::sqdist(X, Y))), memsafe::vec(u.data(), n),
                                        memsafe::wrt<double>(X, Y)),
                           memsafe::budget_bytes(budget));
    std::vector<double> gx(n * d, 0.0), gy(m * d, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        const double a = x[i * d] - y[j * d], b = x[i * d + 1] - y[j * d + 1], r = std::sqrt(a * a + b * b);
        gx[i * d] += u[i] * a / r, gx[i * d + 1] += u[i] * b / r;
        gy[j * d] -= u[i] * a / r, gy[j * d + 1] -= u[i] * b / r;
      }
    for (std::size_t t = 0; t < n * d; ++t) CHECK(g.points.at(0).at(t) == doctest::Approx(gx[t]).epsilon(1e-12));
    for (std::size_t t = 0; t < m * d; ++t) CHECK(g.points.at(1).at(t) == doctest::Approx(gy[t]).epsilon(1e-12));
    CHECK(g.stats.peak_temp_bytes <= budget);
    // the dot kind: a padded column's u is 0 exactly, where inv's derivative -1/u^2 is infinite.
    // L = sum_i u_i sum_j log(x_i . y_j + 10): dL/dx_i = u_i sum_j y_j / (x_i . y_j + 10) (finite
    // everywhere), and with inv(x_i . y_j): -u_i sum_j y_j / (x_i . y_j)^2
    auto h = memsafe::grad(memsafe::vjp(memsafe::sum(memsafe::log(memsafe::dot(X, Y) + 10.0)), memsafe::vec(u.data(), n),
                                        memsafe::wrt<double>(X)),
                           memsafe::budget_bytes(budget));
    auto k = memsafe::grad(memsafe::vjp(memsafe::sum(memsafe::inv(memsafe::dot(X, Y))), memsafe::vec(u.data(), n),
                                        memsafe::wrt<double>(X)),
                           memsafe::budget_bytes(budget));
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        double want = 0, want_inv = 0;
        for (std::size_t j = 0; j < m; ++j) {
          const double s = x[i * d] * y[j * d] + x[i * d + 1] * y[j * d + 1];
          want += u[i] * y[j * d + c] / (s + 10.0);
          want_inv -= u[i] * y[j * d + c] / (s * s);
        }
        CHECK(h.points.at(0).at(i * d + c) == doctest::Approx(want).epsilon(1e-12));
        if (i > 0) CHECK(k.points.at(0).at(i * d + c) == doctest::Approx(want_inv).epsilon(1e-12));  // row 0: x = 0, 1/0
      }
  }
}

TEST_CASE("edge: attention rows with a NaN or +inf score give NaN outputs and lse (the naive formula's), "
          "the other rows are untouched") {
  const std::size_t T = 4, d = 2;
  std::vector<double> q = {1, 0, 0, 1, 1, 1, 0.5, 0.5}, k = {1, 2, 3, 4, 5, 6, 7, 8}, v = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<double> bias(T * T, 0.0);
  bias[1 * T + 2] = std::numeric_limits<double>::quiet_NaN();
  bias[2 * T + 3] = std::numeric_limits<double>::infinity();
  const auto Q = memsafe::heads(q.data(), 1, 1, T, d), K = memsafe::heads(k.data(), 1, 1, T, d),
             V = memsafe::heads(v.data(), 1, 1, T, d);
  const auto A = memsafe::softmax_sum(memsafe::dot(Q, K) + memsafe::heads(bias.data(), 1, 1, T, T), V);
  std::vector<double> O(T * d), lse(T);
  memsafe::eval_into(A, memsafe::heads(O.data(), 1, 1, T, d), lse.data(), memsafe::options{.budget = 1 << 20, .threads = 1});
  for (std::size_t i : {std::size_t{0}, std::size_t{3}}) {  // rows 0 and 3: a dense reference
    double s[T], mx = -INFINITY, Z = 0, o[2] = {0, 0};
    for (std::size_t j = 0; j < T; ++j) mx = std::fmax(mx, s[j] = q[i * d] * k[j * d] + q[i * d + 1] * k[j * d + 1]);
    for (std::size_t j = 0; j < T; ++j) {
      const double w = std::exp(s[j] - mx);
      Z += w;
      for (std::size_t c = 0; c < d; ++c) o[c] += w * v[j * d + c];
    }
    CHECK(lse[i] == doctest::Approx(mx + std::log(Z)).epsilon(1e-13));
    for (std::size_t c = 0; c < d; ++c) CHECK(O[i * d + c] == doctest::Approx(o[c] / Z).epsilon(1e-13));
  }
  for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {  // NaN; +inf (exp(inf − inf) is NaN)
    CHECK(std::isnan(lse[i]));
    CHECK(std::isnan(O[i * d]));
    CHECK(std::isnan(O[i * d + 1]));
  }
  // The backward does not read those rows as masked (lse = −inf would drop them): NaN reaches dV.
  std::vector<double> dO(T * d, 1.0), dQ(T * d), dK(T * d), dV(T * d);
  memsafe::attention_backward(A, memsafe::heads<const double>(O.data(), 1, 1, T, d), lse.data(),
                              memsafe::heads<const double>(dO.data(), 1, 1, T, d), memsafe::heads(dQ.data(), 1, 1, T, d),
                              memsafe::heads(dK.data(), 1, 1, T, d), memsafe::heads(dV.data(), 1, 1, T, d),
                              memsafe::options{.budget = 1 << 20, .threads = 1});
  CHECK(std::isnan(dV[0]));
  CHECK(std::isnan(dQ[1 * d]));
  CHECK(std::isfinite(dQ[0]));
}

TEST_CASE("edge: attention with no query row meeting a key needs no temporaries, at any budget") {
  std::vector<float> q(2 * 3 * 4, 0.5f), k(2 * 3 * 4, 0.25f), v(2 * 3 * 5, 1.0f);
  const memsafe::options tiny{.budget = 1, .threads = 2};
  // Tk = 0: O = 0 and lse = −inf; the gradients are 0
  {
    const auto Q = memsafe::heads(q.data(), 2, 1, 3, 4);
    const auto K = memsafe::heads(k.data(), 2, 1, 0, 4);
    const auto V = memsafe::heads(v.data(), 2, 1, 0, 5);
    const auto A = memsafe::softmax_sum(memsafe::dot(Q, K), V);
    std::vector<float> O(2 * 3 * 5, 7.0f), lse(6, 7.0f), dO(2 * 3 * 5, 1.0f), dQ(2 * 3 * 4, 7.0f);
    const auto st = memsafe::eval_into(A, memsafe::heads(O.data(), 2, 1, 3, 5), lse.data(), tiny);
    for (float o : O) CHECK(o == 0.0f);
    for (float l : lse) CHECK(l == -std::numeric_limits<float>::infinity());
    CHECK(st.peak_temp_bytes == 0);
    const auto sb = memsafe::attention_backward(
        A, memsafe::heads<const float>(O.data(), 2, 1, 3, 5), lse.data(), memsafe::heads<const float>(dO.data(), 2, 1, 3, 5),
        memsafe::heads(dQ.data(), 2, 1, 3, 4), memsafe::heads(k.data(), 2, 1, 0, 4), memsafe::heads(v.data(), 2, 1, 0, 5), tiny);
    for (float g : dQ) CHECK(g == 0.0f);
    CHECK(sb.peak_temp_bytes == 0);
    CHECK(has(memsafe::explain(A, tiny), "nothing to compute"));
  }
  // Tq = 0 and B = 0: nothing to write in the forward; dK, dV = 0 in the backward
  {
    const auto Q = memsafe::heads(q.data(), 1, 2, 0, 4);
    const auto K = memsafe::heads(k.data(), 1, 2, 3, 4);
    const auto V = memsafe::heads(v.data(), 1, 2, 3, 5);
    const auto A = memsafe::softmax_sum(memsafe::dot(Q, K), V);
    CHECK_NOTHROW(memsafe::eval_into(A, memsafe::heads(static_cast<float*>(nullptr), 1, 2, 0, 5), nullptr, tiny));
    std::vector<float> dK(2 * 3 * 4, 7.0f), dV(2 * 3 * 5, 7.0f);
    memsafe::attention_backward(A, memsafe::heads(static_cast<const float*>(nullptr), 1, 2, 0, 5), nullptr,
                                memsafe::heads(static_cast<const float*>(nullptr), 1, 2, 0, 5),
                                memsafe::heads(static_cast<float*>(nullptr), 1, 2, 0, 4), memsafe::heads(dK.data(), 1, 2, 3, 4),
                                memsafe::heads(dV.data(), 1, 2, 3, 5), tiny);
    for (float g : dK) CHECK(g == 0.0f);
    for (float g : dV) CHECK(g == 0.0f);
    const auto B0 = memsafe::softmax_sum(memsafe::dot(memsafe::heads(q.data(), 0, 2, 3, 4), memsafe::heads(k.data(), 0, 2, 3, 4)),
                                         memsafe::heads(v.data(), 0, 2, 3, 5));
    CHECK_NOTHROW(memsafe::eval_into(B0, memsafe::heads(static_cast<float*>(nullptr), 0, 2, 3, 5), nullptr, tiny));
  }
  // one key: a budget that small is still refused, naming the minimum
  const auto A1 = memsafe::softmax_sum(memsafe::dot(memsafe::heads(q.data(), 1, 1, 3, 4), memsafe::heads(k.data(), 1, 1, 1, 4)),
                                       memsafe::heads(v.data(), 1, 1, 1, 5));
  std::vector<float> O1(15);
  CHECK_THROWS_AS(memsafe::eval_into(A1, memsafe::heads(O1.data(), 1, 1, 3, 5), nullptr, tiny), memsafe::budget_error);
}

TEST_CASE("edge: extents above 2^40 (a stride of 0) are an argument_error, at 2^40 a budget_error, no overflow") {
  double one = 1.0, two = 2.0;
  float onef = 1.0f, twof = 2.0f;
  const std::size_t huge = (std::size_t{1} << 61) + 1, top = memsafe::detail::max_extent;
  CHECK(has(message_of<memsafe::argument_error>([&] { (void)memsafe::matrix_view<const double>(&one, 1, huge, 1, 0); }),
            "2^40"));
  CHECK_THROWS_AS((void)memsafe::matrix_view<const double>(&one, top + 1, 1, 0, 1), memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::vec(&one, top + 1, 0), memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::heads_view<const double>(&one, 1, 1, 1, std::size_t{1} << 61, 0, 0, 0, 0),
                  memsafe::argument_error);
  const std::size_t dims[3] = {0, 2, top + 1};
  CHECK_THROWS_AS((void)memsafe::tensor(&one, dims), memsafe::argument_error);
  // batch axes that broadcast against each other: each tensor's count fits, their product does not
  // (2^32 · 2^32 wrapped to a batch of 0: an empty result, no error)
  const auto TX = memsafe::tensor(&one, {std::size_t{1} << 32, 1, 1, 1});
  const auto TY = memsafe::tensor(&one, {1, std::size_t{1} << 32, 1, 1});
  CHECK(has(message_of<memsafe::argument_error>([&] {
              (void)memsafe::sum<4>(memsafe::square(memsafe::unsqueeze<3>(TX) - memsafe::unsqueeze<2>(TY)));
            }),
            "the batch"));
  // 2^37 × 2^37 elements of a stride-0 view: more than std::size_t counts
  CHECK_THROWS_AS((void)memsafe::matrix_view<const double>(&one, std::size_t{1} << 37, std::size_t{1} << 37, 0, 0),
                  memsafe::argument_error);
  // 2^31 × 2^31: the count fits std::size_t, its bytes do not fit ptrdiff_t
  CHECK(has(message_of<memsafe::argument_error>(
                [&] { (void)memsafe::matrix_view<const double>(&one, std::size_t{1} << 31, std::size_t{1} << 31, 0, 0); }),
            "more than can be addressed"));
  // a stride that carries the last element past what can be addressed
  CHECK(has(message_of<memsafe::argument_error>(
                [&] { (void)memsafe::heads_view<const double>(&one, 2, 1, 1, 1, std::size_t{1} << 62, 0, 0, 0); }),
            "span more memory"));
  // d = 2^40: every plan needs TiBs, refused before any work
  const memsafe::matrix_view<const double> X(&one, 1, top, 1, 0), Y(&two, 1, top, 1, 0);
  CHECK_THROWS_AS((void)memsafe::eval(memsafe::sum(memsafe::sqdist(X, Y)), memsafe::budget_bytes(1 << 20)),
                  memsafe::budget_error);
  CHECK_THROWS_AS((void)memsafe::plan_for(memsafe::sum(memsafe::sqdist(X, Y)), memsafe::budget_bytes(1 << 20)),
                  memsafe::budget_error);
  const memsafe::matrix_view<const float> Xf(&onef, 1, top, 1, 0), Yf(&twof, 2, top, 0, 0);
  CHECK_THROWS_AS((void)memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xf, Yf), 1), memsafe::budget_bytes(1 << 20)),
                  memsafe::budget_error);
  CHECK_THROWS_AS((void)memsafe::eval(memsafe::rbf(Xf, Yf, 1.0, 1.0) * memsafe::vec(&twof, 2, 0), memsafe::budget_bytes(1 << 20)),
                  memsafe::budget_error);
  const memsafe::heads_view<const double> Qh(&one, 1, 1, 1, top, 0, 0, 0, 0);
  const auto A = memsafe::softmax_sum(memsafe::dot(Qh, Qh), memsafe::heads(&one, 1, 1, 1, 1));
  double o = 0;
  CHECK_THROWS_AS(memsafe::eval_into(A, memsafe::heads(&o, 1, 1, 1, 1), nullptr, memsafe::options{.budget = 1 << 20}),
                  memsafe::budget_error);
  // a result too large to address: an argument_error before anything is allocated
  const memsafe::matrix_view<const double> Q1(&one, std::size_t{1} << 23, 1, 0, 1), Ybig(&two, top, 1, 0, 1);
  CHECK(has(message_of<memsafe::argument_error>(
                [&] { (void)memsafe::eval(memsafe::argkmin(memsafe::sqdist(Q1, Ybig), top), memsafe::budget_bytes(1 << 20)); }),
            "more than can be addressed"));
}

TEST_CASE("edge: 2^40 by 2^40 pairs plan with a tile count held at 2^64 - 1, not wrapped to 0 tiles and 0 threads") {
  float one = 1.0f, two = 2.0f;
  const std::size_t top = memsafe::detail::max_extent;
  const memsafe::matrix_view<const float> X(&one, top, 1, 0, 1), Y(&two, top, 1, 0, 1);  // stride-0 rows
  const std::size_t sat = static_cast<std::size_t>(-1);
  int saturated = 0;
  const auto check = [&](const memsafe::tile_plan& p) {
    CHECK(p.row_blocks * p.tile_rows >= top);
    CHECK(p.col_blocks * p.tile_cols >= top);
    std::size_t product = 0;
    const bool over = __builtin_mul_overflow(p.row_blocks, p.col_blocks, &product);
    CHECK(p.num_tiles == (over ? sat : product));
    CHECK(p.num_tiles >= 1);
    saturated += over;
    CHECK(p.threads >= 1);
    CHECK(p.threads <= 2);
    CHECK(p.planned_bytes == p.threads * p.per_thread_bytes);
    CHECK(p.planned_bytes > 0);
    CHECK(p.planned_bytes <= p.budget);
    CHECK(has(p.describe(), "2^64 or more tiles") == over);
  };
  for (const std::size_t budget : {std::size_t{1} << 10, std::size_t{64} << 20}) {
    const memsafe::options o{.budget = budget, .threads = 2};
    check(memsafe::plan_for(memsafe::sum(memsafe::rbf(X, Y, 1.0, 1.0)), o));
    check(memsafe::plan_for(memsafe::argkmin(memsafe::sqdist(X, Y), 3), o));
    check(memsafe::plan_for(memsafe::rbf(X, Y, 1.0, 1.0) * memsafe::vec(&two, top, 0), o));
  }
  CHECK(saturated >= 3);  // at 1 KiB every one of them: 2^35 x 2^35 blocks of 32 x 32
  // the saturating product itself
  CHECK(memsafe::plan::saturating_mul(std::size_t{1} << 32, std::size_t{1} << 31) == std::size_t{1} << 63);
  CHECK(memsafe::plan::saturating_mul(std::size_t{1} << 32, std::size_t{1} << 32) == sat);
  CHECK(memsafe::plan::saturating_mul(0, sat) == 0);
}

TEST_CASE("edge: a batch axis of extent 0 gives an empty result") {
  std::vector<double> x(15, 0.5), y(12, 0.25);
  const std::size_t dx[3] = {0, 5, 3}, dy[3] = {0, 4, 3};
  const auto X = memsafe::tensor(x.data(), dx), Y = memsafe::tensor(y.data(), dy);
  const auto D = memsafe::sum<3>(memsafe::square(memsafe::unsqueeze<2>(X) - memsafe::unsqueeze<1>(Y)));
  const auto r = memsafe::eval(memsafe::sum(D), memsafe::budget_bytes(1 << 10));
  CHECK(r.rows == 0);
  const auto t = memsafe::eval(memsafe::argkmin(D, 2), memsafe::budget_bytes(1 << 10));
  CHECK(t.rows == 0);
  CHECK(t.cols == 2);
}

TEST_CASE("edge: naming the same point set twice in wrt(...) says so") {
  std::vector<double> x = {0, 1, 2, 3, 4, 5}, u = {1, 1, 1};
  const auto X = memsafe::points(x.data(), 3, 2);
  const std::string m = message_of<memsafe::argument_error>([&] {
    (void)memsafe::grad(memsafe::vjp(memsafe::sum(memsafe::rbf(X, X, 1.0, 1.0)), memsafe::vec(u.data(), 3), memsafe::wrt<double>(X, X)),
                        memsafe::budget_bytes(1 << 20));
  });
  CHECK(has(m, "same view as #0"));
}

TEST_CASE_TEMPLATE("edge: element-wise min and max propagate NaN from either side", T, float, double) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> x = {T(0), T(1)}, y = {T(0), T(2)};
  const auto X = memsafe::points(x.data(), 2, 1), Y = memsafe::points(y.data(), 2, 1);
  const auto D = memsafe::sqdist(X, Y);     // [[0, 4], [1, 1]]
  const auto N = D * T(0) + nan;            // NaN everywhere
  const memsafe::budget_bytes b(1 << 16);
  for (const auto& r : {memsafe::eval(memsafe::dense(memsafe::min(D, N)), b), memsafe::eval(memsafe::dense(memsafe::min(N, D)), b),
                        memsafe::eval(memsafe::dense(memsafe::max(D, N)), b), memsafe::eval(memsafe::dense(memsafe::max(N, D)), b)})
    for (T v : r.values) CHECK(std::isnan(v));
  const auto lo = memsafe::eval(memsafe::dense(memsafe::min(D, D * T(0) + T(2))), b);
  CHECK(lo.values == std::vector<T>{T(0), T(2), T(1), T(1)});
}

TEST_CASE_TEMPLATE("edge: math::pow's special values are std::pow's", T, float, double) {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const T bases[] = {-inf, inf, T(-2), T(-1), T(-0.5), T(-0.0), T(0), T(0.5), T(1), T(2), nan};
  const T exps[] = {-inf, T(-2.5), T(-2), T(-3), T(-1), T(-0.5), T(0), T(0.5), T(1), T(2), T(2.5), T(3), inf, nan};
  for (T b : bases)
    for (T p : exps) {
      const T r = memsafe::math::pow(b, p), e = std::pow(b, p);
      CAPTURE(b);
      CAPTURE(p);
      if (std::isnan(e)) CHECK(std::isnan(r));
      else if (std::isinf(e) || e == T(0)) CHECK((r == e && std::signbit(r) == std::signbit(e)));
      else CHECK(r == doctest::Approx(e).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-14));
    }
}

TEST_CASE("edge: a negative budget string is named as such") {
  CHECK(has(message_of<memsafe::argument_error>([] { (void)memsafe::parse_bytes("-1MiB"); }), "negative"));
  CHECK(has(message_of<memsafe::argument_error>([] { (void)memsafe::parse_bytes("MiB"); }), "no number"));
}

TEST_CASE("edge: diag(K) and trace(K) of a lazy matrix that is not square say so") {
  std::vector<double> x(6, 0.5), y(9, 0.25);
  const auto K = memsafe::rbf(memsafe::points(x.data(), 2, 3), memsafe::points(y.data(), 3, 3));
  CHECK(has(message_of<memsafe::shape_error>([&] { (void)memsafe::diag(K); }), "K must be square"));
  CHECK(has(message_of<memsafe::shape_error>([&] { (void)memsafe::trace(K); }), "K must be square"));
}
