// Every kernel × every reduction, float and double, against the dense reference.
#include "sweep.hpp"

using namespace ref;

namespace {
const double ls_ard[5] = {0.7, 1.3, 2.0, 0.9, 1.1};
const double var_ard[5] = {0.5, 1.5, 0.0, 2.0, 0.25};
template <class T>
memsafe::ard_view<T> ard_of(const double* p) {
  static thread_local std::vector<T> keep;
  keep.assign(p, p + 5);
  return memsafe::ard(keep.data(), 5);
}
}  // namespace

TEST_SUITE("reference") {
TEST_CASE_TEMPLATE("rbf against the dense reference", T, float, double) {
  sweep<T>("rbf", [](auto X, auto Y) { return memsafe::rbf(X, Y, 1.7, 1.3); },
           [](const double* a, const double* b, std::size_t d) { return 1.3 * std::exp(-0.5 * sq(a, b, d) / (1.7 * 1.7)); });
}
TEST_CASE_TEMPLATE("rbf with ARD lengthscales against the dense reference", T, float, double) {
  std::vector<T> ls(ls_ard, ls_ard + 5);
  sweep<T>("rbf-ard", [&](auto X, auto Y) { return memsafe::rbf(X, Y, memsafe::ard(ls.data(), 5), 0.8); },
           [](const double* a, const double* b, std::size_t d) {
             std::vector<double> l(ls_ard, ls_ard + 5);
             for (auto& q : l) q = double(T(q));
             return 0.8 * std::exp(-0.5 * sq(a, b, d, l.data()));
           });
}
TEST_CASE_TEMPLATE("matern12 against the dense reference", T, float, double) {
  sweep<T>("matern12", [](auto X, auto Y) { return memsafe::matern12(X, Y, 1.4, 2.0); },
           [](const double* a, const double* b, std::size_t d) { return 2.0 * std::exp(-std::sqrt(sq(a, b, d)) / 1.4); });
}
TEST_CASE_TEMPLATE("matern32 against the dense reference", T, float, double) {
  sweep<T>("matern32", [](auto X, auto Y) { return memsafe::matern32(X, Y, 1.4, 2.0); },
           [](const double* a, const double* b, std::size_t d) {
             const double r = std::sqrt(3.0 * sq(a, b, d)) / 1.4;
             return 2.0 * (1 + r) * std::exp(-r);
           });
}
TEST_CASE_TEMPLATE("matern52 with ARD against the dense reference", T, float, double) {
  std::vector<T> ls(ls_ard, ls_ard + 5);
  sweep<T>("matern52-ard", [&](auto X, auto Y) { return memsafe::matern52(X, Y, memsafe::ard(ls.data(), 5), 0.6); },
           [](const double* a, const double* b, std::size_t d) {
             std::vector<double> l(ls_ard, ls_ard + 5);
             for (auto& q : l) q = double(T(q));
             const double s = sq(a, b, d, l.data()), r = std::sqrt(5.0 * s);
             return 0.6 * (1 + r + 5.0 * s / 3.0) * std::exp(-r);
           });
}
TEST_CASE_TEMPLATE("rq keeps its accuracy at large alpha (log1p), and an alpha whose 2 alpha overflows is refused", T,
                   float, double) {
  // K = s2 (1 + r2 / (2 a l2))^(-a) between x = 0 and y = (1, 0.5): log(1 + w) rounded 1 + w first
  // and multiplied that error by a (a = 1e5 in float: 7e-4 relative; 1e17 in double: s2 itself).
  std::vector<T> x = {0, 0}, y = {1, 0.5};
  const auto X = memsafe::points(x.data(), 1, 2), Y = memsafe::points(y.data(), 1, 2);
  const double r2 = 1.25;
  for (double a : {10.0, 1e5, 1e9, 1e17, 1e30}) {
    CAPTURE(a);
    if (!std::isfinite(double(T(2 * a)))) continue;
    const double want = 1.5 * std::exp(-a * std::log1p(r2 / (2 * a * 0.8 * 0.8)));
    const auto K = memsafe::eval(memsafe::dense(memsafe::rq(X, Y, 0.8, 1.5, a)));
    CHECK(double(K.values[0]) == doctest::Approx(want).epsilon(std::is_same_v<T, float> ? 4e-6 : 1e-14));
    // the fused sum (K·v) and the gradient take the same finalise / derivative
    std::vector<T> v = {1};
    const auto s = memsafe::eval(memsafe::rq(X, Y, 0.8, 1.5, a) * memsafe::vec(v.data(), 1));
    CHECK(double(s.values[0]) == doctest::Approx(want).epsilon(std::is_same_v<T, float> ? 4e-6 : 1e-14));
  }
  CHECK_THROWS_AS((void)memsafe::rq(X, Y, 0.8, 1.5, std::is_same_v<T, float> ? 2e38 : 1e308), memsafe::argument_error);
}

TEST_CASE_TEMPLATE("rq against the dense reference", T, float, double) {
  sweep<T>("rq", [](auto X, auto Y) { return memsafe::rq(X, Y, 1.2, 1.5, 0.7); },
           [](const double* a, const double* b, std::size_t d) {
             return 1.5 * std::pow(1 + sq(a, b, d) / (2 * 0.7 * 1.2 * 1.2), -0.7);
           });
}
TEST_CASE_TEMPLATE("linear against the dense reference", T, float, double) {
  sweep<T>("linear", [](auto X, auto Y) { return memsafe::linear(X, Y, 0.4); },
           [](const double* a, const double* b, std::size_t d) { return 0.4 * dotp(a, b, d); });
}
TEST_CASE_TEMPLATE("linear with per-dimension variances against the dense reference", T, float, double) {
  std::vector<T> v(var_ard, var_ard + 5);
  sweep<T>("linear-ard", [&](auto X, auto Y) { return memsafe::linear(X, Y, memsafe::ard(v.data(), 5)); },
           [](const double* a, const double* b, std::size_t d) {
             std::vector<double> w(var_ard, var_ard + 5);
             for (auto& q : w) q = double(T(q));
             return dotp(a, b, d, w.data());
           });
}
}
