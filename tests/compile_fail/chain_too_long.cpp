// EXPECT: memsafe: a product chain has at most 32 factors
// Thirty-three factors: the limit (max_chain_factors) is a static_assert that names itself.
#include <memsafe/memsafe.hpp>

int main() {
  const double a[4] = {};
  const auto M = memsafe::matrix<2, 2>(a);
  auto c = M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M *  //
           M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M * M;
  (void)c;
}
