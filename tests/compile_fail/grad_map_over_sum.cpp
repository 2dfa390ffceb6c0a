// EXPECT: static assertion failed: memsafe: grad: a nonlinear map \(exp, log, pow, \.\.\.\) over a sum of lazy matrices has no derivative yet
// exp(K1 + K2): a nonlinear map over a sum of two lazy matrices is not differentiable yet.
#include <memsafe/grad.hpp>

int main() {
  const double x[6] = {}, y[6] = {}, g[3] = {};
  auto X = memsafe::points(x, 3, 2);
  auto Y = memsafe::points(y, 3, 2);
  auto e = memsafe::exp(memsafe::rbf(X, Y, 1.0) + memsafe::sqdist(X, Y));
  auto r = memsafe::grad(memsafe::sum(e), memsafe::vec(g, 3), memsafe::wrt(X), memsafe::options{});
  (void)r;
}
