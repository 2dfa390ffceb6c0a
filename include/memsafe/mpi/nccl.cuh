// memsafe/mpi/nccl.cuh — shard_reduced with the results in device memory, merged between the
// ranks' GPUs by NCCL. Reached through <memsafe/mpi_nccl.cuh> (nvcc; target memsafe::nccl).
//
//   memsafe::mpi::nccl_comm nc(MPI_COMM_WORLD);  // collective; one GPU per rank: the current device
//   auto st = memsafe::mpi::eval_into(memsafe::mpi::argkmin(memsafe::sqdist(Q, Yshard), k), nc,
//                                     memsafe::mpi::shard_reduced, d_values, d_indices, {64 << 20});
//
// Each rank evaluates its shard with memsafe::cuda::eval_into straight into the device outputs (as
// mpi::eval with cuda::options does, but nothing comes to the host), then:
//   sums, K·v, K·M, v·K, M·K, lazy × lazy   one ncclAllReduce (sum) in place on the outputs;
//   min, max, argmin, argmax, argkmin/max  each rank's sorted lists become ranking keys (the host's
//                                          order: numbers before NaN, ties to the lower global
//                                          index), ncclAllGather collects every rank's lists of a
//                                          chunk of rows, and one thread per row merges them, rank
//                                          after rank, into the outputs.
// logsumexp and softmax_sum merge with rescaling on the host path (mpi::eval with cuda::options).
// The planning and its agreement are mpi::eval's (prepare_reduced: the same errors on every rank
// before any work); the gather buffers — (ranks + 2) · k keys of 16 bytes per row of a chunk — come
// from the rank's budget through a device accountant, and a second agreement sizes the chunks by
// the smallest budget (every rank must send the same count) and refuses a budget below one row on
// every rank. The sums need no buffer. NCCL's own buffers are outside the budget, like MPI's.
// Results: selections equal one process's exactly; sums to rounding (NCCL's order of additions).
#pragma once
#if !defined(__CUDACC__)
#error "<memsafe/mpi/nccl.cuh> runs on the GPU and must be compiled by nvcc"
#else
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda.cuh"

namespace memsafe::mpi {

/// An NCCL communicator over the ranks of an MPI communicator, one GPU per rank (each rank's
/// current device when it is made). Collective to make and to destroy.
class nccl_comm {
 public:
  explicit nccl_comm(MPI_Comm comm) : mpi_(comm) {
    detail::check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    detail::check_mpi(MPI_Comm_size(comm, &ranks_), "MPI_Comm_size");
    require_own_gpus(comm);
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    detail::check_mpi(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, comm), "MPI_Bcast");
    check(ncclCommInitRank(&c_, ranks_, id, rank_), "ncclCommInitRank");
  }
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;
  ~nccl_comm() {
    if (c_) ncclCommDestroy(c_);
  }
  MPI_Comm mpi() const { return mpi_; }
  ncclComm_t get() const { return c_; }
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }

  /// NCCL runs one rank per GPU: two ranks on the same device make ncclCommInitRank fail with a bare
  /// "invalid usage" (seen with two ranks on one H200). Every rank's current device is compared by
  /// UUID first, and the clash is an argument_error on every rank, naming the ranks and the remedy.
  void require_own_gpus(MPI_Comm comm) const {
    int dev = 0;
    MEMSAFE_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    MEMSAFE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    std::vector<char> all(std::size_t(ranks_) * sizeof prop.uuid.bytes);
    detail::check_mpi(MPI_Allgather(prop.uuid.bytes, int(sizeof prop.uuid.bytes), MPI_BYTE, all.data(),
                                    int(sizeof prop.uuid.bytes), MPI_BYTE, comm),
                      "MPI_Allgather");
    const std::size_t u = sizeof prop.uuid.bytes;
    for (int a = 0; a < ranks_; ++a)
      for (int b = a + 1; b < ranks_; ++b)
        if (std::equal(all.begin() + a * u, all.begin() + (a + 1) * u, all.begin() + b * u))
          throw argument_error(memsafe::detail::cat(memsafe::detail::msg{
              "memsafe::mpi::nccl_comm: NCCL needs one GPU per rank, but ranks ", a, " and ", b,
              " both use the same device; select each rank's GPU (cudaSetDevice(local rank % device count)) before "
              "making the communicator, or merge on the host (mpi::eval without nccl_comm)"}));
  }

  /// memsafe::error naming the NCCL call and NCCL's reason.
  static void check(ncclResult_t r, const char* call) {
    if (r != ncclSuccess)
      throw error(memsafe::detail::cat(memsafe::detail::msg{"memsafe::mpi: ", call, " failed: ", ncclGetErrorString(r)}));
  }

 private:
  MPI_Comm mpi_;
  ncclComm_t c_ = nullptr;
  int rank_ = 0, ranks_ = 1;
};

/// What a device-output distributed evaluation did on this rank (`stats` includes the peak of the
/// gather buffers): the host eval_into's rank_stats.
using device_stats = rank_stats;

namespace detail {
namespace nccl_kernels {

using memsafe::cuda::detail::empty_key;
using memsafe::cuda::detail::key_value;
using memsafe::cuda::detail::make_key;
using memsafe::cuda::detail::rank_key;

/// Rows [r0, r0 + nr) of a local result with kl entries per row (kl ≤ k; 0: an empty shard) as k
/// ranking keys per row, local indices made global (+ offset); a value-only result (min, max)
/// takes `offset` as its index (it orders only equal values).
template <bool Max, class T>
__global__ void pack_keys(const T* values, const index_t* indices, std::int64_t kl, std::int64_t k, std::int64_t r0,
                          std::int64_t nr, index_t offset, rank_key* out) {
  const std::int64_t q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= nr * k) return;
  const std::int64_t r = q / k, c = q % k;
  rank_key key = empty_key();
  if (c < kl) {
    const std::int64_t at = (r0 + r) * kl + c;
    const index_t li = indices ? indices[at] : 0;
    if (li >= 0) key = make_key<Max>(values[at], indices ? li + offset : offset);
  }
  out[q] = key;
}

/// One thread per row: the P gathered lists of k sorted keys (rank p's rows at lists + p·nr·k)
/// merged rank after rank through `scratch`, then written as values and indices of rows r0 + r.
/// Nothing behind a key (a reduced extent of 0): ±inf and -1 for min/max, as the host.
template <bool Max, class T>
__global__ void merge_keys(rank_key* lists, rank_key* scratch, int P, std::int64_t nr, std::int64_t k,
                           std::int64_t r0, T* values, index_t* indices) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= nr) return;
  rank_key* acc = lists + r * k;
  rank_key* tmp = scratch + r * k;
  for (int p = 1; p < P; ++p) {
    const rank_key* b = lists + std::int64_t(p) * nr * k + r * k;
    std::int64_t ia = 0, ib = 0;
    for (std::int64_t q = 0; q < k; ++q) tmp[q] = (ib >= k || (ia < k && !(b[ib] < acc[ia]))) ? acc[ia++] : b[ib++];
    for (std::int64_t q = 0; q < k; ++q) acc[q] = tmp[q];
  }
  for (std::int64_t q = 0; q < k; ++q) {
    const rank_key key = acc[q];
    const bool nothing = key.i == ~0ull;
    T v = key_value<Max, T>(key);
    if (nothing) v = k == 1 ? (Max ? -math::detail::inf_v<T>() : math::detail::inf_v<T>()) : math::detail::nan_v<T>();
    values[(r0 + r) * k + q] = v;
    if (indices) indices[(r0 + r) * k + q] = nothing ? index_t(-1) : index_t(key.i);
  }
}

}  // namespace nccl_kernels

/// Max and WithIndex of a selection's merge rule.
template <class Rule>
struct select_traits;
template <class T, bool Max, bool WithIndex>
struct select_traits<select_rule<T, Max, WithIndex>> {
  static constexpr bool max_first = Max, with_index = WithIndex;
};

template <class T>
ncclDataType_t nccl_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "memsafe::mpi: NCCL merges float or double");
  return std::is_same_v<T, float> ? ncclFloat : ncclDouble;
}

/// The selections' gather: the agreement on chunk rows (the smallest budget over the ranks), the
/// budget check on every rank, then chunks of rows from the last to the first (a local result with
/// kl < k entries per row is read below where the merged rows are written).
template <class Rule, class T>
void gather_and_merge(const Rule& rule, const mpi::plan& p, std::size_t budget, std::size_t kl, bool empty,
                      T* values, index_t* indices, const nccl_comm& nc, cudaStream_t st, device_stats& ds) {
  namespace cd = memsafe::cuda::detail;
  using nccl_kernels::rank_key;
  const std::size_t k = rule.k, P = std::size_t(p.ranks);
  // Per row: its keys sent, every rank's gathered, and the merge's scratch; each buffer rounded to 256.
  const std::size_t per_row = (P + 2) * k * sizeof(rank_key), rounding = 3 * 256;
  std::vector<std::uint64_t> budgets(P);
  const std::uint64_t mine = budget;
  check_mpi(MPI_Allgather(&mine, 1, MPI_UINT64_T, budgets.data(), 1, MPI_UINT64_T, nc.mpi()), "MPI_Allgather");
  std::uint64_t least = mine;
  int poorest = p.rank;
  for (std::size_t r = 0; r < P; ++r)
    if (budgets[r] < least) least = budgets[r], poorest = int(r);
  if (least < per_row + rounding) {
    const std::string what = memsafe::detail::cat(memsafe::detail::msg{
        "the gathered lists of one row (", P, " ranks × k = ", k, " keys of 16 bytes, with the send and merge buffers)"});
    if (poorest == p.rank)
      memsafe::plan::too_small(memsafe::detail::cat(memsafe::detail::msg{"memsafe::mpi (NCCL): ", what}), budget,
                               per_row + rounding);
    throw budget_error(
        memsafe::detail::cat(memsafe::detail::msg{"memsafe::mpi: rank ", poorest, " cannot hold ", what, " within its budget"}),
        std::size_t(least), per_row + rounding);
  }
  const std::size_t chunk =
      std::max<std::size_t>(1, std::min<std::size_t>((std::size_t(least) - rounding) / per_row, p.rows));
  cd::device_accountant acc(budget, st);
  {
    cd::device_buffer<rank_key> send(acc, chunk * k), all(acc, P * chunk * k), scratch(acc, chunk * k);
    constexpr bool Max = select_traits<Rule>::max_first, WithIndex = select_traits<Rule>::with_index;
    const std::size_t chunks = (p.rows + chunk - 1) / chunk;
    for (std::size_t c = chunks; c-- > 0;) {
      const std::size_t r0 = c * chunk, nr = std::min(chunk, p.rows - r0);
      nccl_kernels::pack_keys<Max, T><<<cd::blocks_for(std::int64_t(nr * k)), 256, 0, st>>>(
          values, WithIndex ? indices : nullptr, std::int64_t(empty ? 0 : kl), std::int64_t(k), std::int64_t(r0),
          std::int64_t(nr), index_t(p.offset), send.data());
      MEMSAFE_CUDA_LAUNCHED("pack_keys");
      nccl_comm::check(ncclAllGather(send.data(), all.data(), nr * k * 2, ncclUint64, nc.get(), st), "ncclAllGather");
      nccl_kernels::merge_keys<Max, T><<<cd::blocks_for(std::int64_t(nr), 128), 128, 0, st>>>(
          all.data(), scratch.data(), int(P), std::int64_t(nr), std::int64_t(k), std::int64_t(r0), values,
          WithIndex ? indices : nullptr);
      MEMSAFE_CUDA_LAUNCHED("merge_keys");
      ds.comm.bytes_sent += nr * k * sizeof(rank_key);
      ds.comm.bytes_received += (P - 1) * nr * k * sizeof(rank_key);
    }
    ds.comm.chunk_rows = chunk;
    ds.comm.chunks = chunks;
    ds.comm.buffer_bytes = acc.counter().peak();
    MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
  }
  ds.stats.peak_temp_bytes = std::max(ds.stats.peak_temp_bytes, acc.counter().peak());
}

}  // namespace detail

/// shard_reduced into device outputs, merged by NCCL (see the file comment). `values` (and
/// `indices` for arg-reductions) are device memory, contiguous row-major rows × cols, as
/// memsafe::cuda::eval_into takes them; on return they hold the whole result on every rank.
/// Collective over the ranks of `nc`.
template <evaluable X>
device_stats eval_into(const X& x, const nccl_comm& nc, shard_reduced_t, typename X::value_type* values,
                       index_t* indices, const memsafe::cuda::options& o = {}) {
  using T = typename X::value_type;
  using Rule = typename detail::rule_of<X>::type;
  static_assert(!std::is_same_v<Rule, detail::lse_rule<T>> && !std::is_same_v<Rule, detail::softmax_rule<T>>,
                "memsafe::mpi: logsumexp and softmax_sum merge with rescaling on the host: use memsafe::mpi::eval "
                "with memsafe::cuda::options");
  namespace cd = memsafe::cuda::detail;
  const auto t0 = std::chrono::steady_clock::now();
  const detail::cuda_backend be{o};
  // The outputs' checks run inside the agreement: an error on one rank is raised on every rank.
  detail::distributed<X> d = detail::prepare_reduced(x, nc.mpi(), be, [&] {
    memsafe::detail::check_outputs(x, values, indices, "memsafe::mpi::eval_into (NCCL)");
    if (x.rows() * x.cols() > 0 && (cd::space_of(values) != cd::memory_space::device ||
                                    (indices && cd::space_of(indices) != cd::memory_space::device)))
      throw argument_error("memsafe::mpi::eval_into (NCCL): the outputs must be device memory (NCCL merges them on "
                           "the GPUs); for host outputs use memsafe::mpi::eval with memsafe::cuda::options");
  });
  const mpi::plan& p = d.p;

  std::unique_ptr<cd::stream> own;
  if (!o.stream) own = std::make_unique<cd::stream>();
  const cudaStream_t st = o.stream ? o.stream : own->get();
  memsafe::cuda::options lo = be.with(d.budget);
  lo.stream = st;

  device_stats ds;
  const std::size_t total = x.rows() * x.cols();
  if (!d.empty) ds.stats = memsafe::cuda::eval_into(d.local, values, indices, lo);
  ds.stats.budget_bytes = d.budget;
  const auto t1 = std::chrono::steady_clock::now();
  comm_stats& cs = ds.comm;
  cs.ranks = p.ranks;
  cs.rank = p.rank;
  cs.global_extent = p.global_extent;
  cs.offset = p.offset;
  if constexpr (requires { d.rule.k; }) {
    detail::gather_and_merge(d.rule, p, d.budget, d.kl, d.empty, values, indices, nc, st, ds);
  } else {
    if (d.empty && total) MEMSAFE_CUDA_CHECK(cudaMemsetAsync(values, 0, total * sizeof(T), st));
    if (total)
      nccl_comm::check(ncclAllReduce(values, values, total, detail::nccl_type<T>(), ncclSum, nc.get(), st),
                       "ncclAllReduce");
    MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
    cs.chunks = total ? 1 : 0;
    cs.chunk_rows = x.rows();
    cs.bytes_sent = cs.bytes_received = p.ranks > 1 ? 2 * total * sizeof(T) * std::size_t(p.ranks - 1) / std::size_t(p.ranks) : 0;
  }
  cs.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  ds.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ds;
}

}  // namespace memsafe::mpi
#endif
