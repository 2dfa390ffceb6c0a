// Distributed evaluation under mpirun (label mpi; 1 to 4 ranks): every reduction sharded over the
// ranks equals the one-process evaluation of the whole data — exactly for selections, to rounding
// for sums — on even, uneven and empty shards; errors are raised on every rank (no hang); each
// rank's peak temporaries, communication buffers included, stay within its budget. shard_both
// (X and Y both sharded, Y travelling around the ring in chunks): each rank's rows equal the
// one-process rows, on every pair of X and Y layouts, with small budgets so that several chunks
// of every shard travel.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <memsafe/mpi.hpp>

#include "mpi_test.hpp"

#include <algorithm>
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
  if (layout == "all_last")  // one rank holds everything, the others nothing
    for (int q = 0; q < p; ++q) w[std::size_t(q)] = q == p - 1;
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
    for (std::size_t k : {std::size_t(1), std::size_t(7), std::size_t(40), std::size_t(100)}) {  // 100: past the merge's old 64-entry stack scratch
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
  // The local plan appears once (memsafe::explain of the shard), not again after the distribution.
  const auto first = ex.find("temporaries:");
  REQUIRE(first != std::string::npos);
  CHECK(ex.find("temporaries:", first + 1) == std::string::npos);
}

TEST_CASE_TEMPLATE("softmax_sum over a sharded reduced index holds its log-sum-exps within the budget", T, float, double) {
  // Many rows, few columns: the per-row log-sum-exps (n values) outweigh a communication chunk, so
  // a budget that left them out would be passed.
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  const std::size_t n = 3000, m = 97, d = 4, c = 2;
  auto x = data<T>(n, d, 21), y = data<T>(m, d, 22), M = data<T>(m, c, 23);
  const span s = shard_of(m, "even", rank(), ranks());
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data() + s.b * d, s.size(), d);
  const auto e = memsafe::softmax_sum(-memsafe::sqdist(X, Y), memsafe::matrix(M.data() + s.b * c, s.size(), c));
  const auto want = memsafe::eval(memsafe::softmax_sum(-memsafe::sqdist(X, memsafe::points(y.data(), m, d)),
                                                       memsafe::matrix(M.data(), m, c)),
                                  unlimited_opts);
  const auto sh = memsafe::mpi::shard_reduced;
  const auto free_run = memsafe::mpi::eval(e, MPI_COMM_WORLD, sh, memsafe::options{memsafe::unlimited, 1});
  CHECK(free_run.stats.min_budget_bytes > n * sizeof(T));
  unsigned long mine = free_run.stats.min_budget_bytes, need = 0;
  MPI_Allreduce(&mine, &need, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
  for (std::size_t b : {std::size_t(need), std::size_t(need) + (std::size_t(4) << 10), std::size_t(1) << 20}) {
    INFO("budget " << b);
    const auto r = memsafe::mpi::eval(e, MPI_COMM_WORLD, sh, memsafe::options{b, 1});
    CHECK(mismatches(r.values, want.values, tol) == 0);
    CHECK(r.stats.peak_temp_bytes <= b);
    CHECK(r.stats.peak_temp_bytes >= n * sizeof(T));  // the log-sum-exps are counted
    std::vector<T> out(n * c, T(-1));
    const auto st = memsafe::mpi::eval_into(e, MPI_COMM_WORLD, sh, out.data(), nullptr, memsafe::options{b, 1});
    CHECK(st.stats.peak_temp_bytes <= b);
    CHECK(out == r.values);
  }
  // One byte less on the rank that needs most: every rank raises the budget error, which names
  // the log-sum-exps and the minimum.
  const memsafe::options tight{mine == need ? std::size_t(need) - 1 : std::size_t(need), 1};
  try {
    (void)memsafe::mpi::eval(e, MPI_COMM_WORLD, sh, tight);
    FAIL("no budget_error");
  } catch (const memsafe::budget_error& err) {
    CHECK(err.minimum_bytes == need);
    CHECK(std::string(err.what()).find("log-sum-exps") != std::string::npos);
  }
  const std::string ex = memsafe::mpi::explain(e, MPI_COMM_WORLD, sh, memsafe::options{std::size_t(1) << 20, 1});
  CHECK(ex.find("log-sum-exps of the scores: ") != std::string::npos);
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
  // k beyond the replicated Y, or no point at all: refused on every rank (found by probing: index -1
  // and NaN came back, unchecked); the next call runs
  const span s = shard_of(n, "even", rank(), ranks());
  const auto X = memsafe::points(x.data() + s.b * d, s.size(), d);
  const auto Y3 = memsafe::points(y.data(), 3, d), Y0 = memsafe::points(y.data(), 0, d);
  CHECK_THROWS_WITH_AS((void)memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(X, Y3), 5), MPI_COMM_WORLD,
                                                memsafe::mpi::shard_rows),
                       doctest::Contains("k = 5 is larger than the reduced extent over all ranks (3)"),
                       memsafe::argument_error);
  CHECK_THROWS_WITH_AS((void)memsafe::mpi::eval(memsafe::mpi::argmin(memsafe::sqdist(X, Y0)), MPI_COMM_WORLD,
                                                memsafe::mpi::shard_rows),
                       doctest::Contains("the reduced index is empty on every rank"), memsafe::argument_error);
  const auto ok = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(X, Y3), 3), MPI_COMM_WORLD,
                                     memsafe::mpi::shard_rows);
  CHECK(ok.indices.size() == s.size() * 3);
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
  // Rank-dependent code: another reduction on rank 0 than on the others (the records would merge by
  // different rules).
  if (ranks() > 1) {
    const auto run = [&] {
      if (rank() == 0) (void)memsafe::mpi::eval(memsafe::min(memsafe::sqdist(X, Y)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
      else (void)memsafe::mpi::eval(memsafe::max(memsafe::sqdist(X, Y)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains("another reduction, formula or form"), memsafe::argument_error);
    // the same expression with another lengthscale or constant on rank 0 (found by probing: the
    // partials of two kernels were merged), in both layouts that merge
    const auto lengthscale = [&](auto layout) {
      (void)memsafe::mpi::eval(memsafe::sum(memsafe::rbf(X, Y, rank() == 0 ? 1.0 : 3.0)), MPI_COMM_WORLD, layout);
    };
    CHECK_THROWS_WITH_AS(lengthscale(memsafe::mpi::shard_reduced), doctest::Contains("formula parameters"),
                         memsafe::argument_error);
    CHECK_THROWS_WITH_AS(lengthscale(memsafe::mpi::shard_both), doctest::Contains("formula parameters"),
                         memsafe::argument_error);
    const auto constant = [&] {
      (void)memsafe::mpi::eval(memsafe::sum(memsafe::exp(memsafe::sqdist(X, Y) * (rank() == 0 ? -0.5 : -0.25))),
                               MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    };
    CHECK_THROWS_WITH_AS(constant(), doctest::Contains("elementwise constants"), memsafe::argument_error);
    CHECK_NOTHROW((void)memsafe::mpi::eval(memsafe::sum(memsafe::rbf(X, Y, 2.0)), MPI_COMM_WORLD,
                                           memsafe::mpi::shard_reduced));
    // the same merge rule over different expressions (found by probing: merged without an error)
    const auto formula = [&] {
      if (rank() == 0) (void)memsafe::mpi::eval(memsafe::argkmin(memsafe::sqdist(X, Y), 3), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
      else (void)memsafe::mpi::eval(memsafe::argkmin(memsafe::l1(X, Y), 3), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    };
    CHECK_THROWS_WITH_AS(formula(), doctest::Contains("another reduction, formula or form"), memsafe::argument_error);
    // points of another dimension on the last rank: distances of different spaces would merge
    const std::size_t dd = rank() == ranks() - 1 ? d - 1 : d;
    const auto dims = [&] {
      (void)memsafe::mpi::eval(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, dd), memsafe::points(y.data(), Y.rows(), dd)), 3),
                               MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
    };
    CHECK_THROWS_WITH_AS(dims(), doctest::Contains("in their dimension or columns"), memsafe::shape_error);
    // ARD lengthscales that differ in one dimension on rank 0 (the per-dimension parameters)
    const std::vector<double> ls{1.0, 2.0, rank() == 0 ? 3.5 : 3.0};
    const auto ard = [&](auto layout) {
      (void)memsafe::mpi::eval(memsafe::sum(memsafe::rbf(X, Y, memsafe::ard(ls.data(), d))), MPI_COMM_WORLD, layout);
    };
    CHECK_THROWS_WITH_AS(ard(memsafe::mpi::shard_reduced), doctest::Contains("formula parameters"),
                         memsafe::argument_error);
    CHECK_THROWS_WITH_AS(ard(memsafe::mpi::shard_both), doctest::Contains("formula parameters"),
                         memsafe::argument_error);
    // a right-hand side with another number of columns on the last rank
    const std::size_t c = rank() == ranks() - 1 ? 3 : 2;
    const std::vector<double> mv(s.size() * c, 0.5);
    const auto cols = [&] {
      (void)memsafe::mpi::eval(memsafe::rbf(X, Y, 1.0) * memsafe::matrix(mv.data(), s.size(), c), MPI_COMM_WORLD,
                               memsafe::mpi::shard_reduced);
    };
    CHECK_THROWS_AS(cols(), memsafe::shape_error);
    // equal ARD lengthscales everywhere run
    const std::vector<double> ls_same{1.0, 2.0, 3.0};
    CHECK_NOTHROW((void)memsafe::mpi::eval(memsafe::sum(memsafe::rbf(X, Y, memsafe::ard(ls_same.data(), d))),
                                           MPI_COMM_WORLD, memsafe::mpi::shard_reduced));
  }
  // A row of the partial result larger than one MPI message (MPI counts are int): K·M with 2^28
  // columns of doubles (a stride-0 M: nothing that large exists), refused while planning.
  const std::vector<double> one(1, 1.0);
  const memsafe::matrix_view<const double> Mwide(one.data(), s.size(), std::size_t{1} << 28, 0, 0);
  CHECK_THROWS_WITH_AS((void)memsafe::mpi::eval(memsafe::rbf(memsafe::points(x.data(), 1, d), Y, 1.0, 1.0) * Mwide,
                                                MPI_COMM_WORLD, memsafe::mpi::shard_reduced),
                       doctest::Contains("more than one MPI message carries"), memsafe::argument_error);
  // And the communicator is still in step: the next evaluation runs.
  const auto r = memsafe::mpi::eval(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
  CHECK(r.indices == memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, memsafe::points(y.data(), m, d)), 3), unlimited_opts).indices);
}

TEST_CASE("edges across ranks: a non-finite V on one rank, an index empty everywhere, a result without columns") {
  const std::size_t n = 6, m = 16, d = 2, c = 2;
  auto x = data<double>(n, d, 21), y = data<double>(m, d, 22), v = data<double>(m, c, 23);
  const span s = shard_of(m, "even", rank(), ranks());
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data() + s.b * d, s.size(), d);
  const int last = ranks() - 1;
  // softmax_sum with V(1, 1) = inf in the last rank's shard only: every rank raises it (before,
  // that rank alone threw during its local evaluation and the others waited in the merge for ever),
  // the message naming the rank and its own row. The same on the ring (shard_both).
  std::vector<double> vb(v.begin() + s.b * c, v.begin() + s.e * c);
  if (rank() == last && s.size() > 1) vb[1 * c + 1] = std::numeric_limits<double>::infinity();
  const auto V = memsafe::matrix(static_cast<const double*>(vb.data()), s.size(), c);
  for (const bool ring : {false, true}) {
    CAPTURE(ring);
    try {
      if (ring) {
        const span sx = shard_of(n, "even", rank(), ranks());
        (void)memsafe::mpi::eval(memsafe::softmax_sum(-memsafe::sqdist(memsafe::points(x.data() + sx.b * d, sx.size(), d), Y), V),
                                 MPI_COMM_WORLD, memsafe::mpi::shard_both);
      } else {
        (void)memsafe::mpi::eval(memsafe::softmax_sum(-memsafe::sqdist(X, Y), V), MPI_COMM_WORLD,
                                 memsafe::mpi::shard_reduced);
      }
      FAIL("no argument_error");
    } catch (const memsafe::argument_error& e) {
      const std::string w = e.what();
      CHECK(w.find("V(1, 1) is inf") != std::string::npos);
      if (rank() != last) CHECK(w.find("rank " + std::to_string(last)) != std::string::npos);
    }
  }
  // min and max over an index that is empty on every rank: the identity, as one process gives; an
  // index to return (argmin) is still an error.
  const auto Y0 = memsafe::points(y.data(), 0, d);
  const auto one_min = memsafe::eval(memsafe::min(memsafe::sqdist(X, Y0)), unlimited_opts);
  const auto mn = memsafe::mpi::eval(memsafe::min(memsafe::sqdist(X, Y0)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
  const auto mx = memsafe::mpi::eval(memsafe::max(memsafe::sqdist(X, Y0)), MPI_COMM_WORLD, memsafe::mpi::shard_both);
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(mn.values[i] == one_min.values[i]);
    CHECK(mn.values[i] == std::numeric_limits<double>::infinity());
  }
  for (double val : mx.values) CHECK(val == -std::numeric_limits<double>::infinity());
  CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::argmin(memsafe::sqdist(X, Y0)), MPI_COMM_WORLD,
                                           memsafe::mpi::shard_reduced),
                  memsafe::argument_error);
  // K·M with M of 0 columns: a 0-column result (rows of 0 bytes divided the chunk size: SIGFPE).
  const auto M0 = memsafe::matrix(static_cast<const double*>(v.data()), s.size(), 0);
  const auto km = memsafe::mpi::eval(memsafe::rbf(X, Y, 1.0) * M0, MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
  CHECK(km.rows == n);
  CHECK(km.cols == 0);
  // And the communicator is still in step.
  const auto r = memsafe::mpi::eval(memsafe::min(memsafe::sqdist(X, Y)), MPI_COMM_WORLD, memsafe::mpi::shard_reduced);
  CHECK(r.values == memsafe::eval(memsafe::min(memsafe::sqdist(X, memsafe::points(y.data(), m, d))), unlimited_opts).values);
}

// ---- shard_both: X and Y sharded, the Y shards travelling around the ring -----------------------

/// Rows [s.b, s.e) of a one-process result with `c` entries per row.
template <class V>
V rows_of(const V& all, span s, std::size_t c) {
  return V(all.begin() + std::ptrdiff_t(s.b * c), all.begin() + std::ptrdiff_t(s.e * c));
}

const char* const both_layouts[] = {"even", "uneven", "empty_first", "one_big", "all_last"};

TEST_CASE_TEMPLATE("both sharded: k nearest, argmin/argmax and min/max equal one process's rows", T, float, double) {
  const std::size_t n = 23, m = 97, d = 3;
  auto x = data<T>(n, d, 21, true), y = data<T>(m, d, 22, true);  // 64 distinct points: duplicates across ranks
  y[7 * d + 1] = std::numeric_limits<T>::quiet_NaN();             // a NaN point ranks last
  const auto Xall = memsafe::points(x.data(), n, d), Yall = memsafe::points(y.data(), m, d);
  const auto sh = memsafe::mpi::shard_both;
  const auto& W = MPI_COMM_WORLD;
  std::size_t most_chunks = 0;
  for (const char* xl : both_layouts)
    for (const char* yl : both_layouts) {
      const span sx = shard_of(n, xl, rank(), ranks()), sy = shard_of(m, yl, rank(), ranks());
      const auto X = memsafe::points(x.data() + sx.b * d, sx.size(), d), Y = memsafe::points(y.data() + sy.b * d, sy.size(), d);
      INFO("X " << xl << " [" << sx.b << ", " << sx.e << "), Y " << yl << " [" << sy.b << ", " << sy.e << "), rank " << rank());
      for (std::size_t k : {std::size_t(1), std::size_t(6), std::size_t(40)}) {
        const std::size_t budget = std::size_t(256) << 10;
        const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xall, Yall), k), unlimited_opts);
        const auto got = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(X, Y), k), W,
                                            memsafe::mpi::shard_both_t{.max_chunk_rows = 7}, memsafe::options{budget, 1});
        CHECK(got.rows == sx.size());
        CHECK(got.indices == rows_of(want.indices, sx, k));
        CHECK(same_values(got.values, rows_of(want.values, sx, k)));
        CHECK(got.stats.peak_temp_bytes <= budget);
        CHECK(got.comm.global_extent == m);
        CHECK(got.comm.offset == sy.b);
        most_chunks = std::max(most_chunks, got.comm.chunks);
      }
      const auto wmax = memsafe::eval(memsafe::argkmax(memsafe::dot(Xall, Yall), 5), unlimited_opts);
      const auto gmax = memsafe::mpi::eval(memsafe::mpi::argkmax(memsafe::dot(X, Y), 5), W, memsafe::mpi::shard_both_t{.max_chunk_rows = 5},
                                           memsafe::options{std::size_t(32) << 10, 1});
      CHECK(gmax.indices == rows_of(wmax.indices, sx, 5));
      CHECK(same_values(gmax.values, rows_of(wmax.values, sx, 5)));
      const auto wam = memsafe::eval(memsafe::argmin(memsafe::l1(Xall, Yall)), unlimited_opts);
      const auto gam = memsafe::mpi::eval(memsafe::mpi::argmin(memsafe::l1(X, Y)), W, sh);
      CHECK(gam.indices == rows_of(wam.indices, sx, 1));
      CHECK(same_values(gam.values, rows_of(wam.values, sx, 1)));
      const auto waM = memsafe::eval(memsafe::argmax(memsafe::sqdist(Xall, Yall)), unlimited_opts);
      const auto gaM = memsafe::mpi::eval(memsafe::mpi::argmax(memsafe::sqdist(X, Y)), W, sh);
      CHECK(gaM.indices == rows_of(waM.indices, sx, 1));
      const auto wmin = memsafe::eval(memsafe::min(memsafe::sqdist(Xall, Yall)), unlimited_opts);
      const auto gmin = memsafe::mpi::eval(memsafe::min(memsafe::sqdist(X, Y)), W, sh, memsafe::options{std::size_t(8) << 10, 1});
      CHECK(same_values(gmin.values, rows_of(wmin.values, sx, 1)));
      const auto wM = memsafe::eval(memsafe::max(memsafe::rbf(Xall, Yall, 1.5) + memsafe::matern12(Xall, Yall, 0.7)), unlimited_opts);
      const auto gM = memsafe::mpi::eval(memsafe::max(memsafe::rbf(X, Y, 1.5) + memsafe::matern12(X, Y, 0.7)), W, sh);
      CHECK(same_values(gM.values, rows_of(wM.values, sx, 1)));
    }
  CHECK(most_chunks >= 3);  // small chunks: several chunks of a shard travel
}

TEST_CASE_TEMPLATE("both sharded: sums, K*v, K*M, v*K, logsumexp and softmax_sum equal one process's rows", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  const std::size_t n = 19, m = 83, d = 4, c = 3;
  auto x = data<T>(n, d, 23), y = data<T>(m, d, 24), v = data<T>(m, 1, 25), M = data<T>(m, c, 26);
  const auto Xall = memsafe::points(x.data(), n, d), Yall = memsafe::points(y.data(), m, d);
  const auto vall = memsafe::vec(v.data(), m);
  const auto Mall = memsafe::matrix(static_cast<const T*>(M.data()), m, c);
  const auto sh = memsafe::mpi::shard_both_t{.max_chunk_rows = 6};
  const auto& W = MPI_COMM_WORLD;
  for (const char* xl : both_layouts)
    for (const char* yl : both_layouts) {
      const span sx = shard_of(n, xl, rank(), ranks()), sy = shard_of(m, yl, rank(), ranks());
      INFO("X " << xl << " [" << sx.b << ", " << sx.e << "), Y " << yl << " [" << sy.b << ", " << sy.e << "), rank " << rank());
      const auto X = memsafe::points(x.data() + sx.b * d, sx.size(), d), Y = memsafe::points(y.data() + sy.b * d, sy.size(), d);
      const auto vs = memsafe::vec(v.data() + sy.b, sy.size());
      const auto Ms = memsafe::matrix(static_cast<const T*>(M.data()) + sy.b * c, sy.size(), c);
      const memsafe::options o{std::size_t(32) << 10, 1};
      const auto check = [&](const auto& got, const auto& want, std::size_t cols, const char* what) {
        INFO(what);
        CHECK(got.rows == sx.size());
        CHECK(mismatches(got.values, rows_of(want.values, sx, cols), tol) == 0);
        CHECK(got.stats.peak_temp_bytes <= o.budget.value());
      };
      check(memsafe::mpi::eval(memsafe::sum(memsafe::matern32(X, Y, 1.2)), W, sh, o),
            memsafe::eval(memsafe::sum(memsafe::matern32(Xall, Yall, 1.2)), unlimited_opts), 1, "sum");
      check(memsafe::mpi::eval(memsafe::rbf(X, Y, 0.9) * vs, W, sh, o),
            memsafe::eval(memsafe::rbf(Xall, Yall, 0.9) * vall, unlimited_opts), 1, "K*v");
      check(memsafe::mpi::eval(memsafe::rbf(X, Y, 0.9) * Ms, W, sh, o),
            memsafe::eval(memsafe::rbf(Xall, Yall, 0.9) * Mall, unlimited_opts), c, "K*M");
      // v·K = Kᵀv with K = rbf(Y, X): the reduced index is K's rows (the sharded Y), the result's X's.
      check(memsafe::mpi::eval(vs * memsafe::rbf(Y, X, 0.9), W, sh, o),
            memsafe::eval(vall * memsafe::rbf(Yall, Xall, 0.9), unlimited_opts), 1, "v*K");
      check(memsafe::mpi::eval(memsafe::logsumexp(-memsafe::sqdist(X, Y)), W, sh, o),
            memsafe::eval(memsafe::logsumexp(-memsafe::sqdist(Xall, Yall)), unlimited_opts), 1, "logsumexp");
      check(memsafe::mpi::eval(memsafe::softmax_sum(-memsafe::sqdist(X, Y), Ms), W, sh, o),
            memsafe::eval(memsafe::softmax_sum(-memsafe::sqdist(Xall, Yall), Mall), unlimited_opts), c, "softmax_sum");
    }
}

TEST_CASE("both sharded: results do not depend on the budget; the ring's buffers and partials stay within it") {
  const std::size_t n = 150, m = 400, d = 5, k = 8;
  auto x = data<double>(n, d, 27), y = data<double>(m, d, 28);
  const span sx = shard_of(n, "uneven", rank(), ranks()), sy = shard_of(m, "one_big", rank(), ranks());
  const auto X = memsafe::points(x.data() + sx.b * d, sx.size(), d), Y = memsafe::points(y.data() + sy.b * d, sy.size(), d);
  const auto e = memsafe::mpi::argkmin(memsafe::sqdist(X, Y), k);
  const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)), k),
                                  unlimited_opts);
  const auto sh = memsafe::mpi::shard_both;
  std::size_t prev_chunk = 0;
  for (std::size_t b : {std::size_t(64) << 10, std::size_t(96) << 10, std::size_t(1) << 20}) {
    INFO("budget " << b);
    const auto r = memsafe::mpi::eval(e, MPI_COMM_WORLD, sh, memsafe::options{b, 1});
    CHECK(r.indices == rows_of(want.indices, sx, k));
    CHECK(r.stats.peak_temp_bytes <= b);
    CHECK(r.comm.buffer_bytes == (ranks() > 1 ? 2 * r.comm.chunk_rows * d * sizeof(double) : 0));
    CHECK(r.comm.chunk_rows >= prev_chunk);
    prev_chunk = r.comm.chunk_rows;
    std::size_t longest = 0;
    for (int q = 0; q < ranks(); ++q) longest = std::max(longest, shard_of(m, "one_big", q, ranks()).size());
    CHECK(r.comm.chunks == (longest + r.comm.chunk_rows - 1) / r.comm.chunk_rows);
    if (ranks() > 1) {
      // Every shard but this rank's own reaches it; every shard but the next rank's leaves it.
      const span nx = shard_of(m, "one_big", (rank() + 1) % ranks(), ranks());
      CHECK(r.comm.bytes_received == (m - sy.size()) * d * sizeof(double));
      CHECK(r.comm.bytes_sent == (m - nx.size()) * d * sizeof(double));
    } else {
      CHECK(r.comm.bytes_sent == 0);
    }
  }
  const memsafe::options small{std::size_t(64) << 10, 1};
  const auto p = memsafe::mpi::plan_for(e, MPI_COMM_WORLD, memsafe::mpi::shard_both_t{.max_chunk_rows = 50}, small);
  CHECK(p.layout == "shard_both");
  CHECK(p.chunk_rows <= 50);
  CHECK(p.chunks >= 400 / ranks() / 50);
  CHECK(p.buffer_bytes + p.partial_bytes + p.eval_budget == std::size_t(64) << 10);
  const std::string ex = memsafe::mpi::explain(e, MPI_COMM_WORLD, sh, small);
  CHECK(ex.find("distributed over " + std::to_string(ranks()) + " rank(s)") != std::string::npos);
  CHECK(ex.find("ring:") != std::string::npos);
  CHECK(ex.find("k-way merge") != std::string::npos);
}

TEST_CASE("both sharded: strided shards (rows with padding, a transposed M) are gathered into the ring's chunks") {
  const std::size_t n = 17, m = 61, d = 3, c = 2, pad = 5;
  auto x = data<double>(n, d, 31), yp = data<double>(m, pad, 32), mt = data<double>(c * m, 1, 33);
  const span sx = shard_of(n, "uneven", rank(), ranks()), sy = shard_of(m, "one_big", rank(), ranks());
  // Y: the first d of `pad` columns of each row; M (m×c) as the transpose of a c×m row-major matrix.
  const auto Yall = memsafe::matrix_view<const double>(yp.data(), m, d, pad, 1);
  const auto Mall = memsafe::matrix_view<const double>(mt.data(), m, c, 1, m);
  const auto Y = memsafe::matrix_view<const double>(yp.data() + sy.b * pad, sy.size(), d, pad, 1);
  const auto Ms = memsafe::matrix_view<const double>(mt.data() + sy.b, sy.size(), c, 1, m);
  const auto Xall = memsafe::points(x.data(), n, d), X = memsafe::points(x.data() + sx.b * d, sx.size(), d);
  const auto sh = memsafe::mpi::shard_both_t{.max_chunk_rows = 4};
  const auto got = memsafe::mpi::eval(memsafe::rbf(X, Y, 0.8) * Ms, MPI_COMM_WORLD, sh);
  const auto want = memsafe::eval(memsafe::rbf(Xall, Yall, 0.8) * Mall, unlimited_opts);
  CHECK(mismatches(got.values, rows_of(want.values, sx, c), 1e-12) == 0);
  const auto gk = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(X, Y), 4), MPI_COMM_WORLD, sh);
  CHECK(gk.indices == rows_of(memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xall, Yall), 4), unlimited_opts).indices, sx, 4));
  // M·K (a transposed result) is not supported with both sharded: an argument_error on every rank.
  const auto Mk = memsafe::matrix_view<const double>(mt.data(), c, sy.size(), m, 1);
  CHECK_THROWS_AS((void)memsafe::mpi::eval(Mk * memsafe::rbf(Y, X, 0.8), MPI_COMM_WORLD, sh), memsafe::argument_error);
}

TEST_CASE("both sharded: errors on any rank are raised on every rank, before any work, and the next call runs") {
  const std::size_t n = 40, m = 90, d = 3;
  auto x = data<double>(n, d, 29), y = data<double>(m, d, 30);
  const span sx = shard_of(n, "even", rank(), ranks()), sy = shard_of(m, "uneven", rank(), ranks());
  const auto X = memsafe::points(x.data() + sx.b * d, sx.size(), d), Y = memsafe::points(y.data() + sy.b * d, sy.size(), d);
  const auto e = memsafe::mpi::argkmin(memsafe::sqdist(X, Y), 3);
  const auto sh = memsafe::mpi::shard_both;
  const int small_rank = ranks() - 1;
  // A row of the ring's chunks (a point and its row of M) larger than one MPI message
  const std::vector<double> one(1, 1.0);
  const memsafe::matrix_view<const double> Mwide(one.data(), sy.size(), std::size_t{1} << 28, 0, 0);
  CHECK_THROWS_WITH_AS((void)memsafe::mpi::eval(memsafe::rbf(X, Y, 1.0, 1.0) * Mwide, MPI_COMM_WORLD, sh),
                       doctest::Contains("more than one MPI message carries"), memsafe::argument_error);
  const memsafe::options o{rank() == small_rank ? std::size_t(256) : std::size_t(1) << 20, 1};
  try {
    (void)memsafe::mpi::eval(e, MPI_COMM_WORLD, sh, o);
    FAIL("no budget_error");
  } catch (const memsafe::budget_error& err) {
    const std::string w = err.what();
    CHECK(err.minimum_bytes > 256);
    if (rank() != small_rank) CHECK(w.find("rank " + std::to_string(small_rank)) != std::string::npos);
    CHECK(w.find("use a budget of at least") != std::string::npos);
  }
  // A dimension that differs on the last rank (its points have d = 2).
  if (ranks() > 1) {
    const std::size_t dl = rank() == ranks() - 1 ? 2 : d;
    CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(memsafe::points(x.data(), sx.size(), dl),
                                                                                   memsafe::points(y.data(), sy.size(), dl)),
                                                                   3),
                                             MPI_COMM_WORLD, sh),
                    memsafe::shape_error);
    // Values of another type on the last rank.
    std::vector<float> xf(x.begin(), x.end()), yf(y.begin(), y.end());
    if (rank() == ranks() - 1)
      CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(memsafe::points(xf.data(), sx.size(), d),
                                                                                     memsafe::points(yf.data(), sy.size(), d)),
                                                                     3),
                                               MPI_COMM_WORLD, sh),
                      memsafe::argument_error);
    else
      CHECK_THROWS_AS((void)memsafe::mpi::eval(e, MPI_COMM_WORLD, sh), memsafe::argument_error);
  }
  // k larger than the reduced extent over all ranks.
  CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(X, Y), m + 1), MPI_COMM_WORLD, sh),
                  memsafe::argument_error);
  // Two leaves over different point sets cannot share the ring.
  const std::vector<double> y2(y);
  CHECK_THROWS_AS((void)memsafe::mpi::eval(memsafe::sum(memsafe::rbf(X, Y) + memsafe::rbf(X, memsafe::points(y2.data() + sy.b * d, sy.size(), d))),
                                           MPI_COMM_WORLD, sh),
                  memsafe::argument_error);
  const auto r = memsafe::mpi::eval(e, MPI_COMM_WORLD, sh);
  const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)), 3),
                                  unlimited_opts);
  CHECK(r.indices == rows_of(want.indices, sx, 3));
}

// ---- eval_into: the caller's buffers --------------------------------------------------------------

/// Buffers of `count` entries filled with a sentinel, one more past the end to catch an overrun.
template <class V>
V sentinel_buffer(std::size_t count, typename V::value_type mark) {
  return V(count + 1, mark);
}
template <class V>
bool untouched_tail(const V& b, typename V::value_type mark) {
  return b.back() == mark;
}
template <class V>
V first(const V& b, std::size_t count) {
  return V(b.begin(), b.begin() + std::ptrdiff_t(count));
}

TEST_CASE_TEMPLATE("eval_into writes what eval returns into the caller buffers on every layout, within the budget", T,
                   float, double) {
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  const std::size_t n = 17, m = 61, d = 3, c = 2;
  auto x = data<T>(n, d, 31, true), y = data<T>(m, d, 32, true), v = data<T>(m, 1, 33), M = data<T>(m, c, 34);
  const auto Xall = memsafe::points(x.data(), n, d), Yall = memsafe::points(y.data(), m, d);
  const auto Mall = memsafe::matrix(static_cast<const T*>(M.data()), m, c);
  const auto& W = MPI_COMM_WORLD;
  const T mark = T(-12345);
  const memsafe::index_t imark = -777;
  const std::size_t budget = std::size_t(48) << 10;
  const memsafe::options o{budget, 1};
  for (const char* layout : layouts) {
    const span s = shard_of(m, layout, rank(), ranks());
    INFO("layout " << layout << ", rank " << rank() << " holds [" << s.b << ", " << s.e << ")");
    const auto Y = memsafe::points(y.data() + s.b * d, s.size(), d);
    // Selections over the sharded points: k = 40 is more than some shards hold (their k-best are
    // spread over the buffers and padded before the merge); the whole result on every rank.
    for (std::size_t k : {std::size_t(1), std::size_t(7), std::size_t(40)}) {
      const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xall, Yall), k), unlimited_opts);
      auto vals = sentinel_buffer<std::vector<T>>(n * k, mark);
      auto idx = sentinel_buffer<std::vector<memsafe::index_t>>(n * k, imark);
      const auto st = memsafe::mpi::eval_into(memsafe::mpi::argkmin(memsafe::sqdist(Xall, Y), k), W,
                                              memsafe::mpi::shard_reduced, vals.data(), idx.data(), o);
      INFO("k " << k);
      CHECK(first(idx, n * k) == want.indices);
      CHECK(same_values(first(vals, n * k), want.values));
      CHECK(untouched_tail(vals, mark));
      CHECK(untouched_tail(idx, imark));
      CHECK(st.stats.peak_temp_bytes <= budget);
      CHECK(st.comm.global_extent == m);
      CHECK(st.comm.offset == s.b);
    }
    {
      const auto want = memsafe::eval(memsafe::min(memsafe::sqdist(Xall, Yall)), unlimited_opts);
      auto vals = sentinel_buffer<std::vector<T>>(n, mark);
      (void)memsafe::mpi::eval_into(memsafe::min(memsafe::sqdist(Xall, Y)), W, memsafe::mpi::shard_reduced, vals.data(),
                                    nullptr, o);
      CHECK(same_values(first(vals, n), want.values));
      CHECK(untouched_tail(vals, mark));
    }
    // Sums: K·M, logsumexp and softmax_sum (its outputs and the log-sum-exps merged together).
    const auto Ms = memsafe::matrix(static_cast<const T*>(M.data()) + s.b * c, s.size(), c);
    {
      const auto want = memsafe::eval(memsafe::matern32(Xall, Yall, 1.3) * Mall, unlimited_opts);
      auto vals = sentinel_buffer<std::vector<T>>(n * c, mark);
      const auto st = memsafe::mpi::eval_into(memsafe::matern32(Xall, Y, 1.3) * Ms, W, memsafe::mpi::shard_reduced,
                                              vals.data(), nullptr, o);
      CHECK(mismatches(first(vals, n * c), want.values, tol) == 0);
      CHECK(untouched_tail(vals, mark));
      CHECK(st.stats.peak_temp_bytes <= budget);
    }
    {
      const auto want = memsafe::eval(memsafe::logsumexp(-memsafe::sqdist(Xall, Yall)), unlimited_opts);
      auto vals = sentinel_buffer<std::vector<T>>(n, mark);
      (void)memsafe::mpi::eval_into(memsafe::logsumexp(-memsafe::sqdist(Xall, Y)), W, memsafe::mpi::shard_reduced,
                                    vals.data(), nullptr, o);
      CHECK(mismatches(first(vals, n), want.values, tol) == 0);
    }
    {
      const auto want = memsafe::eval(memsafe::softmax_sum(-memsafe::sqdist(Xall, Yall), Mall), unlimited_opts);
      auto vals = sentinel_buffer<std::vector<T>>(n * c, mark);
      (void)memsafe::mpi::eval_into(memsafe::softmax_sum(-memsafe::sqdist(Xall, Y), Ms), W, memsafe::mpi::shard_reduced,
                                    vals.data(), nullptr, o);
      CHECK(mismatches(first(vals, n * c), want.values, tol) == 0);
      CHECK(untouched_tail(vals, mark));
    }
    // Rows sharded: this rank's rows only.
    {
      const span sx = shard_of(n, layout, rank(), ranks());
      const auto X = memsafe::points(x.data() + sx.b * d, sx.size(), d);
      const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xall, Yall), 5), unlimited_opts);
      auto vals = sentinel_buffer<std::vector<T>>(sx.size() * 5, mark);
      auto idx = sentinel_buffer<std::vector<memsafe::index_t>>(sx.size() * 5, imark);
      (void)memsafe::mpi::eval_into(memsafe::argkmin(memsafe::sqdist(X, Yall), 5), W, memsafe::mpi::shard_rows,
                                    vals.data(), idx.data(), o);
      CHECK(first(idx, sx.size() * 5) == rows_of(want.indices, sx, 5));
      CHECK(same_values(first(vals, sx.size() * 5), rows_of(want.values, sx, 5)));
      CHECK(untouched_tail(idx, imark));
      // Both sharded: this rank's rows against every rank's points, around the ring.
      const auto wk = memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xall, Yall), 6), unlimited_opts);
      auto bv = sentinel_buffer<std::vector<T>>(sx.size() * 6, mark);
      auto bi = sentinel_buffer<std::vector<memsafe::index_t>>(sx.size() * 6, imark);
      const auto st = memsafe::mpi::eval_into(memsafe::mpi::argkmin(memsafe::sqdist(X, Y), 6), W,
                                              memsafe::mpi::shard_both_t{.max_chunk_rows = 5}, bv.data(), bi.data(), o);
      CHECK(first(bi, sx.size() * 6) == rows_of(wk.indices, sx, 6));
      CHECK(same_values(first(bv, sx.size() * 6), rows_of(wk.values, sx, 6)));
      CHECK(untouched_tail(bv, mark));
      CHECK(st.stats.peak_temp_bytes <= budget);
      const auto wM = memsafe::eval(memsafe::rbf(Xall, Yall, 0.8) * Mall, unlimited_opts);
      auto mv = sentinel_buffer<std::vector<T>>(sx.size() * c, mark);
      (void)memsafe::mpi::eval_into(memsafe::rbf(X, Y, 0.8) * Ms, W, memsafe::mpi::shard_both_t{.max_chunk_rows = 5},
                                    mv.data(), nullptr, o);
      CHECK(mismatches(first(mv, sx.size() * c), rows_of(wM.values, sx, c), tol) == 0);
      CHECK(untouched_tail(mv, mark));
    }
  }
}

TEST_CASE("eval_into errors on any rank, outputs over an input among them, are raised on every rank before any output is written") {
  const std::size_t n = 20, m = 64, d = 2, k = 3;
  auto x = data<double>(n, d, 41), y = data<double>(m, d, 42);
  const span s = shard_of(m, "even", rank(), ranks());
  const auto X = memsafe::points(x.data(), n, d), Y = memsafe::points(y.data() + s.b * d, s.size(), d);
  const auto e = memsafe::mpi::argkmin(memsafe::sqdist(X, Y), k);
  const int bad = ranks() - 1;
  std::vector<double> vals(n * k, -1.0);
  std::vector<memsafe::index_t> idx(n * k, -2);
  // On the last rank the values are written over the queries themselves (n·k ≥ n·d doubles).
  std::vector<double> xq(x);
  const auto Xq = memsafe::points(xq.data(), n, d);
  const auto eq = memsafe::mpi::argkmin(memsafe::sqdist(Xq, Y), k);
  double* out = rank() == bad ? xq.data() : vals.data();
  const std::vector<double> xq_before = xq;
  try {
    (void)memsafe::mpi::eval_into(eq, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, out, idx.data());
    FAIL("no argument_error");
  } catch (const memsafe::argument_error& err) {
    const std::string w = err.what();
    CHECK(w.find("memsafe::mpi::eval_into") != std::string::npos);
    if (rank() != bad) CHECK(w.find("rank " + std::to_string(bad)) != std::string::npos);
  }
  CHECK(xq == xq_before);
  CHECK(std::all_of(vals.begin(), vals.end(), [](double a) { return a == -1.0; }));
  CHECK(std::all_of(idx.begin(), idx.end(), [](memsafe::index_t a) { return a == -2; }));
  // Missing indices for an arg-reduction, on the last rank only.
  CHECK_THROWS_AS((void)memsafe::mpi::eval_into(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, vals.data(),
                                                rank() == bad ? nullptr : idx.data()),
                  memsafe::argument_error);
  // The same for shard_rows and shard_both: values and indices in one buffer on the last rank.
  std::vector<double> both(2 * n * k);
  auto* shared_idx = reinterpret_cast<memsafe::index_t*>(both.data());
  CHECK_THROWS_AS((void)memsafe::mpi::eval_into(e, MPI_COMM_WORLD, memsafe::mpi::shard_rows,
                                                rank() == bad ? both.data() : vals.data(),
                                                rank() == bad ? shared_idx : idx.data()),
                  memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::mpi::eval_into(e, MPI_COMM_WORLD, memsafe::mpi::shard_both,
                                                rank() == bad ? both.data() : vals.data(),
                                                rank() == bad ? shared_idx : idx.data()),
                  memsafe::argument_error);
  // A budget too small on the last rank: budget_error everywhere, nothing written.
  CHECK_THROWS_AS((void)memsafe::mpi::eval_into(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, vals.data(), idx.data(),
                                                memsafe::options{rank() == bad ? std::size_t(64) : std::size_t(1) << 20, 1}),
                  memsafe::budget_error);
  CHECK(std::all_of(vals.begin(), vals.end(), [](double a) { return a == -1.0; }));
  // And the communicator is still in step: the next call writes the result.
  (void)memsafe::mpi::eval_into(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, vals.data(), idx.data());
  CHECK(idx == memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, memsafe::points(y.data(), m, d)), k), unlimited_opts).indices);
}

}  // TEST_SUITE

int main(int argc, char** argv) { return mpi_test::main(argc, argv); }
