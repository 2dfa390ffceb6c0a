// EXPECT: static assertion failed: memsafe: argkmin/argkmax: k is larger than the reduced \(static\) extent
// argkmin<8> over the 7 columns of a static 7-point Y.
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {}, y[21] = {};
  auto X = memsafe::points<3>(x, 4);
  auto Y = memsafe::matrix<7, 3>(y);
  auto e = memsafe::argkmin<8>(memsafe::sqdist(X, Y));
  (void)e;
}
