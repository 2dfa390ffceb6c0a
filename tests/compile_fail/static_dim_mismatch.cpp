// EXPECT: static assertion failed: memsafe: X and Y have different static feature dimensions
// points<3> against points<4>: the feature dimensions are known to differ at compile time.
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {}, y[16] = {};
  auto X = memsafe::points<3>(x, 4);
  auto Y = memsafe::points<4>(y, 4);
  auto e = memsafe::sum(memsafe::sqdist(X, Y));
  (void)e;
}
