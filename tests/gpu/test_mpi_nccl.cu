// shard_reduced into device outputs merged by NCCL (labels gpu and mpi; run under mpirun where a
// GPU per rank is): the same answers as one host process — exactly for selections (integer data:
// every distance is exact), to rounding for sums, logsumexp and softmax_sum (NaN and −inf rows
// included) —, empty and uneven shards, and a too-small budget on one rank raised on every rank.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <memsafe/mpi_nccl.cuh>

#include "../mpi/mpi_test.hpp"
#include "device_vector.cuh"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace {
using mpi_test::rank;
using mpi_test::ranks;

/// Small integers (exact distances in float).
template <class T>
std::vector<T> ints(std::size_t n, std::size_t d, unsigned seed) {
  std::vector<T> v(n * d);
  unsigned s = seed * 2654435761u + 7u;
  for (auto& a : v) {
    s = s * 1664525u + 1013904223u;
    a = T(int(s >> 28) - 8);
  }
  return v;
}
/// This rank's rows [b, e) of m: uneven (rank r holds a share ∝ r + 1; the last rank of three or
/// more holds none).
std::pair<std::size_t, std::size_t> shard(std::size_t m) {
  const std::size_t R = std::size_t(ranks()), r = std::size_t(rank());
  std::vector<std::size_t> w(R);
  for (std::size_t q = 0; q < R; ++q) w[q] = (R >= 3 && q == R - 1) ? 0 : q + 1;
  std::size_t tot = 0, before = 0;
  for (std::size_t q = 0; q < R; ++q) tot += w[q];
  for (std::size_t q = 0; q < r; ++q) before += w[q];
  return {m * before / tot, m * (before + w[r]) / tot};
}

/// Each rank on its own GPU (its rank on the node modulo the node's devices); false on every rank
/// when some node has more ranks than GPUs.
bool select_gpu() {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int lr = 0, ls = 1, count = 0;
  MPI_Comm_rank(local, &lr);
  MPI_Comm_size(local, &ls);
  MPI_Comm_free(&local);
  MEMSAFE_CUDA_CHECK(cudaGetDeviceCount(&count));
  MEMSAFE_CUDA_CHECK(cudaSetDevice(lr % count));
  int enough = count >= ls ? 1 : 0, all = 0;
  MPI_Allreduce(&enough, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}
/// Where ranks must share a GPU, NCCL cannot run: making the communicator must then fail on every
/// rank with the clear error (not NCCL's bare "invalid usage"), and the case stops there, saying so.
bool shared_gpu_refused() {
  if (select_gpu()) return false;
  try {
    memsafe::mpi::nccl_comm nc(MPI_COMM_WORLD);
    FAIL("nccl_comm accepted two ranks on one GPU");
  } catch (const memsafe::argument_error& e) {
    CHECK(std::string(e.what()).find("one GPU per rank") != std::string::npos);
  }
  MESSAGE("NCCL case skipped: " << ranks() << " ranks share fewer GPUs (checked: nccl_comm refuses clearly)");
  return true;
}
}  // namespace

TEST_SUITE("gpu_mpi_nccl") {

TEST_CASE("NCCL: k nearest, argmin and min over uneven shards equal one host process exactly, on every rank") {
  if (shared_gpu_refused()) return;
  memsafe::mpi::nccl_comm nc(MPI_COMM_WORLD);
  const std::size_t n = 300, m = 6000, d = 40;  // d = 40: the fused kernel; ties to the lower global index
  auto x = ints<float>(n, d, 1), y = ints<float>(m, d, 2);
  const auto [b, e] = shard(m);
  dvec<float> X(x), Y(std::vector<float>(y.begin() + std::ptrdiff_t(b * d), y.begin() + std::ptrdiff_t(e * d)));
  const auto Xd = memsafe::points(X.p, n, d), Yd = memsafe::points(Y.p, e - b, d);
  const auto Xh = memsafe::points(x.data(), n, d), Yh = memsafe::points(y.data(), m, d);
  for (std::size_t k : {1u, 10u, 40u}) {
    dvec<float> V(n * k);
    dvec<memsafe::index_t> I(n * k);
    for (std::size_t budget : {std::size_t(64) << 10, std::size_t(16) << 20}) {
      const auto st = memsafe::mpi::eval_into(memsafe::mpi::argkmin(memsafe::sqdist(Xd, Yd), k), nc,
                                              memsafe::mpi::shard_reduced, V.p, I.p, memsafe::cuda::options{budget});
      const auto want = memsafe::eval(memsafe::argkmin(memsafe::sqdist(Xh, Yh), k), memsafe::options{memsafe::unlimited, 2});
      INFO("k = " << k << ", budget " << budget << ", rank " << rank() << " of " << ranks());
      CHECK(I.host() == want.indices);
      CHECK(V.host() == want.values);
      CHECK(st.stats.peak_temp_bytes <= budget);
      CHECK(st.comm.ranks == ranks());
    }
  }
  dvec<float> V1(n), V2(n);
  dvec<memsafe::index_t> I1(n);
  (void)memsafe::mpi::eval_into(memsafe::mpi::argmin(memsafe::sqdist(Xd, Yd)), nc, memsafe::mpi::shard_reduced, V1.p,
                                I1.p, memsafe::cuda::options{std::size_t(1) << 20});
  (void)memsafe::mpi::eval_into(memsafe::min(memsafe::sqdist(Xd, Yd)), nc, memsafe::mpi::shard_reduced, V2.p, nullptr,
                                memsafe::cuda::options{std::size_t(1) << 20});
  const auto am = memsafe::eval(memsafe::argmin(memsafe::sqdist(Xh, Yh)), memsafe::options{memsafe::unlimited, 2});
  CHECK(I1.host() == am.indices);
  CHECK(V1.host() == am.values);
  CHECK(V2.host() == am.values);
}

TEST_CASE("NCCL: K*v and Kuf*Kuf^T summed on the GPUs equal one host process to rounding") {
  if (shared_gpu_refused()) return;
  memsafe::mpi::nccl_comm nc(MPI_COMM_WORLD);
  const std::size_t n = 200, m = 5000, d = 8;
  auto x = ints<double>(n, d, 3), y = ints<double>(m, d, 4), v = ints<double>(m, 1, 5);
  const auto [b, e] = shard(m);
  dvec<double> X(x), Y(std::vector<double>(y.begin() + std::ptrdiff_t(b * d), y.begin() + std::ptrdiff_t(e * d))),
      W(std::vector<double>(v.begin() + std::ptrdiff_t(b), v.begin() + std::ptrdiff_t(e)));
  const auto Xd = memsafe::points(X.p, n, d), Yd = memsafe::points(Y.p, e - b, d);
  dvec<double> out(n), P(n * n);
  (void)memsafe::mpi::eval_into(memsafe::rbf(Xd, Yd, 4.0) * memsafe::vec(W.p, e - b), nc, memsafe::mpi::shard_reduced,
                                out.p, nullptr, memsafe::cuda::options{std::size_t(4) << 20});
  const auto Xh = memsafe::points(x.data(), n, d), Yh = memsafe::points(y.data(), m, d);
  const auto want = memsafe::eval(memsafe::rbf(Xh, Yh, 4.0) * memsafe::vec(v.data(), m), memsafe::options{memsafe::unlimited, 2});
  const auto got = out.host();
  for (std::size_t i = 0; i < n; ++i) CHECK(got[i] == doctest::Approx(want.values[i]).epsilon(1e-10).scale(double(m) * 8));
  const auto Kuf = memsafe::rbf(Xd, Yd, 4.0);
  (void)memsafe::mpi::eval_into(Kuf * memsafe::transpose(Kuf), nc, memsafe::mpi::shard_reduced, P.p, nullptr,
                                memsafe::cuda::options{std::size_t(8) << 20});
  const auto Kh = memsafe::rbf(Xh, Yh, 4.0);
  const auto pw = memsafe::eval(Kh * memsafe::transpose(Kh), memsafe::options{memsafe::unlimited, 2});
  const auto pg = P.host();
  for (std::size_t q = 0; q < n * n; ++q) CHECK(pg[q] == doctest::Approx(pw.values[q]).epsilon(1e-10).scale(double(m)));
}

/// got equals want where want is a number (to rel · (1 + |want|)), NaN where want is NaN and the same
/// infinity where want is infinite (the host merge's special rows).
template <class T>
void check_rows(const std::vector<T>& got, const std::vector<T>& want, double rel, const char* what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t q = 0; q < want.size(); ++q) {
    const double g = double(got[q]), w = double(want[q]);
    const bool ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::abs(g - w) <= rel * (1 + std::abs(w));
    if (!ok && bad++ < 4) MESSAGE(what << ": entry " << q << " is " << g << ", one process gives " << w);
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " entries differ from one process's");
}

TEST_CASE_TEMPLATE("NCCL: logsumexp and softmax_sum over uneven shards equal one host process, special rows included",
                   T, float, double) {
  if (shared_gpu_refused()) return;
  memsafe::mpi::nccl_comm nc(MPI_COMM_WORLD);
  const std::size_t n = 300, m = 4000, d = 6, c = 5;
  auto x = ints<T>(n, d, 8), y = ints<T>(m, d, 9), v = ints<T>(m, c, 10);
  for (auto& a : x) a /= T(4);  // scores -|x - y|^2 of a few units: the exponentials matter
  for (auto& a : y) a /= T(4);
  x[0] = std::numeric_limits<T>::quiet_NaN();  // row 0: NaN scores (NaN for both)
  x[d] = std::numeric_limits<T>::infinity();   // row 1: every score -inf (-inf, and NaN for softmax_sum)
  const auto [b, e] = shard(m);
  dvec<T> X(x), Y(std::vector<T>(y.begin() + std::ptrdiff_t(b * d), y.begin() + std::ptrdiff_t(e * d))),
      V(std::vector<T>(v.begin() + std::ptrdiff_t(b * c), v.begin() + std::ptrdiff_t(e * c)));
  const auto Xd = memsafe::points(X.p, n, d), Yd = memsafe::points(Y.p, e - b, d);
  const auto Xh = memsafe::points(x.data(), n, d), Yh = memsafe::points(y.data(), m, d);
  const double rel = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  const auto lse_want = memsafe::eval(memsafe::logsumexp(-memsafe::sqdist(Xh, Yh)), memsafe::options{memsafe::unlimited, 2});
  const auto sm_want = memsafe::eval(memsafe::softmax_sum(-memsafe::sqdist(Xh, Yh), memsafe::matrix(v.data(), m, c)),
                                     memsafe::options{memsafe::unlimited, 2});
  for (std::size_t budget : {std::size_t(16) << 20, std::size_t(1) << 20}) {
    INFO("budget " << budget << ", rank " << rank() << " of " << ranks());
    dvec<T> L(n), S(n * c);
    const auto sl = memsafe::mpi::eval_into(memsafe::logsumexp(-memsafe::sqdist(Xd, Yd)), nc, memsafe::mpi::shard_reduced,
                                            L.p, nullptr, memsafe::cuda::options{budget});
    check_rows(L.host(), lse_want.values, rel, "logsumexp");
    CHECK(sl.stats.peak_temp_bytes <= budget);
    CHECK(sl.comm.ranks == ranks());
    const auto ss = memsafe::mpi::eval_into(memsafe::softmax_sum(-memsafe::sqdist(Xd, Yd), memsafe::matrix(V.p, e - b, c)),
                                            nc, memsafe::mpi::shard_reduced, S.p, nullptr, memsafe::cuda::options{budget});
    check_rows(S.host(), sm_want.values, rel, "softmax_sum");
    CHECK(ss.stats.peak_temp_bytes <= budget);
  }
}

TEST_CASE("NCCL: a budget too small for the gathered lists on one rank is a budget_error on every rank") {
  if (shared_gpu_refused()) return;
  memsafe::mpi::nccl_comm nc(MPI_COMM_WORLD);
  const std::size_t n = 64, m = 512, d = 4, k = 64;
  auto x = ints<float>(n, d, 6), y = ints<float>(m, d, 7);
  dvec<float> X(x), Y(y), V(n * k);
  dvec<memsafe::index_t> I(n * k);
  const auto e = memsafe::mpi::argkmin(memsafe::sqdist(memsafe::points(X.p, n, d), memsafe::points(Y.p, m, d)), k);
  // Enough for the local evaluation everywhere, but below (ranks + 2)·k·16 bytes on rank 0 when ranks > 1.
  const std::size_t small = std::size_t(ranks() + 1) * k * 16;
  const memsafe::cuda::options o{rank() == 0 && ranks() > 1 ? std::max<std::size_t>(small, memsafe::cuda::plan_for(e, {}).min_bytes)
                                                             : std::size_t(8) << 20};
  if (ranks() > 1 && o.budget.value() < std::size_t(ranks() + 2) * k * 16 + 768)
    CHECK_THROWS_AS((void)memsafe::mpi::eval_into(e, nc, memsafe::mpi::shard_reduced, V.p, I.p, o), memsafe::budget_error);
  // Host outputs are refused before any work.
  std::vector<float> hv(n * k);
  std::vector<memsafe::index_t> hi(n * k);
  CHECK_THROWS_AS((void)memsafe::mpi::eval_into(e, nc, memsafe::mpi::shard_reduced, hv.data(), hi.data(),
                                                memsafe::cuda::options{std::size_t(8) << 20}),
                  memsafe::argument_error);
}

}  // TEST_SUITE

int main(int argc, char** argv) { return mpi_test::main(argc, argv); }
