// memsafe_bench — one benchmark measurement per process, printed as ONE JSON line on stdout.
//
//   memsafe_bench knn    --impl memsafe|faiss|naive --data random|mnist --n N --m M --d D --k 10
//                        --metric l2|l1|cosine --precision f32|f64 --budget 64MiB --threads 2 --reps 3
//   memsafe_bench matvec --impl memsafe|naive --n N --d D --precision f32|f64 --budget 64MiB
//                        --threads 2 --reps 3 --lengthscale 1 [--cols C] [--grad 1]
//
// knn: for each of m queries the k nearest of n database points (ascending distance).
//   memsafe  argkmin(sqdist|l1|cosine(Q, X), k), evaluated in tiles within --budget;
//   faiss    exact search with IndexFlatL2 / IndexFlat(METRIC_L1) / IndexFlatIP on unit-normalised
//            copies (cosine distance = 1 - ip); float only; add() is reported as setup_s; the
//            process re-executes itself once with OMP_WAIT_POLICY=PASSIVE unless that is set
//            (see faiss_wait_policy);
//   naive    the full m×n distance matrix (l2: one GEMM for -2·Q·Xᵀ plus the norms, clamped at 0;
//            l1 and cosine: loops over queries on --threads threads), then nth_element per row.
// matvec: y = K(X, X) v with the RBF kernel exp(-‖x - y‖² / (2ℓ²)); with --cols C > 1, Y = K(X, X) V
// for an n×C matrix V (K·M).
//   memsafe  rbf(X, X, ℓ) * v (or * V) within --budget;
//   naive    the full n×n K filled on --threads threads, then one GEMV (GEMM for C > 1).
// matvec --grad 1: instead of y, the vector-Jacobian product of y = K(X, X')·v with respect to its
// row points, ∂⟨ḡ, y⟩/∂x_i = Σ_j ḡ_i v_j ∂k(x_i, x'_j)/∂x_i (an n×d matrix; X' a copy of X, so only
// the row side is differentiated, as KeOps' Grad(…, x, e) does; ḡ from stream 2).
//   memsafe  grad(vjp(rbf(X, X', ℓ) * v, ḡ, wrt(X))) within --budget; naive: unsupported.
//
// Data: random X = N(0,1) n×d (seed, stream 0), queries / v from stream 1 (examples/common/data.hpp,
// so separate processes see the same numbers); mnist: the training images as X, the test images as
// queries, pixels / 255 (examples/common/mnist.hpp; --n / --m take the first images).
//
// The timed part is repeated --reps times (after one untimed run with --warmup 1); the JSON line
// carries min, median and every time. The naive code checks the bytes it needs against --mem-limit
// before allocating and reports "oom" (also on std::bad_alloc, e.g. under `ulimit -v`).
// --dump PATH writes the last repetition's result for cross-checking implementations:
// knn -> the first min(m, 2000) rows of indices as int64 (row-major, k per row);
// matvec -> the first min(n, 2000) entries of y (rows of Y, row-major) as float64 (both little-endian, no header);
// with --grad 1 the first min(n, 2000) rows of the n×d gradient, row-major, as float64.
//
// Exit status: 0 for status ok / oom / unsupported / unavailable / budget_too_small, 1 for error,
// 2 for a command line the shared parser rejects (message on stderr, no JSON line).
// Diagnostics go to stderr. See bench/README.md for every field.
#include <memsafe/grad.hpp>
#include <memsafe/memsafe.hpp>
#include <memsafe/linalg/fortran.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(MEMSAFE_BENCH_HAS_FAISS)
#include <faiss/IndexFlat.h>
#include <faiss/MetricType.h>
#endif
#if defined(MEMSAFE_BENCH_HAS_OPENMP)
#include <omp.h>
#endif
#include <unistd.h>  // execv

#include "common/cli.hpp"
#include "common/data.hpp"
#include "common/mnist.hpp"
#include "common/rss.hpp"
#include "common/json.hpp"
#include "common/knn_data.hpp"

#include "bench_common.hpp"  // what memsafe_bench_cuda shares with this program

#if defined(MEMSAFE_HAS_LAPACK)
// Level-2 BLAS for the naive matvec (Fortran-77 ABI as in memsafe/linalg/fortran.hpp).
extern "C" {
void dgemv_(const char* trans, const int* m, const int* n, const double* alpha, const double* a, const int* lda,
            const double* x, const int* incx, const double* beta, double* y, const int* incy, std::size_t trans_len);
void sgemv_(const char* trans, const int* m, const int* n, const float* alpha, const float* a, const int* lda,
            const float* x, const int* incx, const float* beta, float* y, const int* incy, std::size_t trans_len);
}
#endif

namespace {

namespace mx = memsafe_examples;
namespace bc = memsafe_bench_common;

// ---- configuration and the measurement row ---------------------------------------------------

struct config {
  std::string bench, impl, data, metric, precision, data_dir, dump;
  std::size_t n = 0, m = 0, d = 0, k = 0;
  bool n_given = false, m_given = false;
  std::size_t budget = 0, mem_limit = 0, reps = 1;
  unsigned threads = 0;  // as given; 0 = all cores
  bool warmup = false;
  std::uint64_t seed = 42;
  double lengthscale = 1;
  std::size_t cols = 1;  // matvec: right-hand columns (1: K·v, more: K·M)
  bool grad = false;      // matvec: the VJP with respect to the row points instead of the product
  double offset = 0;  // knn, random data: added to every coordinate of X and the queries

  // Threads for the FAISS and naive code (memsafe resolves its own 0).
  unsigned resolved_threads() const {
    if (threads > 0) return threads;
    const unsigned hc = std::thread::hardware_concurrency();
    return hc > 0 ? hc : 1;
  }
};

// Everything the JSON line reports; unset optionals are left out of the line.
struct row {
  std::string status = "error", message;
  std::optional<std::size_t> n, m, d, k, threads, budget_bytes;
  std::optional<std::size_t> peak_temp_bytes, min_budget_bytes, needed_bytes, input_bytes;
  std::optional<std::size_t> tile_rows, tile_cols;
  std::optional<double> setup_s;
  std::vector<double> times;
  std::string isa;  // memsafe: the instruction set of the host kernels that ran (tile_plan::isa)
  std::string screen;  // memsafe: the fused selection's screening precision (tile_plan::screen)
  bool symmetric = false;  // memsafe: the symmetric form of k(X, X)·v ran (each pair once)
};

// How this program was compiled (MEMSAFE_BENCH_BUILD from CMake: "native" for -march=native,
// "default" for the plain -O2 of memsafe_bench_default), and the instruction set it targets.
#if !defined(MEMSAFE_BENCH_BUILD)
#define MEMSAFE_BENCH_BUILD "unknown"
#endif
#if defined(__AVX512F__)
constexpr const char* compiled_target = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* compiled_target = "avx2";
#else
constexpr const char* compiled_target = "baseline";
#endif

// Thrown by the naive code when it cannot have its matrix; carries the bytes it needed.
struct oom_error : std::runtime_error {
  std::size_t needed;
  oom_error(const std::string& what, std::size_t bytes) : std::runtime_error(what), needed(bytes) {}
};

void print_row(const config& c, const row& r) {
  memsafe_examples::json_line j;
  j.add("bench", c.bench).add("impl", c.impl).add("data", c.data).add("metric", c.metric);
  bc::add_sizes(j, r);
  j.add("precision", c.precision);
  if (c.offset != 0) j.add("offset", c.offset);
  j.add("threads", r.threads ? *r.threads : std::size_t{c.resolved_threads()});
  if (r.budget_bytes) j.add("budget_bytes", *r.budget_bytes);
  j.add("reps", c.reps);
  if (!r.times.empty()) bc::add_rates(j, c.bench, r.n, r.m, bc::add_times(j, r.times));
  if (r.peak_temp_bytes) j.add("peak_temp_bytes", *r.peak_temp_bytes);
  if (r.min_budget_bytes) j.add("min_budget_bytes", *r.min_budget_bytes);
  if (r.needed_bytes) j.add("needed_bytes", *r.needed_bytes);
  j.add("max_rss_bytes", mx::max_rss_bytes());
  if (r.input_bytes) j.add("input_bytes", *r.input_bytes);
  if (r.setup_s) j.add("setup_s", *r.setup_s);
  j.add("status", r.status);
  if (r.status != "ok") j.add("message", r.message);
  j.add("cpu", bc::cpu_model()).add("cores", std::thread::hardware_concurrency());
  if (r.tile_rows) j.add("tile_rows", *r.tile_rows);
  if (r.tile_cols) j.add("tile_cols", *r.tile_cols);
  if (!r.isa.empty()) j.add("isa", r.isa);
  if (!r.screen.empty()) j.add("screen", r.screen);
  if (c.impl == "memsafe" && c.bench == "matvec") j.add("symmetric", r.symmetric);
  if (c.bench == "matvec") j.add("cols", c.cols).add("grad", c.grad);
  j.add("build", MEMSAFE_BENCH_BUILD).add("compiled_target", compiled_target);
#if defined(MEMSAFE_BENCH_HAS_FAISS)
  if (c.impl == "faiss") {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    j.add("omp_wait_policy", policy != nullptr ? policy : "default");
  }
#endif
  j.print();
}

// a * b, or nullopt when it overflows size_t.
std::optional<std::size_t> checked_mul(std::size_t a, std::size_t b) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return std::nullopt;
  return a * b;
}

std::size_t checked_bytes(std::initializer_list<std::size_t> factors, const char* what) {
  std::size_t p = 1;
  for (std::size_t f : factors) {
    auto q = checked_mul(p, f);
    if (!q) throw oom_error(std::string(what) + " needs more than 2^64 bytes", std::numeric_limits<std::size_t>::max());
    p = *q;
  }
  return p;
}

// ---- timing ------------------------------------------------------------------------------------

// Runs `once` --reps times (after one untimed run with --warmup 1), appending each time to r.times.
template <class F>
void timed_reps(const config& c, row& r, F&& once) {
  if (c.warmup) once();
  for (std::size_t rep = 0; rep < c.reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    const auto t1 = std::chrono::steady_clock::now();
    r.times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
}

// f(begin, end) over [0, count) split into `threads` contiguous blocks; the calling thread takes
// the first block. An exception from any block is rethrown after all have finished.
template <class F>
void parallel_blocks(unsigned threads, std::size_t count, F&& f) {
  const std::size_t t = std::max<std::size_t>(1, std::min<std::size_t>(threads, count));
  if (t == 1) {
    f(std::size_t{0}, count);
    return;
  }
  std::vector<std::exception_ptr> errors(t);
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  auto block = [&](std::size_t b) {
    try {
      f(b * count / t, (b + 1) * count / t);
    } catch (...) {
      errors[b] = std::current_exception();
    }
  };
  for (std::size_t b = 1; b < t; ++b) pool.emplace_back(block, b);
  block(0);
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The plan fields of a memsafe row; `peak` is the largest peak over the repetitions.
void record_plan(row& r, const memsafe::eval_stats& st, std::size_t peak) {
  bc::record_plan(r, st, peak);
  r.threads = st.threads;
  r.isa = st.plan.isa;
  r.screen = st.plan.screen;
  r.symmetric = st.plan.symmetric;
}

// ---- knn data ----------------------------------------------------------------------------------

template <class T>
using knn_data = mx::knn_data<T>;

// The same data as examples/knn.cpp for the same options.
template <class T>
knn_data<T> make_knn_data(const config& c) {
  knn_data<T> ds = mx::load_knn_data<T>(c.data, c.n, c.m, c.d, c.n_given, c.m_given, c.seed, c.data_dir);
  if (c.offset != 0) {  // data far from the origin (distances do not change; rounding does)
    for (T& v : ds.X) v += static_cast<T>(c.offset);
    for (T& v : ds.Q) v += static_cast<T>(c.offset);
  }
  return ds;
}

// n, m, d of a knn run without loading the data (for rows that stop before loading it).
void knn_nominal_sizes(const config& c, row& r) {
  r.k = c.k;
  if (c.data == "random") {
    r.n = c.n;
    r.m = c.m;
    r.d = c.d;
    return;
  }
  try {  // limit 0: reads only the IDX headers
    auto train = mx::load_mnist_images<float>(mx::mnist_file(c.data_dir, mx::mnist_train_images), 0);
    auto test = mx::load_mnist_images<float>(mx::mnist_file(c.data_dir, mx::mnist_test_images), 0);
    r.n = c.n_given ? std::min(c.n, train.count_in_file) : train.count_in_file;
    r.m = c.m_given ? std::min(c.m, test.count_in_file) : test.count_in_file;
    r.d = train.dim();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memsafe_bench: note: cannot read the MNIST headers: %s\n", e.what());
  }
}

// ---- knn: memsafe --------------------------------------------------------------------------------

template <class T>
std::vector<memsafe::index_t> knn_memsafe(const config& c, const knn_data<T>& ds, row& r) {
  const std::size_t n = ds.n, m = ds.m, d = ds.d, k = c.k;
  const auto Xv = memsafe::points(ds.X.data(), n, d);
  const auto Qv = memsafe::points(ds.Q.data(), m, d);
  const memsafe::options opts{c.budget, c.threads};
  r.budget_bytes = c.budget;

  memsafe::result<T> res;
  std::size_t peak = 0;
  auto measure = [&](const auto& expr) {
    timed_reps(c, r, [&] {
      res = memsafe::eval(expr, opts);
      peak = std::max(peak, res.stats.peak_temp_bytes);
    });
  };
  if (c.metric == "l2") measure(memsafe::argkmin(memsafe::sqdist(Qv, Xv), k));
  else if (c.metric == "l1") measure(memsafe::argkmin(memsafe::l1(Qv, Xv), k));
  else measure(memsafe::argkmin(memsafe::cosine(Qv, Xv), k));

  if (res.rows != m || res.cols != k || res.indices.size() != m * k)
    throw std::runtime_error("memsafe returned a " + std::to_string(res.rows) + "x" + std::to_string(res.cols) +
                             " result with " + std::to_string(res.indices.size()) + " indices for " +
                             std::to_string(m) + " queries and k = " + std::to_string(k));
  record_plan(r, res.stats, peak);
  return std::move(res.indices);
}

// ---- knn: FAISS ----------------------------------------------------------------------------------

#if defined(MEMSAFE_BENCH_HAS_FAISS)
// FAISS's own loops use OpenMP; its exhaustive L2/IP search calls sgemm_ (OpenBLAS threads).
void set_threads_for_libraries(unsigned threads) {
  memsafe::linalg::set_blas_threads(static_cast<int>(threads));  // no effect without OpenBLAS
#if defined(MEMSAFE_BENCH_HAS_OPENMP)
  omp_set_num_threads(static_cast<int>(threads));
#endif
}

// Rows scaled to unit Euclidean length (zero rows stay zero: cosine similarity 0, as in memsafe).
void normalise_rows(const float* in, float* out, std::size_t rows, std::size_t d) {
  for (std::size_t i = 0; i < rows; ++i) {
    double s = 0;
    for (std::size_t t = 0; t < d; ++t) s += static_cast<double>(in[i * d + t]) * in[i * d + t];
    const float inv = s > 0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.0f;
    for (std::size_t t = 0; t < d; ++t) out[i * d + t] = in[i * d + t] * inv;
  }
}

std::vector<std::int64_t> knn_faiss(const config& c, const knn_data<float>& ds, row& r) {
  const std::size_t n = ds.n, m = ds.m, d = ds.d, k = c.k;
  const unsigned threads = c.resolved_threads();
  set_threads_for_libraries(threads);
  r.threads = threads;
  using idx_t = faiss::Index::idx_t;
  const bool cosine = c.metric == "cosine";

  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<faiss::IndexFlat> index;
  if (c.metric == "l2") index = std::make_unique<faiss::IndexFlatL2>(static_cast<idx_t>(d));
  else if (c.metric == "l1") index = std::make_unique<faiss::IndexFlat>(static_cast<idx_t>(d), faiss::METRIC_L1);
  else index = std::make_unique<faiss::IndexFlatIP>(static_cast<idx_t>(d));
  if (cosine) {
    std::vector<float> Xn(n * d);
    normalise_rows(ds.X.data(), Xn.data(), n, d);
    index->add(static_cast<idx_t>(n), Xn.data());  // the index keeps its own copy
  } else {
    index->add(static_cast<idx_t>(n), ds.X.data());
  }
  r.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<float> distances(m * k), Qn(cosine ? m * d : 0);
  std::vector<idx_t> labels(m * k);
  timed_reps(c, r, [&] {
    const float* q = ds.Q.data();
    if (cosine) {  // normalising the queries is part of each search
      normalise_rows(ds.Q.data(), Qn.data(), m, d);
      q = Qn.data();
    }
    index->search(static_cast<idx_t>(m), q, static_cast<idx_t>(k), distances.data(), labels.data());
  });
  return std::vector<std::int64_t>(labels.begin(), labels.end());
}
#endif

// ---- knn: naive ----------------------------------------------------------------------------------

template <class T>
std::vector<std::int64_t> knn_naive(const config& c, const knn_data<T>& ds, row& r) {
  const std::size_t n = ds.n, m = ds.m, d = ds.d, k = c.k;
  const unsigned threads = c.resolved_threads();
  r.threads = threads;
  const bool need_norms = c.metric != "l1";
  const std::size_t sel_threads = std::max<std::size_t>(1, std::min<std::size_t>(threads, m));

  // Temporaries: the m×n matrix, one index array of n per selecting thread, the norms.
  const std::size_t matrix_bytes = checked_bytes({m, n, sizeof(T)}, "the m x n distance matrix");
  const std::size_t sel_bytes = checked_bytes({sel_threads, n, sizeof(std::int64_t)}, "the selection buffers");
  const std::size_t norm_bytes = need_norms ? (n + m) * sizeof(T) : 0;
  std::size_t needed = matrix_bytes;
  for (std::size_t b : {sel_bytes, norm_bytes}) {
    if (needed > std::numeric_limits<std::size_t>::max() - b)
      throw oom_error("the naive knn needs more than 2^64 bytes", std::numeric_limits<std::size_t>::max());
    needed += b;
  }
  r.needed_bytes = needed;
  r.peak_temp_bytes = needed;
  if (needed > c.mem_limit)
    throw oom_error("the naive knn needs " + memsafe::format_bytes(needed) + " (the " + std::to_string(m) + " x " +
                        std::to_string(n) + " distance matrix is " + memsafe::format_bytes(matrix_bytes) +
                        "), more than --mem-limit " + memsafe::format_bytes(c.mem_limit) + "; nothing was allocated",
                    needed);

  std::vector<std::int64_t> out(m * k);
  const T* X = ds.X.data();
  const T* Q = ds.Q.data();

  timed_reps(c, r, [&] {
    std::unique_ptr<T[]> D(new T[m * n]);  // uninitialised: first touched by the fill
    std::vector<T> xn(need_norms ? n : 0), qn(need_norms ? m : 0);
    if (need_norms) {
      auto norms = [d](const T* A, T* out_norm, std::size_t b, std::size_t e, bool squared) {
        for (std::size_t i = b; i < e; ++i) {
          T s = 0;
          for (std::size_t t = 0; t < d; ++t) s += A[i * d + t] * A[i * d + t];
          out_norm[i] = squared ? s : std::sqrt(s);
        }
      };
      const bool sq = c.metric == "l2";
      parallel_blocks(threads, n, [&](std::size_t b, std::size_t e) { norms(X, xn.data(), b, e, sq); });
      parallel_blocks(threads, m, [&](std::size_t b, std::size_t e) { norms(Q, qn.data(), b, e, sq); });
    }

    // ---- materialise D (m×n, row-major) ----
    // D(i, j) = pair(i, j, q_i, x_j) for every query row, rows split over the threads.
    auto fill = [&](auto pair) {
      parallel_blocks(threads, m, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
          T* Di = D.get() + i * n;
          for (std::size_t j = 0; j < n; ++j) Di[j] = pair(i, j, Q + i * d, X + j * d);
        }
      });
    };
    if (c.metric == "l2") {
      bool done = false;
#if defined(MEMSAFE_HAS_LAPACK)
      constexpr std::size_t int_max = static_cast<std::size_t>(std::numeric_limits<int>::max());
      if (n <= int_max && m <= int_max && d <= int_max) {
        // Row-major D (m×n) is column-major Dᵀ (n×m) = X · Qᵀ; row-major X (n×d) is column-major Xᵀ.
        memsafe::linalg::set_blas_threads(static_cast<int>(threads));
        const int N = static_cast<int>(n), M = static_cast<int>(m), K = static_cast<int>(d);
        const T alpha = -2, beta = 0;
        if constexpr (std::is_same_v<T, float>)
          sgemm_("T", "N", &N, &M, &K, &alpha, X, &K, Q, &K, &beta, D.get(), &N, 1, 1);
        else
          dgemm_("T", "N", &N, &M, &K, &alpha, X, &K, Q, &K, &beta, D.get(), &N, 1, 1);
        parallel_blocks(threads, m, [&](std::size_t b, std::size_t e) {
          for (std::size_t i = b; i < e; ++i) {
            T* Di = D.get() + i * n;
            for (std::size_t j = 0; j < n; ++j) Di[j] = std::max(T(0), qn[i] + xn[j] + Di[j]);
          }
        });
        done = true;
      }
#endif
      if (!done)
        fill([&](std::size_t i, std::size_t j, const T* q, const T* x) {
          T s = 0;
          for (std::size_t t = 0; t < d; ++t) s += q[t] * x[t];
          return std::max(T(0), qn[i] + xn[j] - 2 * s);
        });
    } else if (c.metric == "l1") {
      fill([&](std::size_t, std::size_t, const T* q, const T* x) {
        T s = 0;
        for (std::size_t t = 0; t < d; ++t) s += std::abs(q[t] - x[t]);
        return s;
      });
    } else {  // cosine distance 1 - q·x / (‖q‖‖x‖); a zero vector has similarity 0
      fill([&](std::size_t i, std::size_t j, const T* q, const T* x) {
        T s = 0;
        for (std::size_t t = 0; t < d; ++t) s += q[t] * x[t];
        const T den = qn[i] * xn[j];
        return den > 0 ? T(1) - s / den : T(1);
      });
    }

    // ---- reduce: the k smallest of every row, ascending (ties by index) ----
    parallel_blocks(threads, m, [&](std::size_t b, std::size_t e) {
      std::vector<std::int64_t> idx(n);
      for (std::size_t i = b; i < e; ++i) {
        const T* Di = D.get() + i * n;
        std::iota(idx.begin(), idx.end(), std::int64_t{0});
        auto less = [Di](std::int64_t a, std::int64_t bb) { return Di[a] < Di[bb] || (Di[a] == Di[bb] && a < bb); };
        const auto kth = idx.begin() + static_cast<std::ptrdiff_t>(k);
        if (k < n) std::nth_element(idx.begin(), kth, idx.end(), less);
        std::sort(idx.begin(), kth, less);
        std::copy(idx.begin(), kth, out.begin() + static_cast<std::ptrdiff_t>(i * k));
      }
    });
  });
  return out;
}

// ---- knn driver ----------------------------------------------------------------------------------

template <class T>
void run_knn(const config& c, row& r) {
  if (c.impl == "faiss") {
#if !defined(MEMSAFE_BENCH_HAS_FAISS)
    knn_nominal_sizes(c, r);
    r.status = "unavailable";
    r.message = "memsafe_bench was built without FAISS (install libfaiss-dev and re-run CMake)";
    return;
#else
    if constexpr (!std::is_same_v<T, float>) {
      knn_nominal_sizes(c, r);
      r.status = "unsupported";
      r.message = "FAISS searches float vectors only; use --precision f32";
      return;
    }
#endif
  }

  const knn_data<T> ds = make_knn_data<T>(c);
  r.n = ds.n;
  r.m = ds.m;
  r.d = ds.d;
  r.k = c.k;
  r.input_bytes = (ds.n + ds.m) * ds.d * sizeof(T);
  if (c.k > ds.n)
    throw std::invalid_argument("--k " + std::to_string(c.k) + " exceeds the database size n = " + std::to_string(ds.n));

  std::vector<std::int64_t> indices;
  if (c.impl == "memsafe") {
    auto idx = knn_memsafe<T>(c, ds, r);
    indices.assign(idx.begin(), idx.end());
  } else if (c.impl == "naive") {
    indices = knn_naive<T>(c, ds, r);
  } else {
#if defined(MEMSAFE_BENCH_HAS_FAISS)
    if constexpr (std::is_same_v<T, float>) indices = knn_faiss(c, ds, r);
#endif
  }
  if (!c.dump.empty()) bc::dump_indices(c.dump, indices.data(), ds.m, c.k, "--dump: ");
  r.status = "ok";
}

// ---- matvec --------------------------------------------------------------------------------------

template <class T>
std::vector<T> matvec_memsafe(const config& c, const std::vector<T>& X, const std::vector<T>& v, row& r) {
  const std::size_t n = c.n, d = c.d;
  const auto Xv = memsafe::points(X.data(), n, d);
  const memsafe::options opts{c.budget, c.threads};
  r.budget_bytes = c.budget;
  const auto K = memsafe::rbf(Xv, Xv, c.lengthscale);

  memsafe::result<T> res;
  std::size_t peak = 0;
  timed_reps(c, r, [&] {
    res = c.cols == 1 ? memsafe::eval(K * memsafe::vec(v.data(), n), opts)
                      : memsafe::eval(K * memsafe::matrix(v.data(), n, c.cols), opts);
    peak = std::max(peak, res.stats.peak_temp_bytes);
  });
  if (res.rows != n || res.cols != c.cols || res.values.size() != n * c.cols)
    throw std::runtime_error("memsafe returned a " + std::to_string(res.rows) + "x" + std::to_string(res.cols) +
                             " result for an " + std::to_string(n) + "x" + std::to_string(c.cols) + " product");
  record_plan(r, res.stats, peak);
  return std::move(res.values);
}

// The VJP of K(X, X')·v with respect to X (see the header): n×d values, row-major.
template <class T>
std::vector<T> matvec_grad_memsafe(const config& c, const std::vector<T>& X, const std::vector<T>& v, row& r) {
  const std::size_t n = c.n, d = c.d;
  const std::vector<T> Xc = X, g = mx::normal_matrix<T>(n, 1, c.seed, 2);
  const auto Xv = memsafe::points(X.data(), n, d), Xcv = memsafe::points(Xc.data(), n, d);
  const memsafe::options opts{c.budget, c.threads};
  r.budget_bytes = c.budget;
  auto b = memsafe::vjp(memsafe::rbf(Xv, Xcv, c.lengthscale) * memsafe::vec(v.data(), n), memsafe::vec(g.data(), n),
                        memsafe::wrt(Xv));
  std::vector<T> out;
  std::size_t peak = 0;
  timed_reps(c, r, [&] {
    auto gr = memsafe::grad(b, opts);
    peak = std::max(peak, gr.stats.peak_temp_bytes);
    out = gr.of(Xv);
    r.min_budget_bytes = gr.stats.min_budget_bytes;
    r.threads = gr.stats.threads;
  });
  if (out.size() != n * d) throw std::runtime_error("memsafe returned a gradient of the wrong size");
  r.peak_temp_bytes = peak;
  return out;
}

template <class T>
std::vector<T> matvec_naive(const config& c, const std::vector<T>& Xs, const std::vector<T>& v, row& r) {
  const std::size_t n = c.n, d = c.d;
  const unsigned threads = c.resolved_threads();
  r.threads = threads;
  const std::size_t matrix_bytes = checked_bytes({n, n, sizeof(T)}, "the n x n kernel matrix");
  r.needed_bytes = matrix_bytes;
  r.peak_temp_bytes = matrix_bytes;
  if (matrix_bytes > c.mem_limit)
    throw oom_error("the naive matvec needs the " + std::to_string(n) + " x " + std::to_string(n) +
                        " kernel matrix, " + memsafe::format_bytes(matrix_bytes) + ", more than --mem-limit " +
                        memsafe::format_bytes(c.mem_limit) + "; nothing was allocated",
                    matrix_bytes);

  const T* X = Xs.data();
  const T scale = static_cast<T>(1.0 / (2.0 * c.lengthscale * c.lengthscale));
  const std::size_t nc = c.cols;
  std::vector<T> y(n * nc);
  timed_reps(c, r, [&] {
    std::unique_ptr<T[]> K(new T[n * n]);  // uninitialised: first touched by the fill
    parallel_blocks(threads, n, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        const T* xi = X + i * d;
        T* Ki = K.get() + i * n;
        for (std::size_t j = 0; j < n; ++j) {
          const T* xj = X + j * d;
          T r2 = 0;
          for (std::size_t t = 0; t < d; ++t) {
            const T diff = xi[t] - xj[t];
            r2 += diff * diff;
          }
          Ki[j] = std::exp(-r2 * scale);
        }
      }
    });
    bool done = false;
#if defined(MEMSAFE_HAS_LAPACK)
    if (n <= static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      // Row-major K is column-major Kᵀ; K symmetric or not, y = K v is GEMV with trans = 'T'.
      memsafe::linalg::set_blas_threads(static_cast<int>(threads));
      const int N = static_cast<int>(n), inc = 1, C = static_cast<int>(nc);
      const T one = 1, zero = 0;
      if (nc == 1) {
        if constexpr (std::is_same_v<T, float>)
          sgemv_("T", &N, &N, &one, K.get(), &N, v.data(), &inc, &zero, y.data(), &inc, 1);
        else
          dgemv_("T", &N, &N, &one, K.get(), &N, v.data(), &inc, &zero, y.data(), &inc, 1);
      } else {  // row-major Y = K V is column-major Yᵀ = Vᵀ Kᵀ (C × n)
        if constexpr (std::is_same_v<T, float>)
          sgemm_("N", "N", &C, &N, &N, &one, v.data(), &C, K.get(), &N, &zero, y.data(), &C, 1, 1);
        else
          dgemm_("N", "N", &C, &N, &N, &one, v.data(), &C, K.get(), &N, &zero, y.data(), &C, 1, 1);
      }
      done = true;
    }
#endif
    if (!done)
      parallel_blocks(threads, n, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
          const T* Ki = K.get() + i * n;
          for (std::size_t q = 0; q < nc; ++q) {
            T s = 0;
            for (std::size_t j = 0; j < n; ++j) s += Ki[j] * v[j * nc + q];
            y[i * nc + q] = s;
          }
        }
      });
  });
  return y;
}

template <class T>
void run_matvec(const config& c, row& r) {
  r.n = c.n;
  r.m = c.n;
  r.d = c.d;
  r.k = 0;
  const std::vector<T> X = mx::normal_matrix<T>(c.n, c.d, c.seed, 0);
  const std::vector<T> v = mx::normal_matrix<T>(c.n, c.cols, c.seed, 1);
  r.input_bytes = (c.n * c.d + c.n * c.cols) * sizeof(T);

  if (c.grad && c.impl != "memsafe") {
    bc::fail_row(r, "unsupported", "--grad 1: the naive matvec has no gradient");
    return;
  }
  const std::vector<T> y = c.grad                ? matvec_grad_memsafe<T>(c, X, v, r)
                           : c.impl == "memsafe" ? matvec_memsafe<T>(c, X, v, r)
                                                 : matvec_naive<T>(c, X, v, r);
  if (!c.dump.empty()) bc::dump_values(c.dump, y, "--dump: ");
  r.status = "ok";
}

// FAISS (CPU) alternates OpenBLAS calls with OpenMP parallel regions. With Debian's pthread build
// of OpenBLAS, libgomp's default of spin-waiting between regions keeps the OpenMP threads busy
// while OpenBLAS's own threads need the cores: searches ran 3-10x slower on 2 cores than with
// OMP_WAIT_POLICY=PASSIVE. libgomp reads the variable only when it is loaded, so a FAISS run
// re-executes itself once with OMP_WAIT_POLICY=PASSIVE unless the variable is already set (any
// value given by the caller is kept). The policy in force is reported as "omp_wait_policy".
void faiss_wait_policy([[maybe_unused]] char** argv) {
#if defined(MEMSAFE_BENCH_HAS_FAISS)
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "memsafe_bench: note: could not re-execute with OMP_WAIT_POLICY=PASSIVE; "
                       "FAISS runs with libgomp's default wait policy\n");
  unsetenv("OMP_WAIT_POLICY");
#endif
}

// ---- command line --------------------------------------------------------------------------------

void print_usage(std::FILE* f) {
  std::fputs(
      "usage: memsafe_bench knn|matvec [options]   (memsafe_bench knn --help lists the options)\n"
      "  knn     k nearest neighbours: --impl memsafe|faiss|naive --data random|mnist --metric l2|l1|cosine\n"
      "  matvec  RBF kernel matrix times a vector: --impl memsafe|naive\n"
      "Prints one JSON line on stdout per run.\n",
      f);
}

std::size_t parse_size_option(const mx::cli& args, const char* name) {
  return bc::parse_size_option(args, name, "64MiB, 20GiB or 4096");
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto rc = bc::reject_subcommand(argc, argv, print_usage)) return *rc;
  config c;
  c.bench = argv[1];
  const bool knn = c.bench == "knn";

  mx::cli args("memsafe_bench " + c.bench, knn ? "One k-nearest-neighbour measurement, printed as one JSON line."
                                               : "One RBF kernel matvec measurement, printed as one JSON line.");
  args.option("impl", "memsafe", knn ? "memsafe|faiss|naive" : "memsafe|naive");
  if (knn)
    args.option("data", "random", "random|mnist (mnist: database = training images, queries = test images)")
        .option("n", "100000", "database size (mnist: limits the training images used)")
        .option("m", "1000", "number of queries (mnist: limits the test images used)")
        .option("d", "3", "dimension (random only; mnist has 784)")
        .option("k", "10", "neighbours per query")
        .option("offset", "0", "random only: add this constant to every coordinate (data far from the origin)")
        .option("metric", "l2", "l2|l1|cosine")
        .option("data-dir", "", "folder holding the MNIST IDX .gz files (default: $MEMSAFE_DATA_DIR/mnist, "
                                "else the build's shared data folder)");
  else {
    bc::add_matvec_options(args);
    args.option("cols", "1", "right-hand columns: 1 for K·v, more for K·M with an n x C matrix")
        .option("grad", "0", "1: time the gradient of <g, K(X, X')·v> with respect to X instead of the product");
  }
  args.option("precision", "f32", "f32|f64")
      .option("budget", "64MiB", "memsafe's temporary-memory budget, e.g. 64MiB, 1GB, 4096")
      .option("threads", "0", "threads for every implementation (0 = all cores)")
      .option("reps", "3", "timed repetitions")
      .option("warmup", "0", "1: one untimed run before the timed ones")
      .option("seed", "42", "random seed for random data")
      .option("mem-limit", "20GiB", "naive: report oom, without allocating, when its temporaries would exceed this")
      .option("dump", "", "write the last repetition's result (first 2000 rows) to this binary file");
  args.parse(argc - 1, argv + 1);

  c.impl = knn ? args.get_choice("impl", {"memsafe", "faiss", "naive"}) : args.get_choice("impl", {"memsafe", "naive"});
  c.n = args.get_uint("n");
  c.d = args.get_uint("d");
  c.n_given = args.given("n");
  if (knn) {
    c.data = args.get_choice("data", {"random", "mnist"});
    c.m = args.get_uint("m");
    c.m_given = args.given("m");
    c.k = args.get_uint("k");
    c.metric = args.get_choice("metric", {"l2", "l1", "cosine"});
    c.data_dir = args.get_string("data-dir", mx::default_mnist_dir());
    c.offset = args.get_double("offset");
    if (!std::isfinite(c.offset)) args.fail("--offset must be finite");
    if (c.data == "mnist" && c.offset != 0) args.fail("--offset applies to random data only");
  } else {
    c.data = "random";
    c.metric = "rbf";
    c.m = c.n;
    c.lengthscale = args.get_double("lengthscale");
    c.cols = args.get_uint("cols");
    if (c.cols == 0 || c.cols > 4096) args.fail("--cols must be between 1 and 4096");
    c.grad = args.get_uint("grad") != 0;
    if (c.grad && c.cols != 1) args.fail("--grad 1 takes --cols 1");
  }
  c.precision = args.get_choice("precision", {"f32", "f64"});
  c.budget = parse_size_option(args, "budget");
  c.mem_limit = parse_size_option(args, "mem-limit");
  const std::uint64_t threads = args.get_uint("threads");
  if (threads > 4096) args.fail("--threads must be at most 4096");
  c.threads = static_cast<unsigned>(threads);
  c.reps = args.get_uint("reps");
  c.warmup = args.get_uint("warmup") != 0;
  c.seed = args.get_uint("seed");
  c.dump = args.get_string("dump");

  if (c.reps == 0) args.fail("--reps must be at least 1");
  if (c.n == 0) args.fail("--n must be positive");
  if (knn) {
    if (c.m == 0) args.fail("--m must be positive");
    if (c.k == 0) args.fail("--k must be positive");
    if (c.data == "random" && c.k > c.n) args.fail("--k must not exceed --n");
    if (c.data == "mnist" && args.given("d")) std::fprintf(stderr, "memsafe_bench: note: --d is ignored with --data mnist\n");
  } else if (!(c.lengthscale > 0)) {
    args.fail("--lengthscale must be positive");
  }
  if (c.data == "random") {
    if (c.d == 0) args.fail("--d must be positive");
    if (c.n > (std::size_t{1} << 32) || c.m > (std::size_t{1} << 32)) args.fail("--n / --m too large");
    if (!checked_mul(c.n, c.d) || !checked_mul(c.m, c.d) || c.n * c.d > (std::size_t{1} << 40) ||
        c.m * c.d > (std::size_t{1} << 40))
      args.fail("the input data would be larger than 2^40 values");
  }

  if (c.impl == "faiss") faiss_wait_policy(argv);

  row r;
  r.threads = c.resolved_threads();  // memsafe rows report the count memsafe used
  if (c.impl == "memsafe") r.budget_bytes = c.budget;
  try {
    mx::dispatch_precision(mx::parse_precision(c.precision), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (knn) run_knn<T>(c, r);
      else run_matvec<T>(c, r);
    });
  } catch (const memsafe::budget_error& e) {
    bc::fail_row(r, "budget_too_small", e.what());
    r.budget_bytes = e.budget_bytes;
    r.min_budget_bytes = e.minimum_bytes;
  } catch (const oom_error& e) {
    bc::fail_row(r, "oom", e.what());
    r.needed_bytes = e.needed;
    r.peak_temp_bytes.reset();  // nothing of it was allocated
  } catch (const std::bad_alloc& e) {
    std::string message = std::string("allocation failed (") + e.what() + ")";
    if (r.needed_bytes) message += "; the naive code needed " + memsafe::format_bytes(*r.needed_bytes);
    bc::fail_row(r, "oom", std::move(message));
    r.peak_temp_bytes.reset();
  } catch (const std::exception& e) {
    bc::fail_row(r, "error", e.what());
  } catch (...) {
    bc::fail_row(r, "error", "unknown exception");
  }
  if (r.status != "ok") std::fprintf(stderr, "memsafe_bench: %s: %s\n", r.status.c_str(), r.message.c_str());
  return bc::print_and_exit("memsafe_bench", r.status, [&] { print_row(c, r); });
}
