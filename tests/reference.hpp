// tests/reference.hpp — independent naive references (dense, in double) and checking helpers.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memsafe/memsafe.hpp>
#if defined(__CUDACC__)
#include <memsafe/cuda.cuh>  // memsafe::cuda for MEMSAFE_TEST_DEVICE (the GPU tests nvcc compiles)
#endif
#include <numeric>
#include <optional>
#include <stdexcept>
#include <random>
#include <cstdlib>
#include <string>
#include <vector>

namespace ref {

/// n×d values ~ N(0,1) from a seed (or small integers when `integer`).
inline std::vector<double> data(std::size_t n, std::size_t d, unsigned seed, bool integer = false) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> N;
  std::uniform_int_distribution<int> U(-3, 3);
  std::vector<double> v(n * d);
  for (auto& a : v) a = integer ? U(g) : N(g);
  return v;
}
template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
/// Values as the library sees them (after rounding to T), back in double for the reference.
template <class T>
std::vector<double> seen(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = static_cast<double>(static_cast<T>(v[i]));
  return r;
}

using entry_fn = std::function<double(const double*, const double*, std::size_t)>;

/// Dense n×m reference matrix.
inline std::vector<double> dense(const std::vector<double>& x, const std::vector<double>& y, std::size_t n,
                                 std::size_t m, std::size_t d, const entry_fn& f) {
  std::vector<double> K(n * m);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) K[i * m + j] = f(&x[i * d], &y[j * d], d);
  return K;
}
/// C = A·B for row-major A (p×n) and B (n×q), with scale Σ|a·b| per entry for the tolerance.
struct product {
  std::vector<double> want, scale;
};
inline product matmul(const std::vector<double>& A, const std::vector<double>& B, std::size_t p, std::size_t n,
                      std::size_t q) {
  product r{std::vector<double>(p * q, 0), std::vector<double>(p * q, 0)};
  for (std::size_t i = 0; i < p; ++i)
    for (std::size_t j = 0; j < q; ++j)
      for (std::size_t s = 0; s < n; ++s) {
        r.want[i * q + j] += A[i * n + s] * B[s * q + j];
        r.scale[i * q + j] += std::fabs(A[i * n + s] * B[s * q + j]);
      }
  return r;
}
inline std::vector<double> transpose(const std::vector<double>& K, std::size_t n, std::size_t m) {
  std::vector<double> t(n * m);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) t[j * n + i] = K[i * m + j];
  return t;
}

// Independent entry formulas (plain loops, std:: functions, double).
inline double sq(const double* a, const double* b, std::size_t d, const double* ls = nullptr) {
  double s = 0;
  for (std::size_t k = 0; k < d; ++k) {
    double t = (a[k] - b[k]) / (ls ? ls[k] : 1.0);
    s += t * t;
  }
  return s;
}
inline double l1(const double* a, const double* b, std::size_t d) {
  double s = 0;
  for (std::size_t k = 0; k < d; ++k) s += std::fabs(a[k] - b[k]);
  return s;
}
inline double dotp(const double* a, const double* b, std::size_t d, const double* w = nullptr) {
  double s = 0;
  for (std::size_t k = 0; k < d; ++k) s += a[k] * b[k] * (w ? w[k] : 1.0);
  return s;
}
inline double cosd(const double* a, const double* b, std::size_t d) {
  double na = std::sqrt(dotp(a, a, d)), nb = std::sqrt(dotp(b, b, d));
  if (na == 0 || nb == 0) return 1.0;
  return 1.0 - dotp(a, b, d) / (na * nb);
}

/// Row reductions of a dense reference (NaN-free data).
struct ranked {
  double v;
  std::int64_t i;
};
inline std::vector<ranked> row_sorted(const std::vector<double>& K, std::size_t m, std::size_t i, bool largest) {
  std::vector<ranked> r(m);
  for (std::size_t j = 0; j < m; ++j) r[j] = {K[i * m + j], std::int64_t(j)};
  std::stable_sort(r.begin(), r.end(), [&](const ranked& a, const ranked& b) { return largest ? a.v > b.v : a.v < b.v; });
  return r;
}

template <class T>
double tol() {
  return std::is_same_v<T, float> ? 2e-4 : 1e-10;
}

/// |got − want| ≤ tol·scale for every element.
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, const std::vector<double>& scale,
                  const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t q = 0; q < got.size(); ++q) {
    const double e = std::fabs(double(got[q]) - want[q]) / (scale[q] + 1e-300);
    if (!(e <= worst)) { worst = e; at = q; }
  }
  INFO(what << ": worst relative error " << worst << " at " << at << " (got " << double(got[at]) << ", want " << want[at]
            << ")");
  CHECK(worst <= tol<T>());
}

/// Bitwise-equal outputs (NaN == NaN), for results that must not depend on the budget.
template <class T>
bool identical(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---- the backend under test ------------------------------------------------------------------
// The same test sources run on the host backend (g++) and, compiled by nvcc with
// MEMSAFE_TEST_DEVICE, on the CUDA backend with every input copied to device memory.
#if defined(MEMSAFE_TEST_DEVICE)
/// Device copies of test inputs, freed when the process ends.
struct device_arena {
  std::vector<void*> blocks;
  ~device_arena() {
    for (void* p : blocks) cudaFree(p);
  }
};
inline device_arena& arena() {
  static device_arena a;
  return a;
}
/// A device copy of v (the views the tests build then point to device memory).
template <class T>
T* on_device(std::vector<T>& v) {
  if (v.empty()) return v.data();
  void* p = nullptr;
  MEMSAFE_CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
  arena().blocks.push_back(p);
  MEMSAFE_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}
struct run_opts {
  std::size_t budget;
  unsigned threads;
};
template <class X>
auto run(const X& x, const run_opts& o) {
  return memsafe::cuda::eval(x, memsafe::cuda::options{o.budget});
}
template <class X>
std::size_t min_budget(const X& x) {
  return memsafe::cuda::plan_for(x, memsafe::cuda::options{memsafe::unlimited}).min_bytes;
}
#else
template <class T>
T* on_device(std::vector<T>& v) {
  return v.data();
}
struct run_opts {
  std::size_t budget;
  unsigned threads;
};
template <class X>
auto run(const X& x, const run_opts& o) {
  return memsafe::eval(x, memsafe::options{o.budget, o.threads});
}
template <class X>
std::size_t min_budget(const X& x) {
  return memsafe::plan_for(x, memsafe::options{memsafe::unlimited, 1}).min_bytes;
}
/// The fused kernels' smallest plan where they serve x (0 otherwise): below it the tile loop runs.
template <class X>
std::size_t fused_min_budget(const X& x) {
  return memsafe::plan_for(x, memsafe::options{memsafe::unlimited, 1}).fused_min_bytes;
}
/// Whether r ran the fused kernels (fused_min: fused_min_budget of its expression), checking that
/// it ran the form its budget calls for: the fused kernels from their smallest plan up, below it
/// the tile loop, marked portable and saying why.
template <class R>
bool ran_fused(const R& r, std::size_t fused_min) {
  const bool fused = fused_min && r.stats.budget_bytes >= fused_min;
  CHECK(r.stats.plan.fused == fused);
  if (fused_min && !fused) {
    CHECK(r.stats.plan.isa == "portable");
    CHECK(r.stats.plan.reduction.find("fused kernels' smallest plan") != std::string::npos);
  }
  return fused;
}
#endif

/// Budgets from the minimum to unlimited for an evaluable expression, with varying thread counts.
template <class X>
std::vector<run_opts> budgets(const X& x) {
  const std::size_t mn = min_budget(x);
  std::vector<run_opts> o;
  o.push_back({mn, 1});
#if !defined(MEMSAFE_TEST_DEVICE)
  // The fused kernels at their own smallest plan, where the tile loop's is smaller (and runs at mn).
  if (const std::size_t f = fused_min_budget(x); f > mn) o.push_back({f, 1});
#endif
  o.push_back({mn + mn / 2 + 97, 2});
  o.push_back({mn * 5, 3});
  o.push_back({mn * 40, 2});
  o.push_back({memsafe::unlimited, 3});
  o.push_back({memsafe::unlimited, 1});
  return o;
}

/// Evaluate at every budget; assert peak ≤ budget; return all results.
template <class X>
auto eval_all(const X& x) {
  std::vector<memsafe::result<typename X::value_type>> rs;
  for (const auto& o : budgets(x)) {
    auto r = run(x, o);
    INFO(x.str() << " budget " << o.budget << " threads " << o.threads);
    CHECK(r.stats.peak_temp_bytes <= o.budget);
    CHECK(r.stats.peak_temp_bytes <= r.stats.planned_temp_bytes);
    rs.push_back(std::move(r));
  }
  return rs;
}

/// Sets (or, with null, unsets) an environment variable for a scope (MEMSAFE_ISA, MEMSAFE_KERNELS).
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~scoped_env() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Runs f, which must throw exactly Ex (checked by type); returns the message ("" if nothing thrown).
template <class Ex, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Ex& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a different exception: " << e.what());
    return {};
  }
  FAIL_CHECK("did not throw");
  return {};
}
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace ref
