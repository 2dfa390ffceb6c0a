// Gradients (vector–Jacobian products) of reductions: every formula's derivatives against central
// finite differences of the forward evaluation in f64 (relative error ≤ 1e-6), at budgets from
// the minimum to unlimited (peak ≤ budget, budget-independent results, budget_error below the
// minimum), scalar and ARD lengthscales, maps of lazy matrices, Matérn at coincident points.
#include "grad_check.hpp"

using gradcheck::problem;
using gradcheck::want;

namespace {
// θ layouts: [ℓ, σ²], [ℓ_1..ℓ_d, σ²], [ℓ, σ², α], [σ²], [σ_1²..σ_d²]
auto sum_red = [](const auto& E, const double*) { return memsafe::sum(E); };
template <std::size_t C>
auto km_red(std::size_t m) {
  return [m](const auto& E, const double* M) { return E * memsafe::matrix(M, m, C); };
}
auto kv_red(std::size_t m) {
  return [m](const auto& E, const double* v) { return E * memsafe::vec(v, m); };
}

/// Every formula with sum over j and with K·M (operand included).
template <class Make>
void formula_cases(const std::string& what, std::vector<double> theta, Make make, bool params = true) {
  {
    problem P(9, 7, 3, theta, 7 * 2, 3);
    gradcheck::check(what + " / sum", P, make, sum_red, want{true, true, params, false, false});
  }
  {
    problem P(11, 6, 3, theta, 6 * 2, 5);
    gradcheck::check(what + " / K*M", P, make, km_red<2>(6), want{true, true, params, true, false});
  }
}
}  // namespace

TEST_SUITE("grad") {
TEST_CASE("grad: distances against finite differences") {
  formula_cases("sqdist", {}, [](auto X, auto Y, const std::vector<double>&) { return memsafe::sqdist(X, Y); }, false);
  formula_cases("dist", {}, [](auto X, auto Y, const std::vector<double>&) { return memsafe::dist(X, Y); }, false);
  formula_cases("dot", {}, [](auto X, auto Y, const std::vector<double>&) { return memsafe::dot(X, Y); }, false);
}
namespace {
/// derivative<F>::at at u against F's closed form g (independent of the library) and a central
/// finite difference of g; a formula of a root: at() is at_root at a = √(root_scale · u), bit for bit.
template <class F, class G>
void at_against_closed_form(const char* name, G g) {
  using D = memsafe::derivative<F>;
  memsafe::detail::formula_params<double> p;
  p.variance = 1.7;
  p.alpha = 0.8;
  for (double u : {0.05, 0.7, 3.2, 11.0}) {
    CAPTURE(name);
    CAPTURE(u);
    double f = 0, df = 0;
    D::at(u, p, f, df);
    CHECK(f == doctest::Approx(g(u, p)).epsilon(1e-14));
    const double h = 1e-5 * u;
    CHECK(df == doctest::Approx((g(u + h, p) - g(u - h, p)) / (2 * h)).epsilon(1e-7));
    if constexpr (D::root_scale != 0) {
      double fr = 0, dfr = 0;
      D::at_root(u, std::sqrt(D::root_scale * u), p, fr, dfr);
      CHECK(fr == f);
      CHECK(dfr == df);
    }
  }
}
}  // namespace

namespace {
/// w/(1 + w) − log1p(w) in long double by its alternating series Σ_{k≥2} (−1)^(k+1) (k−1)/k · w^k
/// (w < 0.1, to a long double's rounding), or as written (w ≥ 0.1: cancels ≤ 6 bits of 64).
long double dlog_t_reference(long double w) {
  if (w >= 0.1L) return w / (1 + w) - std::log1p(w);
  long double s = 0, wk = w;
  for (int k = 2; k < 40; ++k) {
    wk *= w;
    s += (k % 2 ? 1 : -1) * static_cast<long double>(k - 1) / k * wk;
  }
  return s;
}
template <class T>
void check_rq_dalpha(double ulps) {
  using D = memsafe::derivative<memsafe::formula::rq>;
  const long double eps = std::numeric_limits<T>::epsilon();
  for (double w = 1e-12; w < 1e4; w *= 1.37) {
    const T wt = static_cast<T>(w);
    const long double ref = dlog_t_reference(wt);
    if (std::fabs(ref) < std::numeric_limits<T>::min()) continue;  // below T's normal range
    CAPTURE(w);
    CHECK(std::fabs((D::dlog_t(wt) - ref) / ref) <= ulps * eps);
  }
  // both sides of the switch at w = 1/2
  for (T wt : {std::nextafter(T(0.5), T(0)), T(0.5)}) {
    const long double ref = dlog_t_reference(wt);
    CHECK(std::fabs((D::dlog_t(wt) - ref) / ref) <= ulps * eps);
  }
}
}  // namespace

TEST_CASE("grad: the rational-quadratic dF/dalpha keeps its precision for close points and large alpha") {
  // w/(1+w) − log1p(w) as written lost log2(2/w) bits: 1.5e-3 relative in float at alpha = 1e5
  check_rq_dalpha<float>(8);
  check_rq_dalpha<double>(8);
  // the gradient of sum(rq) with respect to alpha at alpha = 1e5 (float) and 1e9 (double), against
  // a long double sum of the same terms (every term has the same sign: relative error of the terms)
  const auto run = [](auto zero, double alpha, double tol) {
    using T = decltype(zero);
    const std::size_t n = 20, m = 20, d = 2;
    std::vector<T> x(n * d), y(m * d), up(n, T(1));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(std::sin(1.3 * double(i) + 0.2));
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<T>(std::cos(0.7 * double(i) + 0.5));
    const auto X = memsafe::points(static_cast<const T*>(x.data()), n, d);
    const auto Y = memsafe::points(static_cast<const T*>(y.data()), m, d);
    const auto g = memsafe::grad(memsafe::vjp(memsafe::sum(memsafe::rq(X, Y, 1.0, 1.0, alpha)),
                                              memsafe::vec(static_cast<const T*>(up.data()), n),
                                              memsafe::wrt<T>(memsafe::params)),
                                 memsafe::budget_bytes(1 << 16));
    long double ref = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        long double u = 0;
        for (std::size_t k = 0; k < d; ++k) {
          const long double t = static_cast<long double>(x[i * d + k]) - y[j * d + k];
          u += t * t;
        }
        const long double w = u / (2.0L * static_cast<T>(alpha));
        ref += std::exp(-static_cast<long double>(static_cast<T>(alpha)) * std::log1p(w)) * dlog_t_reference(w);
      }
    CAPTURE(alpha);
    CHECK(std::fabs((g.params[0].alpha[0] - ref) / ref) <= tol);
  };
  run(float(0), 1e5, 1e-6);
  run(double(0), 1e9, 1e-14);
}

TEST_CASE("grad: every formula derivative at u against its closed form and finite differences") {
  namespace fm = memsafe::formula;
  using P = memsafe::detail::formula_params<double>;
  at_against_closed_form<fm::sqdist>("sqdist", [](double u, const P&) { return u; });
  at_against_closed_form<fm::dist>("dist", [](double u, const P&) { return std::sqrt(u); });
  at_against_closed_form<fm::rbf>("rbf", [](double u, const P& p) { return p.variance * std::exp(-u / 2); });
  at_against_closed_form<fm::matern12>("matern12", [](double u, const P& p) {
    return p.variance * std::exp(-std::sqrt(u));
  });
  at_against_closed_form<fm::matern32>("matern32", [](double u, const P& p) {
    const double a = std::sqrt(3 * u);
    return p.variance * (1 + a) * std::exp(-a);
  });
  at_against_closed_form<fm::matern52>("matern52", [](double u, const P& p) {
    const double a = std::sqrt(5 * u);
    return p.variance * (1 + a + a * a / 3) * std::exp(-a);
  });
  at_against_closed_form<fm::rq>("rq", [](double u, const P& p) {
    return p.variance * std::pow(1 + u / (2 * p.alpha), -p.alpha);
  });
  // At u = 0: the Matérn-3/2 and 5/2 slopes are finite (−3σ²/2, −5σ²/6), the cusps' are 0.
  P p;
  p.variance = 2;
  double f = 0, df = 0;
  memsafe::derivative<fm::matern32>::at(0.0, p, f, df);
  CHECK(f == 2);
  CHECK(df == doctest::Approx(-3.0));
  memsafe::derivative<fm::matern52>::at(0.0, p, f, df);
  CHECK(f == 2);
  CHECK(df == doctest::Approx(-5.0 / 3.0));
  memsafe::derivative<fm::matern12>::at(0.0, p, f, df);
  CHECK(f == 2);
  CHECK(df == 0);
  memsafe::derivative<fm::dist>::at(0.0, p, f, df);
  CHECK(f == 0);
  CHECK(df == 0);
}

TEST_CASE("grad: rbf with scalar and ARD lengthscales against finite differences") {
  formula_cases("rbf", {1.3, 0.7}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::rbf(X, Y, t[0], t[1]);
  });
  formula_cases("rbf-ard", {0.8, 1.4, 1.1, 0.6}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::rbf(X, Y, memsafe::ard(t.data(), 3), t[3]);
  });
}
TEST_CASE("grad: Matern kernels with scalar and ARD lengthscales against finite differences") {
  formula_cases("matern12", {1.2, 0.9}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::matern12(X, Y, t[0], t[1]);
  });
  formula_cases("matern12-ard", {0.9, 1.6, 1.2, 1.1}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::matern12(X, Y, memsafe::ard(t.data(), 3), t[3]);
  });
  formula_cases("matern32", {1.1, 1.5}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::matern32(X, Y, t[0], t[1]);
  });
  formula_cases("matern32-ard", {0.7, 1.3, 2.0, 0.8}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::matern32(X, Y, memsafe::ard(t.data(), 3), t[3]);
  });
  formula_cases("matern52", {0.9, 1.2}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::matern52(X, Y, t[0], t[1]);
  });
  formula_cases("matern52-ard", {1.4, 0.6, 1.0, 1.7}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::matern52(X, Y, memsafe::ard(t.data(), 3), t[3]);
  });
}
TEST_CASE("grad: rational quadratic lengthscale and variance and alpha against finite differences") {
  formula_cases("rq", {1.2, 1.5, 0.7}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::rq(X, Y, t[0], t[1], t[2]);
  });
  formula_cases("rq-ard", {0.9, 1.3, 1.6, 0.8, 2.5}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::rq(X, Y, memsafe::ard(t.data(), 3), t[3], t[4]);
  });
}
TEST_CASE("grad: linear kernel with scalar and per-dimension variances against finite differences") {
  formula_cases("linear", {0.4}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::linear(X, Y, t[0]);
  });
  formula_cases("linear-ard", {0.5, 1.5, 0.25}, [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::linear(X, Y, memsafe::ard(t.data(), 3));
  });
}

TEST_CASE("grad: every reduction against finite differences") {
  auto m32 = [](auto X, auto Y, const std::vector<double>& t) {
    return memsafe::matern32(X, Y, memsafe::ard(t.data(), 3), t[3]);
  };
  const std::vector<double> th = {0.8, 1.2, 1.5, 1.3};
  {
    problem P(9, 7, 3, th, 1);
    gradcheck::check("sum over i", P, m32, [](const auto& E, const double*) { return memsafe::sum(E, memsafe::over_i); });
  }
  {
    problem P(9, 7, 3, th, 7);
    gradcheck::check("K*v", P, m32, kv_red(7), want{true, true, true, true, false});
  }
  {
    problem P(9, 7, 3, th, 9);
    gradcheck::check("v*K", P, m32, [](const auto& E, const double* v) { return memsafe::vec(v, 9) * E; },
                     want{true, true, true, true, false});
  }
  {
    problem P(9, 7, 3, th, 3 * 9);
    gradcheck::check("M*K", P, m32, [](const auto& E, const double* M) { return memsafe::matrix(M, 3, 9) * E; },
                     want{true, true, true, true, false});
  }
  {
    problem P(9, 7, 3, th, 7 * 4);
    gradcheck::check("K*M (4 columns)", P, m32, km_red<4>(7), want{true, true, true, true, false});
  }
  {
    problem P(9, 7, 3, th, 1);
    gradcheck::check("dense", P, m32, [](const auto& E, const double*) { return memsafe::dense(E); });
  }
  {
    problem P(9, 7, 3, th, 1);
    gradcheck::check("logsumexp", P, m32, [](const auto& E, const double*) { return memsafe::logsumexp(E); });
  }
  {
    problem P(9, 7, 3, th, 7 * 3);
    gradcheck::check("softmax_sum", P, m32,
                     [](const auto& E, const double* V) { return memsafe::softmax_sum(E, memsafe::matrix(V, 7, 3)); },
                     want{true, true, true, true, false});
  }
  {  // attention scores as users write them: −sqdist/2 (no parameters)
    problem P(8, 10, 3, {}, 10 * 2);
    gradcheck::check("softmax_sum(-sqdist/2)", P,
                     [](auto X, auto Y, const std::vector<double>&) { return -0.5 * memsafe::sqdist(X, Y); },
                     [](const auto& E, const double* V) { return memsafe::softmax_sum(E, memsafe::matrix(V, 10, 2)); },
                     want{true, true, false, true, false});
    problem Q(8, 10, 3, {}, 1);
    gradcheck::check("logsumexp(dot)", Q, [](auto X, auto Y, const std::vector<double>&) { return memsafe::dot(X, Y); },
                     [](const auto& E, const double*) { return memsafe::logsumexp(E); }, want{true, true, false, false, false});
  }
}

TEST_CASE("grad: maps of lazy matrices against finite differences") {
  {  // the RBF kernel as a user writes it
    problem P(9, 7, 3, {1.3}, 7);
    gradcheck::check("exp(-sqdist/(2 l^2))", P,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return memsafe::exp(-memsafe::sqdist(X, Y) / (2 * t[0] * t[0]));
                     },
                     kv_red(7), want{true, true, false, true, false});
  }
  {  // a linear combination of kernels (parameters of every leaf, in order)
    problem P(9, 7, 3, {1.1, 0.8, 0.6, 1.4, 0.9, 1.2}, 1);
    gradcheck::check("2 rbf + matern32 - 0.5 sqdist + 0.3", P,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return 2.0 * memsafe::rbf(X, Y, t[0], t[1]) +
                              memsafe::matern32(X, Y, memsafe::ard(t.data() + 2, 3), t[5]) / 1.5 -
                              0.5 * memsafe::sqdist(X, Y) + 0.3;
                     },
                     sum_red);
  }
  {  // nonlinear maps over one kernel
    problem P(9, 7, 3, {1.2, 0.7, 0.9, 1.1, 0.5}, 7 * 2);
    gradcheck::check("log(rq) and square, sqrt, pow, inv", P,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return memsafe::log(memsafe::rq(X, Y, t[0], t[1], t[2])) +
                              memsafe::square(memsafe::rbf(X, Y, t[3], t[4])) +
                              memsafe::sqrt(memsafe::sqdist(X, Y) + 1.0) +
                              memsafe::pow(memsafe::sqdist(X, Y) + 2.0, 1.5) + memsafe::inv(memsafe::sqdist(X, Y) + 1.0) +
                              3.0 / (memsafe::sqdist(X, Y) + 4.0);
                     },
                     km_red<2>(7), want{true, true, true, true, false});
  }
  {  // a diagonal term (K + s I) on a square matrix, and transposes
    problem P(8, 8, 3, {1.1, 0.9}, 8);
    gradcheck::check("(K + 0.1 I) v", P,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return memsafe::rbf(X, Y, t[0], t[1]) + 0.1 * memsafe::identity(8);
                     },
                     kv_red(8), want{true, true, true, true, false});
    problem Q(9, 7, 3, {1.1, 0.9}, 9);
    gradcheck::check("transpose(K) v", Q,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return memsafe::transpose(memsafe::matern52(X, Y, t[0], t[1]));
                     },
                     kv_red(9), want{true, true, true, true, false});
  }
}

TEST_CASE("grad: Matern at coincident points is finite and matches finite differences") {
  // X with itself (the same view on both sides: the gradient is the total over both sides), and
  // Y holding copies of some rows of X.
  auto check_same = [](const std::string& what, auto make, bool par = true) {
    const std::vector<double> th = par ? std::vector<double>{1.1, 1.3} : std::vector<double>{};
    problem P(9, 9, 3, th, 9);
    gradcheck::check(what + "(X, X) sum", P, make, sum_red, want{true, false, par, false, true});
    problem Q(9, 9, 3, th, 9);
    gradcheck::check(what + "(X, X) K*v", Q, make, kv_red(9), want{true, false, par, true, true});
    problem R(9, 6, 3, th, 6);
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t k = 0; k < 3; ++k) R.y[j * 3 + k] = R.x[(2 * j) * 3 + k];
    gradcheck::check(what + "(X, Y) with shared points, K*v", R, make, kv_red(6), want{true, true, par, true, false});
  };
  check_same("matern12", [](auto X, auto Y, const std::vector<double>& t) { return memsafe::matern12(X, Y, t[0], t[1]); });
  check_same("matern32", [](auto X, auto Y, const std::vector<double>& t) { return memsafe::matern32(X, Y, t[0], t[1]); });
  check_same("matern52", [](auto X, auto Y, const std::vector<double>& t) { return memsafe::matern52(X, Y, t[0], t[1]); });
  check_same("dist", [](auto X, auto Y, const std::vector<double>&) { return memsafe::dist(X, Y); }, false);
}

TEST_CASE("grad: pairs at infinite distance contribute 0, the other points keep their gradients") {
  // X[2] and Y[1] are infinitely far (±inf, or differences that overflow) from every other point:
  // their kernel entries are 0 and so are their slopes, so the gradients of the finite points and
  // of the lengthscales equal those computed without the far points, and the far points' are 0.
  auto run = [](auto big, const char* what) {
    using T = decltype(big);
    CAPTURE(what);
    const std::vector<T> x = {0, 0, 1, 0, big, 0}, y = {T(0.5), T(0.5), -big, 1}, ls = {T(1.2), T(0.8)};
    const std::vector<T> up = {1, T(0.5), 2};
    auto X = memsafe::points(x.data(), 3, 2), Y = memsafe::points(y.data(), 2, 2);
    auto Xn = memsafe::points(x.data(), 2, 2), Yn = memsafe::points(y.data(), 1, 2);
    const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
    auto compare = [&](auto&& make) {
      const auto g = memsafe::grad(memsafe::sum(make(X, Y)), memsafe::vec(up.data(), 3), memsafe::wrt(X, Y, memsafe::params));
      const auto h = memsafe::grad(memsafe::sum(make(Xn, Yn)), memsafe::vec(up.data(), 2), memsafe::wrt(Xn, Yn, memsafe::params));
      const auto gx = g.of(X), gy = g.of(Y), hx = h.of(Xn), hy = h.of(Yn);
      for (std::size_t q = 0; q < 4; ++q) CHECK(std::fabs(double(gx[q]) - double(hx[q])) <= tol);
      CHECK(gx[4] == 0);
      CHECK(gx[5] == 0);
      for (std::size_t q = 0; q < 2; ++q) CHECK(std::fabs(double(gy[q]) - double(hy[q])) <= tol);
      CHECK(gy[2] == 0);
      CHECK(gy[3] == 0);
      REQUIRE(g.params.size() == 1);
      for (std::size_t k = 0; k < g.params[0].lengthscale.size(); ++k)
        CHECK(std::fabs(double(g.params[0].lengthscale[k]) - double(h.params[0].lengthscale[k])) <= tol);
      CHECK(std::fabs(double(g.params[0].variance[0]) - double(h.params[0].variance[0])) <= tol);
    };
    compare([&](auto A, auto B) { return memsafe::rbf(A, B, memsafe::ard(ls.data(), 2), 1.0); });
    compare([&](auto A, auto B) { return memsafe::matern32(A, B, memsafe::ard(ls.data(), 2), 1.3); });
    compare([&](auto A, auto B) { return memsafe::matern12(A, B, 0.9, 1.0); });
  };
  run(std::numeric_limits<double>::infinity(), "double, inf");
  run(1e308, "double, x - y overflows");
  run(std::numeric_limits<float>::infinity(), "float, inf");
  run(3e38f, "float, x - y overflows");
}

TEST_CASE("grad: a written-out square root of sqdist has the built-in matern12 gradient at coincident points") {
  // exp(−√sqdist / l) is Matérn-1/2: √'s derivative is infinite at 0, where every difference is 0;
  // the pair contributes 0 there, as the built-in's (never ∞·0 = NaN).
  const std::vector<double> x = {0, 0, 1, 0, 0, 2}, y = {0, 0, 3, 1}, up = {1, 0.5, 2};
  auto X = memsafe::points(x.data(), 3, 2), Y = memsafe::points(y.data(), 2, 2);
  const double l = 1.3;
  const auto a = memsafe::grad(memsafe::sum(memsafe::exp(-memsafe::sqrt(memsafe::sqdist(X, Y)) / l)),
                               memsafe::vec(up.data(), 3), memsafe::wrt(X, Y));
  const auto b = memsafe::grad(memsafe::sum(memsafe::matern12(X, Y, l, 1.0)), memsafe::vec(up.data(), 3), memsafe::wrt(X, Y));
  for (std::size_t q = 0; q < 6; ++q) CHECK(a.of(X)[q] == doctest::Approx(b.of(X)[q]).epsilon(1e-12));
  for (std::size_t q = 0; q < 4; ++q) CHECK(a.of(Y)[q] == doctest::Approx(b.of(Y)[q]).epsilon(1e-12));
  const auto c = memsafe::grad(memsafe::sum(memsafe::exp(-memsafe::sqrt(memsafe::sqdist(X, X)) / l)),
                               memsafe::vec(up.data(), 3), memsafe::wrt(X));
  const auto e = memsafe::grad(memsafe::sum(memsafe::matern12(X, X, l, 1.0)), memsafe::vec(up.data(), 3), memsafe::wrt(X));
  for (std::size_t q = 0; q < 6; ++q) {
    CHECK(std::isfinite(c.of(X)[q]));
    CHECK(c.of(X)[q] == doctest::Approx(e.of(X)[q]).epsilon(1e-12));
  }
}

TEST_CASE("grad: lazy x lazy products against finite differences") {
  auto same = [](const auto& E, const double*) { return E; };
  {  // two different kernels: A = rbf(X, Y) (n×m), B = matern32(Y, X) with ARD (m×n)
    problem P(9, 7, 3, {1.1, 0.8, 0.7, 1.3, 0.9, 1.2}, 1);
    gradcheck::check("rbf(X, Y) * matern32(Y, X)", P,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return memsafe::rbf(X, Y, t[0], t[1]) * memsafe::matern32(Y, X, memsafe::ard(t.data() + 2, 3), t[5]);
                     },
                     same);
  }
  {  // maps and a transpose on the factors
    problem P(8, 10, 3, {1.2, 0.9, 1.4, 0.6}, 1);
    gradcheck::check("(2 matern52(X, Y) + sqdist) * transpose(rq(X, Y))", P,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return (2.0 * memsafe::matern52(X, Y, t[0], t[1]) + memsafe::sqdist(X, Y)) *
                              memsafe::transpose(memsafe::rq(X, Y, t[2], t[3], 1.5));
                     },
                     same, want{true, true, false, false, false});
  }
  {  // SGPR's Kuf·Kufᵀ: the same leaf twice; the gradient of the shared parameters is the sum of
     // both leaves' entries
    const std::size_t m = 6, n = 40, d = 3;
    std::vector<double> z = ref::data(m, d, 1), x = ref::data(n, d, 2), up = ref::data(m * m, 1, 3);
    std::vector<double> th = {0.8, 1.3, 1.1, 1.4};
    auto Z = memsafe::points(static_cast<const double*>(z.data()), m, d);
    auto X = memsafe::points(static_cast<const double*>(x.data()), n, d);
    auto build = [&] {
      auto Kuf = memsafe::matern32(Z, X, memsafe::ard(th.data(), d), th[3]);
      return Kuf * memsafe::transpose(Kuf);
    };
    auto loss = [&] {
      const auto r = memsafe::eval(build(), memsafe::options{memsafe::unlimited, 1});
      double s = 0;
      for (std::size_t q = 0; q < r.values.size(); ++q) s += up[q] * r.values[q];
      return s;
    };
    const auto fz = gradcheck::fd(z, loss), fx = gradcheck::fd(x, loss), ft = gradcheck::fd(th, loss);
    auto b = memsafe::vjp(build(), memsafe::matrix(static_cast<const double*>(up.data()), m, m),
                          memsafe::wrt(Z, X, memsafe::params));
    const std::size_t mn = memsafe::plan_for(b, memsafe::options{memsafe::unlimited, 1}).min_bytes;
    for (std::size_t budget : {mn, 3 * mn, std::size_t{memsafe::unlimited}}) {
      for (unsigned threads : {1u, 3u}) {
        CAPTURE(budget);
        CAPTURE(threads);
        const auto g = memsafe::grad(b, memsafe::options{budget, threads});
        CHECK(g.stats.peak_temp_bytes <= budget);
        CHECK(gradcheck::rel_err(g.of(Z), fz) <= 1e-6);
        CHECK(gradcheck::rel_err(g.of(X), fx) <= 1e-6);
        REQUIRE(g.params.size() == 2);
        std::vector<double> pt;
        for (std::size_t k = 0; k < d; ++k) pt.push_back(g.params[0].lengthscale[k] + g.params[1].lengthscale[k]);
        pt.push_back(g.params[0].variance[0] + g.params[1].variance[0]);
        CHECK(gradcheck::rel_err(pt, ft) <= 1e-6);
      }
    }
    CHECK_THROWS_AS(memsafe::grad(b, memsafe::budget_bytes(mn - 1)), memsafe::budget_error);
    const std::string e = memsafe::explain(b, memsafe::options{memsafe::unlimited, 2});
    CAPTURE(e);
    CHECK(e.find("lazy x lazy") != std::string::npos);
  }
}

TEST_CASE("grad: diag and trace against finite differences") {
  auto diag_red = [](const auto& E, const double*) { return memsafe::diag(E); };
  auto trace_red = [](const auto& E, const double*) { return memsafe::trace(E); };
  {
    problem P(8, 8, 3, {0.8, 1.3, 1.1, 1.4}, 1);
    gradcheck::check("diag(rbf(X, Y) + 0.2 I)", P,
                     [](auto X, auto Y, const std::vector<double>& t) {
                       return memsafe::rbf(X, Y, memsafe::ard(t.data(), 3), t[3]) + 0.2 * memsafe::identity(8);
                     },
                     diag_red);
  }
  {
    problem P(8, 8, 3, {0.6}, 1);
    gradcheck::check("trace(linear(X, X))", P,
                     [](auto X, auto Y, const std::vector<double>& t) { return memsafe::linear(X, Y, t[0]); }, trace_red,
                     want{true, false, true, false, true});
  }
  {  // a stationary kernel of X with itself: trace = n σ², so only ∂/∂σ² is nonzero, and ∂/∂X is exactly 0
    problem P(8, 8, 3, {1.1, 1.3}, 1);
    auto m32 = [](auto X, auto Y, const std::vector<double>& t) { return memsafe::matern32(X, Y, t[0], t[1]); };
    gradcheck::check("trace(matern32(X, X))", P, m32, trace_red, want{false, false, true, false, true});
    const auto X = memsafe::points(static_cast<const double*>(P.x.data()), 8, 3);
    const double up = 0.7;
    const auto g = memsafe::grad(memsafe::trace(m32(X, X, P.th)), memsafe::vec(&up, 1), memsafe::wrt(X, memsafe::params),
                                 memsafe::options{});
    CHECK(g.of(X) == std::vector<double>(24, 0.0));
    CHECK(g.params[0].variance[0] == doctest::Approx(8 * 0.7));
    CHECK(g.params[0].lengthscale[0] == 0.0);
  }
}

TEST_CASE("grad: larger problems are budget-independent over many tiles and threads and split columns") {
  const std::size_t n = 150, m = 700, d = 4;
  const auto x = ref::data(n, d, 1), y = ref::data(m, d, 2), up = ref::data(n, 3, 3), M = ref::data(m, 3, 4);
  const std::vector<double> ls = {0.9, 1.3, 1.1, 0.7};
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  auto b = memsafe::vjp(memsafe::matern52(X, Y, memsafe::ard(ls.data(), d), 1.4) * memsafe::matrix(M.data(), m, 3),
                        memsafe::matrix(up.data(), n, 3), memsafe::wrt(X, Y, memsafe::params, memsafe::operand));
  const auto ref_g = memsafe::grad(b, memsafe::options{memsafe::unlimited, 1});
  const std::size_t mn = ref_g.stats.min_budget_bytes;
  for (std::size_t budget : {mn, mn + 5000, std::size_t{64 << 10}, std::size_t{1 << 20}}) {
    for (unsigned threads : {1u, 2u, 3u}) {
      CAPTURE(budget);
      CAPTURE(threads);
      const auto g = memsafe::grad(b, memsafe::options{budget, threads});
      CHECK(g.stats.peak_temp_bytes <= budget);
      CHECK(gradcheck::rel_err(g.of(X), ref_g.of(X)) <= 1e-12);
      CHECK(gradcheck::rel_err(g.of(Y), ref_g.of(Y)) <= 1e-12);
      CHECK(gradcheck::rel_err(gradcheck::flat_params(g), gradcheck::flat_params(ref_g)) <= 1e-12);
      CHECK(gradcheck::rel_err(g.operand, ref_g.operand) <= 1e-12);
    }
  }
}

TEST_CASE("grad: fused and split backward plans with plan_for and explain") {
  const std::size_t n = 40, m = 3000, d = 3;
  const auto x = ref::data(n, d, 1), y = ref::data(m, d, 2), up = ref::data(n, 1, 3);
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  auto b = memsafe::vjp(memsafe::sum(memsafe::rbf(X, Y, 1.1, 0.8)), memsafe::vec(up.data(), n),
                        memsafe::wrt(X, Y, memsafe::params));
  const auto big = memsafe::plan_for(b, memsafe::options{memsafe::unlimited, 2});
  CHECK(big.mode.rfind("fused", 0) == 0);
  CHECK(big.passes.size() == 1);
  // The fused pass holds m×d doubles per thread; the minimum is the split's (no m-sized buffer).
  CHECK(big.min_bytes < m * d * sizeof(double));
  const auto small = memsafe::plan_for(b, memsafe::options{big.min_bytes, 2});
  CHECK(small.mode.rfind("split", 0) == 0);
  CHECK(small.passes.size() == 2);
  CHECK(small.planned_bytes <= big.min_bytes);
  const auto g_small = memsafe::grad(b, memsafe::options{big.min_bytes, 2});
  const auto g_big = memsafe::grad(b, memsafe::options{memsafe::unlimited, 2});
  CHECK(g_small.stats.peak_temp_bytes <= big.min_bytes);
  CHECK(gradcheck::rel_err(g_small.of(X), g_big.of(X)) <= 1e-12);
  CHECK(gradcheck::rel_err(g_small.of(Y), g_big.of(Y)) <= 1e-12);
  const std::string e = memsafe::explain(b, memsafe::options{big.min_bytes, 2});
  CAPTURE(e);
  CHECK(e.find("as written:   vjp(sum(rbf(") != std::string::npos);
  CHECK(e.find("pass 2:") != std::string::npos);
  CHECK(e.find("rows of E^T") != std::string::npos);
  CHECK(e.find("W = A[40×1]") != std::string::npos);
  const std::string tight = memsafe::explain(b, memsafe::options{big.min_bytes - 1, 1});
  CHECK(tight.find("does not fit") != std::string::npos);
  CHECK(tight.find(std::to_string(big.min_bytes)) != std::string::npos);
  // Only the columns: one pass over the transpose, no m-sized accumulator.
  auto bc = memsafe::vjp(memsafe::sum(memsafe::rbf(X, Y, 1.1, 0.8)), memsafe::vec(up.data(), n), memsafe::wrt(Y));
  const auto pc = memsafe::plan_for(bc, memsafe::options{memsafe::unlimited, 2});
  CHECK(pc.mode.rfind("columns", 0) == 0);
  CHECK(pc.passes.size() == 1);
  // logsumexp: the forward pre-step and its kept vector are in the plan and the minimum.
  auto bl = memsafe::vjp(memsafe::logsumexp(memsafe::rbf(X, Y, 1.1, 0.8)), memsafe::vec(up.data(), n),
                         memsafe::wrt(X, memsafe::params));
  const auto pl = memsafe::plan_for(bl, memsafe::options{memsafe::unlimited, 2});
  CHECK(pl.pre.size() == 1);
  CHECK(pl.persistent_bytes == n * sizeof(double));
  CHECK(pl.min_bytes > pl.persistent_bytes);
  const auto gl = memsafe::grad(bl, memsafe::options{pl.min_bytes, 1});
  CHECK(gl.stats.peak_temp_bytes <= pl.min_bytes);
}

TEST_CASE("grad: the one-call form and compile-time budgets and gradients::of") {
  using namespace memsafe::literals;
  const std::size_t n = 12, m = 9, d = 2;
  const auto x = ref::data(n, d, 1), y = ref::data(m, d, 2), up = ref::data(n, 1, 3), v = ref::data(m, 1, 4);
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d);
  auto K = memsafe::rbf(X, Y, 0.9, 1.1);
  auto g1 = memsafe::grad(K * memsafe::vec(v.data(), m), memsafe::vec(up.data(), n),
                          memsafe::wrt(Y, X, memsafe::operand), memsafe::budget_bytes(1 << 20));
  auto g2 = memsafe::grad<memsafe::budget<1_MiB>>(
      memsafe::vjp(K * memsafe::vec(v.data(), m), memsafe::vec(up.data(), n), memsafe::wrt(X, Y, memsafe::operand)));
  CHECK(g1.of(X) == g2.of(X));
  CHECK(g1.of(Y) == g2.of(Y));
  CHECK(g1.points[0] == g2.points[1]);
  CHECK(g1.operand == g2.operand);
  CHECK(g1.params.size() == 1);
  CHECK(g1.params[0].formula == "rbf");
  CHECK(g1.params[0].lengthscale.empty());  // not requested
  const double other[4] = {};
  CHECK_THROWS_AS((void)g1.of(memsafe::points(other, 2, 2)), memsafe::argument_error);
}

TEST_CASE("grad: argument and shape errors") {
  const std::size_t n = 6, m = 5, d = 2;
  const auto x = ref::data(n, d, 1), y = ref::data(m, d, 2), z = ref::data(m, d, 3), up = ref::data(n, 2, 4);
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data(), m, d), Z = memsafe::points(z.data(), m, d);
  auto K = memsafe::rbf(X, Y, 1.0, 1.0);
  // a point set that is not a side of any leaf
  CHECK_THROWS_AS((void)memsafe::grad(memsafe::sum(K), memsafe::vec(up.data(), n), memsafe::wrt(Z), memsafe::options{}),
                  memsafe::argument_error);
  // a sum has no operand
  CHECK_THROWS_AS((void)memsafe::grad(memsafe::sum(K), memsafe::vec(up.data(), n), memsafe::wrt(X, memsafe::operand),
                                      memsafe::options{}),
                  memsafe::argument_error);
  // upstream of the wrong length or shape
  CHECK_THROWS_AS((void)memsafe::vjp(memsafe::sum(K), memsafe::vec(up.data(), n - 1), memsafe::wrt(X)), memsafe::shape_error);
  CHECK_THROWS_AS((void)memsafe::vjp(memsafe::dense(K), memsafe::vec(up.data(), n), memsafe::wrt(X)), memsafe::shape_error);
  CHECK_THROWS_AS((void)memsafe::vjp(memsafe::dense(K), memsafe::matrix(up.data(), n, 2), memsafe::wrt(X)),
                  memsafe::shape_error);
}

TEST_CASE("grad: a MEMSAFE_ISA that is not a name is an argument_error, in the gradient too") {
  ref::scoped_env unset_kernels("MEMSAFE_KERNELS", nullptr);
  ref::scoped_env force("MEMSAFE_ISA", "bogus");
  const std::vector<double> x = {0, 0, 1, 0, 0, 2}, up = {1, 1, 1};
  auto X = memsafe::points(x.data(), 3, 2);
  auto K = memsafe::rbf(X, X, 1.0, 1.0);
  try {
    (void)memsafe::grad(memsafe::sum(K), memsafe::vec(up.data(), 3), memsafe::wrt(X));
    FAIL("no argument_error");
  } catch (const memsafe::argument_error& e) {
    CHECK(std::string(e.what()).find("MEMSAFE_ISA must be avx512, avx2 or portable, got \"bogus\"") != std::string::npos);
  }
  const std::vector<double> up9(9, 1.0);  // a lazy × lazy product: its own planner
  CHECK_THROWS_AS((void)memsafe::grad(memsafe::vjp(K * memsafe::transpose(K), memsafe::matrix(up9.data(), 3, 3),
                                                   memsafe::wrt(X))),
                  memsafe::argument_error);
}

TEST_CASE("grad: empty extents and nothing requested give zero gradients without temporaries") {
  const std::vector<double> x(12, 0.5), y(9, 0.1), g(4, 1.0), ls(3, 1.0);
  const auto X = memsafe::points(x.data(), 4, 3), Y = memsafe::points(y.data(), 3, 3);
  const auto X0 = memsafe::points(x.data(), 0, 3), Y0 = memsafe::points(y.data(), 0, 3);
  const auto a = memsafe::grad(memsafe::sum(memsafe::rbf(X0, Y, memsafe::ard(ls.data(), 3))), memsafe::vec(g.data(), 0),
                               memsafe::wrt(X0, Y, memsafe::params), memsafe::options{});
  CHECK(a.points[0].empty());
  CHECK(a.points[1] == std::vector<double>(9, 0.0));
  CHECK(a.params[0].lengthscale == std::vector<double>(3, 0.0));
  CHECK(a.params[0].variance == std::vector<double>(1, 0.0));
  CHECK(a.stats.peak_temp_bytes == 0);
  const auto b = memsafe::grad(memsafe::logsumexp(memsafe::rbf(X, Y0, 1.0)), memsafe::vec(g.data(), 4),
                               memsafe::wrt(X, memsafe::params), memsafe::options{});
  CHECK(b.points[0] == std::vector<double>(12, 0.0));
  CHECK(b.params[0].lengthscale == std::vector<double>(1, 0.0));
  CHECK(b.stats.temp_allocations == 0);
  const auto c = memsafe::grad(memsafe::sum(memsafe::rbf(X, Y, 1.0)), memsafe::vec(g.data(), 4), memsafe::wrt<double>(),
                               memsafe::options{});
  CHECK(c.stats.temp_allocations == 0);
  CHECK(c.stats.plan.mode.rfind("none", 0) == 0);
}

TEST_CASE("grad: float gradients agree with double") {
  const std::size_t n = 20, m = 15, d = 3;
  const auto x = ref::data(n, d, 1), y = ref::data(m, d, 2), up = ref::data(n, 1, 3);
  const auto xf = ref::cast<float>(x), yf = ref::cast<float>(y), uf = ref::cast<float>(up);
  const auto xd = ref::seen<float>(x), yd = ref::seen<float>(y), ud = ref::seen<float>(up);
  const std::vector<float> lsf = {0.9f, 1.2f, 1.4f};
  const std::vector<double> lsd(lsf.begin(), lsf.end());
  auto Xf = memsafe::points(xf.data(), n, d), Yf = memsafe::points(yf.data(), m, d);
  auto Xd = memsafe::points(xd.data(), n, d), Yd = memsafe::points(yd.data(), m, d);
  const auto gf = memsafe::grad(memsafe::sum(memsafe::matern52(Xf, Yf, memsafe::ard(lsf.data(), d), 1.25)),
                                memsafe::vec(uf.data(), n), memsafe::wrt(Xf, Yf, memsafe::params), memsafe::options{});
  const auto gd = memsafe::grad(memsafe::sum(memsafe::matern52(Xd, Yd, memsafe::ard(lsd.data(), d), 1.25)),
                                memsafe::vec(ud.data(), n), memsafe::wrt(Xd, Yd, memsafe::params), memsafe::options{});
  CHECK(gradcheck::rel_err(gradcheck::as_double(gf.of(Xf)), gd.of(Xd)) <= 1e-4);
  CHECK(gradcheck::rel_err(gradcheck::as_double(gf.of(Yf)), gd.of(Yd)) <= 1e-4);
  CHECK(gradcheck::rel_err(gradcheck::flat_params(gf), gradcheck::flat_params(gd)) <= 1e-4);
  CHECK(gf.stats.peak_temp_bytes <= gf.stats.planned_temp_bytes);
}
}  // TEST_SUITE("grad")
