// tests/test_headers.cpp — what including <memsafe/memsafe.hpp> costs a translation unit.
//
// The main header is included first, alone, and must not bring in the standard headers the library
// chose not to include because they cost much to compile and the library uses little of them
// (docs/design.md, "Compile time"): libstdc++'s <algorithm> (core/algo.hpp includes the two of its
// headers that declare the algorithms the library calls), <cmath> with its special functions
// (core/libm.hpp), <chrono>, streams, <functional>, <map>. A header that includes one of them again
// fails this translation unit's build here, with the name of the header, rather than showing
// later as a slower compile in bench/compile_time.sh.
#include <memsafe/memsafe.hpp>

#include "header_guards.hpp"

#include <doctest/doctest.h>

TEST_CASE("headers: memsafe.hpp alone is enough to evaluate") {
  // nothing else included: points, a selection, a budget parsed from text
  const std::vector<float> x = {0.0f, 1.0f, 3.0f}, y = {2.9f, 0.2f, 1.2f};
  const auto X = memsafe::points(x.data(), 3, 1), Y = memsafe::points(y.data(), 3, 1);
  const auto nearest = memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, Y), 1),
                                     memsafe::budget_bytes(memsafe::parse_bytes("1 MiB")));
  REQUIRE(nearest.indices.size() == 3);
  CHECK(nearest.indices[0] == 1);
  CHECK(nearest.indices[1] == 2);
  CHECK(nearest.indices[2] == 0);
}

// memsafe::precompiled_expr (a few partial specializations) against the list the library is built
// from (MEMSAFE_PRECOMPILED_FOR_EACH_FORMULA × FOR_EACH_EXPR): every listed type, and none of its
// near neighbours.
#define MEMSAFE_TEST_LISTED_(T_, ...) static_assert(memsafe::precompiled_expr<__VA_ARGS__>);
#define MEMSAFE_TEST_FORMULA_(F_)                                                       \
  MEMSAFE_PRECOMPILED_FOR_EACH_EXPR(::memsafe::formula::F_, float, MEMSAFE_TEST_LISTED_) \
  MEMSAFE_PRECOMPILED_FOR_EACH_EXPR(::memsafe::formula::F_, double, MEMSAFE_TEST_LISTED_)
MEMSAFE_PRECOMPILED_FOR_EACH_FORMULA(MEMSAFE_TEST_FORMULA_)
#undef MEMSAFE_TEST_FORMULA_
#undef MEMSAFE_TEST_LISTED_

namespace {
namespace md = memsafe::detail;
template <class F, class T = float, std::size_t D = memsafe::dyn>
using pw = md::pairwise<F, T, memsafe::dyn, memsafe::dyn, D>;
using sq = memsafe::formula::sqdist;
struct own_formula : sq {};   // a user's formula is not in the library
struct own_reduction {};
static_assert(!memsafe::precompiled_expr<md::reduce_expr<memsafe::red::sum, pw<sq, long double>>>);
static_assert(!memsafe::precompiled_expr<md::reduce_expr<memsafe::red::sum, pw<sq, float, 3>>>);
static_assert(!memsafe::precompiled_expr<md::reduce_expr<memsafe::red::sum, pw<own_formula>>>);
static_assert(!memsafe::precompiled_expr<md::reduce_expr<own_reduction, pw<sq>>>);
static_assert(!memsafe::precompiled_expr<md::reduce_expr<memsafe::red::sum, md::transpose_expr<md::transpose_expr<pw<sq>>>>>);
static_assert(!memsafe::precompiled_expr<md::matmul_expr<pw<sq>, true>>);
static_assert(!memsafe::precompiled_expr<md::matmul_expr<md::transpose_expr<pw<sq>>, false>>);
static_assert(!memsafe::precompiled_expr<md::softmax_sum_expr<md::transpose_expr<pw<sq>>>>);
static_assert(!memsafe::precompiled_expr<pw<sq>>);
static_assert(memsafe::precompiled_expr<md::matmul_expr<pw<memsafe::formula::matern32, double>>>);
}  // namespace
