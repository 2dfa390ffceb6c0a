// EXPECT: memsafe: a product chain has at most 9 factors
// Ten factors: the planner's step table (N^3 types) passed g++'s template depth with no word of why.
#include <memsafe/memsafe.hpp>

int main() {
  const double a[4] = {};
  const auto M = memsafe::matrix<2, 2>(a);
  auto c = M * M * M * M * M * M * M * M * M * M;
  (void)c;
}
