// A downstream program using memsafe's public names only. The expressions are written outside
// namespace memsafe with unqualified operators and functions: the nodes they build are
// implementation types (memsafe::detail), and argument-dependent lookup must still find the
// operators and builders (through the tag bases lazy_tag, tensor_tag and evaluable_tag, and, for
// identity(n), the operators of its symbol).
#include <memsafe/memsafe.hpp>

#include <cmath>
#include <vector>

namespace {
bool close(double a, double b) { return std::fabs(a - b) <= 1e-12 * (1 + std::fabs(a) + std::fabs(b)); }
}  // namespace

int main() {
  using namespace memsafe::literals;
  if (memsafe::parse_bytes("1MiB") != 1_MiB) return 1;

  const std::vector<double> x = {0, 0, 1, 0, 0, 1, 1, 1}, v = {1, -2, 3, 0.5};
  const auto X = memsafe::points(x.data(), 4, 2);
  const auto V = memsafe::vec(v.data(), 4);
  const auto S = memsafe::sqdist(X, X);
  const auto K = memsafe::rbf(X, X, 1.5);
  const memsafe::options o{.budget = 1_MiB, .threads = 1};

  // Elementwise operators, scalars, unary maps and a diagonal symbol, then a product with v.
  const auto E = 2.0 * K - S / 4.0 + exp(-S) + 0.5 * memsafe::identity(4);
  const auto ev = memsafe::eval(E * V, o);
  for (std::size_t i = 0; i < 4; ++i) {
    double want = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      double r2 = 0;
      for (std::size_t k = 0; k < 2; ++k) r2 += (x[i * 2 + k] - x[j * 2 + k]) * (x[i * 2 + k] - x[j * 2 + k]);
      const double e = 2.0 * std::exp(-0.5 * r2 / (1.5 * 1.5)) - r2 / 4.0 + std::exp(-r2) + (i == j ? 0.5 : 0.0);
      want += e * v[j];
    }
    if (!close(ev[i], want)) return 2;
  }

  // A broadcast tensor (NumPy form) equals the pairwise distance.
  const auto T = square(memsafe::unsqueeze<1>(X) - memsafe::unsqueeze<0>(X));
  const auto B = memsafe::eval(memsafe::dense(memsafe::sum<2>(T)), o);
  const auto D = memsafe::eval(dense(S), o);
  for (std::size_t q = 0; q < 16; ++q)
    if (!close(B.values[q], D.values[q])) return 3;

  // Reductions found by argument-dependent lookup, and a product chain with a pinned factor.
  const auto nn = memsafe::eval(argkmin(S + K, 2), o);
  if (nn.indices.size() != 8) return 4;
  const auto c1 = memsafe::eval(K * (transpose(K) * V), o);
  const auto c2 = memsafe::eval(memsafe::pin(K * transpose(K)) * V, o);
  for (std::size_t i = 0; i < 4; ++i)
    if (!close(c1[i], c2[i])) return 5;

  // A chain of dense factors only (its nodes carry no lazy operand).
  const std::vector<double> a = {1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0, 4};
  const auto A = memsafe::matrix(a.data(), 4, 4);
  const auto av = memsafe::eval(A * A * V, o);
  for (std::size_t i = 0; i < 4; ++i)
    if (!close(av[i], a[i * 5] * a[i * 5] * v[i])) return 6;
  return 0;
}
