// Errors: shape_error / argument_error for mismatched extents and invalid values, the exception
// hierarchy, and empty point sets (which are not errors).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <memsafe/memsafe.hpp>

#include "reference.hpp"

namespace {

static_assert(std::is_base_of_v<std::runtime_error, memsafe::error>);
static_assert(std::is_base_of_v<memsafe::error, memsafe::shape_error>);
static_assert(std::is_base_of_v<memsafe::error, memsafe::argument_error>);
static_assert(std::is_base_of_v<memsafe::error, memsafe::budget_error>);
static_assert(std::is_base_of_v<std::runtime_error, memsafe::shape_error>);
static_assert(std::is_base_of_v<std::runtime_error, memsafe::argument_error>);
static_assert(std::is_base_of_v<std::runtime_error, memsafe::budget_error>);

constexpr double nan_d = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_d = std::numeric_limits<double>::infinity();

std::vector<double> seq(std::size_t count, double scale = 0.1) {
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = scale * double((i * 7) % 13) - 0.5;
  return v;
}

using ref::contains;
using ref::message_of;

const std::vector<double> x10 = seq(10 * 3), y7 = seq(7 * 3, 0.3), y7_4 = seq(7 * 4, 0.2), x10_4 = seq(10 * 4, 0.05);

}  // namespace

TEST_SUITE("errors") {

TEST_CASE("errors: messages write numbers as std::to_string does") {
  using memsafe::detail::cat, memsafe::detail::msg;
  // every integer type the messages pass, at its extremes and around powers of ten
  CHECK(cat(msg{std::size_t{0}}) == "0");
  CHECK(cat(msg{std::numeric_limits<std::size_t>::max()}) == std::to_string(std::numeric_limits<std::size_t>::max()));
  CHECK(cat(msg{std::numeric_limits<long long>::min()}) == std::to_string(std::numeric_limits<long long>::min()));
  CHECK(cat(msg{std::numeric_limits<int>::min()}) == std::to_string(std::numeric_limits<int>::min()));
  CHECK(cat(msg{std::numeric_limits<std::ptrdiff_t>::max()}) == std::to_string(std::numeric_limits<std::ptrdiff_t>::max()));
  CHECK(cat(msg{static_cast<unsigned char>(255), short{-7}, std::uint32_t{4000000000u}}) == "255-74000000000");
  for (std::size_t v = 1; v && v < std::numeric_limits<std::size_t>::max() / 3; v = v * 3 + 1) {
    CAPTURE(v);
    CHECK(cat(msg{v}) == std::to_string(v));
    CHECK(cat(msg{-static_cast<long long>(v)}) == std::to_string(-static_cast<long long>(v)));
  }
  // floating point as "%f" (std::to_string) where that shows the leading digits, else as "%.6g"
  for (double x : {0.0, -0.0, 0.5, -1.25, 2e-4, 3.0e15, 9.9e15, inf_d, -inf_d, nan_d}) {
    CAPTURE(x);
    CHECK(cat(msg{x}) == std::to_string(x));
    CHECK(cat(msg{static_cast<float>(x)}) == std::to_string(static_cast<float>(x)));
  }
  CHECK(cat(msg{1e-7}) == "1e-07");
  CHECK(cat(msg{-1e-9}) == "-1e-09");  // not "-0.000000": a tiny negative parameter reads as what it is
  CHECK(cat(msg{1.5e16}) == "1.5e+16");
  CHECK(cat(msg{1e300}) == "1e+300");
  CHECK(cat(msg{std::numeric_limits<double>::max()}) == "1.79769e+308");
  CHECK(cat(msg{-std::numeric_limits<double>::max()}) == "-1.79769e+308");
  CHECK(cat(msg{std::numeric_limits<double>::denorm_min()}) == "4.94066e-324");
  // text pieces of every kind, empty ones included, in order
  const std::string s = "std::string";
  CHECK(cat(msg{"a ", std::string_view("view"), "", s, std::string(" tmp"), " ", 42, "."}) == "a viewstd::string tmp 42.");
  CHECK(cat(msg{}).empty());
}

TEST_CASE("errors: exception hierarchy of thrown errors") {
  const auto X = memsafe::points(x10.data(), 10, 3);
  const auto Y = memsafe::points(y7_4.data(), 7, 4);
  CHECK_THROWS_AS(memsafe::sqdist(X, Y), memsafe::error);
  CHECK_THROWS_AS(memsafe::sqdist(X, Y), std::runtime_error);
  CHECK_THROWS_AS(memsafe::rbf(X, X, -1.0), memsafe::error);
  CHECK_THROWS_AS(memsafe::rbf(X, X, -1.0), std::runtime_error);
  CHECK_THROWS_AS((void)memsafe::eval(memsafe::sum(memsafe::sqdist(X, X)), memsafe::budget_bytes(1)), memsafe::error);
  CHECK_THROWS_AS((void)memsafe::eval(memsafe::sum(memsafe::sqdist(X, X)), memsafe::budget_bytes(1)),
                  std::runtime_error);
}

TEST_CASE("errors: X and Y with different d name both shapes") {
  const auto X = memsafe::points(x10.data(), 10, 3);
  const auto Y = memsafe::points(y7_4.data(), 7, 4);
  const std::string msg = message_of<memsafe::shape_error>([&] { (void)memsafe::sqdist(X, Y); });
  CAPTURE(msg);
  CHECK(contains(msg, "10×3"));
  CHECK(contains(msg, "7×4"));
  CHECK(contains(msg, "sqdist"));
  // Every formula checks, in both argument orders.
  CHECK_THROWS_AS(memsafe::sqdist(Y, X), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::dist(X, Y), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::l1(X, Y), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::cosine(X, Y), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::dot(X, Y), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::rbf(X, Y, 1.0), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::matern12(X, Y, 1.0), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::matern32(X, Y, 1.0), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::matern52(X, Y, 1.0), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::rq(X, Y, 1.0, 1.0, 2.0), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::linear(X, Y), memsafe::shape_error);
  // A static d on one side and a different run-time d on the other.
  const auto Xs = memsafe::points<3>(x10.data(), 10);
  CHECK_THROWS_AS(memsafe::sqdist(Xs, Y), memsafe::shape_error);
}

TEST_CASE("errors: K times v with v of the wrong length") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const std::vector<double> v(10, 1.0);
  const std::string msg = message_of<memsafe::shape_error>([&] { (void)(memsafe::sqdist(X, Y) * memsafe::vec(v.data(), 5)); });
  CAPTURE(msg);
  CHECK(contains(msg, "10×7"));
  CHECK(contains(msg, "5"));
  CHECK_THROWS_AS(memsafe::sqdist(X, Y) * memsafe::vec(v.data(), 10), memsafe::shape_error);
  CHECK_NOTHROW((void)(memsafe::sqdist(X, Y) * memsafe::vec(v.data(), 7)));
}

TEST_CASE("errors: K times M with the wrong number of rows") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const std::vector<double> m(10 * 2, 1.0);
  const std::string msg = message_of<memsafe::shape_error>([&] { (void)(memsafe::sqdist(X, Y) * memsafe::matrix(m.data(), 5, 2)); });
  CAPTURE(msg);
  CHECK(contains(msg, "10×7"));
  CHECK(contains(msg, "5×2"));
  CHECK_THROWS_AS(memsafe::sqdist(X, Y) * memsafe::matrix(m.data(), 10, 2), memsafe::shape_error);
  CHECK_NOTHROW((void)(memsafe::sqdist(X, Y) * memsafe::matrix(m.data(), 7, 2)));
}

TEST_CASE("errors: v times K and M times K with wrong extents") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const std::vector<double> v(10, 1.0), m(3 * 10, 1.0);
  const std::string vmsg = message_of<memsafe::shape_error>([&] { (void)(memsafe::vec(v.data(), 7) * memsafe::sqdist(X, Y)); });
  CAPTURE(vmsg);
  CHECK(contains(vmsg, "10×7"));
  CHECK_NOTHROW((void)(memsafe::vec(v.data(), 10) * memsafe::sqdist(X, Y)));
  const std::string mmsg = message_of<memsafe::shape_error>([&] { (void)(memsafe::matrix(m.data(), 3, 7) * memsafe::sqdist(X, Y)); });
  CAPTURE(mmsg);
  CHECK(contains(mmsg, "3×7"));
  CHECK(contains(mmsg, "10×7"));
  CHECK_THROWS_AS(memsafe::matrix(m.data(), 10, 3) * memsafe::sqdist(X, Y), memsafe::shape_error);
  CHECK_NOTHROW((void)(memsafe::matrix(m.data(), 3, 10) * memsafe::sqdist(X, Y)));
}

TEST_CASE("errors: lazy A times B with mismatched inner extents") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const auto A = memsafe::sqdist(X, Y);  // 10×7
  const std::string msg = message_of<memsafe::shape_error>([&] { (void)(A * A); });
  CAPTURE(msg);
  CHECK(contains(msg, "10×7"));
  CHECK_THROWS_AS(memsafe::transpose(A) * memsafe::transpose(A), memsafe::shape_error);
  CHECK_THROWS_AS(A * memsafe::sqdist(X, X), memsafe::shape_error);
  CHECK_NOTHROW((void)(A * memsafe::transpose(A)));
  CHECK_NOTHROW((void)(memsafe::transpose(A) * A));
}

TEST_CASE("errors: elementwise ops on lazy matrices of different shapes") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const auto A = memsafe::sqdist(X, Y);  // 10×7
  const auto B = memsafe::sqdist(X, X);  // 10×10
  const std::string msg = message_of<memsafe::shape_error>([&] { (void)memsafe::hadamard(A, B); });
  CAPTURE(msg);
  CHECK(contains(msg, "10×7"));
  CHECK(contains(msg, "10×10"));
  CHECK_THROWS_AS(A + B, memsafe::shape_error);
  CHECK_THROWS_AS(A - B, memsafe::shape_error);
  CHECK_THROWS_AS(A / B, memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::min(A, B), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::max(A, B), memsafe::shape_error);
  CHECK_THROWS_AS(A + memsafe::transpose(A), memsafe::shape_error);
  CHECK_NOTHROW((void)(A + memsafe::rbf(X, Y, 1.0)));
  CHECK_NOTHROW((void)memsafe::hadamard(B, memsafe::transpose(B)));
}

TEST_CASE("errors: softmax_sum with V rows not matching S columns") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const std::vector<double> v(10 * 2, 1.0);
  const std::string msg = message_of<memsafe::shape_error>([&] { (void)memsafe::softmax_sum(-memsafe::sqdist(X, Y), memsafe::matrix(v.data(), 10, 2)); });
  CAPTURE(msg);
  CHECK(contains(msg, "10×7"));
  CHECK(contains(msg, "10×2"));
  CHECK_THROWS_AS(memsafe::softmax_sum(memsafe::sqdist(X, Y), memsafe::matrix(v.data(), 6, 2)), memsafe::shape_error);
  CHECK_NOTHROW((void)memsafe::softmax_sum(memsafe::sqdist(X, Y), memsafe::matrix(v.data(), 7, 2)));
}

TEST_CASE("errors: ARD lengthscale count differs from d") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const std::vector<double> ls{0.5, 1.0, 2.0, 3.0};
  const std::string msg = message_of<memsafe::shape_error>([&] { (void)memsafe::rbf(X, Y, memsafe::ard(ls.data(), 2)); });
  CAPTURE(msg);
  CHECK(contains(msg, "2"));
  CHECK(contains(msg, "d = 3"));
  CHECK_THROWS_AS(memsafe::rbf(X, Y, memsafe::ard(ls.data(), 4)), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::matern32(X, Y, memsafe::ard(ls.data(), 4)), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::rq(X, Y, memsafe::ard(ls.data(), 2), 1.0, 1.0), memsafe::shape_error);
  CHECK_NOTHROW((void)memsafe::rbf(X, Y, memsafe::ard(ls.data(), 3)));
  CHECK_NOTHROW((void)memsafe::matern52(X, Y, memsafe::ard(std::span<const double>(ls.data(), 3))));
}

TEST_CASE("errors: invalid lengthscales are argument_errors") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  for (double ls : {0.0, -0.0, -1.0, nan_d, inf_d, -inf_d}) {
    CAPTURE(ls);
    CHECK_THROWS_AS(memsafe::rbf(X, Y, ls), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::matern12(X, Y, ls), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::matern32(X, Y, ls), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::matern52(X, Y, ls), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::rq(X, Y, ls, 1.0, 1.0), memsafe::argument_error);
    // One bad entry among ARD lengthscales.
    const std::vector<double> ard_ls{1.0, ls, 2.0};
    CHECK_THROWS_AS(memsafe::rbf(X, Y, memsafe::ard(ard_ls.data(), 3)), memsafe::argument_error);
  }
  const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::rbf(X, Y, -2.0); });
  CAPTURE(msg);
  CHECK(contains(msg, "lengthscale"));
  // float points, float lengthscale
  const std::vector<float> xf(10 * 3, 0.5f);
  const auto Xf = memsafe::points(xf.data(), 10, 3);
  CHECK_THROWS_AS(memsafe::rbf(Xf, Xf, 0.0f), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::rbf(Xf, Xf, std::numeric_limits<float>::quiet_NaN()), memsafe::argument_error);
  CHECK_NOTHROW((void)memsafe::rbf(Xf, Xf, 0.5f));
}

TEST_CASE("errors: invalid variances are argument_errors") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  for (double var : {0.0, -1.0, nan_d, inf_d}) {
    CAPTURE(var);
    CHECK_THROWS_AS(memsafe::rbf(X, Y, 1.0, var), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::matern12(X, Y, 1.0, var), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::matern32(X, Y, 1.0, var), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::matern52(X, Y, 1.0, var), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::rq(X, Y, 1.0, var, 1.0), memsafe::argument_error);
    CHECK_THROWS_AS(memsafe::linear(X, Y, var), memsafe::argument_error);
  }
  const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::rbf(X, Y, 1.0, -3.0); });
  CAPTURE(msg);
  CHECK(contains(msg, "variance"));
}

TEST_CASE("errors: rq alpha must be positive") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  for (double alpha : {0.0, -1.0, nan_d, inf_d}) {
    CAPTURE(alpha);
    CHECK_THROWS_AS(memsafe::rq(X, Y, 1.0, 1.0, alpha), memsafe::argument_error);
  }
  const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::rq(X, Y, 1.0, 1.0, -0.5); });
  CAPTURE(msg);
  CHECK(contains(msg, "alpha"));
  CHECK_NOTHROW((void)memsafe::rq(X, Y, 1.0, 1.0, 0.25));
}

TEST_CASE("errors: linear kernel per-dimension variances") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const std::vector<double> neg{1.0, -1.0, 2.0}, nanv{1.0, nan_d, 2.0}, infv{1.0, inf_d, 2.0}, zero{1.0, 0.0, 2.0};
  CHECK_THROWS_AS(memsafe::linear(X, Y, memsafe::ard(neg.data(), 3)), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::linear(X, Y, memsafe::ard(nanv.data(), 3)), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::linear(X, Y, memsafe::ard(infv.data(), 3)), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::linear(X, Y, memsafe::ard(zero.data(), 2)), memsafe::shape_error);
  CHECK_NOTHROW((void)memsafe::linear(X, Y, memsafe::ard(zero.data(), 3)));  // zero is allowed (non-negative)
}

TEST_CASE("errors: argkmin and argkmax with k out of range") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const auto D = memsafe::sqdist(X, Y);  // 10×7
  {
    const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::argkmin(D, 0); });
    CAPTURE(msg);
    CHECK(contains(msg, "k"));
  }
  {
    const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::argkmin(D, 8); });
    CAPTURE(msg);
    CHECK(contains(msg, "k = 8"));
    CHECK(contains(msg, "7"));
  }
  {
    const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::argkmax(D, 8); });
    CAPTURE(msg);
    CHECK(contains(msg, "k = 8"));
    CHECK(contains(msg, "7"));
  }
  {  // over i the reduced extent is 10
    const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::argkmin(D, 11, memsafe::over_i); });
    CAPTURE(msg);
    CHECK(contains(msg, "k = 11"));
    CHECK(contains(msg, "10"));
  }
  CHECK_THROWS_AS(memsafe::argkmax(D, 0), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::argkmin<8>(D), memsafe::argument_error);
  CHECK_NOTHROW((void)memsafe::argkmin(D, 7));
  CHECK_NOTHROW((void)memsafe::argkmin(D, 10, memsafe::over_i));
  CHECK_NOTHROW((void)memsafe::argkmax<7>(D));
}

TEST_CASE("errors: argmin and argmax over an empty column set") {
  const auto X = memsafe::points(x10.data(), 10, 3);
  const auto Y0 = memsafe::points(static_cast<const double*>(nullptr), 0, 3);
  CHECK_THROWS_AS(memsafe::argmin(memsafe::sqdist(X, Y0)), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::argmax(memsafe::sqdist(X, Y0)), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::argmin(memsafe::sqdist(Y0, X), memsafe::over_i), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::argkmin(memsafe::sqdist(X, Y0), 1), memsafe::argument_error);
  const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::argmin(memsafe::sqdist(X, Y0)); });
  CAPTURE(msg);
  CHECK(contains(msg, "argmin"));
}

TEST_CASE("errors: null data with a non-zero extent") {
  const double* null = nullptr;
  CHECK_THROWS_AS(memsafe::points(null, 3, 2), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::points<2>(null, 3), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::matrix(null, 3, 2), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::vec(null, 3), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::ard(null, 3), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::points(static_cast<const float*>(nullptr), 3, 2), memsafe::argument_error);
  const std::string msg = message_of<memsafe::argument_error>([&] { (void)memsafe::points(null, 3, 2); });
  CAPTURE(msg);
  CHECK(contains(msg, "null"));
  // Zero extent: fine.
  CHECK_NOTHROW((void)memsafe::points(null, 0, 2));
  CHECK_NOTHROW((void)memsafe::points(null, 3, 0));
  CHECK_NOTHROW((void)memsafe::points<2>(null, 0));
  CHECK_NOTHROW((void)memsafe::matrix(null, 0, 4));
  CHECK_NOTHROW((void)memsafe::vec(null, 0));
  CHECK_NOTHROW((void)memsafe::ard(null, 0));
}

TEST_CASE("errors: views filled in by hand are checked where they are used") {
  // tensor_view and ard_view have public fields: one built without the factories was used
  // unchecked (a null tensor segfaulted in the tile loop; a null ARD view was dereferenced).
  const double* null = nullptr;
  const memsafe::tensor_view<double, 2> N{null, {4, 3}, {3, 1}};
  const std::string m = message_of<memsafe::argument_error>(
      [&] { (void)memsafe::sum(memsafe::sum<1>(memsafe::square(memsafe::unsqueeze<1>(N) - memsafe::unsqueeze<0>(N)))); });
  CHECK(contains(m, "unsqueeze: null data pointer with 12 elements"));
  CHECK_THROWS_AS((void)memsafe::as_tensor(N), memsafe::argument_error);
  std::vector<double> x(12, 0.5);
  const memsafe::tensor_view<double, 2> W{x.data(), {4, 3}, {~std::size_t{0} / 2, 1}};  // spans beyond the address space
  CHECK(contains(message_of<memsafe::argument_error>([&] { (void)memsafe::unsqueeze<1>(W); }),
                 "span more memory than can be addressed"));
  CHECK_THROWS_AS((void)memsafe::tensor(x.data(), {4, 3}, {~std::size_t{0} / 2, 1}), memsafe::argument_error);
  // the strided factory: a broadcast axis (stride 0) of the same 3 coordinates, 4 times
  const auto B = memsafe::tensor(x.data(), {4, 3}, {0, 1});
  const auto r = memsafe::eval(memsafe::sum(memsafe::sum<2>(memsafe::square(memsafe::unsqueeze<1>(B) - memsafe::unsqueeze<0>(B)))),
                               memsafe::budget_bytes(1 << 16));
  for (double v : r.values) CHECK(v == 0.0);
  const auto X = memsafe::points(x.data(), 4, 3);
  const memsafe::ard_view<double> nowhere{null, 3};
  CHECK(contains(message_of<memsafe::argument_error>([&] { (void)memsafe::rbf(X, X, nowhere); }), "null data pointer"));
  CHECK(contains(message_of<memsafe::argument_error>([&] { (void)memsafe::linear(X, X, nowhere); }), "null data pointer"));
}

TEST_CASE("errors: points from a span that does not divide into rows") {
  const std::vector<double> v(10, 1.0);
  CHECK_THROWS_AS(memsafe::points(std::span<const double>(v), 3), memsafe::shape_error);
  CHECK_THROWS_AS(memsafe::points(std::span<const double>(v), 0), memsafe::shape_error);
  CHECK(memsafe::points(std::span<const double>(v), 5).rows() == 2);
}

TEST_CASE("errors: X with zero rows gives empty results without allocating") {
  const auto X0 = memsafe::points(static_cast<const double*>(nullptr), 0, 3);
  const auto Y = memsafe::points(y7.data(), 7, 3);
  const std::vector<double> v(7, 1.0);
  auto check_empty = [](const auto& r, std::size_t cols) {
    CHECK(r.rows == 0);
    CHECK(r.cols == cols);
    CHECK(r.values.empty());
    CHECK(r.stats.peak_temp_bytes == 0);
    CHECK(r.stats.temp_allocations == 0);
    CHECK(r.stats.planned_temp_bytes == 0);
  };
  // Even a 1-byte budget is enough: nothing is allocated.
  for (std::size_t b : {std::size_t{1}, memsafe::unlimited}) {
    CAPTURE(b);
    const memsafe::budget_bytes B(b);
    check_empty(memsafe::eval(memsafe::sum(memsafe::sqdist(X0, Y)), B), 1);
    check_empty(memsafe::eval(memsafe::min(memsafe::sqdist(X0, Y)), B), 1);
    check_empty(memsafe::eval(memsafe::logsumexp(memsafe::sqdist(X0, Y)), B), 1);
    check_empty(memsafe::eval(memsafe::argmin(memsafe::sqdist(X0, Y)), B), 1);
    auto a = memsafe::eval(memsafe::argkmin(memsafe::sqdist(X0, Y), 3), B);
    check_empty(a, 3);
    CHECK(a.indices.empty());
    check_empty(memsafe::eval(memsafe::argkmin(memsafe::sqdist(X0, Y), 7), B), 7);
    check_empty(memsafe::eval(memsafe::sqdist(X0, Y) * memsafe::vec(v.data(), 7), B), 1);
    check_empty(memsafe::eval(memsafe::rbf(X0, Y, 1.0) * memsafe::vec(v.data(), 7), B), 1);
    // Lazy × lazy with an empty outer extent.
    check_empty(memsafe::eval(memsafe::sqdist(X0, Y) * memsafe::transpose(memsafe::sqdist(X0, Y)), B), 0);
  }
}

TEST_CASE("errors: Y with zero rows gives the reductions' identities") {
  const auto X = memsafe::points(x10.data(), 10, 3);
  const auto Y0 = memsafe::points(static_cast<const double*>(nullptr), 0, 3);
  const auto D = memsafe::sqdist(X, Y0);
  const memsafe::budget_bytes B(memsafe::unlimited);
  auto all_equal = [](const auto& r, double want) {
    REQUIRE(r.rows == 10);
    REQUIRE(r.values.size() == 10);
    for (double v : r.values) CHECK(v == want);
  };
  all_equal(memsafe::eval(memsafe::sum(D), B), 0.0);
  all_equal(memsafe::eval(memsafe::sum(memsafe::rbf(X, Y0, 1.0)), B), 0.0);
  all_equal(memsafe::eval(memsafe::min(D), B), inf_d);
  all_equal(memsafe::eval(memsafe::max(D), B), -inf_d);
  all_equal(memsafe::eval(memsafe::logsumexp(D), B), -inf_d);
  all_equal(memsafe::eval(D * memsafe::vec(static_cast<const double*>(nullptr), 0), B), 0.0);
  // Over i with an empty row set is the same thing transposed.
  all_equal(memsafe::eval(memsafe::sum(memsafe::sqdist(Y0, X), memsafe::over_i), B), 0.0);
  // vᵀ K with K 0×10: ten zeros.
  all_equal(memsafe::eval(memsafe::vec(static_cast<const double*>(nullptr), 0) * memsafe::sqdist(Y0, X), B), 0.0);
  // Lazy × lazy contracting an empty extent: a 10×10 matrix of zeros.
  auto p = memsafe::eval(D * memsafe::transpose(D), B);
  CHECK(p.rows == 10);
  CHECK(p.cols == 10);
  for (double v : p.values) CHECK(v == 0.0);
  // Default budget too.
  all_equal(memsafe::eval(memsafe::sum(D), memsafe::options{.budget = std::size_t{1} << 20}), 0.0);
}

// With m = 0 every row is the identity: written directly, with no temporaries at all.
TEST_CASE("errors: Y with zero rows runs within a tiny budget") {
  const auto X = memsafe::points(x10.data(), 10, 3);
  const auto Y0 = memsafe::points(static_cast<const double*>(nullptr), 0, 3);
  const auto D = memsafe::sqdist(X, Y0);
  auto r = memsafe::eval(memsafe::sum(D), memsafe::budget_bytes(1));
  CHECK(r.rows == 10);
  CHECK(r.stats.peak_temp_bytes <= r.stats.budget_bytes);
  auto q = memsafe::eval(memsafe::sum(D), memsafe::budget_bytes(memsafe::unlimited));
  CHECK(q.stats.peak_temp_bytes <= q.stats.planned_temp_bytes);
}

TEST_CASE("errors: eval_into with null outputs") {
  const auto X = memsafe::points(x10.data(), 10, 3), Y = memsafe::points(y7.data(), 7, 3);
  const memsafe::options o{.budget = std::size_t{1} << 20};
  std::vector<double> out(10 * 3);
  std::vector<memsafe::index_t> idx(10 * 3);
  CHECK_THROWS_AS((void)memsafe::eval_into(memsafe::sum(memsafe::sqdist(X, Y)), nullptr, nullptr, o), memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::eval_into(memsafe::argmin(memsafe::sqdist(X, Y)), nullptr, idx.data(), o),
                  memsafe::argument_error);
  // Arg-reductions need the index output as well.
  CHECK_THROWS_AS((void)memsafe::eval_into(memsafe::argmin(memsafe::sqdist(X, Y)), out.data(), nullptr, o),
                  memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::eval_into(memsafe::argkmin(memsafe::sqdist(X, Y), 3), out.data(), nullptr, o),
                  memsafe::argument_error);
  const std::vector<double> v(7, 1.0);
  CHECK_THROWS_AS((void)memsafe::eval_into(memsafe::sqdist(X, Y) * memsafe::vec(v.data(), 7), nullptr, nullptr, o),
                  memsafe::argument_error);
  // Valid calls work; sum ignores the index pointer.
  CHECK_NOTHROW((void)memsafe::eval_into(memsafe::sum(memsafe::sqdist(X, Y)), out.data(), nullptr, o));
  CHECK_NOTHROW((void)memsafe::eval_into(memsafe::argkmin(memsafe::sqdist(X, Y), 3), out.data(), idx.data(), o));
  // Empty outputs may be null.
  const auto X0 = memsafe::points(static_cast<const double*>(nullptr), 0, 3);
  CHECK_NOTHROW((void)memsafe::eval_into(memsafe::sum(memsafe::sqdist(X0, Y)), nullptr, nullptr, o));
  CHECK_NOTHROW((void)memsafe::eval_into(memsafe::argmin(memsafe::sqdist(X0, Y)), nullptr, nullptr, o));
}

TEST_CASE("errors: static extents checked against run-time sizes") {
  const std::vector<double> m(7 * 3, 1.0);
  CHECK_THROWS_AS((memsafe::matrix_view<const double, 7, 3>(m.data(), 6, 3)), memsafe::shape_error);
  CHECK_THROWS_AS((memsafe::matrix_view<const double, 7, 3>(m.data(), 7, 2)), memsafe::shape_error);
  CHECK_THROWS_AS((memsafe::vector_view<const double, 5>(m.data(), 4)), memsafe::shape_error);
  CHECK_NOTHROW((void)memsafe::matrix<7, 3>(m.data()));
  // A static-size Y against dynamic X of another d.
  const auto Ys = memsafe::matrix<7, 3>(m.data());
  const auto X4 = memsafe::points(x10_4.data(), 10, 4);
  CHECK_THROWS_AS(memsafe::sqdist(X4, Ys), memsafe::shape_error);
}

}  // TEST_SUITE("errors")
