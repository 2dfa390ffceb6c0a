// EXPECT: static assertion failed: memsafe: product chain: inner extents differ
// A (2×3) · B (4×2): the inner extents 3 and 4 are known at compile time.
#include <memsafe/memsafe.hpp>

int main() {
  const double a[6] = {}, b[8] = {};
  auto c = memsafe::matrix<2, 3>(a) * memsafe::matrix<4, 2>(b);
  (void)c;
}
