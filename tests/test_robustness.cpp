// Robustness at the edges: absurd thread counts, thread start failures, kernels at infinite
// distances, lengthscales out of range, extents that overflow, IEEE semantics kept by rewrites,
// budget texts, and cosine of zero / non-finite / tiny / huge vectors. Each case is a regression
// test of a hole found by an adversarial pass (it failed, hung or aborted before the fix).
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include <memsafe/memsafe.hpp>
#if defined(MEMSAFE_HAS_LAPACK)
#include <memsafe/gp.hpp>
#endif

namespace {

template <class T>
constexpr T inf = std::numeric_limits<T>::infinity();
template <class T>
constexpr T nan_v = std::numeric_limits<T>::quiet_NaN();

std::vector<double> grid(std::size_t n, std::size_t d, double scale = 0.37) {
  std::vector<double> v(n * d);
  for (std::size_t q = 0; q < v.size(); ++q) v[q] = scale * double((q * 7919) % 23) - 3.0;
  return v;
}

/// Sets (or unsets, with nullptr) an environment variable for the guard's lifetime.
struct env_guard {
  std::string name;
  std::string old;
  bool had;
  env_guard(const char* n, const char* v) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (v) ::setenv(n, v, 1);
    else ::unsetenv(n);
  }
  ~env_guard() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE("robustness") {

// ---- 1. thread counts --------------------------------------------------------------------------

TEST_CASE("threads: an absurd request is clamped to the cores, planned at once") {
  const auto x = grid(1000, 3), y = grid(1000, 3, 0.21);
  const auto e = memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), 1000, 3), memsafe::points(y.data(), 1000, 3)), 5);
  const std::size_t cores = memsafe::available_cores();
  REQUIRE(cores >= 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto p = memsafe::plan_for(e, memsafe::options{.budget = 64u << 20, .threads = 4294967295u});
  CHECK(p.threads >= 1);
  CHECK(p.threads <= cores);
  // threads alone, the budget left to its default (compiles without -Wmissing-field-initializers)
  CHECK(memsafe::plan_for(e, memsafe::options{.threads = 4294967295u}).threads <= cores);
  {
    env_guard g("MEMSAFE_NUM_THREADS", "100000000000");
    auto q = memsafe::plan_for(e, memsafe::options{.budget = 64u << 20});
    CHECK(q.threads <= cores);
    auto r = memsafe::eval(e, memsafe::options{.budget = 64u << 20});
    CHECK(r.stats.threads <= cores);
  }
  // The planner's search does not grow with the request: well under a second (it took minutes).
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
}

TEST_CASE("threads: MEMSAFE_NUM_THREADS must be a positive integer") {
  const auto x = grid(20, 2);
  const auto e = memsafe::sum(memsafe::sqdist(memsafe::points(x.data(), 20, 2), memsafe::points(x.data(), 20, 2)));
  for (const char* bad : {"2abc", "abc", "-1", "0", "1.5", "99999999999999999999999"}) {
    CAPTURE(bad);
    env_guard g("MEMSAFE_NUM_THREADS", bad);
    std::string msg;
    try {
      (void)memsafe::eval(e);
    } catch (const memsafe::argument_error& ex) {
      msg = ex.what();
    }
    CHECK(contains(msg, "MEMSAFE_NUM_THREADS"));
    CHECK(contains(msg, bad));
  }
  env_guard g("MEMSAFE_NUM_THREADS", " 1 ");
  CHECK(memsafe::eval(e).stats.threads == 1);
}

TEST_CASE("threads: no more workers than the work can use") {
  // 2 row blocks of 64 × 2 column tiles of 1024: splitting columns among more threads than there
  // are column tiles is not planned.
  const auto x = grid(100, 2), y = grid(2000, 2, 0.11);
  const auto X = memsafe::points(x.data(), 100, 2), Y = memsafe::points(y.data(), 2000, 2);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, Y), 2);
  for (unsigned t : {1u, 2u, 3u, 8u, 64u}) {
    auto p = memsafe::plan_for(e, memsafe::options{.budget = memsafe::unlimited, .threads = t});
    CAPTURE(t);
    CHECK(p.threads <= std::max<std::size_t>(1, p.col_blocks * p.row_blocks));
    if (p.split_columns) CHECK(p.threads <= p.col_blocks);
  }
}

// ---- 2. a thread that cannot start ---------------------------------------------------------------

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool asan = true;
#else
constexpr bool asan = false;
#endif
#else
constexpr bool asan = false;
#endif

/// Bytes of address space the process uses now (from /proc/self/statm).
std::size_t address_space_now() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long pages = 0;
  const int got = std::fscanf(f, "%lu", &pages);
  std::fclose(f);
  return got == 1 ? pages * std::size_t(::sysconf(_SC_PAGESIZE)) : 0;
}

/// Whether a child's address space can be limited to what it maps plus a margin here; says why not.
bool address_space_limits_work() {
  if (address_space_now() == 0) {
    MESSAGE("skipped: /proc/self/statm is not readable here");
    return false;
  }
  if (asan) {  // scripts/sanitize.sh address: ASan's own mappings and fake stacks need far more
    MESSAGE("skipped: built with AddressSanitizer, whose mappings do not fit a limited address space");
    return false;
  }
  return true;
}

/// body() in a forked child whose address space may grow by `spare` bytes beyond what it maps when
/// it starts; the child's exit code: body's value, 3 when the limit could not be set, 125 when body
/// threw. REQUIREs that the child exited (did not crash).
template <class Body>
int exit_code_in_child(std::size_t spare, Body body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::size_t vm = address_space_now();
    struct rlimit lim{vm + spare, vm + spare};
    if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
    int code = 125;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE_MESSAGE(WIFEXITED(status), "the child did not exit: wait status " << status);
  return WEXITSTATUS(status);
}

/// 0 when f() throws E, 1 for another std::bad_alloc, 2 for anything else, 3 when it returns.
template <class E, class F>
int thrown(F&& f) {
  try {
    f();
  } catch (const E&) {
    return 0;
  } catch (const std::exception& e) {
    return dynamic_cast<const std::bad_alloc*>(&e) ? 1 : 2;
  } catch (...) {
    return 2;
  }
  return 3;
}
}  // namespace

TEST_CASE("threads: when the system refuses a thread the work still completes on fewer") {
  // In a child process whose address space cannot hold one more thread stack, run the executor's
  // parallel loop and an evaluation: both must finish with the right answer (before, the vector of
  // running threads was destroyed unjoined: std::terminate).
  const std::size_t n = 300, m = 200, d = 3;
  const auto x = grid(n, d), y = grid(m, d, 0.13);
  const auto e = memsafe::sum(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)));
  // also the allocator's warm-up: the child starts with what this evaluation left mapped
  const auto want = memsafe::eval(e, memsafe::options{.budget = 1u << 20, .threads = 1});
  if (!address_space_limits_work()) return;
  // 3 MiB to spare: enough for the 1 MiB budget and the result, not for one more thread stack
  const int code = exit_code_in_child(3u << 20, [&] {
    std::atomic<std::size_t> ran{0};
    memsafe::host::parallel(8, [&](std::size_t) { ran.fetch_add(1); });
    if (ran.load() != 8) return 4;
    auto got = memsafe::eval(e, memsafe::options{.budget = 1u << 20, .threads = 8});
    for (std::size_t i = 0; i < n; ++i)
      if (std::abs(got[i] - want[i]) > 1e-9 * std::abs(want[i])) return 5;
    return 0;
  });
  CHECK(code == 0);
}

#if defined(MEMSAFE_HAS_LAPACK)
TEST_CASE("threads: the GP module's loops complete on fewer threads when the system refuses one") {
  // gp::sgpr's row loops ran on std::thread in a vector: a refused second thread destroyed the
  // first one unjoined (std::terminate), a refused first one escaped as std::system_error. m is
  // small enough that LAPACK's own calls stay on one thread.
  const std::size_t n = 300, m = 16, d = 3;
  const auto x = grid(n, d), z = grid(m, d, 0.9);
  std::vector<double> y(n);
  for (std::size_t j = 0; j < n; ++j) y[j] = std::sin(x[j * d] + 2 * x[j * d + 1]);
  memsafe::gp::hyperparameters h;
  h.kind = memsafe::gp::kernel::matern32;
  h.lengthscales.assign(d, 0.8);
  h.noise = 0.1;
  const auto want = memsafe::gp::sgpr({x.data(), y.data(), n, d}, {z.data(), m, d}, h,
                                      {.budget = 1u << 20, .gradient = true, .threads = 1});
  if (!address_space_limits_work()) return;
  const int code = exit_code_in_child(3u << 20, [&] {
    const auto got = memsafe::gp::sgpr({x.data(), y.data(), n, d}, {z.data(), m, d}, h,
                                       {.budget = 1u << 20, .gradient = true, .threads = 8});
    if (!(std::abs(got.bound - want.bound) <= 1e-10 * std::abs(want.bound))) return 4;
    for (std::size_t q = 0; q < m * d; ++q)
      if (!(std::abs(got.grad.Z[q] - want.grad.Z[q]) <= 1e-8 * (1 + std::abs(want.grad.Z[q])))) return 5;
    return 0;
  });
  CHECK(code == 0);
}
#endif

TEST_CASE("eval refuses a budget that is too small before it allocates the result") {
  // The result is not a temporary and may be far larger than the budget: a 2 GiB result with a
  // 1-byte budget must be a budget_error, not a 2 GiB allocation first (before, eval sized its
  // result and then planned). In a child whose address space has 256 MiB to spare, an allocation of
  // the result fails, which the last check shows does happen once the plan fits.
  if (!address_space_limits_work()) return;
  const std::size_t n = std::size_t{1} << 14;  // n × n doubles: 2 GiB
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = double(i % 977);
  const auto X = memsafe::points(x.data(), n, 1);
  const int code = exit_code_in_child(256u << 20, [&] {
    const auto tiny = memsafe::budget_bytes(1);
    if (int r = thrown<memsafe::budget_error>([&] { (void)memsafe::eval(memsafe::dense(memsafe::sqdist(X, X)), tiny); }))
      return 10 + r;
    if (int r = thrown<memsafe::budget_error>(
            [&] { (void)memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, X), n / 2), tiny); }))
      return 20 + r;
    // the same evaluation with a budget that fits: the 2 GiB result cannot be allocated here
    if (thrown<std::bad_alloc>([&] { (void)memsafe::eval(memsafe::dense(memsafe::sqdist(X, X)), memsafe::budget_bytes(1 << 20)); }))
      return 30;
    return 0;
  });
  INFO("11: the result was allocated first; 30: the limit did not bite");
  CHECK(code == 0);
}

TEST_CASE("memory the system refuses is an out_of_memory that says what was asked for") {
  // A result too large for the machine, with a budget that fits: out_of_memory, still a
  // std::bad_alloc, naming the result's shape and bytes and that the budget does not bound it. A
  // temporary within a budget larger than the machine can give (the accountant every temporary is
  // allocated through): out_of_memory naming the budget, and nothing left counted.
  if (!address_space_limits_work()) return;
  const std::size_t n = std::size_t{1} << 14;  // n × n doubles: 2 GiB
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = double(i % 977);
  const auto X = memsafe::points(x.data(), n, 1);
  const std::size_t gib = std::size_t{1} << 30;
  const int code = exit_code_in_child(256u << 20, [&] {
    try {
      (void)memsafe::eval(memsafe::dense(memsafe::sqdist(X, X)), memsafe::budget_bytes(1 << 20));
      return 10;
    } catch (const memsafe::out_of_memory& e) {
      const std::string w = e.what();
      if (e.bytes != 2 * gib) return 11;
      if (!contains(w, "the result of 16384×16384 values needs 2 GiB") || !contains(w, "the budget does not bound it"))
        return 12;
    }
    memsafe::detail::accountant acc(4 * gib);
    void* held = acc.allocate(1 << 20);
    try {
      (void)acc.allocate(gib);
      return 20;
    } catch (const memsafe::out_of_memory& e) {
      const std::string w = e.what();
      if (e.bytes != gib) return 21;
      if (!contains(w, "a temporary of 1 GiB") || !contains(w, "within the budget of 4 GiB") ||
          !contains(w, "with 1 MiB (1048576 B) of temporaries already held") || !contains(w, "choose a smaller budget"))
        return 22;
    }
    if (acc.current() != (1u << 20)) return 23;  // the refused bytes are not left counted
    acc.deallocate(held, 1 << 20);
    // both are std::bad_alloc to a caller that catches that
    return thrown<std::bad_alloc>([&] { (void)memsafe::eval(memsafe::dense(memsafe::sqdist(X, X))); }) ? 30 : 0;
  });
  INFO("10/20: nothing thrown; 11/21: the bytes; 12/22: the message; 23: still counted; 125: another exception");
  CHECK(code == 0);
}

// ---- 3. Matérn kernels at an infinite distance ---------------------------------------------------

TEST_CASE_TEMPLATE("matern32 and matern52 are 0, not NaN, where the scaled distance overflows", T, float, double) {
  const T far = std::is_same_v<T, float> ? T(1e20) : T(1e200);
  const std::vector<T> x = {T(0), far, T(1)};
  const auto X = memsafe::points(x.data(), 3, 1);
  const std::vector<T> ones(3, T(1));
  const double a3 = std::sqrt(3.0), a5 = std::sqrt(5.0);
  const double k32 = (1 + a3) * std::exp(-a3), k52 = (1 + a5 + 5.0 / 3.0) * std::exp(-a5);
  auto check_kernel = [&](const auto& K, double k01, const char* name) {
    CAPTURE(name);
    auto D = memsafe::eval(memsafe::dense(K), memsafe::budget_bytes(1 << 20));
    for (std::size_t q = 0; q < 9; ++q) CHECK(std::isfinite(D.values[q]));
    CHECK(D(0, 0) == T(1));
    CHECK(D(0, 1) == T(0));
    CHECK(D(1, 0) == T(0));
    CHECK(D(1, 2) == T(0));
    CHECK(double(D(0, 2)) == doctest::Approx(k01).epsilon(1e-6));
    auto s = memsafe::eval(K * memsafe::vec(ones.data(), 3), memsafe::budget_bytes(1 << 20));
    CHECK(double(s[0]) == doctest::Approx(1 + k01).epsilon(1e-6));
    CHECK(double(s[1]) == doctest::Approx(1).epsilon(1e-6));
  };
  check_kernel(memsafe::matern32(X, X, 1.0), k32, "matern32");
  check_kernel(memsafe::matern52(X, X, 1.0), k52, "matern52");
  // A large variance does not overflow before the decaying factor is applied.
  const double big = std::is_same_v<T, float> ? 1e37 : 1e300;
  auto D = memsafe::eval(memsafe::dense(memsafe::matern32(X, X, 1.0, big)), memsafe::budget_bytes(1 << 20));
  CHECK(double(D(0, 2)) == doctest::Approx(big * k32).epsilon(1e-5));
}

// ---- 4. lengthscales out of range ----------------------------------------------------------------

TEST_CASE_TEMPLATE("a lengthscale whose 1/l^2 is not a normal number is rejected with its range", T, float, double) {
  const std::vector<T> x = {T(0), T(1), T(2)};
  const auto P = memsafe::points(x.data(), 3, 1);
  const double tiny = std::is_same_v<T, float> ? 1e-25 : 1e-200;
  const double huge = std::is_same_v<T, float> ? 1e25 : 1e200;
  for (double ls : {tiny, huge}) {
    CAPTURE(ls);
    std::string msg;
    try {
      (void)memsafe::rbf(P, P, ls);
    } catch (const memsafe::argument_error& e) {
      msg = e.what();
    }
    CHECK(contains(msg, "lengthscale"));
    CHECK(contains(msg, std::is_same_v<T, float> ? "float" : "double"));
    CHECK_THROWS_AS((void)memsafe::matern32(P, P, ls), memsafe::argument_error);
    CHECK_THROWS_AS((void)memsafe::matern52(P, P, ls), memsafe::argument_error);
    CHECK_THROWS_AS((void)memsafe::rq(P, P, ls), memsafe::argument_error);
    const std::vector<T> ard(1, T(ls));
    if (ls == tiny || std::is_same_v<T, double>)  // 1e25 in float is inf: still rejected
      CHECK_THROWS_AS((void)memsafe::rbf(P, P, memsafe::ard(ard.data(), 1)), memsafe::argument_error);
  }
  // rq: a tiny alpha would make 1/(2αℓ²) overflow.
  CHECK_THROWS_AS((void)memsafe::rq(P, P, 1.0, 1.0, std::is_same_v<T, float> ? 1e-39 : 1e-310), memsafe::argument_error);
  // In range, even small, the kernel is the identity on distinct points, with no NaN.
  const double small = std::is_same_v<T, float> ? 1e-18 : 1e-150;
  auto K = memsafe::eval(memsafe::dense(memsafe::rbf(P, P, small, 2.0)), memsafe::budget_bytes(1 << 20));
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) CHECK(K(i, j) == (i == j ? T(2) : T(0)));
  auto M = memsafe::eval(memsafe::dense(memsafe::matern52(P, P, small)), memsafe::budget_bytes(1 << 20));
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) CHECK(M(i, j) == (i == j ? T(1) : T(0)));
}

// ---- 5. extents that overflow ---------------------------------------------------------------------

TEST_CASE("extents whose product overflows are an argument_error, not a bypassed null check") {
  const std::size_t big = std::size_t{1} << 32;
  CHECK_THROWS_AS((void)memsafe::points(static_cast<const float*>(nullptr), big, big), memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::points(static_cast<const double*>(nullptr), big * 4, big), memsafe::argument_error);
  float f = 0;
  CHECK_THROWS_AS((void)memsafe::points(&f, big, big), memsafe::argument_error);
  // A stride that makes the spanned memory wrap around.
  CHECK_THROWS_AS((void)memsafe::vec(&f, 3, std::numeric_limits<std::size_t>::max() / 2), memsafe::argument_error);
  CHECK_THROWS_AS((void)memsafe::matrix_view<const float>(&f, 2, 2, std::numeric_limits<std::size_t>::max() / 3, 1),
                  memsafe::argument_error);
  const std::size_t dims[3] = {big, big, 2};
  CHECK_THROWS_AS((void)memsafe::tensor(static_cast<const float*>(nullptr), dims), memsafe::argument_error);
  std::string msg;
  try {
    (void)memsafe::points(static_cast<const float*>(nullptr), big, big);
  } catch (const memsafe::argument_error& e) {
    msg = e.what();
  }
  CHECK(contains(msg, "overflow"));
}

// ---- 6. rewrites keep IEEE results for non-finite values -------------------------------------------

TEST_CASE_TEMPLATE("a scalar factor is hoisted out of a sum only when that cannot change the result", T, float, double) {
  const std::vector<T> x = {T(0), T(1), T(3)};
  const auto P = memsafe::points(x.data(), 3, 1);
  const auto D = memsafe::sqdist(P, P);
  const memsafe::options o{.budget = 1u << 20, .threads = 1};
  // Entry by entry: x/0 = +inf off the diagonal, 0/0 = NaN on it, so each row sums to NaN.
  auto a = memsafe::eval(memsafe::sum(D / 0.0), o);
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::isnan(a[i]));
  // inf · 0 on the diagonal: NaN rows; inf · E over positive entries only would be +inf.
  auto b = memsafe::eval(memsafe::sum(std::numeric_limits<double>::infinity() * D), o);
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::isnan(b[i]));
  // 0 · inf entries are NaN: a zero factor must not zero the sum.
  const std::vector<T> y = {T(0), inf<T>};
  const auto Q = memsafe::points(y.data(), 2, 1);
  auto c = memsafe::eval(memsafe::sum(0.0 * memsafe::sqdist(Q, Q)), o);
  for (std::size_t i = 0; i < 2; ++i) CHECK(std::isnan(c[i]));
  // The same in products.
  const std::vector<T> v = {T(1), T(1), T(1)};
  auto pv = memsafe::eval((D / 0.0) * memsafe::vec(v.data(), 3), o);
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::isnan(pv[i]));
  // A finite nonzero factor is still hoisted (and exact to rounding).
  auto h = memsafe::eval(memsafe::sum(D / 4.0), o);
  auto s = memsafe::eval(memsafe::sum(D), o);
  for (std::size_t i = 0; i < 3; ++i) CHECK(h[i] == doctest::Approx(s[i] / 4));
  CHECK(contains(memsafe::explain(memsafe::sum(D / 4.0), o), "scalar_hoist"));
}

TEST_CASE_TEMPLATE("a diagonal term is split off a product only when the dense factor is finite", T, float, double) {
  const std::vector<T> x = {T(0), T(1), T(3)};
  const auto P = memsafe::points(x.data(), 3, 1);
  const auto K = memsafe::rbf(P, P, 1.0) + 2.0 * memsafe::identity(3);
  const memsafe::options o{.budget = 1u << 20, .threads = 1};
  // Row 0 of (K + 2I)·v with v = (inf, 1, 1): (1 + 2)·inf + … = +inf entry by entry; split into
  // K·v + 2I·v it would also be +inf; with v0 = −inf and a negative diagonal the split can differ:
  // (1 − 3)·(−inf) = +inf, but 1·(−inf) + (−3)·(−inf) = −inf + inf = NaN.
  const auto Kn = memsafe::rbf(P, P, 1.0) - 3.0 * memsafe::identity(3);
  const std::vector<T> v = {-inf<T>, T(1), T(1)};
  auto r = memsafe::eval(Kn * memsafe::vec(v.data(), 3), o);
  CHECK(r[0] == inf<T>);
  // Finite factors: split as before and correct.
  const std::vector<T> w = {T(1), T(2), T(3)};
  auto f = memsafe::eval(K * memsafe::vec(w.data(), 3), o);
  double want0 = 0;
  for (std::size_t j = 0; j < 3; ++j) want0 += std::exp(-0.5 * double(x[j] * x[j])) * double(w[j]);
  want0 += 2 * 1;
  CHECK(double(f[0]) == doctest::Approx(want0).epsilon(1e-6));
}

// ---- found by the fuzz test ------------------------------------------------------------------------

TEST_CASE_TEMPLATE("a hoisted scale multiplies the double sum before it is rounded to T", T, float) {
  // Ten points 1e19 from the origin: the unscaled row sum 1e39 overflows float, the scaled 1e37
  // does not (dense: each entry 1e38/100 = 1e36, summed: 1e37).
  const std::vector<T> x = {T(0)};
  const std::vector<T> y(10, T(1e19));
  const auto D = memsafe::sqdist(memsafe::points(x.data(), 1, 1), memsafe::points(y.data(), 10, 1));
  const memsafe::options o{.budget = 1u << 20, .threads = 1};
  auto a = memsafe::eval(memsafe::sum(D / 100.0), o);
  CHECK(std::isfinite(a[0]));
  CHECK(double(a[0]) == doctest::Approx(1e37).epsilon(1e-5));
  const std::vector<T> ones(10, T(1));
  auto b = memsafe::eval((0.01 * D) * memsafe::vec(ones.data(), 10), o);
  CHECK(double(b[0]) == doctest::Approx(1e37).epsilon(1e-5));
}

TEST_CASE_TEMPLATE("diag and trace of a kernel of X with itself are NaN where a point is not finite", T, float, double) {
  const std::vector<T> x = {nan_v<T>, T(0), inf<T>, T(1), T(1), T(2)};
  const auto P = memsafe::points(x.data(), 3, 2);
  const memsafe::options o{.budget = 1u << 20, .threads = 1};
  auto d = memsafe::eval(memsafe::diag(memsafe::rbf(P, P, 1.0)), o);
  CHECK(std::isnan(d[0]));
  CHECK(std::isnan(d[1]));
  CHECK(d[2] == T(1));
  CHECK(std::isnan(memsafe::eval(memsafe::trace(memsafe::sqdist(P, P)), o)[0]));
  // Finite points: the rule still answers without reading pairs.
  const auto Q = memsafe::points(x.data() + 4, 1, 2);
  CHECK(contains(memsafe::explain(memsafe::diag(memsafe::rbf(Q, Q, 1.0)), o), "stationary_diagonal"));
}

TEST_CASE("diag and trace with ARD lengthscales follow the dense K where a scaled coordinate overflows") {
  // x / l = 1e300 / 1e-100 overflows: the dense K_00 is NaN (inf - inf), so diag must be too; the
  // other point stays the variance, and trace is NaN.
  const std::vector<double> x = {1e300, 0.5, 1.0, 2.0}, ls = {1e-100, 1.0};
  const auto P = memsafe::points(x.data(), 2, 2);
  const memsafe::options o{.budget = 1u << 20, .threads = 1};
  const auto K = memsafe::rbf(P, P, memsafe::ard(ls.data(), 2), 2.0);
  const auto dense = memsafe::eval(memsafe::dense(K), o);
  REQUIRE(std::isnan(dense[0]));
  const auto d = memsafe::eval(memsafe::diag(K), o);
  CHECK(std::isnan(d[0]));
  CHECK(d[1] == dense[3]);
  CHECK(std::isnan(memsafe::eval(memsafe::trace(K), o)[0]));
}

TEST_CASE("diag and trace of an empty matrix allocate nothing") {
  const std::vector<float> x;
  const auto P = memsafe::points(x.data(), 0, 3);
  const memsafe::options o{.budget = 1, .threads = 1};
  auto d = memsafe::eval(memsafe::diag(memsafe::cosine(P, P)), o);
  CHECK(d.size() == 0);
  CHECK(d.stats.temp_allocations == 0);
  CHECK(d.stats.peak_temp_bytes == 0);
  auto t = memsafe::eval(memsafe::trace(memsafe::cosine(P, P)), o);
  CHECK(t[0] == 0.0f);
  CHECK(t.stats.temp_allocations == 0);
}

// ---- 7. budget texts and cosine edge values -----------------------------------------------------------

TEST_CASE("budget texts: more than 2^64 - 1 bytes is an error, not unlimited") {
  CHECK(memsafe::parse_bytes("18446744073709551615") == memsafe::unlimited);
  for (const char* bad : {"18446744073709551616", "99999999999999999999999", "20000000TB", "17179869184GiB"}) {
    CAPTURE(bad);
    std::string msg;
    try {
      (void)memsafe::parse_bytes(bad);
    } catch (const memsafe::argument_error& e) {
      msg = e.what();
    }
    CHECK(contains(msg, bad));
    CHECK(contains(msg, "unlimited"));
  }
  // The documented spellings of no limit.
  CHECK(memsafe::parse_bytes("unlimited") == memsafe::unlimited);
  CHECK(memsafe::parse_bytes("inf") == memsafe::unlimited);
  CHECK(memsafe::parse_bytes("none") == memsafe::unlimited);
  CHECK_THROWS_AS((void)memsafe::parse_bytes("16777216TiB"), memsafe::argument_error);  // 2^64 bytes
}

TEST_CASE_TEMPLATE("cosine: a zero vector is at distance 1 from everything, non-finite vectors give NaN", T, float, double) {
  // Queries: zero, +inf, tiny, huge, ordinary. Points: +inf, -inf, zero, ordinary, tiny, huge.
  const T tiny = std::is_same_v<T, float> ? T(1e-30) : T(1e-300);
  const T huge = std::is_same_v<T, float> ? T(1e30) : T(1e300);
  const std::vector<T> q = {T(0), T(0), inf<T>, T(0), tiny, tiny, huge, huge, T(3), T(4)};
  const std::vector<T> p = {inf<T>, T(0), -inf<T>, T(1), T(0), T(0), T(6), T(8), T(0), tiny, huge, T(0)};
  const auto Q = memsafe::points(q.data(), 5, 2), P = memsafe::points(p.data(), 6, 2);
  auto D = memsafe::eval(memsafe::dense(memsafe::cosine(Q, P)), memsafe::budget_bytes(1 << 20));
  // The zero query: 1 against every point, the infinite ones included.
  for (std::size_t j = 0; j < 6; ++j) CHECK(D(0, j) == T(1));
  // The infinite query: NaN against every nonzero point, 1 against the zero point.
  for (std::size_t j = 0; j < 6; ++j) {
    CAPTURE(j);
    if (j == 2) CHECK(D(1, j) == T(1));
    else CHECK(std::isnan(D(1, j)));
  }
  // Tiny and huge vectors have a direction: (1,1)/√2 vs (3,4)/5 → 1 − 7/(5√2); vs (0,1) → 1 − 1/√2.
  const double c34 = 1 - 7 / (5 * std::sqrt(2.0)), c01 = 1 - 1 / std::sqrt(2.0);
  for (std::size_t i : {2u, 3u}) {
    CAPTURE(i);
    CHECK(double(D(i, 3)) == doctest::Approx(c34).epsilon(1e-5));
    CHECK(double(D(i, 4)) == doctest::Approx(c01).epsilon(1e-5));
    CHECK(double(D(i, 5)) == doctest::Approx(1 - 1 / std::sqrt(2.0)).epsilon(1e-5));
  }
  // The same values through the selection paths, which rank them.
  auto k = memsafe::eval(memsafe::argkmin(memsafe::cosine(Q, P), 6), memsafe::budget_bytes(1 << 20));
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t c = 0; c < 6; ++c) {
      const T want = D(i, std::size_t(k.index(i, c)));
      CHECK((k(i, c) == want || (std::isnan(k(i, c)) && std::isnan(want))));
    }
  CHECK(k.index(0, 0) == 0);  // all ties at 1: the lowest index first
}

}  // TEST_SUITE("robustness")
