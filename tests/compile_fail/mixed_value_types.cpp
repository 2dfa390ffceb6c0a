// EXPECT: static assertion failed: memsafe: X and Y must have the same value type
// float points against double points.
#include <memsafe/memsafe.hpp>

int main() {
  const float x[12] = {};
  const double y[12] = {};
  auto e = memsafe::sqdist(memsafe::points(x, 4, 3), memsafe::points(y, 4, 3));
  (void)e;
}
