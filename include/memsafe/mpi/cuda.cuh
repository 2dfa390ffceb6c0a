// memsafe/mpi/cuda.cuh — distributed evaluation with each rank's shard evaluated on its GPU:
// memsafe::mpi::eval / plan_for / explain called with memsafe::cuda::options instead of
// memsafe::options. Compile with nvcc; reached through <memsafe/mpi.cuh>.
//
// Each rank runs memsafe::cuda::eval on its shard (the rank's current device; inputs on the device
// or on the host, as memsafe::cuda::eval takes them), under its budget of device and pinned
// memory; memsafe::cuda::eval_into writes the partial results straight into the rank's host
// outputs (mpi::eval's result, or mpi::eval_into's buffers: the result is held once on the host,
// not first in a vector of its own and then copied), and they merge on the host exactly as the
// host path's do (mpi/merge.hpp): the records are small for
// selections (k pairs per row) and one output for sums. Any MPI works, CUDA-aware or not; device
// buffers never go through MPI. The agreement also covers a rank without a usable GPU: its
// cuda_error is raised on every rank.
//
// shard_both (mpi/ring.hpp) works the same way: the ring's chunks live in host buffers (gathered
// from the rank's own shard, on the device or the host, by cudaMemcpy2D), travel by ordinary MPI,
// and each chunk is evaluated by memsafe::cuda::eval with X where it is and the chunk streamed
// from the host; the partials merge on the host. The budget counts the host-side buffers and
// partials against the same number as the device and pinned memory (conservative).
#pragma once
#if !defined(__CUDACC__)
#error "<memsafe/mpi/cuda.cuh> evaluates shards on the GPU and must be compiled by nvcc; host-only code includes <memsafe/mpi.hpp>"
#else
#include "../cuda.cuh"
#include "eval.hpp"

namespace memsafe::mpi {
namespace detail {

/// host_backend's twin: the shard evaluated by memsafe::cuda on the rank's current device.
struct cuda_backend {
  memsafe::cuda::options o;
  /// Nothing here: what eval refuses on the values (a non-finite M under diagonal terms) is
  /// refused by eval_plan, which minimum() runs inside the agreement; the device does not refuse a
  /// non-finite softmax_sum V (docs/gpu_notes.md, "Known differences from the host backend").
  template <class X>
  void check_values(const X&) const {}
  std::size_t budget() const { return resolve_budget(o.budget); }
  memsafe::cuda::options with(std::size_t b) const {
    memsafe::cuda::options oo = o;
    oo.budget = b;
    oo.synchronize = true;  // the partial result is merged on the host right after
    return oo;
  }
  /// The plan memsafe::cuda::eval will follow for x under b bytes, made as eval makes it: the
  /// operand of (K + D)·M checked, the lowering's guard read, the inputs' memory spaces queried and
  /// the outputs in host memory (the rank's result or the caller's buffers). A refusal eval would
  /// raise after the agreement — a shard in host memory needing more than the device-resident
  /// minimum, a non-finite M under diagonal terms, M on the device — is raised here, inside the
  /// agreement, on every rank (plan_for's assumptions, inputs on the device and none read, let one
  /// rank refuse after it while the others waited in the merge).
  template <class X>
  tile_plan eval_plan(const X& x, std::size_t b) const {
    namespace cd = memsafe::cuda::detail;
    cd::check_node<X>();
    if constexpr (cd::device_node<X>) {
      cd::check_diag_operand(x);
      rewrite::rule_log log;
      const auto job = cd::lower(x, log);
      tile_plan p =
          cd::plan_job(job, b, memsafe::cuda::device_resources::current(), cd::residency::host_outputs, x.str()).plan;
      p.rules = log.fired;
      return p;
    } else {
      return {};
    }
  }
  template <class X>
  std::size_t minimum(const X& x) const {
    return eval_plan(x, unlimited).min_bytes;
  }
  template <class X>
  tile_plan plan(const X& x, std::size_t b) const {
    return eval_plan(x, b);
  }
  template <class X>
  memsafe::result<typename X::value_type> eval(const X& x, std::size_t b) const {
    return memsafe::cuda::eval(x, with(b));
  }
  /// Into row-major outputs in host memory (the rank's result or the caller's buffers), written
  /// by memsafe::cuda::eval_into itself: no host vector of the partial result beside them.
  template <class X>
  eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, std::size_t b) const {
    return memsafe::cuda::eval_into(x, values, indices, with(b));
  }
  template <class X>
  std::string explain(const X& x) const {
    return memsafe::detail::cat(
        memsafe::detail::msg{"this rank's shard, on its GPU: ", x.str(), "\n", plan(x, budget()).describe()});
  }
  /// The plan of one ring chunk as eval will make it (X where it is, the chunk in host memory), so
  /// that a rank whose chunk would not fit fails the second agreement, not the ring.
  template <class X>
  tile_plan plan_chunk(const X& x, std::size_t b) const {
    return eval_plan(x, b);
  }
  /// Rows [r0, r0 + nr) of `src` (device or host memory) into the host buffer `dst`, contiguous.
  template <class T>
  void gather(T* dst, const matrix_view<const T>& src, std::size_t r0, std::size_t nr) const {
    const std::size_t c = src.cols(), rs = src.row_stride(), cs = src.col_stride();
    if (nr == 0 || c == 0) return;
    // The caller's stream may be non-blocking (options.stream, the documented way to order the
    // inputs): work on it that writes src is not ordered before this copy on the legacy stream.
    if (o.stream != nullptr) MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(o.stream));
    if (cs == 1 && (rs >= c || nr == 1)) {
      MEMSAFE_CUDA_CHECK(cudaMemcpy2D(dst, c * sizeof(T), src.data() + r0 * rs, std::max(rs, c) * sizeof(T),
                                      c * sizeof(T), nr, cudaMemcpyDefault));
      return;
    }
    host_backend{}.gather(dst, src, r0, nr);  // host memory with other strides (check_gather)
  }
  /// A device-resident operand must have unit column stride and rows that do not overlap.
  template <class T>
  void check_gather(const matrix_view<const T>& src) const {
    if (src.rows() == 0 || src.cols() == 0) return;
    const bool rows_ok = src.col_stride() == 1 && (src.row_stride() >= src.cols() || src.rows() == 1);
    if (!rows_ok && memsafe::cuda::detail::space_of(src.data()) == memsafe::cuda::detail::memory_space::device)
      throw argument_error(memsafe::detail::cat(memsafe::detail::msg{
          "memsafe::mpi: shard_both on the GPU: the sharded operand ", src.shape(), " is on the device with strides (",
          src.row_stride(), ", ", src.col_stride(), "); give it unit column stride and row-major rows"}));
  }
};

}  // namespace detail

/// As mpi::eval with memsafe::options, each rank's shard evaluated on its GPU.
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_reduced_t, const memsafe::cuda::options& o) {
  return detail::rank_result(x, [&](auto&& target) { return detail::run_reduced(x, comm, detail::cuda_backend{o}, target); });
}
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_rows_t, const memsafe::cuda::options& o) {
  return detail::rank_result(x, [&](auto&& target) { return detail::run_rows(x, comm, detail::cuda_backend{o}, target); });
}
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_both_t s, const memsafe::cuda::options& o) {
  return detail::rank_result(x, [&](auto&& target) { return detail::run_both(x, comm, s, detail::cuda_backend{o}, target); });
}
template <evaluable X, class Shard>
mpi::plan plan_for(const X& x, MPI_Comm comm, Shard s, const memsafe::cuda::options& o) {
  return detail::plan_of(x, comm, s, detail::cuda_backend{o});
}
template <evaluable X, class Shard>
std::string explain(const X& x, MPI_Comm comm, Shard s, const memsafe::cuda::options& o) {
  return detail::explain_of(x, comm, s, detail::cuda_backend{o});
}

}  // namespace memsafe::mpi
#endif
