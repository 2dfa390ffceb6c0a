// memsafe/backend/cuda/staging.cuh — rows of a matrix on the device, wherever they live.
//
// A feeder serves blocks of rows of a matrix_view (points, or a dense operand such as v, M, V).
// Device-resident data are served in place (a view with the caller's strides, no copy). Host data
// are streamed: the rows are gathered by the CPU into a pinned staging buffer, copied on a copy
// stream into a device buffer, and the compute stream waits on the copy's event. With two slots
// the next block is gathered and copied while the kernels of the current one run (double
// buffering); each slot is reused only after the kernels that read it have finished (an event
// recorded by release()). All buffers come from the evaluation's budget.
#pragma once
#include <cstring>
#include <memory>

#include "../../expr/view.hpp"
#include "device_expr.cuh"
#include "runtime.cuh"

namespace memsafe::cuda::detail {

template <class T>
class feeder {
 public:
  feeder(const matrix_view<const T>& v, bool host, int slots, std::size_t max_rows, device_accountant& acc,
         cudaStream_t copy_stream)
      : v_(v), host_(host), slots_(slots), compute_(acc.stream()), copy_(copy_stream) {
    if (host_ && max_rows * v.cols() != 0)
      for (int s = 0; s < slots_; ++s) {
        dev_[s] = device_buffer<T>(acc, max_rows * v.cols());
        pin_[s] = std::make_unique<pinned_buffer<T>>(acc, max_rows * v.cols());
      }
  }

  bool host() const { return host_; }

  /// Rows [i0, i0 + cnt) on the device, in `slot`. Call release(slot) after enqueuing their use.
  dev_points<T> fetch(std::size_t i0, std::size_t cnt, int slot) {
    const std::size_t d = v_.cols();
    if (!host_)
      return {v_.data() + i0 * v_.row_stride(), std::int64_t(v_.row_stride()), std::int64_t(v_.col_stride()),
              std::int64_t(cnt), std::int64_t(d)};
    // The CPU reads the caller's host memory: what the caller queued before this evaluation (a
    // cudaMemcpyAsync into it on stream 0, or on the caller's stream) must have landed. The compute
    // stream already waits on those (after_default_streams, or it is the caller's stream): once,
    // before the first gather, the host waits for it.
    if (!joined_) {
      MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(compute_));
      joined_ = true;
    }
    // The copy that last read this pinned slot must be done before the CPU overwrites it.
    MEMSAFE_CUDA_CHECK(cudaEventSynchronize(copied_[slot].get()));
    T* pin = pin_[slot]->data();
    const std::size_t rs = v_.row_stride(), cs = v_.col_stride();
    for (std::size_t r = 0; r < cnt; ++r) {
      const T* src = v_.data() + (i0 + r) * rs;
      T* dst = pin + r * d;
      if (cs == 1) std::memcpy(dst, src, d * sizeof(T));
      else
        for (std::size_t k = 0; k < d; ++k) dst[k] = src[k * cs];
    }
    // The device slot is free once the kernels that read it (recorded by release) are done.
    MEMSAFE_CUDA_CHECK(cudaStreamWaitEvent(copy_, used_[slot].get(), 0));
    MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(dev_[slot].data(), pin, cnt * d * sizeof(T), cudaMemcpyHostToDevice, copy_));
    copied_[slot].record(copy_);
    MEMSAFE_CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_[slot].get(), 0));
    return {dev_[slot].data(), std::int64_t(d), 1, std::int64_t(cnt), std::int64_t(d)};
  }
  /// The kernels reading `slot` are enqueued: the slot may be refilled after them.
  void release(int slot) {
    if (host_) used_[slot].record(compute_);
  }

 private:
  matrix_view<const T> v_;
  bool host_;
  int slots_;
  cudaStream_t compute_, copy_;
  device_buffer<T> dev_[2];
  std::unique_ptr<pinned_buffer<T>> pin_[2];
  event copied_[2], used_[2];
  bool joined_ = false;  // the host has waited for the compute stream's earlier work
};

}  // namespace memsafe::cuda::detail
