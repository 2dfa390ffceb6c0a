// mpi::sgpr under mpirun (label mpi; 1 to 4 ranks): the SGPR bound and its gradient with the training
// points sharded over the ranks equal gp::sgpr on the concatenated data — bound ≤ 1e-10 relative,
// every gradient group (σ_f², ℓ, σ², Z; max-norm) ≤ 1e-9 — on even, uneven, empty-first and
// all-on-one-rank shards, both accumulations (plain and whitened), at budgets from the minimum to
// unlimited; every rank gets the same bits; errors on any rank are raised on every rank before any
// work (no hang); each rank's peak temporaries, communication buffers included, stay within its budget.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <memsafe/mpi_gp.hpp>

#include "../gp_problem.hpp"
#include "mpi_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

namespace gp = memsafe::gp;
using mpi_test::rank;
using mpi_test::ranks;
using vec = std::vector<double>;

/// The same data on every rank (each rank then passes its own rows): tests/gp_problem.hpp's problem
/// with 13 test points (seed 5 unless given); all() is the whole training set.
struct problem : gp_test::problem {
  problem(std::size_t n_, std::size_t m_, std::size_t d_, gp::kernel k, unsigned seed = 5)
      : gp_test::problem(n_, m_, d_, k, seed, 13) {}
  gp::data_view all() const { return data(); }
};

/// [b, e) of this rank's shard of n rows under a layout.
struct span {
  std::size_t b, e;
  std::size_t size() const { return e - b; }
};
span shard_of(std::size_t n, const std::string& layout, int r, int p) {
  std::vector<std::size_t> w(std::size_t(p), 1);
  if (layout == "uneven")
    for (int q = 0; q < p; ++q) w[std::size_t(q)] = 2 * std::size_t(q) + 1;
  if (layout == "empty_first") w[0] = 0;
  if (layout == "all_on_last") std::fill(w.begin(), w.end() - 1, std::size_t(0));
  std::size_t tot = 0;
  for (auto x : w) tot += x;
  if (tot == 0) return {0, n};  // one rank, empty_first: it holds everything
  std::size_t acc = 0, b = 0;
  for (int q = 0; q <= r; ++q) {
    b = acc * n / tot;
    acc += w[std::size_t(q)];
  }
  return {b, acc * n / tot};
}
const char* const layouts[] = {"even", "uneven", "empty_first", "all_on_last"};

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-300); }
/// max |a − b| / max |b| (a group of gradient components).
double rel_max(const vec& a, const vec& b) {
  if (a.size() != b.size()) return 1e300;
  double e = 0, s = 0;
  for (std::size_t q = 0; q < a.size(); ++q) {
    e = std::max(e, std::fabs(a[q] - b[q]));
    s = std::max(s, std::fabs(b[q]));
  }
  return s == 0 ? e : e / s;
}

/// The largest relative difference of the bound and of each gradient group.
double worst_difference(const gp::sgpr_result& a, const gp::sgpr_result& b, double& grad) {
  grad = 0;
  if (a.has_gradient && b.has_gradient) {
    grad = std::max({rel(a.grad.variance, b.grad.variance), rel(a.grad.noise, b.grad.noise),
                     rel_max(a.grad.lengthscales, b.grad.lengthscales), rel_max(a.grad.Z, b.grad.Z)});
  }
  return rel(a.bound, b.bound);
}

/// Every rank holds the same bits of v.
bool same_on_every_rank(const vec& v) {
  const int count = int(v.size());
  vec lo(v), hi(v);
  MPI_Allreduce(v.data(), lo.data(), count, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(v.data(), hi.data(), count, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return std::memcmp(lo.data(), v.data(), v.size() * sizeof(double)) == 0 &&
         std::memcmp(hi.data(), v.data(), v.size() * sizeof(double)) == 0;
}
vec flatten(const gp::sgpr_result& r) {
  vec v{r.bound, r.grad.variance, r.grad.noise};
  v.insert(v.end(), r.grad.lengthscales.begin(), r.grad.lengthscales.end());
  v.insert(v.end(), r.grad.Z.begin(), r.grad.Z.end());
  v.insert(v.end(), r.posterior.w.begin(), r.posterior.w.end());
  return v;
}

constexpr double tol_bound = 1e-10, tol_grad = 1e-9;

}  // namespace

TEST_SUITE("mpi") {

TEST_CASE("mpi::sgpr bound and gradient equal gp::sgpr on the concatenated data on every shard layout") {
  double worst_b = 0, worst_g = 0;
  for (auto k : {gp::kernel::matern32, gp::kernel::rbf}) {
    const problem p(701, 23, 3, k);
    for (const std::optional<bool> wh : {std::optional<bool>(false), std::optional<bool>(true), std::optional<bool>()}) {
      const auto want = gp::sgpr(p.all(), p.ind(), p.h, {.budget = memsafe::unlimited, .gradient = true, .whitened = wh, .threads = 1});
      for (const char* layout : layouts) {
        const span s = shard_of(p.n, layout, rank(), ranks());
        CAPTURE(std::string(gp::kernel_name(k)));
        CAPTURE(wh.has_value());
        CAPTURE(wh.value_or(false));
        CAPTURE(layout);
        CAPTURE(s.b);
        CAPTURE(s.e);
        const std::size_t budget = std::size_t(64) << 10;
        const auto got = memsafe::mpi::sgpr(MPI_COMM_WORLD, p.rows(s.b, s.e), p.ind(), p.h,
                                            {.budget = budget, .gradient = true, .whitened = wh, .threads = 1});
        REQUIRE(got.has_gradient);
        double g = 0;
        const double b = worst_difference(got, want, g);
        CHECK(b < tol_bound);
        CHECK(g < tol_grad);
        worst_b = std::max(worst_b, b);
        worst_g = std::max(worst_g, g);
        CHECK(rel(got.yty, want.yty) < 1e-12);
        CHECK(rel(got.trace_kff, want.trace_kff) < 1e-15);
        CHECK(rel_max(got.posterior.w, want.posterior.w) < tol_grad);
        CHECK(rel_max(got.posterior.LB, want.posterior.LB) < tol_bound);
        CHECK(got.posterior.L == want.posterior.L);  // Kuu's factor: the same computation on every rank
        CHECK(got.stats.whitened == want.stats.whitened);  // the order, chosen or set, as gp::sgpr's
        CHECK(got.stats.kuu_condition == want.stats.kuu_condition);
        CHECK(got.stats.peak_temp_bytes <= budget);
        CHECK(got.comm.n_global == p.n);
        CHECK(got.comm.n_local == s.size());
        CHECK(got.comm.offset == s.b);
        CHECK(same_on_every_rank(flatten(got)));
      }
    }
  }
  if (rank() == 0) MESSAGE("worst relative difference to gp::sgpr on " << ranks() << " rank(s): bound " << worst_b
                                                      << ", gradient groups " << worst_g);
}

TEST_CASE("mpi::sgpr without the gradient, every kernel: one allreduce, the bound equals gp::sgpr") {
  for (auto k : {gp::kernel::rbf, gp::kernel::matern12, gp::kernel::matern32, gp::kernel::matern52}) {
    const problem p(513, 17, 3, k, 9);
    const auto want = gp::sgpr(p.all(), p.ind(), p.h, {.budget = memsafe::unlimited, .threads = 1});
    const span s = shard_of(p.n, "uneven", rank(), ranks());
    const auto got = memsafe::mpi::sgpr(MPI_COMM_WORLD, p.rows(s.b, s.e), p.ind(), p.h,
                                        {.budget = std::size_t(32) << 10, .threads = 1});
    CAPTURE(std::string(gp::kernel_name(k)));
    CHECK(!got.has_gradient);
    CHECK(rel(got.bound, want.bound) < tol_bound);
    CHECK(rel(got.sum_log_diag_LB, want.sum_log_diag_LB) < tol_bound);
    CHECK(rel(got.ctc, want.ctc) < tol_grad);
    CHECK(rel(got.trace_aat, want.trace_aat) < tol_bound);
    CHECK(got.comm.backward_doubles == 0);
    CHECK(got.comm.forward_doubles == p.m * (p.m + 1) / 2 + p.m + 2);
    if (ranks() > 1) CHECK(got.comm.bytes_reduced == got.comm.forward_doubles * sizeof(double));
    CHECK(got.stats.peak_temp_bytes <= std::size_t(32) << 10);
  }
}

TEST_CASE("mpi::sgpr does not depend on the budgets, which may differ per rank; communication chunks within them") {
  const problem p(1009, 31, 4, gp::kernel::matern52, 13);
  const auto want = gp::sgpr(p.all(), p.ind(), p.h, {.budget = memsafe::unlimited, .gradient = true, .threads = 1});
  const span s = shard_of(p.n, "uneven", rank(), ranks());
  const std::size_t minimum = memsafe::mpi::sgpr_minimum_bytes(p.m, p.d, true);
  CHECK(minimum == gp::sgpr_minimum_bytes(p.m, p.d, true));  // one column pair holds the smallest buffers
  const std::size_t budgets[] = {minimum, minimum + std::size_t(rank()) * 1000, std::size_t(6) << 10,
                                 std::size_t(48) << 10 << rank(), memsafe::unlimited};
  const unsigned threads = 1 + unsigned(rank() % 2);  // threads may differ per rank too
  for (std::size_t budget : budgets) {
    CAPTURE(budget);
    const auto got = memsafe::mpi::sgpr(MPI_COMM_WORLD, p.rows(s.b, s.e), p.ind(), p.h,
                                        {.budget = budget, .gradient = true, .threads = threads});
    double g = 0;
    CHECK(worst_difference(got, want, g) < tol_bound);
    CHECK(g < tol_grad);
    CHECK(got.stats.peak_temp_bytes <= budget);
    CHECK(got.comm.buffer_bytes <= budget);
    CHECK(got.stats.minimum_bytes == minimum);
    CHECK(same_on_every_rank(flatten(got)));
    const auto& c = got.comm;
    CHECK(c.forward_doubles == p.m * (p.m + 1) / 2 + p.m + 2);
    CHECK(c.backward_doubles == 1 + p.d + p.m * p.d);
    if (ranks() > 1) {
      CHECK(c.bytes_reduced == (c.forward_doubles + c.backward_doubles) * sizeof(double));
      CHECK(c.allreduce_calls == (c.forward_doubles + c.chunk_doubles - 1) / c.chunk_doubles +
                                     (c.backward_doubles + c.chunk_doubles - 1) / c.chunk_doubles);
      CHECK(c.buffer_bytes == 2 * c.chunk_doubles * sizeof(double));
      if (budget == minimum) CHECK(c.allreduce_calls > 2);  // the smallest buffers: many messages
      if (budget == memsafe::unlimited) CHECK(c.allreduce_calls == 2);  // one per pass
    } else {
      CHECK(c.allreduce_calls == 0);
      CHECK(c.bytes_reduced == 0);
    }
    // Kuu's rows are split over the ranks: each counted once.
    const std::uint64_t rows = c.kuu_rows_end - c.kuu_rows_begin;
    std::uint64_t total = 0;
    MPI_Allreduce(&rows, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(total == p.m);
    const std::string line = c.describe();
    CHECK(line.find("mpi::sgpr over " + std::to_string(ranks()) + " rank(s)") != std::string::npos);
    CHECK(line.find("of " + std::to_string(p.n)) != std::string::npos);
  }
}

TEST_CASE("mpi::sgpr with fewer inducing points than ranks and a one-point shard per rank") {
  const problem p(std::size_t(ranks()), 3, 2, gp::kernel::matern52, 29);  // one training point per rank
  const auto want = gp::sgpr(p.all(), p.ind(), p.h, {.budget = memsafe::unlimited, .gradient = true, .threads = 1});
  const span s{std::size_t(rank()), std::size_t(rank()) + 1};
  const auto got = memsafe::mpi::sgpr(MPI_COMM_WORLD, p.rows(s.b, s.e), p.ind(), p.h,
                                      {.budget = memsafe::mpi::sgpr_minimum_bytes(p.m, p.d, true), .gradient = true});
  double g = 0;
  CHECK(worst_difference(got, want, g) < tol_bound);
  CHECK(g < tol_grad);
  CHECK(got.stats.peak_temp_bytes <= memsafe::mpi::sgpr_minimum_bytes(p.m, p.d, true));
  CHECK(got.comm.kuu_rows_end - got.comm.kuu_rows_begin <= 1 + p.m / std::size_t(ranks()));
}

TEST_CASE("predictions from the distributed fit equal those from gp::sgpr") {
  const problem p(600, 20, 3, gp::kernel::matern32, 21);
  const auto want = gp::sgpr(p.all(), p.ind(), p.h, {.budget = memsafe::unlimited, .threads = 1});
  const span s = shard_of(p.n, "empty_first", rank(), ranks());
  const auto got = memsafe::mpi::sgpr(MPI_COMM_WORLD, p.rows(s.b, s.e), p.ind(), p.h, {.budget = std::size_t(16) << 10});
  const std::size_t ns = p.Xs.size() / p.d;
  vec m1(ns), v1(ns), m2(ns), v2(ns);
  gp::predict(want.posterior, p.Xs.data(), ns, m1.data(), v1.data());
  gp::predict(got.posterior, p.Xs.data(), ns, m2.data(), v2.data());
  CHECK(rel_max(m2, m1) < tol_grad);
  CHECK(rel_max(v2, v1) < tol_grad);
}

TEST_CASE("mpi::sgpr errors on any rank are raised on every rank before any work, and the next call runs") {
  const problem p(300, 12, 3, gp::kernel::rbf, 17);
  const span s = shard_of(p.n, "even", rank(), ranks());
  const auto D = p.rows(s.b, s.e);
  const int last = ranks() - 1;
  const gp::sgpr_options o{.budget = std::size_t(1) << 20, .gradient = true, .threads = 1};
  const auto call = [&](const gp::data_view& Dv, const gp::inducing_view& Iv, const gp::hyperparameters& hv,
                        const gp::sgpr_options& ov) { (void)memsafe::mpi::sgpr(MPI_COMM_WORLD, Dv, Iv, hv, ov); };

  // A budget far too small on the last rank.
  {
    gp::sgpr_options small = o;
    if (rank() == last) small.budget = 64;
    try {
      call(D, p.ind(), p.h, small);
      FAIL("no budget_error");
    } catch (const memsafe::budget_error& e) {
      CHECK(e.minimum_bytes == memsafe::mpi::sgpr_minimum_bytes(p.m, p.d, true));
      const std::string w = e.what();
      CHECK(w.find("use a budget of at least") != std::string::npos);
      if (rank() != last) CHECK(w.find("rank " + std::to_string(last)) != std::string::npos);
    }
  }
  // A bad argument on the last rank: a negative noise; a null X for a non-empty shard.
  {
    auto h = p.h;
    if (rank() == last) h.noise = -1;
    CHECK_THROWS_AS(call(D, p.ind(), h, o), memsafe::argument_error);
    gp::data_view bad = D;
    if (rank() == last) {
      bad.X = nullptr;
      bad.n = std::max<std::size_t>(bad.n, 1);
    }
    CHECK_THROWS_AS(call(bad, p.ind(), p.h, o), memsafe::argument_error);
    gp::data_view wrong_d = D;
    if (rank() == last) {
      wrong_d.d = p.d + 1;
      wrong_d.n = std::min<std::size_t>(std::max<std::size_t>(wrong_d.n, 1), p.n / (p.d + 1));
    }
    CHECK_THROWS_AS(call(wrong_d, p.ind(), p.h, o), memsafe::shape_error);
  }
  // Replicated operands that differ between ranks.
  if (ranks() > 1) {
    vec Z = p.Z;
    if (rank() == last) Z[5] += 1e-3;
    try {
      call(D, {Z.data(), p.m, p.d}, p.h, o);
      FAIL("no argument_error");
    } catch (const memsafe::argument_error& e) {
      CHECK(std::string(e.what()).find("inducing points Z differ") != std::string::npos);
    }
    auto h = p.h;
    if (rank() == last) h.lengthscales[1] *= 1.0 + 1e-12;
    try {
      call(D, p.ind(), h, o);
      FAIL("no argument_error");
    } catch (const memsafe::argument_error& e) {
      CHECK(std::string(e.what()).find("hyperparameters") != std::string::npos);
    }
    gp::sgpr_options o2 = o;
    if (rank() == last) o2.whitened = !o.whitened.value_or(false);
    CHECK_THROWS_AS(call(D, p.ind(), p.h, o2), memsafe::argument_error);
    o2 = o;  // set on one rank, left to the choice on the others (or the reverse)
    if (rank() == last) o2.whitened = o.whitened ? std::optional<bool>() : std::optional<bool>(false);
    CHECK_THROWS_AS(call(D, p.ind(), p.h, o2), memsafe::argument_error);
    o2 = o;
    if (rank() == last) o2.gradient = false;  // one rank without the backward pass would hang the others
    CHECK_THROWS_AS(call(D, p.ind(), p.h, o2), memsafe::argument_error);
    try {
      call(D, {p.Z.data(), rank() == last ? p.m - 1 : p.m, p.d}, p.h, o);
      FAIL("no shape_error");
    } catch (const memsafe::shape_error& e) {
      CHECK(std::string(e.what()).find("same m and d") != std::string::npos);
    }
  }
  // No training data on any rank.
  CHECK_THROWS_AS(call({nullptr, nullptr, 0, p.d}, p.ind(), p.h, o), memsafe::shape_error);
  // Kuu singular (two equal inducing points, no jitter): the same error everywhere.
  {
    vec Z = p.Z;
    std::copy(Z.begin(), Z.begin() + std::ptrdiff_t(p.d), Z.begin() + std::ptrdiff_t(p.d));
    auto h = p.h;
    h.jitter = 0;
    CHECK_THROWS_AS(call(D, {Z.data(), p.m, p.d}, h, o), memsafe::argument_error);
  }
  // And the ranks are still in step: the next call runs and is right.
  const auto want = gp::sgpr(p.all(), p.ind(), p.h, {.budget = memsafe::unlimited, .gradient = true, .threads = 1});
  const auto got = memsafe::mpi::sgpr(MPI_COMM_WORLD, D, p.ind(), p.h, o);
  double g = 0;
  CHECK(worst_difference(got, want, g) < tol_bound);
  CHECK(g < tol_grad);
}

}  // TEST_SUITE

int main(int argc, char** argv) { return mpi_test::main(argc, argv); }
