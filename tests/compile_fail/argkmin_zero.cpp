// EXPECT: static assertion failed: memsafe: argkmin/argkmax: k must be at least 1
// argkmin<0>: an empty top-k is rejected at compile time.
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {};
  auto X = memsafe::points<3>(x, 4);
  auto e = memsafe::argkmin<0>(memsafe::sqdist(X, X));
  (void)e;
}
