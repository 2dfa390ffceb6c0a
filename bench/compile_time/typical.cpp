// A translation unit as a user writes it: one kernel matrix-vector product and one k-NN search.
#include <memsafe/memsafe.hpp>
#include <vector>
int main() {
  std::vector<float> x(300), y(600), v(200);
  auto X = memsafe::points(x.data(), 100, 3), Y = memsafe::points(y.data(), 200, 3);
  auto r = memsafe::eval(memsafe::rbf(X, Y, 1.0, 1.0) * memsafe::vec(v.data(), 200), memsafe::budget_bytes(1 << 20));
  auto t = memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, Y), 5), memsafe::budget_bytes(1 << 20));
  return (r.rows == 100 && t.cols == 5) ? 0 : 1;
}
