// EXPECT: memsafe cannot be compiled with -ffast-math
// FLAGS: -O2 -ffast-math
// -ffast-math folds away the rounding steps of memsafe's exp and log: a K·v came out 4 % off,
// silently. Such a build must stop with a message that says why and what to use instead.
#include <memsafe/memsafe.hpp>

int main() {
  float x[3] = {0, 1, 2}, v[3] = {1, 1, 1};
  auto X = memsafe::points(x, 3, 1);
  return memsafe::eval(memsafe::rbf(X, X, 1.0, 1.0) * memsafe::vec(v, 3), memsafe::budget_bytes(1 << 20)).rows == 3 ? 0 : 1;
}
