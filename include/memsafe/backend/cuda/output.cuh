// memsafe/backend/cuda/output.cuh — row_output: where a row block's results go (device outputs in
// place, or host outputs through device + pinned staging).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "device_expr.cuh"
#include "device_monoids.cuh"
#include "runtime.cuh"

namespace memsafe::cuda::detail {

/// Where a row block's results go: straight to device outputs, or through device + pinned staging
/// to host outputs (scattered with the caller's strides after the block).
template <class T>
class row_output {
 public:
  row_output(const jobs::out_spec<T>& out, double scale, bool host, std::size_t ti, std::size_t c, bool idx,
             device_accountant& acc)
      : out_(out), scale_(scale), host_(host), c_(c), idx_(idx) {
    if (host_) {
      dv_ = device_buffer<T>(acc, ti * c);
      pv_ = std::make_unique<pinned_buffer<T>>(acc, ti * c);
      if (idx) {
        di_ = device_buffer<index_t>(acc, ti * c);
        pi_ = std::make_unique<pinned_buffer<index_t>>(acc, ti * c);
      }
    }
  }
  /// The target of a row block's write kernel and the row offset it writes at.
  dev_out<T> target() const {
    if (host_) return {dv_.data(), std::int64_t(c_), 1, idx_ ? di_.data() : nullptr, std::int64_t(c_), 1, scale_};
    return {out_.values, out_.vrs, out_.vcs, idx_ ? out_.indices : nullptr, out_.irs, out_.ics, scale_};
  }
  std::int64_t base(std::int64_t i0) const { return host_ ? 0 : i0; }
  /// After the write kernel: bring a host block home (synchronises the stream).
  void finish_block(std::size_t i0, std::size_t ni, cudaStream_t s) {
    if (!host_ || ni == 0) return;
    MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(pv_->data(), dv_.data(), ni * c_ * sizeof(T), cudaMemcpyDeviceToHost, s));
    if (idx_)
      MEMSAFE_CUDA_CHECK(
          cudaMemcpyAsync(pi_->data(), di_.data(), ni * c_ * sizeof(index_t), cudaMemcpyDeviceToHost, s));
    MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(s));
    for (std::size_t r = 0; r < ni; ++r)
      for (std::size_t q = 0; q < c_; ++q) {
        out_.v(i0 + r, q) = pv_->data()[r * c_ + q];
        if (idx_ && out_.indices) out_.ix(i0 + r, q) = pi_->data()[r * c_ + q];
      }
  }

 private:
  jobs::out_spec<T> out_;
  double scale_;
  bool host_;
  std::size_t c_;
  bool idx_;
  device_buffer<T> dv_;
  device_buffer<index_t> di_;
  std::unique_ptr<pinned_buffer<T>> pv_;
  std::unique_ptr<pinned_buffer<index_t>> pi_;
};

}  // namespace memsafe::cuda::detail
