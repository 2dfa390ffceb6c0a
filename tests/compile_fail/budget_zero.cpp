// EXPECT: static assertion failed: memsafe: a budget must be a positive number of bytes
// budget<0> can hold nothing.
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {};
  auto X = memsafe::points(x, 4, 3);
  auto r = memsafe::eval<memsafe::budget<0>>(memsafe::sum(memsafe::sqdist(X, X)));
  (void)r;
}
