// EXPECT: in eval_into<B>, plan_for<B> and explain<B>, B must be memsafe::budget<Bytes>
// explain<B>(expr) (likewise eval_into<B>, plan_for<B>): the template parameter must be memsafe::budget<N>.
#include <memsafe/memsafe.hpp>

#include <string>

int main() {
  const double x[12] = {};
  auto X = memsafe::points(x, 4, 3);
  const std::string s = memsafe::explain<std::size_t>(memsafe::sum(memsafe::sqdist(X, X)));
  return s.empty() ? 1 : 0;
}
