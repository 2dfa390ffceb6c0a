// memsafe/backend/cuda/runtime.cuh — CUDA runtime and cuBLAS under RAII, errors as exceptions,
// and the accounting allocator every device (and pinned host) temporary goes through.
//
// Every CUDA or cuBLAS call is checked: a failure becomes memsafe::cuda::cuda_error naming the
// call, the file:line and the error text; an out-of-memory from the driver (another process holds
// the GPU, or the budget is larger than the free memory) becomes device_out_of_memory, which says
// so. Buffers, streams, events and handles release themselves, so an exception leaks nothing.
// Memory is stream-ordered (cudaMallocAsync / cudaFreeAsync on the evaluation's stream): freeing
// never synchronises the device.
#pragma once
#if !defined(__CUDACC__)
#error "memsafe/backend/cuda/*.cuh are CUDA headers: compile with nvcc (target memsafe::cuda)"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../../core/accounting.hpp"
#include "../../core/error.hpp"

namespace memsafe::cuda {

/// A CUDA runtime or cuBLAS call failed.
struct cuda_error : error {
  int code = 0;
  cuda_error(const std::string& what, int c) : error(what), code(c) {}
};
/// The driver could not provide device memory (not the budget: the GPU itself is full).
struct device_out_of_memory : cuda_error {
  using cuda_error::cuda_error;
};

namespace detail {

using memsafe::detail::cat;
using memsafe::detail::msg;

inline const char* cublas_status_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a sticky-free error so later calls are not blamed for it
  const std::string text = cat(msg{"memsafe::cuda: ", call, " failed at ", file, ":", line, ": ", cudaGetErrorName(e),
                                    " (", cudaGetErrorString(e), ")"});
  if (e == cudaErrorMemoryAllocation)
    throw device_out_of_memory(cat(msg{text, ": the GPU has no free memory for the request (another process may hold "
                                             "it); lower the budget or free device memory"}),
                               int(e));
  throw cuda_error(text, int(e));
}
inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const std::string text = cat(msg{"memsafe::cuda: ", call, " failed at ", file, ":", line, ": ", cublas_status_text(s)});
  if (s == CUBLAS_STATUS_ALLOC_FAILED) throw device_out_of_memory(text, int(s));
  throw cuda_error(text, int(s));
}

#define MEMSAFE_CUDA_CHECK(call) ::memsafe::cuda::detail::check((call), #call, __FILE__, __LINE__)
/// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define MEMSAFE_CUDA_LAUNCHED(name) ::memsafe::cuda::detail::check(cudaGetLastError(), name, __FILE__, __LINE__)

/// Where a pointer lives, as the runtime sees it.
enum class memory_space { device, host };

inline memory_space space_of(const void* p) {
  if (!p) return memory_space::device;
  cudaPointerAttributes a{};
  MEMSAFE_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
  return (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) ? memory_space::device
                                                                              : memory_space::host;
}

// ---- owned resources ---------------------------------------------------------------------------

/// A stream owned by memsafe (only when the caller gave none).
class stream {
 public:
  stream() { MEMSAFE_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class event {
 public:
  event() { MEMSAFE_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() {
    if (e_) cudaEventDestroy(e_);
  }
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) { MEMSAFE_CUDA_CHECK(cudaEventRecord(e_, s)); }

 private:
  cudaEvent_t e_ = nullptr;
};

/// Counts device and pinned-host temporaries against the budget (core accountant), hands them
/// out stream-ordered, and releases them on the same stream.
class device_accountant {
 public:
  device_accountant(std::size_t limit, cudaStream_t s) : acc_(limit), s_(s) {}
  memsafe::detail::accountant& counter() { return acc_; }
  const memsafe::detail::accountant& counter() const { return acc_; }
  cudaStream_t stream() const { return s_; }

  void* allocate_device(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    bytes = round(bytes);
    acc_.reserve(bytes);
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes, s_);
    if (e != cudaSuccess) {
      acc_.release(bytes);
      detail::check(e, "cudaMallocAsync", __FILE__, __LINE__);
    }
    return p;
  }
  void free_device(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    cudaFreeAsync(p, s_);
    acc_.release(round(bytes));
  }
  void* allocate_pinned(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    bytes = round(bytes);
    acc_.reserve(bytes);
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes);
    if (e != cudaSuccess) {
      acc_.release(bytes);
      detail::check(e, "cudaMallocHost", __FILE__, __LINE__);
    }
    return p;
  }
  void free_pinned(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    cudaFreeHost(p);  // waits for work using it: pinned buffers are freed after the stream is done
    acc_.release(round(bytes));
  }
  /// Allocation granularity the planner models (256 bytes, as cudaMalloc aligns).
  static constexpr std::size_t round(std::size_t b) { return (b + 255) / 256 * 256; }

 private:
  memsafe::detail::accountant acc_;
  cudaStream_t s_;
};

/// Device memory of n objects, counted against the budget.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(device_accountant& a, std::size_t n)
      : a_(&a), n_(n), p_(static_cast<T*>(a.allocate_device(n * sizeof(T)))) {}
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept { swap(o); }
  device_buffer& operator=(device_buffer&& o) noexcept {
    device_buffer t(std::move(o));
    swap(t);
    return *this;
  }
  ~device_buffer() {
    if (a_) a_->free_device(p_, n_ * sizeof(T));
  }
  T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  void swap(device_buffer& o) noexcept {
    std::swap(a_, o.a_);
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
  }
  device_accountant* a_ = nullptr;
  std::size_t n_ = 0;
  T* p_ = nullptr;
};

/// Page-locked host memory (staging for streamed inputs and outputs), counted against the budget.
template <class T>
class pinned_buffer {
 public:
  pinned_buffer() = default;
  pinned_buffer(device_accountant& a, std::size_t n)
      : a_(&a), n_(n), p_(static_cast<T*>(a.allocate_pinned(n * sizeof(T)))) {}
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() {
    if (a_) a_->free_pinned(p_, n_ * sizeof(T));
  }
  T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  device_accountant* a_ = nullptr;
  std::size_t n_ = 0;
  T* p_ = nullptr;
};

/// cuBLAS handles, kept per device and reused: creating one costs device memory (cuBLAS's own
/// workspace pool, 64 MiB under CUDA 13 on an H200, outside any evaluation's budget, once per
/// device) and destroying one synchronises the whole device, so an evaluation takes a handle from its
/// device's pool and gives it back. A handle is used by one evaluation (one thread) at a time; the
/// pool grows to the number of evaluations that ever ran at once on that device. The pool object is
/// never deleted (a static destructor could run after the CUDA runtime has shut down); its idle
/// handles are destroyed by an exit handler registered at the first creation, after the runtime
/// initialised, so it runs before the runtime's own teardown (exit handlers run in reverse order).
class blas_pool {
 public:
  static blas_pool& instance() {
    static blas_pool* p = new blas_pool;  // deliberately never deleted (see above)
    return *p;
  }
  /// A handle created on (and only to be used on) `device`.
  cublasHandle_t acquire(int device) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (auto& v = free_[device]; !v.empty()) {
        cublasHandle_t h = v.back();
        v.pop_back();
        return h;
      }
    }
    cublasHandle_t h = nullptr;
    MEMSAFE_CUDA_CHECK(cublasCreate(&h));
    static const bool registered = (std::atexit(+[] { instance().destroy_idle(); }), true);
    (void)registered;
    return h;
  }
  /// Destroys the handles not in use (at exit; each on its own device).
  void destroy_idle() noexcept {
    const std::lock_guard<std::mutex> lock(mu_);
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) return;
    for (auto& [device, handles] : free_) {
      if (cudaSetDevice(device) != cudaSuccess) continue;
      for (cublasHandle_t h : handles) cublasDestroy(h);
      handles.clear();
    }
    cudaSetDevice(current);
  }
  void release(int device, cublasHandle_t h) noexcept {
    try {
      const std::lock_guard<std::mutex> lock(mu_);
      free_[device].push_back(h);
    } catch (...) {
      cublasDestroy(h);  // no memory to keep it: destroy instead of leaking
    }
  }

 private:
  std::mutex mu_;
  std::map<int, std::vector<cublasHandle_t>> free_;
};

/// A cuBLAS handle of the device's pool, bound to the stream, with its workspace taken from the
/// budget (cuBLAS would otherwise use its own, unaccounted). The default math mode keeps FP32 GEMM
/// in FP32 (TF32 tensor cores only when asked for); nothing is destroyed when the evaluation ends.
class blas {
 public:
  static constexpr std::size_t workspace_bytes = std::size_t(4) << 20;
  blas(device_accountant& a, bool allow_tf32) : ws_(a, workspace_bytes) {
    MEMSAFE_CUDA_CHECK(cudaGetDevice(&device_));
    h_ = blas_pool::instance().acquire(device_);
    try {
      MEMSAFE_CUDA_CHECK(cublasSetStream(h_, a.stream()));
      MEMSAFE_CUDA_CHECK(cublasSetWorkspace(h_, ws_.data(), ws_.size()));
      MEMSAFE_CUDA_CHECK(cublasSetMathMode(h_, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    } catch (...) {
      blas_pool::instance().release(device_, h_);
      throw;
    }
  }
  blas(const blas&) = delete;
  blas& operator=(const blas&) = delete;
  /// Back to the pool. The workspace is freed stream-ordered right after, so work queued on the
  /// stream still finds it; the next evaluation sets its own before any call.
  ~blas() {
    if (h_) blas_pool::instance().release(device_, h_);
  }
  cublasHandle_t get() const { return h_; }

 private:
  device_buffer<unsigned char> ws_;
  int device_ = 0;
  cublasHandle_t h_ = nullptr;
};

/// Before an evaluation: a CUDA error left pending by earlier work of the caller (a failed launch
/// or call whose error nobody read) is reported as such, naming it, instead of being blamed on the
/// first check of memsafe's own calls. Reading it clears it (when it is not sticky).
inline void check_no_pending_error(const char* entry) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  throw cuda_error(cat(msg{entry, ": a CUDA error was pending before the call (raised by earlier work, not by memsafe): ",
                           cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"}),
                   int(e));
}

/// An internal stream (the caller gave none) runs after what the caller queued on the default
/// stream: the legacy default stream and this thread's per-thread default stream are joined by an
/// event each, so inputs written by a kernel or cudaMemcpyAsync on stream 0 (PyTorch's and CuPy's
/// default) are complete before memsafe reads them.
inline void after_default_streams(cudaStream_t s) {
  for (cudaStream_t d : {cudaStreamLegacy, cudaStreamPerThread}) {
    event e;
    e.record(d);
    MEMSAFE_CUDA_CHECK(cudaStreamWaitEvent(s, e.get(), 0));
  }
}

}  // namespace detail
}  // namespace memsafe::cuda
