// memsafe/mpi/cuda.cuh — distributed evaluation with each rank's shard evaluated on its GPU:
// memsafe::mpi::eval / plan_for / explain called with memsafe::cuda::options instead of
// memsafe::options. Compile with nvcc; reached through <memsafe/mpi.cuh>.
//
// Each rank runs memsafe::cuda::eval on its shard (the rank's current device; inputs on the device
// or on the host, as memsafe::cuda::eval takes them), under its budget of device and pinned
// memory; the partial results come back as host vectors, as memsafe::cuda::eval returns them, and
// merge on the host exactly as the host path's do (mpi/merge.hpp): the records are small for
// selections (k pairs per row) and one output for sums. Any MPI works, CUDA-aware or not; device
// buffers never go through MPI. The agreement also covers a rank without a usable GPU: its
// cuda_error is raised on every rank.
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
  std::size_t budget() const { return resolve_budget(o.budget); }
  memsafe::cuda::options with(std::size_t b) const {
    memsafe::cuda::options oo = o;
    oo.budget = b;
    oo.synchronize = true;  // the partial result is merged on the host right after
    return oo;
  }
  template <class X>
  std::size_t minimum(const X& x) const {
    return memsafe::cuda::plan_for(x, with(unlimited)).min_bytes;
  }
  template <class X>
  tile_plan plan(const X& x, std::size_t b) const {
    return memsafe::cuda::plan_for(x, with(b));
  }
  template <class X>
  memsafe::result<typename X::value_type> eval(const X& x, std::size_t b) const {
    return memsafe::cuda::eval(x, with(b));
  }
  template <class X>
  std::string explain(const X& x) const {
    return "this rank's shard, on its GPU: " + x.str() + "\n" + plan(x, budget()).describe();
  }
};

}  // namespace detail

/// As mpi::eval with memsafe::options, each rank's shard evaluated on its GPU.
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_reduced_t, const memsafe::cuda::options& o) {
  return detail::run_reduced(x, comm, detail::cuda_backend{o});
}
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_rows_t, const memsafe::cuda::options& o) {
  return detail::run_rows(x, comm, detail::cuda_backend{o});
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
