// EXPECT: static assertion failed: memsafe: broadcast: the last \(feature\) axes have different static extents
// Points of static dimension 3 broadcast against points of static dimension 4.
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {}, y[12] = {};
  auto X = memsafe::points<3>(x, 4);
  auto Y = memsafe::points<4>(y, 3);
  auto e = memsafe::sum<2>(memsafe::square(memsafe::unsqueeze<1>(X) - memsafe::unsqueeze<0>(Y)));
  (void)e;
}
