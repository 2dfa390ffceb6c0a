// EXPECT: static assertion failed: memsafe: broadcast: the operands have different ranks
// X[:, None, :] - Y: a rank-3 tensor against a rank-2 one (NumPy would prepend an axis; memsafe asks for it).
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {}, y[9] = {};
  auto X = memsafe::points(x, 4, 3);
  auto Y = memsafe::points(y, 3, 3);
  auto e = memsafe::unsqueeze<1>(X) - memsafe::as_tensor(Y);
  (void)e;
}
