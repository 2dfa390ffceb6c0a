// The kNN data sets of the knn example and the benchmarks: random N(0,1) points (database stream
// 0, queries stream 1 of the seed), or MNIST (training images as the database, test images as
// the queries; a given n or m truncates them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data.hpp"
#include "mnist.hpp"

namespace memsafe_examples {

template <class T>
struct knn_data {
  std::vector<T> X, Q;  // n×d database, m×d queries, row-major
  std::size_t n = 0, m = 0, d = 0;
};

/// `data` is "random" or "mnist"; n, m, d are used for random data, and for MNIST when given.
template <class T>
knn_data<T> load_knn_data(const std::string& data, std::size_t n, std::size_t m, std::size_t d, bool n_given,
                          bool m_given, std::uint64_t seed, const std::string& data_dir) {
  knn_data<T> ds;
  if (data == "random") {
    ds.n = n;
    ds.m = m;
    ds.d = d;
    ds.X = normal_matrix<T>(n, d, seed, 0);
    ds.Q = normal_matrix<T>(m, d, seed, 1);
    return ds;
  }
  const std::size_t all = std::numeric_limits<std::size_t>::max();
  auto train = load_mnist_images<T>(mnist_file(data_dir, mnist_train_images), n_given ? n : all);
  auto test = load_mnist_images<T>(mnist_file(data_dir, mnist_test_images), m_given ? m : all);
  if (train.dim() != test.dim())
    throw std::runtime_error("MNIST training images have " + std::to_string(train.dim()) +
                             " pixels but test images have " + std::to_string(test.dim()));
  ds.n = train.n;
  ds.m = test.n;
  ds.d = train.dim();
  ds.X = std::move(train.pixels);
  ds.Q = std::move(test.pixels);
  return ds;
}

}  // namespace memsafe_examples
