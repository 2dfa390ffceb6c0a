// A product chain of 9 factors (f64): lazy kernel matrices, their transposes and a dense matrix in
// turn, then a vector. Its planner's code is instantiated per kind of step (lower/chain.hpp), so
// the compile time grows about linearly with the factors (docs/design.md, "Chains: code per kind
// of step").
#include <memsafe/memsafe.hpp>
#include <vector>
int main() {
  std::vector<double> x(300), m(100 * 100), v(100);
  auto X = memsafe::points(x.data(), 100, 3);
  auto K = memsafe::rbf(X, X, 1.0, 1.0);
  auto M = memsafe::matrix(m.data(), 100, 100);
  auto V = memsafe::vec(v.data(), 100);
  auto Kt = memsafe::transpose(K);
  auto r = memsafe::eval(K * Kt * M * K * Kt * M * K * Kt * V, memsafe::budget_bytes(1 << 20));
  return r.values.size() == 100 ? 0 : 1;
}
