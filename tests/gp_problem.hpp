// A small SGPR problem for the GP tests (tests/test_gp.cpp, tests/mpi/test_mpi_sgpr.cpp): n training
// points ~ N(0, 1) in d dimensions with y = sin(Σx) + noise, m inducing points, test points, and
// fixed ARD hyperparameters; the same data from the same seed on every rank.
#pragma once
#include <memsafe/gp.hpp>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace gp_test {

struct problem {
  std::size_t n, m, d;
  std::vector<double> X, y, Z, Xs;
  memsafe::gp::hyperparameters h;
  problem(std::size_t n_, std::size_t m_, std::size_t d_, memsafe::gp::kernel k, unsigned seed, std::size_t tests)
      : n(n_), m(m_), d(d_) {
    std::mt19937_64 g(seed);
    std::normal_distribution<double> N;
    X.resize(n * d);
    for (auto& v : X) v = N(g);
    Z.resize(m * d);
    for (auto& v : Z) v = 0.8 * N(g);
    Xs.resize(tests * d);
    for (auto& v : Xs) v = N(g);
    y.resize(n);
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t q = 0; q < d; ++q) s += X[j * d + q];
      y[j] = std::sin(s) + 0.1 * N(g);
    }
    h.kind = k;
    h.variance = 1.3;
    h.noise = 0.2;
    h.jitter = 1e-6;
    h.lengthscales.resize(d);
    for (std::size_t q = 0; q < d; ++q) h.lengthscales[q] = 0.9 + 0.35 * double(q);
  }
  memsafe::gp::data_view data() const { return {X.data(), y.data(), n, d}; }
  /// Training rows [b, e).
  memsafe::gp::data_view rows(std::size_t b, std::size_t e) const { return {X.data() + b * d, y.data() + b, e - b, d}; }
  memsafe::gp::inducing_view ind() const { return {Z.data(), m, d}; }
};

}  // namespace gp_test
