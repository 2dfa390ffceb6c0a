// A translation unit that differentiates one reduction: the gradient of a kernel matrix-vector
// product with respect to both point sets, the kernel's parameters and the vector.
#include <memsafe/grad.hpp>
#include <vector>
int main() {
  std::vector<double> x(300), y(600), v(200), g(100), ls(3, 1.0);
  auto X = memsafe::points(x.data(), 100, 3), Y = memsafe::points(y.data(), 200, 3);
  auto K = memsafe::matern32(X, Y, memsafe::ard(ls.data(), 3), 1.0);
  auto r = memsafe::grad(K * memsafe::vec(v.data(), 200), memsafe::vec(g.data(), 100),
                         memsafe::wrt(X, Y, memsafe::params, memsafe::operand), memsafe::budget_bytes(1 << 20));
  return r.points.size() == 2 ? 0 : 1;
}
