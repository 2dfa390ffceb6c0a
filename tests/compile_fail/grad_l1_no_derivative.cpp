// EXPECT: static assertion failed: memsafe: grad: the formula l1 \(sum of \|x_k - y_k\|\) has no derivative yet
// The l1 distance has no derivative: differentiating a reduction of it names the formula at compile time.
#include <memsafe/grad.hpp>

int main() {
  const double x[6] = {}, y[6] = {}, g[3] = {};
  auto X = memsafe::points(x, 3, 2);
  auto Y = memsafe::points(y, 3, 2);
  auto r = memsafe::grad(memsafe::sum(memsafe::l1(X, Y)), memsafe::vec(g, 3), memsafe::wrt(X), memsafe::options{});
  (void)r;
}
