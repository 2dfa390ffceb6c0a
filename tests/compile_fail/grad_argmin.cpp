// EXPECT: static assertion failed: memsafe: grad: argmin/argmax/argkmin/argkmax return indices and have no gradient
// An arg-reduction has no vector-Jacobian product.
#include <memsafe/grad.hpp>

int main() {
  const double x[6] = {}, y[6] = {}, g[3] = {};
  auto X = memsafe::points(x, 3, 2);
  auto Y = memsafe::points(y, 3, 2);
  auto b = memsafe::vjp(memsafe::argmin(memsafe::sqdist(X, Y)), memsafe::vec(g, 3), memsafe::wrt(X));
  (void)b;
}
