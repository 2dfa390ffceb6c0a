// Distributed evaluation with each rank's shard on its GPU (labels gpu and mpi; run under mpirun
// where a GPU is): the same answers as one host process, errors on every rank.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <memsafe/mpi.cuh>

#include "../mpi/mpi_test.hpp"
#include "device_vector.cuh"

#include <vector>

namespace {
using mpi_test::rank;
using mpi_test::ranks;
template <class T>
std::vector<T> data(std::size_t n, std::size_t d, unsigned seed) {
  std::vector<T> v(n * d);
  unsigned s = seed * 2654435761u + 7u;
  for (auto& a : v) {
    s = s * 1664525u + 1013904223u;
    a = T(double(s >> 8) / double(1u << 24) * 4 - 2);
  }
  return v;
}
}  // namespace

TEST_SUITE("gpu_mpi") {

TEST_CASE("k nearest and K*v over a database sharded across ranks, each shard on the GPU, equal one host process") {
  const std::size_t n = 200, m = 5000, d = 8, k = 10;
  auto x = data<float>(n, d, 1), y = data<float>(m, d, 2), v = data<float>(m, 1, 3);
  const std::size_t b = m * std::size_t(rank()) / std::size_t(ranks()), e = m * std::size_t(rank() + 1) / std::size_t(ranks());
  dvec<float> X(x), Y(std::vector<float>(y.begin() + std::ptrdiff_t(b * d), y.begin() + std::ptrdiff_t(e * d))),
      V(std::vector<float>(v.begin() + std::ptrdiff_t(b), v.begin() + std::ptrdiff_t(e)));
  const auto Xd = memsafe::points(X.p, n, d), Yd = memsafe::points(Y.p, e - b, d);
  const memsafe::cuda::options o{std::size_t(8) << 20};
  const auto r = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(Xd, Yd), k), MPI_COMM_WORLD,
                                    memsafe::mpi::shard_reduced, o);
  const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)), k),
                                  memsafe::options{memsafe::unlimited, 2});
  std::size_t same = 0;
  for (std::size_t q = 0; q < want.indices.size(); ++q) same += r.indices[q] == want.indices[q];
  CHECK(same >= want.indices.size() * 99 / 100);  // FP32 GEMM tiles at d = 8 may swap near-ties
  CHECK(r.stats.peak_temp_bytes <= std::size_t(8) << 20);
  const auto kv = memsafe::mpi::eval(memsafe::rbf(Xd, Yd, 1.0f) * memsafe::vec(V.p, e - b), MPI_COMM_WORLD,
                                     memsafe::mpi::shard_reduced, o);
  const auto kv_want = memsafe::eval(memsafe::rbf(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d), 1.0f) *
                                         memsafe::vec(v.data(), m),
                                     memsafe::options{memsafe::unlimited, 2});
  for (std::size_t i = 0; i < n; ++i) CHECK(kv.values[i] == doctest::Approx(kv_want.values[i]).epsilon(1e-4).scale(double(m)));
  const std::string ex = memsafe::mpi::explain(memsafe::mpi::argkmin(memsafe::sqdist(Xd, Yd), k), MPI_COMM_WORLD,
                                               memsafe::mpi::shard_reduced, o);
  CHECK(ex.find("on its GPU") != std::string::npos);
}

TEST_CASE("both sharded (shard_both): each rank's queries on its GPU against the database shards of the ring") {
  const std::size_t n = 300, m = 4000, d = 8, k = 10;
  auto x = data<float>(n, d, 6), y = data<float>(m, d, 7), v = data<float>(m, 1, 8);
  const std::size_t qb = n * std::size_t(rank()) / std::size_t(ranks()), qe = n * std::size_t(rank() + 1) / std::size_t(ranks());
  const std::size_t b = m * std::size_t(rank()) / std::size_t(ranks()), e = m * std::size_t(rank() + 1) / std::size_t(ranks());
  dvec<float> X(std::vector<float>(x.begin() + std::ptrdiff_t(qb * d), x.begin() + std::ptrdiff_t(qe * d))),
      Y(std::vector<float>(y.begin() + std::ptrdiff_t(b * d), y.begin() + std::ptrdiff_t(e * d))),
      V(std::vector<float>(v.begin() + std::ptrdiff_t(b), v.begin() + std::ptrdiff_t(e)));
  const auto Xd = memsafe::points(X.p, qe - qb, d), Yd = memsafe::points(Y.p, e - b, d);
  const memsafe::cuda::options o{std::size_t(8) << 20};
  const auto sh = memsafe::mpi::shard_both_t{.max_chunk_rows = 700};  // several chunks per shard
  const auto r = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(Xd, Yd), k), MPI_COMM_WORLD, sh, o);
  const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)), k),
                                  memsafe::options{memsafe::unlimited, 2});
  REQUIRE(r.indices.size() == (qe - qb) * k);
  std::size_t same = 0;
  for (std::size_t q = 0; q < r.indices.size(); ++q) same += r.indices[q] == want.indices[qb * k + q];
  CHECK(same >= r.indices.size() * 99 / 100);
  CHECK(r.stats.peak_temp_bytes <= std::size_t(8) << 20);
  const auto kv = memsafe::mpi::eval(memsafe::rbf(Xd, Yd, 1.0f) * memsafe::vec(V.p, e - b), MPI_COMM_WORLD, sh, o);
  const auto kv_want = memsafe::eval(memsafe::rbf(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d), 1.0f) *
                                         memsafe::vec(v.data(), m),
                                     memsafe::options{memsafe::unlimited, 2});
  for (std::size_t i = 0; i < qe - qb; ++i)
    CHECK(kv.values[i] == doctest::Approx(kv_want.values[qb + i]).epsilon(1e-4).scale(double(m)));
}

TEST_CASE("a device budget too small on one rank is a budget_error on every rank") {
  const std::size_t n = 64, m = 512, d = 4;
  auto x = data<float>(n, d, 4), y = data<float>(m, d, 5);
  dvec<float> X(x), Y(y);
  const memsafe::cuda::options o{rank() == 0 ? std::size_t(256) : std::size_t(8) << 20};
  CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d),
                                                                                 memsafe::points(Y.p, m, d)),
                                                                 3),
                                           MPI_COMM_WORLD, memsafe::mpi::shard_reduced, o),
                  memsafe::budget_error);
}

TEST_CASE("a shard in host memory needing more than the device-resident minimum is refused on every rank") {
  // The last rank's database shard is in host memory: its evaluation stages it through the budget,
  // so it needs more than plan_for's minimum (inputs taken as device-resident). With that minimum
  // as its budget, the refusal must come from the agreement, on every rank: the rank refused after
  // it while the others waited in the merge.
  const std::size_t n = 64, m = 512, d = 4;
  auto x = data<float>(n, d, 11), y = data<float>(m, d, 12);
  const bool last = rank() == ranks() - 1;
  dvec<float> X(x), Y(y);
  const auto Xd = memsafe::points(X.p, n, d);
  const auto Yl = last ? memsafe::points(y.data(), m, d) : memsafe::points(Y.p, m, d);
  const auto refused_everywhere = [&](const auto& local, const auto& distributed, auto layout) {
    const std::size_t assumed = memsafe::cuda::plan_for(local, memsafe::cuda::options{std::size_t(8) << 20}).min_bytes;
    if (last)  // one process: eval itself refuses that budget (the staging)
      CHECK_THROWS_AS((void)memsafe::cuda::eval(local, memsafe::cuda::options{assumed}), memsafe::budget_error);
    const memsafe::cuda::options o{last ? assumed : std::size_t(8) << 20};
    CHECK_THROWS_AS((void)memsafe::mpi::eval(distributed, MPI_COMM_WORLD, layout, o), memsafe::budget_error);
  };
  refused_everywhere(memsafe::argkmin(memsafe::sqdist(Xd, Yl), 3), memsafe::mpi::argkmin(memsafe::sqdist(Xd, Yl), 3),
                     memsafe::mpi::shard_reduced);
  refused_everywhere(memsafe::argkmin(memsafe::sqdist(Yl, Xd), 3), memsafe::mpi::argkmin(memsafe::sqdist(Yl, Xd), 3),
                     memsafe::mpi::shard_rows);
}

}  // TEST_SUITE

int main(int argc, char** argv) { return mpi_test::main(argc, argv); }
