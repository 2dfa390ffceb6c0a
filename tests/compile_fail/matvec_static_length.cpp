// EXPECT: static assertion failed: memsafe: K \* v: the vector's static length differs from the lazy matrix's column count
// K = sqdist(X, Y) has 7 columns (Y is a static 7×3 matrix); v has static length 5.
#include <memsafe/memsafe.hpp>

int main() {
  const double x[12] = {}, y[21] = {}, v[5] = {};
  auto X = memsafe::points<3>(x, 4);
  auto Y = memsafe::matrix<7, 3>(y);
  auto e = memsafe::sqdist(X, Y) * memsafe::vec<5>(v);
  (void)e;
}
