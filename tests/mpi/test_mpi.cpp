// Distributed evaluation under mpirun (label mpi; 1 to 4 ranks): every reduction sharded over the
// ranks equals the one-process evaluation of the whole data — exactly for selections, to rounding
// for sums — on even, uneven and empty shards; errors are raised on every rank (no hang); each
// rank's peak temporaries, communication buffers included, stay within its budget.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <memsafe/mpi.hpp>

#include "mpi_test.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace {

using mpi_test::rank;
using mpi_test::ranks;

/// Deterministic data, the same on every rank; `integer` makes many exact ties.
template <class T>
std::vector<T> data(std::size_t n, std::size_t d, unsigned seed, bool integer = false) {
  std::vector<T> v(n * d);
  unsigned s = seed * 2654435761u + 12345u;
  for (auto& a : v) {
    s = s * 1664525u + 1013904223u;
    const double u = double(s >> 8) / double(1u << 24);
    a = integer ? T(std::floor(u * 4)) : T(u * 4 - 2);
  }
  return v;
}

/// [begin, end) of this rank's shard of m items under a layout.
struct span {
  std::size_t b, e;
  std::size_t size() const { return e - b; }
};
span shard_of(std::size_t m, const std::string& layout, int r, int p) {
  std::vector<std::size_t> w(std::size_t(p), 1);
  if (layout == "uneven")
    for (int q = 0; q < p; ++q) w[std::size_t(q)] = std::size_t(q) + 1;
  if (layout == "empty_first") w[0] = 0;
  if (layout == "one_big") w[std::size_t(p - 1)] = 10;
  std::size_t tot = 0;
  for (auto x : w) tot += x;
  if (tot == 0) return {0, m};  // one rank and an empty layout: it holds everything
  std::size_t acc = 0, b = 0;
  for (int q = 0; q <= r; ++q) {
    b = acc * m / tot;
    acc += w[std::size_t(q)];
  }
  return {b, acc * m / tot};
}

const char* const layouts[] = {"even", "uneven", "empty_first", "one_big"};

template <class T>
bool close(T a, T b, double tol) {
  if (a != a || b != b) return a != a && b != b;
  return std::fabs(double(a) - double(b)) <= tol * (1 + std::fabs(double(a)) + std::fabs(double(b)));
}
template <class T>
std::size_t mismatches(const std::vector<T>& a, const std::vector<T>& b, double tol) {
  if (a.size() != b.size()) return std::size_t(-1);
  std::size_t bad = 0;
  for (std::size_t q = 0; q < a.size(); ++q) bad += !close(a[q], b[q], tol);
  return bad;
}
/// Exactly equal values, NaN equal to NaN.
template <class T>
bool same_values(const std::vector<T>& a, const std::vector<T>& b) {
  return mismatches(a, b, 0.0) == 0;
}

const memsafe::options unlimited_opts{memsafe::unlimited, 1};

}  // namespace

TEST_SUITE("mpi") {

TEST_CASE_TEMPLATE("k nearest, argmin/argmax and min/max over a sharded database equal one process", T, float, double) {
  const std::size_t n = 37, m = 301, d = 3;
  auto x = data<T>(n, d, 1, true), y = data<T>(m, d, 2, true);  // integers: many ties across shards
  y[5 * d] = std::numeric_limits<T>::quiet_NaN();               // a NaN point ranks last
  const auto X = memsafe::points(x.data(), n, d), Yall = memsafe::points(y.data(), m, d);
  for (const char* layout : layouts) {
    const span s = shard_of(m, layout, rank(), ranks());
    const auto Y = memsafe::points(y.data() + s.b * d, s.size(), d);
    INFO("layout " << layout << ", rank " << rank() << " holds [" << s.b << ", " << s.e << ")");
    for (std::size_t k : {std::size_t(1), std::size_t(7), std::size_t(40)}) {
      const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, Yall), k), unlimited_opts);
      const auto got = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(X, Y), k), MPI_COMM_WORLD,
                                          memsafe::mpi::shard_reduced, memsafe::options{std::size_t(64) << 10, 1});
      CHECK(got.indices == want.indices);
      CHECK(same_values(got.values, want.values));
      CHECK(got.stats.peak_temp_bytes <= std::size_t(64) << 10);
      CHECK(got.comm.global_extent == m);
      CHECK(got.comm.offset == s.b);
    }
    const auto wmax = memsafe::eval(memsafe::argkmax(memsafe::dot(X, Yall), 5), unlimited_opts);
    const auto gmax = memsafe::mpi::eval(memsafe::mpi::argkmax(memsafe::dot(X, Y), 5), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    CHECK(gmax.indices == wmax.indices);
    CHECK(same_values(gmax.values, wmax.values));
    const auto wam = memsafe::eval(memsafe::argmin(memsafe::l1(X, Yall)), unlimited_opts);
    const auto gam = memsafe::mpi::eval(memsafe::mpi::argmin(memsafe::l1(X, Y)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    CHECK(gam.indices == wam.indices);
    CHECK(same_values(gam.values, wam.values));
    const auto waM = memsafe::eval(memsafe::argmax(memsafe::sqdist(X, Yall)), unlimited_opts);
    const auto gaM = memsafe::mpi::eval(memsafe::mpi::argmax(memsafe::sqdist(X, Y)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    CHECK(gaM.indices == waM.indices);
    const auto wmin = memsafe::eval(memsafe::min(memsafe::sqdist(X, Yall)), unlimited_opts);
    const auto gmin = memsafe::mpi::eval(memsafe::min(memsafe::sqdist(X, Y)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    CHECK(same_values(gmin.values, wmin.values));
    const auto wM = memsafe::eval(memsafe::max(memsafe::rbf(X, Yall, 1.5)), unlimited_opts);
    const auto gM = memsafe::mpi::eval(memsafe::max(memsafe::rbf(X, Y, 1.5)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    CHECK(same_values(gM.values, wM.values));
  }
}

TEST_CASE_TEMPLATE("sums, products, logsumexp and softmax_sum over sharded points equal one process", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  const std::size_t n = 29, m = 257, d = 4, c = 3;
  auto x = data<T>(n, d, 3), y = data<T>(m, d, 4), v = data<T>(m, 1, 5), M = data<T>(m, c, 6);
  const auto X = memsafe::points(x.data(), n, d), Yall = memsafe::points(y.data(), m, d);
  for (const char* layout : layouts) {
    const span s = shard_of(m, layout, rank(), ranks());
    INFO("layout " << layout << ", rank " << rank() << " holds [" << s.b << ", " << s.e << ")");
    const auto Y = memsafe::points(y.data() + s.b * d, s.size(), d);
    const auto vs = memsafe::vec(v.data() + s.b, s.size());
    const auto Ms = memsafe::matrix(M.data() + s.b * c, s.size(), c);
    const auto sh = memsafe::mpi::shard_reduced;
    const auto& W = MPI_COMM_WORLD;
    const memsafe::options o{std::size_t(48) << 10, 1};

    CHECK(mismatches(memsafe::mpi::eval(memsafe::sum(memsafe::matern32(X, Y, 1.2)), W, sh, o).values,
                     memsafe::eval(memsafe::sum(memsafe::matern32(X, Yall, 1.2)), unlimited_opts).values, tol) == 0);
    CHECK(mismatches(memsafe::mpi::eval(memsafe::rbf(X, Y, 0.9) * vs, W, sh, o).values,
                     memsafe::eval(memsafe::rbf(X, Yall, 0.9) * memsafe::vec(v.data(), m), unlimited_opts).values, tol) == 0);
    CHECK(mismatches(memsafe::mpi::eval(memsafe::rbf(X, Y, 0.9) * Ms, W, sh, o).values,
                     memsafe::eval(memsafe::rbf(X, Yall, 0.9) * memsafe::matrix(M.data(), m, c), unlimited_opts).values,
                     tol) == 0);
    // v·K: the reduced index is K's rows, so there the sharded points are the first operand's.
    CHECK(mismatches(memsafe::mpi::eval(vs * memsafe::rbf(Y, X, 0.9), W, sh, o).values,
                     memsafe::eval(memsafe::vec(v.data(), m) * memsafe::rbf(Yall, X, 0.9), unlimited_opts).values, tol) == 0);
    CHECK(mismatches(memsafe::mpi::eval(memsafe::logsumexp(-memsafe::sqdist(X, Y)), W, sh, o).values,
                     memsafe::eval(memsafe::logsumexp(-memsafe::sqdist(X, Yall)), unlimited_opts).values, tol) == 0);
    CHECK(mismatches(memsafe::mpi::eval(memsafe::softmax_sum(-memsafe::sqdist(X, Y), Ms), W, sh, o).values,
                     memsafe::eval(memsafe::softmax_sum(-memsafe::sqdist(X, Yall), memsafe::matrix(M.data(), m, c)),
                                   unlimited_opts)
                         .values,
                     tol) == 0);
    // Kuf·Kufᵀ with the training points sharded: the SGPR accumulation, one allreduce.
    const auto Z = memsafe::points(x.data(), 11, d);
    const auto Kuf = memsafe::rbf(Z, Y, 1.1);
    const auto Kall = memsafe::rbf(Z, Yall, 1.1);
    const auto g = memsafe::mpi::eval(Kuf * memsafe::transpose(Kuf), W, sh, o);
    CHECK(mismatches(g.values, memsafe::eval(Kall * memsafe::transpose(Kall), unlimited_opts).values, tol) == 0);
    CHECK(g.stats.peak_temp_bytes <= o.budget.value());
  }
}

TEST_CASE("results do not depend on the budget; small budgets chunk the communication, within the budget") {
  const std::size_t n = 300, m = 500, d = 5, k = 8;
  auto x = data<double>(n, d, 7), y = data<double>(m, d, 8);
  const span s = shard_of(m, "uneven", rank(), ranks());
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data() + s.b * d, s.size(), d);
  const auto e = memsafe::mpi::argkmin(memsafe::sqdist(X, Y), k);
  const auto base = memsafe::mpi::eval(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
  const std::size_t rec = k * 16;
  for (std::size_t b : {std::size_t(8) << 10, std::size_t(32) << 10, std::size_t(1) << 20}) {
    const auto r = memsafe::mpi::eval(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, memsafe::options{b, 1});
    INFO("budget " << b);
    CHECK(r.indices == base.indices);
    CHECK(r.stats.peak_temp_bytes <= b);
    CHECK(r.comm.buffer_bytes <= b);
    CHECK(r.comm.chunk_rows <= b / 2 / rec);
    CHECK(r.comm.chunks == (n + r.comm.chunk_rows - 1) / r.comm.chunk_rows);
    if (ranks() > 1) CHECK(r.comm.bytes_broadcast == n * rec);
  }
  const auto p = memsafe::mpi::plan_for(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, memsafe::options{std::size_t(8) << 10, 1});
  CHECK(p.chunks > 1);
  const std::string ex = memsafe::mpi::explain(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, memsafe::options{std::size_t(8) << 10, 1});
  CHECK(ex.find("distributed over " + std::to_string(ranks()) + " rank(s)") != std::string::npos);
  CHECK(ex.find("k-way merge") != std::string::npos);
  CHECK(ex.find("communication:") != std::string::npos);
}

TEST_CASE("rows sharded: each rank gets its own rows, equal to one process's") {
  const std::size_t n = 103, m = 211, d = 3;
  auto x = data<float>(n, d, 9), y = data<float>(m, d, 10);
  const auto Yall = memsafe::points(y.data(), m, d);
  const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), Yall), 4), unlimited_opts);
  for (const char* layout : layouts) {
    const span s = shard_of(n, layout, rank(), ranks());
    const auto X = memsafe::points(x.data() + s.b * d, s.size(), d);
    INFO("layout " << layout);
    const auto r = memsafe::mpi::eval(memsafe::argkmin(memsafe::sqdist(X, Yall), 4), MPI_COMM_WORLD,
                                      memsafe::mpi::shard_rows, memsafe::options{std::size_t(32) << 10, 1});
    CHECK(r.rows == s.size());
    CHECK(std::vector<memsafe::index_t>(want.indices.begin() + std::ptrdiff_t(s.b * 4),
                                        want.indices.begin() + std::ptrdiff_t(s.e * 4)) == r.indices);
    CHECK(r.stats.peak_temp_bytes <= std::size_t(32) << 10);
  }
}

TEST_CASE("errors on any rank are raised on every rank, before any work, and the next call runs") {
  const std::size_t n = 50, m = 120, d = 3;
  auto x = data<double>(n, d, 11), y = data<double>(m, d, 12);
  const span s = shard_of(m, "even", rank(), ranks());
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data() + s.b * d, s.size(), d);
  const auto e = memsafe::mpi::argkmin(memsafe::sqdist(X, Y), 3);
  const int small_rank = ranks() - 1;  // this rank's budget is far too small
  const memsafe::options o{rank() == small_rank ? std::size_t(64) : std::size_t(1) << 20, 1};
  try {
    (void)memsafe::mpi::eval(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, o);
    FAIL("no budget_error");
  } catch (const memsafe::budget_error& err) {
    const std::string w = err.what();
    CHECK(err.minimum_bytes > 64);
    if (rank() != small_rank) CHECK(w.find("rank " + std::to_string(small_rank)) != std::string::npos);
    CHECK(w.find("use a budget of at least") != std::string::npos);
  }
  // Shapes that differ between ranks (a different number of queries on the last rank).
  if (ranks() > 1) {
    const std::size_t nq = rank() == ranks() - 1 ? n - 1 : n;
    CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(memsafe::points(x.data(), nq, d), Y), 3),
                                             MPI_COMM_WORLD, memsafe::mpi::shard_reduced),
                    memsafe::shape_error);
  }
  // k larger than the reduced extent over all ranks.
  CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(X, Y), m + 1), MPI_COMM_WORLD,
                                           memsafe::mpi::shard_reduced),
                  memsafe::argument_error);
  // And the communicator is still in step: the next evaluation runs.
  const auto r = memsafe::mpi::eval(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
  CHECK(r.indices == memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, memsafe::points(y.data(), m, d)), 3), unlimited_opts).indices);
}

}  // TEST_SUITE

int main(int argc, char** argv) { return mpi_test::main(argc, argv); }
