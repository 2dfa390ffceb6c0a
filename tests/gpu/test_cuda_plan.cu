// The CUDA backend's planner without a GPU: plan_for with given device resources lowers and plans
// only — it allocates nothing, launches nothing and asks the CUDA runtime nothing — so these cases
// run wherever nvcc builds them, CI included (label cuda, not gpu). They pin the fused path's column
// splits (rows_plan.cuh, splits_for and plan_layout; plan.cuh, fused_split_target and
// fused_rows_per_thread) to the numbers docs/budget.md states, at full and reduced budgets.
#include <doctest/doctest.h>

#include <memsafe/cuda.cuh>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace mc = memsafe::cuda;

namespace {

constexpr std::size_t MiB = std::size_t(1) << 20;
const mc::device_resources h100{132, std::size_t(80) << 30};  // an H100's SM count; no device asked

/// One allocation as the byte model rounds it.
std::size_t rounded(std::size_t b) { return (b + 255) / 256 * 256; }
/// A fused K·v's planned bytes for ti rows and S splits with host outputs: ti·S double partial
/// states, and the outputs staged twice (device and pinned).
template <class T>
std::size_t kv_bytes(std::size_t ti, std::size_t S) {
  return rounded(ti * S * sizeof(double)) + 2 * rounded(ti * sizeof(T));
}

/// K(X, Y)·v with the RBF kernel, n = 10⁶ points in d = 3, in T: Y another buffer (the plain
/// form), or the same view as X (k(X, X)·v, the symmetric form where it pays). Host vectors stand
/// for device inputs (plan_for assumes them there and reads nothing).
template <class T, std::size_t N = 1000000>
struct kv_case {
  static constexpr std::size_t n = N, d = 3;
  std::vector<T> x = std::vector<T>(n * d), y = std::vector<T>(n * d), v = std::vector<T>(n);
  auto expr(bool same = false) const {
    const auto X = memsafe::points(x.data(), n, d);
    return memsafe::rbf(X, same ? X : memsafe::points(y.data(), n, d), 1.0) * memsafe::vec(v.data(), n);
  }
};

/// The symmetric form's planned bytes (rows_plan.cuh, layout_bytes) for bands of tb rows in blocks
/// of rpb, S splits, host outputs: the split states, the column sums per row block and column, every
/// column's double state, the outputs staged twice.
template <class T>
std::size_t sym_bytes(std::size_t n, std::size_t tb, std::size_t rpb, std::size_t S) {
  return rounded(tb * S * sizeof(double)) + rounded(tb / rpb * n * sizeof(T)) + rounded(n * sizeof(double)) +
         2 * rounded(tb * sizeof(T));
}

/// MEMSAFE_SYMMETRIC set for a scope.
struct symmetric_env {
  explicit symmetric_env(const char* v) { ::setenv("MEMSAFE_SYMMETRIC", v, 1); }
  ~symmetric_env() { ::unsetenv("MEMSAFE_SYMMETRIC"); }
};

}  // namespace

TEST_SUITE("cuda_plan") {
TEST_CASE("K*v in float at d = 3: 1024-row blocks and splits for 128 blocks per SM, halved to fit a smaller budget") {
  const kv_case<float> c;
  const std::size_t n = c.n;
  const auto kv = c.expr();
  // 8 query rows per thread × 128 threads: 977 row groups; 128 × 132 blocks wanted: 18 splits.
  const auto p = mc::plan_for(kv, mc::options{std::size_t(1) << 30}, h100);
  CHECK(p.tile_rows == n);
  CHECK(p.threads == 18);
  CHECK(p.split_columns);
  CHECK(p.planned_bytes == kv_bytes<float>(n, 18));
  CHECK(p.planned_bytes <= p.budget);
  // Smaller budgets halve the splits (18, 9, 5, 3, 2, 1) before they take a smaller row block:
  // 64 MiB holds 5 splits (46 MiB; 9 need 76), 24 MiB 2 (23 MiB), 16 MiB 1 (15 MiB), 8 MiB none
  // of all rows.
  const std::size_t budgets[] = {64 * MiB, 24 * MiB, 16 * MiB};
  const std::size_t splits[] = {5, 2, 1};
  for (int b = 0; b < 3; ++b) {
    CAPTURE(budgets[b]);
    const auto q = mc::plan_for(kv, mc::options{budgets[b]}, h100);
    CHECK(q.tile_rows == n);
    CHECK(q.threads == splits[b]);
    CHECK(q.planned_bytes == kv_bytes<float>(n, splits[b]));
    CHECK(q.planned_bytes <= budgets[b]);
  }
  const auto r = mc::plan_for(kv, mc::options{8 * MiB}, h100);
  CHECK(r.tile_rows < n);
  CHECK(r.planned_bytes <= 8 * MiB);
  // One SM: 977 groups already fill it.
  const auto one = mc::plan_for(kv, mc::options{std::size_t(1) << 30}, mc::device_resources{1, std::size_t(1) << 30});
  CHECK(one.threads == 1);
  CHECK(one.min_bytes == p.min_bytes);
}

TEST_CASE("K*v in double keeps 512-row blocks; a selection keeps 4 blocks per SM") {
  const std::size_t n = 1000000, m = 10000, d = 3;
  const kv_case<double> c;
  const auto kv = c.expr();
  // 4 rows per thread for double: 1954 groups, cdiv(128 × 132, 1954) = 9 splits.
  const auto p = mc::plan_for(kv, mc::options{std::size_t(1) << 30}, h100);
  CHECK(p.threads == 9);
  CHECK(p.planned_bytes == kv_bytes<double>(n, 9));
  // kNN: m = 10^4 query rows in blocks of 64 (157 groups), 4 × 132 blocks wanted: 4 splits.
  const std::vector<float> qs(m * d), ys(n * d);
  const float* q = qs.data();
  const float* y = ys.data();
  const auto knn = memsafe::argkmin(memsafe::sqdist(memsafe::points(q, m, d), memsafe::points(y, n, d)), 10);
  const auto s = mc::plan_for(knn, mc::options{std::size_t(1) << 30}, h100);
  CHECK(s.tile_rows == m);
  CHECK(s.threads == 4);
  CHECK(s.planned_bytes <= s.budget);
}

TEST_CASE("K(X, X)*v takes each pair once in bands of rows where that fills the GPU, else the plain form") {
  const kv_case<float> c;
  const std::size_t n = c.n;
  const auto kv = c.expr(true);
  // Bands of n/16 rows capped at 32 blocks of 1024 rows; 128 × 132 blocks wanted over 32 row
  // blocks: 528 splits of 15 tiles (1920 columns), 521 over 10^6 columns.
  const auto p = mc::plan_for(kv, mc::options{std::size_t(1) << 30}, h100);
  CHECK(p.symmetric);
  CHECK(p.reduction.find("symmetric") != std::string::npos);
  CHECK(p.tile_rows == 32768);
  CHECK(p.threads == 521);
  CHECK(p.planned_bytes == sym_bytes<float>(n, 32768, 1024, 521));
  CHECK(p.planned_bytes <= p.budget);
  // The plain form's minimum is the call's minimum.
  CHECK(p.min_bytes == mc::plan_for(c.expr(false), mc::options{std::size_t(1) << 30}, h100).min_bytes);
  // 64 MiB: the largest band whose bytes fit with enough blocks (8 row blocks, 245 splits).
  const auto q = mc::plan_for(kv, mc::options{64 * MiB}, h100);
  CHECK(q.symmetric);
  CHECK(q.tile_rows == 8192);
  CHECK(q.threads == 245);
  CHECK(q.planned_bytes == sym_bytes<float>(n, 8192, 1024, 245));
  CHECK(q.planned_bytes <= 64 * MiB);
  // 16 MiB: no band fits with 8 blocks per SM: the plain form, as for two buffers.
  const auto r = mc::plan_for(kv, mc::options{16 * MiB}, h100);
  CHECK_FALSE(r.symmetric);
  CHECK(r.threads == 1);
  CHECK(r.tile_rows == n);
  // n = 10^4: a band launch cannot fill the GPU: plain.
  const kv_case<float, 10000> small;
  CHECK_FALSE(mc::plan_for(small.expr(true), mc::options{std::size_t(1) << 30}, h100).symmetric);
  // double: 512-row blocks, bands of 32 of them.
  const kv_case<double> cd;
  const auto pd = mc::plan_for(cd.expr(true), mc::options{std::size_t(1) << 30}, h100);
  CHECK(pd.symmetric);
  CHECK(pd.tile_rows == 16384);
  CHECK(pd.threads == 521);
  CHECK(pd.planned_bytes == sym_bytes<double>(n, 16384, 512, 521));
  {
    const symmetric_env off("off");
    const auto o = mc::plan_for(kv, mc::options{std::size_t(1) << 30}, h100);
    CHECK_FALSE(o.symmetric);
    CHECK(o.threads == 18);
  }
  {
    const symmetric_env on("on");
    CHECK(mc::plan_for(kv, mc::options{16 * MiB}, h100).symmetric);
    CHECK(mc::plan_for(small.expr(true), mc::options{std::size_t(1) << 30}, h100).symmetric);
  }
}

TEST_CASE("plan_for reads no input: (K + s*I)*v with v where the host cannot read it") {
  // The lowering's guard of (K + D)·v reads v on the host (a non-finite entry keeps the unsplit
  // form); plan_for takes its inputs as device-resident, so it must not: a pointer no host code may
  // dereference stands for a device vector here (reading it crashed).
  const kv_case<float, 4096> c;
  const auto X = memsafe::points(c.x.data(), c.n, c.d);
  const auto* nowhere = reinterpret_cast<const float*>(std::uintptr_t(64));
  const auto p = mc::plan_for((memsafe::rbf(X, X, 1.0) + 0.5 * memsafe::identity(c.n)) * memsafe::vec(nowhere, c.n),
                              mc::options{std::size_t(1) << 30}, h100);
  CHECK(p.rows == c.n);
  CHECK(p.planned_bytes <= p.budget);
}

TEST_CASE("too small a budget names the minimum, with one split and the smallest blocks") {
  const kv_case<float> c;
  const auto kv = c.expr();
  const auto p = mc::plan_for(kv, mc::options{std::size_t(1) << 30}, h100);
  CHECK(p.min_bytes > 0);
  CHECK(p.min_bytes < 4096);
  CHECK_THROWS_AS(mc::plan_for(kv, mc::options{p.min_bytes - 1}, h100), memsafe::budget_error);
  const auto at_min = mc::plan_for(kv, mc::options{p.min_bytes}, h100);
  CHECK(at_min.threads == 1);
  CHECK(at_min.planned_bytes <= p.min_bytes);
}
}

TEST_CASE("strides and extents beyond cuBLAS 32-bit ints are planned without cuBLAS or refused before any work") {
  // plan_for reads nothing: a pointer no code dereferences stands for device data of any extent.
  const auto* nowhere = reinterpret_cast<const float*>(std::uintptr_t(64));
  const std::size_t d = 100, wide = std::size_t(1) << 31;  // d above the fused kernels' 64: cuBLAS tiles
  const mc::options o{std::size_t(1) << 30};
  // argkmin over a squared distance at d >= 32 screens with cuBLAS X·Yᵀ, whose leading dimension is
  // the points' row stride: beyond an int, the semiring kernels take it (no cuBLAS call at all).
  const auto X = memsafe::points(nowhere, 1000, d), Y = memsafe::points(nowhere, 5000, d);
  const memsafe::matrix_view<const float> Ywide(nowhere, 5000, d, wide, 1);
  CHECK(mc::plan_for(memsafe::argkmin(memsafe::sqdist(X, Y), 10), o, h100).reduction.find("cuBLAS") !=
        std::string::npos);
  CHECK(mc::plan_for(memsafe::argkmin(memsafe::sqdist(X, Ywide), 10), o, h100).reduction.find("cuBLAS") ==
        std::string::npos);
  // cuBLAS wants a leading dimension of at least d: sliding windows over a series (row stride 1)
  // go to the semiring kernels too (cuBLAS refused them: CUBLAS_STATUS_INVALID_VALUE)
  const memsafe::matrix_view<const float> windows(nowhere, 5000, d, 1, 1);
  CHECK(mc::plan_for(memsafe::argkmin(memsafe::sqdist(X, windows), 10), o, h100).reduction.find("cuBLAS") ==
        std::string::npos);
  // K·M with several columns accumulates through cuBLAS, reading M in place: a row stride beyond
  // an int, or rows that overlap (stride 0), are an argument_error from planning.
  CHECK_NOTHROW(mc::plan_for(memsafe::rbf(X, Y, 1.0) * memsafe::matrix(nowhere, 5000, 4), o, h100));
  CHECK_NOTHROW(mc::plan_for(memsafe::rbf(X, Y, 1.0) * memsafe::matrix(nowhere, 4, 5000).t(), o, h100));
  for (std::size_t rs : {wide, std::size_t{0}, std::size_t{3}}) {
    CAPTURE(rs);
    const memsafe::matrix_view<const float> M(nowhere, 5000, 4, rs, 1);
    CHECK_THROWS_WITH_AS(mc::plan_for(memsafe::rbf(X, Y, 1.0) * M, o, h100),
                         doctest::Contains("row- or column-contiguous"), memsafe::argument_error);
  }
  // a selection over dot ranks the semiring kernel's values at every budget, never cuBLAS's blocked
  // sums (which a budget below cuBLAS's workspace does not take: near-ties depended on the budget);
  // a sum over dot still takes cuBLAS's values
  CHECK(mc::plan_for(memsafe::argkmax(memsafe::dot(X, Y), 32), o, h100).reduction.find("cuBLAS") == std::string::npos);
  CHECK(mc::plan_for(memsafe::max(memsafe::dot(X, Y)), o, h100).reduction.find("cuBLAS") == std::string::npos);
  CHECK(mc::plan_for(memsafe::dot(X, Y) * memsafe::matrix(nowhere, 5000, 4), o, h100).reduction.find("cuBLAS") !=
        std::string::npos);
  // an operand of no columns: an empty result, planned (its run returns before reading anything)
  CHECK_NOTHROW(mc::plan_for(memsafe::rbf(X, Y, 1.0) * memsafe::matrix(nowhere, 5000, 0), o, h100));
}

TEST_CASE("empty inputs plan no temporaries on the device and fit a one-byte budget, as on the host") {
  // No rows, no columns (each row's identity), an inner extent of 0 (zeros): the host plans 0 bytes
  // and runs at any budget; the device planned 768-1280 B for these (a budget_error below that).
  const mc::options o{std::size_t(1)};
  const float* nowhere = nullptr;  // the empty inputs' data
  const std::vector<float> x(40 * 3);  // stands for device points (plan_for reads no input)
  const auto X = memsafe::points(x.data(), 40, 3), X0 = memsafe::points(nowhere, 0, 3);
  const auto K0 = memsafe::rbf(X, X0, 1.0);  // 40 × 0
  const auto check = [&](const auto& e, const char* what) {
    CAPTURE(what);
    const auto p = mc::plan_for(e, o, h100);
    CHECK(p.planned_bytes == 0);
    CHECK(p.min_bytes == 0);
    CHECK(memsafe::plan_for(e, memsafe::options{std::size_t(1), 1}).planned_bytes == 0);  // the host's
  };
  check(memsafe::sum(K0), "sum, m = 0");
  check(memsafe::min(memsafe::sqdist(X, X0)), "min, m = 0");
  check(memsafe::max(K0), "max, m = 0");
  check(memsafe::logsumexp(K0), "logsumexp, m = 0");
  check(K0 * memsafe::vec(nowhere, 0), "K*v, m = 0");
  check(K0 * memsafe::matrix(nowhere, 0, 4), "K*M, m = 0");
  check(memsafe::softmax_sum(memsafe::dot(X, X0), memsafe::matrix(nowhere, 0, 5)), "softmax_sum, m = 0");
  check(memsafe::argkmin(memsafe::sqdist(X0, X), 10), "argkmin, n = 0");
  check(memsafe::rbf(X0, X, 1.0) * memsafe::vec(x.data(), 40), "K*v, n = 0");
  check(K0 * memsafe::transpose(K0), "lazy x lazy, inner 0");
  check(memsafe::rbf(X0, X, 1.0) * memsafe::transpose(memsafe::rbf(X, X, 1.0)), "lazy x lazy, no rows");
}
