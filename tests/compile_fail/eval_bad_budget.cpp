// EXPECT: static assertion failed: memsafe: eval<B>\(expr\): B must be memsafe::budget<Bytes>
// eval<int>(expr): the template parameter must be memsafe::budget<N>.
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {};
  auto X = memsafe::points(x, 4, 3);
  auto r = memsafe::eval<int>(memsafe::sum(memsafe::sqdist(X, X)));
  (void)r;
}
