// memsafe_bench_cuda — one GPU benchmark measurement per process, printed as ONE JSON line on stdout.
//
//   memsafe_bench_cuda knn    --n N --m M --d D --k 10 --metric l2|l1|cosine --precision f32|f64
//                             --budget 1GiB --reps 3 [--warmup 1] [--seed 42] [--host-resident]
//                             [--tf32 0] [--device 0] [--dump PATH] [--save-data PREFIX]
//   memsafe_bench_cuda matvec --n N --d D --precision f32|f64 --budget 1GiB --reps 3 [--lengthscale 1] ...
//
// The GPU counterpart of bench/memsafe_bench.cpp (implementation "memsafe-cuda"), with its field
// names where they apply:
// knn:    argkmin(sqdist|l1|cosine(Q, X), k) through memsafe::cuda::eval_into into device outputs
//         (k distances and k indices per query, row-major);
// matvec: rbf(X, X, ℓ) * vec(v), y = K(X, X) v with K = exp(-‖x - y‖² / (2ℓ²)).
//
// Data: the generator of memsafe_bench (examples/common/data.hpp: X = N(0,1) n×d from stream 0 of
// --seed, the queries or v from stream 1), made on the host and copied to cudaMalloc'd memory before
// anything is timed, so answers can be compared with memsafe_bench's and, through --save-data, with
// the Python peers'. --host-resident leaves X (the n points) in pageable host memory: memsafe then
// streams it through its budget.
//
// Timing: one untimed warm-up call (--warmup 1, the default), then --reps calls, each bracketed by
// cudaEventRecord on the evaluation stream (times_s); host_times_s is the steady clock around the
// call and a stream synchronisation.
//
// Memory: peak_temp_bytes is memsafe's own count (device + pinned temporaries). Seen from outside,
// the device's used bytes (cudaMemGetInfo: total - free, i.e. every process on the GPU) are polled
// on a second thread every ~100 µs during the untimed call (the warm-up, or one extra call after
// the timed ones with --warmup 0): device_peak_bytes is that high-water mark minus the bytes in use
// before the first call (inputs and outputs already allocated), a lower bound of the true peak;
// device_used_delta_bytes is used-after minus used-before around that call, and
// device_retained_bytes the same after the last timed call (memory a backend keeps between calls).
//
// --dump PATH: the last call's answer as memsafe_bench writes it (knn: the first min(m, 2000) rows
// of indices as int64; matvec: the first min(n, 2000) entries of y as float64; little-endian).
// --save-data PREFIX: PREFIX.X and PREFIX.Q (knn) or PREFIX.v (matvec), the raw row-major input
// arrays in the chosen precision, for the peers' --data-file (bench/gpu/peers/).
//
// Exit status: 0 for status ok / oom / unavailable / budget_too_small, 1 for error, 2 for a rejected
// command line (message on stderr, no JSON line). Diagnostics go to stderr. See bench/README.md.
#if __has_include(<memsafe/cuda.cuh>)
#include <memsafe/cuda.cuh>
#else
#error "memsafe_bench_cuda needs the CUDA backend, include/memsafe/cuda.cuh"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// Relative paths, so that a plain `nvcc -Iinclude bench/gpu/memsafe_bench_cuda.cu` builds it too.
#include "../../examples/common/cli.hpp"
#include "../../examples/common/data.hpp"
#include "../../examples/common/json.hpp"
#include "../../examples/common/rss.hpp"
#include "../bench_common.hpp"  // what memsafe_bench shares with this program

namespace {

namespace mx = memsafe_examples;
namespace bc = memsafe_bench_common;

// ---- configuration and the measurement row ---------------------------------------------------

struct config {
  std::string bench, metric, precision, dump, save_data;
  std::size_t n = 0, m = 0, d = 0, k = 0, budget = 0, reps = 1;
  bool warmup = true, host_resident = false, tf32 = false;
  int device = 0;
  std::uint64_t seed = 42;
  double lengthscale = 1;
};

struct row {
  std::string status = "error", message;
  std::optional<std::size_t> n, m, d, k, budget_bytes, peak_temp_bytes, min_budget_bytes, input_bytes;
  std::optional<std::size_t> tile_rows, tile_cols, num_tiles, planned_temp_bytes;
  std::optional<std::size_t> device_peak_bytes, device_used_delta_bytes;
  std::string plan;  // memsafe's kernel path, as its plan describes it
  std::optional<long long> device_retained_bytes;
  std::optional<double> data_s, h2d_s;
  std::vector<double> times, host_times;
  // the GPU
  std::string device_name, compute_capability;
  std::optional<std::size_t> device_mem_bytes, sm_count;
  int runtime_version = 0, driver_version = 0;
};

// A failed CUDA runtime call; the code tells an out-of-memory from other failures.
struct cuda_failure : std::runtime_error {
  cudaError_t code;
  cuda_failure(cudaError_t c, const std::string& what)
      : std::runtime_error(what + ": " + cudaGetErrorName(c) + " (" + cudaGetErrorString(c) + ")"), code(c) {}
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw cuda_failure(e, what);
}

std::string version_text(int v) {  // 12040 -> "12.4"
  return v > 0 ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : std::string("unknown");
}

void print_row(const config& c, const row& r) {
  mx::json_line j;
  j.add("bench", c.bench).add("impl", "memsafe-cuda").add("data", "random").add("metric", c.metric);
  bc::add_sizes(j, r);
  j.add("precision", c.precision);
  if (r.budget_bytes) j.add("budget_bytes", *r.budget_bytes);
  j.add("reps", c.reps);
  if (!r.times.empty()) {
    const double med = bc::add_times(j, r.times);
    j.add_array("host_times_s", r.host_times);
    bc::add_rates(j, c.bench, r.n, r.m, med);
  }
  if (r.peak_temp_bytes) j.add("peak_temp_bytes", *r.peak_temp_bytes);
  if (r.min_budget_bytes) j.add("min_budget_bytes", *r.min_budget_bytes);
  if (r.device_peak_bytes) j.add("device_peak_bytes", *r.device_peak_bytes);
  if (r.device_used_delta_bytes) j.add("device_used_delta_bytes", *r.device_used_delta_bytes);
  if (r.device_retained_bytes) j.add("device_retained_bytes", *r.device_retained_bytes);
  j.add("max_rss_bytes", mx::max_rss_bytes());
  if (r.input_bytes) j.add("input_bytes", *r.input_bytes);
  if (r.data_s) j.add("data_s", *r.data_s);
  if (r.h2d_s) j.add("h2d_s", *r.h2d_s);
  j.add("host_resident", c.host_resident).add("tf32", c.tf32).add("warmup", c.warmup);
  if (c.bench == "matvec") j.add("lengthscale", c.lengthscale);
  j.add("status", r.status);
  if (r.status != "ok") j.add("message", r.message);
  if (r.tile_rows) j.add("tile_rows", *r.tile_rows);
  if (r.tile_cols) j.add("tile_cols", *r.tile_cols);
  if (r.num_tiles) j.add("num_tiles", *r.num_tiles);
  if (r.planned_temp_bytes) j.add("planned_temp_bytes", *r.planned_temp_bytes);
  if (!r.plan.empty()) j.add("plan", r.plan);
  if (!r.device_name.empty()) j.add("device", r.device_name).add("compute_capability", r.compute_capability);
  if (r.device_mem_bytes) j.add("device_mem_bytes", *r.device_mem_bytes);
  if (r.sm_count) j.add("sm_count", *r.sm_count);
  j.add("device_index", c.device);
  j.add("cuda_runtime", version_text(r.runtime_version)).add("cuda_driver", version_text(r.driver_version));
  j.add("cpu", bc::cpu_model()).add("cores", std::thread::hardware_concurrency());
  j.print();
}

// ---- device memory -------------------------------------------------------------------------------

template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t count) : count_(count) {
    if (count_ > 0) check(cudaMalloc(reinterpret_cast<void**>(&p_), count_ * sizeof(T)), "cudaMalloc");
  }
  ~device_buffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  std::size_t count_ = 0;
};

// Bytes in use on the current device (total - free: every process's allocations and contexts).
std::size_t device_used_bytes() {
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return total_b - free_b;
}

// Polls device_used_bytes() on its own thread until stop(); the largest value seen, a lower bound
// of the high-water mark (an allocation that lives less than a polling interval can be missed).
class used_sampler {
 public:
  explicit used_sampler(int device) : peak_(device_used_bytes()) {
    thread_ = std::thread([this, device] {
      if (cudaSetDevice(device) != cudaSuccess) return;
      while (!done_.load(std::memory_order_relaxed)) {
        std::size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) peak_ = std::max(peak_, total_b - free_b);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }
  ~used_sampler() { stop(); }
  used_sampler(const used_sampler&) = delete;
  used_sampler& operator=(const used_sampler&) = delete;
  std::size_t stop() {
    if (thread_.joinable()) {
      done_ = true;
      thread_.join();
    }
    return peak_;
  }

 private:
  std::atomic<bool> done_{false};
  std::size_t peak_ = 0;  // written by the polling thread only, read after join
  std::thread thread_;
};

class stream_guard {
 public:
  stream_guard() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~stream_guard() { cudaStreamDestroy(s_); }
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class event_pair {
 public:
  event_pair() {
    check(cudaEventCreate(&a_), "cudaEventCreate");
    check(cudaEventCreate(&b_), "cudaEventCreate");
  }
  ~event_pair() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  event_pair(const event_pair&) = delete;
  event_pair& operator=(const event_pair&) = delete;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

// ---- one measurement -------------------------------------------------------------------------------

// The untimed call(s) under the sampler, then --reps timed calls of eval_into(expr, values, indices).
template <class Expr, class T>
void measure(const config& c, row& r, const Expr& expr, T* values, memsafe::index_t* indices,
             const memsafe::cuda::options& o) {
  std::size_t peak_temp = 0;
  memsafe::eval_stats st{};
  auto once = [&] {
    st = memsafe::cuda::eval_into(expr, values, indices, o);
    peak_temp = std::max(peak_temp, st.peak_temp_bytes);
  };
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::size_t base = device_used_bytes();
  auto sampled_call = [&] {
    const std::size_t before = device_used_bytes();
    used_sampler sampler(c.device);
    once();
    check(cudaStreamSynchronize(o.stream), "cudaStreamSynchronize");
    const std::size_t after = device_used_bytes();
    const std::size_t high = std::max(sampler.stop(), after);
    r.device_peak_bytes = high > base ? high - base : 0;
    r.device_used_delta_bytes = after > before ? after - before : 0;
  };
  if (c.warmup) sampled_call();

  event_pair ev;
  for (std::size_t rep = 0; rep < c.reps; ++rep) {
    const auto h0 = std::chrono::steady_clock::now();
    check(cudaEventRecord(ev.a_, o.stream), "cudaEventRecord");
    once();
    check(cudaEventRecord(ev.b_, o.stream), "cudaEventRecord");
    check(cudaEventSynchronize(ev.b_), "cudaEventSynchronize");
    const auto h1 = std::chrono::steady_clock::now();
    float ms = 0;
    check(cudaEventElapsedTime(&ms, ev.a_, ev.b_), "cudaEventElapsedTime");
    r.times.push_back(static_cast<double>(ms) / 1e3);
    r.host_times.push_back(std::chrono::duration<double>(h1 - h0).count());
  }
  r.device_retained_bytes = static_cast<long long>(device_used_bytes()) - static_cast<long long>(base);
  if (!c.warmup) sampled_call();

  bc::record_plan(r, st, peak_temp);
  r.num_tiles = st.num_tiles;
  r.planned_temp_bytes = st.planned_temp_bytes;
  r.plan = st.plan.reduction;
}

memsafe::cuda::options make_options(const config& c, cudaStream_t s) {
  memsafe::cuda::options o;
  o.budget = c.budget;
  o.stream = s;
  o.allow_tf32 = c.tf32;
  return o;
}

template <class T>
void copy_to_device(T* dst, const std::vector<T>& src) {
  check(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

template <class T>
void run_knn(const config& c, row& r) {
  const std::size_t n = c.n, m = c.m, d = c.d, k = c.k;
  r.n = n;
  r.m = m;
  r.d = d;
  r.k = k;
  r.input_bytes = (n + m) * d * sizeof(T);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<T> X = mx::normal_matrix<T>(n, d, c.seed, 0);
  const std::vector<T> Q = mx::normal_matrix<T>(m, d, c.seed, 1);
  r.data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!c.save_data.empty()) {
    bc::write_binary(c.save_data + ".X", X.data(), X.size() * sizeof(T));
    bc::write_binary(c.save_data + ".Q", Q.data(), Q.size() * sizeof(T));
  }

  stream_guard stream;
  device_buffer<T> dX(c.host_resident ? 0 : n * d), dQ(m * d), dvals(m * k);
  device_buffer<memsafe::index_t> didx(m * k);
  const auto t1 = std::chrono::steady_clock::now();
  if (!c.host_resident) copy_to_device(dX.get(), X);
  copy_to_device(dQ.get(), Q);
  r.h2d_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();

  const T* xp = c.host_resident ? X.data() : dX.get();
  const T* qp = dQ.get();
  const auto Xv = memsafe::points(xp, n, d);
  const auto Qv = memsafe::points(qp, m, d);
  const auto o = make_options(c, stream.get());
  r.budget_bytes = c.budget;
  if (c.metric == "l2") measure(c, r, memsafe::argkmin(memsafe::sqdist(Qv, Xv), k), dvals.get(), didx.get(), o);
  else if (c.metric == "l1") measure(c, r, memsafe::argkmin(memsafe::l1(Qv, Xv), k), dvals.get(), didx.get(), o);
  else measure(c, r, memsafe::argkmin(memsafe::cosine(Qv, Xv), k), dvals.get(), didx.get(), o);

  // The first rows of the answer: checked for range always, written with --dump.
  const std::size_t rows = std::min(m, bc::dump_rows_max);
  std::vector<memsafe::index_t> head(rows * k);
  check(cudaMemcpy(head.data(), didx.get(), head.size() * sizeof(memsafe::index_t), cudaMemcpyDeviceToHost),
        "cudaMemcpy from the device");
  for (memsafe::index_t i : head)
    if (i < 0 || static_cast<std::size_t>(i) >= n)
      throw std::runtime_error("memsafe-cuda returned the index " + std::to_string(i) + " for n = " + std::to_string(n));
  if (!c.dump.empty()) bc::dump_indices(c.dump, head.data(), rows, k);
  r.status = "ok";
}

template <class T>
void run_matvec(const config& c, row& r) {
  const std::size_t n = c.n, d = c.d;
  r.n = n;
  r.m = n;
  r.d = d;
  r.k = 0;
  r.input_bytes = (n * d + n) * sizeof(T);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<T> X = mx::normal_matrix<T>(n, d, c.seed, 0);
  const std::vector<T> v = mx::normal_matrix<T>(n, 1, c.seed, 1);
  r.data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!c.save_data.empty()) {
    bc::write_binary(c.save_data + ".X", X.data(), X.size() * sizeof(T));
    bc::write_binary(c.save_data + ".v", v.data(), v.size() * sizeof(T));
  }

  stream_guard stream;
  device_buffer<T> dX(c.host_resident ? 0 : n * d), dv(n), dy(n);
  const auto t1 = std::chrono::steady_clock::now();
  if (!c.host_resident) copy_to_device(dX.get(), X);
  copy_to_device(dv.get(), v);
  r.h2d_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();

  const T* xp = c.host_resident ? X.data() : dX.get();
  const T* vp = dv.get();
  const auto Xv = memsafe::points(xp, n, d);
  const auto vv = memsafe::vec(vp, n);
  r.budget_bytes = c.budget;
  measure(c, r, memsafe::rbf(Xv, Xv, c.lengthscale) * vv, dy.get(), static_cast<memsafe::index_t*>(nullptr),
          make_options(c, stream.get()));

  if (!c.dump.empty()) {
    std::vector<T> head(std::min(n, bc::dump_rows_max));
    check(cudaMemcpy(head.data(), dy.get(), head.size() * sizeof(T), cudaMemcpyDeviceToHost),
          "cudaMemcpy from the device");
    bc::dump_values(c.dump, head);
  }
  r.status = "ok";
}

// The device's identity into the row; false (status "unavailable") without a usable device.
bool open_device(const config& c, row& r) {
  cudaDriverGetVersion(&r.driver_version);
  cudaRuntimeGetVersion(&r.runtime_version);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    r.status = "unavailable";
    r.message = e != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
                                       cudaGetErrorString(e) + ")"
                                 : std::string("no CUDA device");
    return false;
  }
  if (c.device < 0 || c.device >= count) {
    r.status = "unavailable";
    r.message = "--device " + std::to_string(c.device) + " but only " + std::to_string(count) + " device(s)";
    return false;
  }
  check(cudaSetDevice(c.device), "cudaSetDevice");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, c.device), "cudaGetDeviceProperties");
  r.device_name = p.name;
  r.compute_capability = std::to_string(p.major) + "." + std::to_string(p.minor);
  r.device_mem_bytes = p.totalGlobalMem;
  r.sm_count = static_cast<std::size_t>(p.multiProcessorCount);
  return true;
}

// This program's own cudaMalloc of the inputs and outputs failing is an "oom" row too.
bool is_out_of_memory(const std::exception& e) {
  const auto* cf = dynamic_cast<const cuda_failure*>(&e);
  return cf != nullptr && cf->code == cudaErrorMemoryAllocation;
}

void print_usage(std::FILE* f) {
  std::fputs(
      "usage: memsafe_bench_cuda knn|matvec [options]   (memsafe_bench_cuda knn --help lists the options)\n"
      "  knn     k nearest neighbours on the GPU: --metric l2|l1|cosine\n"
      "  matvec  RBF kernel matrix times a vector on the GPU\n"
      "Prints one JSON line on stdout per run.\n",
      f);
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto rc = bc::reject_subcommand(argc, argv, print_usage)) return *rc;
  config c;
  c.bench = argv[1];
  const bool knn = c.bench == "knn";

  mx::cli args("memsafe_bench_cuda " + c.bench, knn ? "One GPU k-nearest-neighbour measurement, one JSON line."
                                                    : "One GPU RBF kernel matvec measurement, one JSON line.");
  args.option("impl", "memsafe-cuda", "memsafe-cuda (accepted for symmetry with memsafe_bench)");
  if (knn)
    args.option("n", "100000", "database size")
        .option("m", "1000", "number of queries")
        .option("d", "3", "dimension")
        .option("k", "10", "neighbours per query")
        .option("metric", "l2", "l2|l1|cosine");
  else
    bc::add_matvec_options(args);
  args.option("precision", "f32", "f32|f64")
      .option("budget", "1GiB", "memsafe's budget for device and pinned temporaries, e.g. 64MiB, 1GiB")
      .option("reps", "3", "timed repetitions")
      .option("warmup", "1", "1: one untimed call before the timed ones")
      .option("seed", "42", "random seed")
      .option("device", "0", "CUDA device index")
      .option("tf32", "0", "1: allow TF32 tensor cores in memsafe's GEMM path")
      .flag("host-resident", "leave X (the n points) in host memory: memsafe streams it")
      .option("dump", "", "write the answer's first 2000 rows to this binary file")
      .option("save-data", "", "write the inputs to PREFIX.X and PREFIX.Q (knn) / PREFIX.v (matvec)");
  args.parse(argc - 1, argv + 1);

  (void)args.get_choice("impl", {"memsafe-cuda"});
  c.n = args.get_uint("n");
  c.d = args.get_uint("d");
  if (knn) {
    c.m = args.get_uint("m");
    c.k = args.get_uint("k");
    c.metric = args.get_choice("metric", {"l2", "l1", "cosine"});
  } else {
    c.m = c.n;
    c.metric = "rbf";
    c.lengthscale = args.get_double("lengthscale");
  }
  c.precision = args.get_choice("precision", {"f32", "f64"});
  c.budget = bc::parse_size_option(args, "budget", "64MiB, 1GiB or 4096");
  c.reps = args.get_uint("reps");
  c.warmup = args.get_uint("warmup") != 0;
  c.seed = args.get_uint("seed");
  const std::uint64_t device = args.get_uint("device");
  if (device > 1024) args.fail("--device must be a device index");
  c.device = static_cast<int>(device);
  c.tf32 = args.get_uint("tf32") != 0;
  c.host_resident = args.get_flag("host-resident");
  c.dump = args.get_string("dump");
  c.save_data = args.get_string("save-data");

  if (c.reps == 0) args.fail("--reps must be at least 1");
  if (c.n == 0 || c.d == 0) args.fail("--n and --d must be positive");
  if (knn && (c.m == 0 || c.k == 0)) args.fail("--m and --k must be positive");
  if (knn && c.k > c.n) args.fail("--k must not exceed --n");
  if (!knn && !(c.lengthscale > 0)) args.fail("--lengthscale must be positive");
  if (c.n > (std::size_t{1} << 32) || c.m > (std::size_t{1} << 32) || c.d > (std::size_t{1} << 20) ||
      c.n * c.d > (std::size_t{1} << 40) || c.m * c.d > (std::size_t{1} << 40))
    args.fail("the input data would be larger than 2^40 values");

  row r;
  r.budget_bytes = c.budget;
  try {
    if (open_device(c, r)) {
      mx::dispatch_precision(mx::parse_precision(c.precision), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (knn) run_knn<T>(c, r);
        else run_matvec<T>(c, r);
      });
    } else {  // the sizes asked for, on the "unavailable" row
      r.n = c.n;
      r.m = c.m;
      r.d = c.d;
      r.k = knn ? c.k : 0;
    }
  } catch (const memsafe::budget_error& e) {
    bc::fail_row(r, "budget_too_small", e.what());
    r.budget_bytes = e.budget_bytes;
    r.min_budget_bytes = e.minimum_bytes;
  } catch (const memsafe::cuda::device_out_of_memory& e) {  // the GPU itself is full (not the budget)
    bc::fail_row(r, "oom", e.what());
  } catch (const std::bad_alloc& e) {
    bc::fail_row(r, "oom", std::string("host allocation failed (") + e.what() + ")");
  } catch (const std::exception& e) {
    bc::fail_row(r, is_out_of_memory(e) ? "oom" : "error", e.what());
  } catch (...) {
    bc::fail_row(r, "error", "unknown exception");
  }
  if (r.status != "ok") {
    r.peak_temp_bytes.reset();
    std::fprintf(stderr, "memsafe_bench_cuda: %s: %s\n", r.status.c_str(), r.message.c_str());
  }
  return bc::print_and_exit("memsafe_bench_cuda", r.status, [&] { print_row(c, r); });
}
