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
//   logsumexp, softmax_sum                 each rank's log-sum-exps of a chunk of rows gathered
//                                          (ncclAllGather) and combined per row as the host merge
//                                          does (in double; NaN, then +inf, win); softmax_sum's
//                                          outputs weighted by exp(lse_rank − lse) on each rank,
//                                          then one ncclAllReduce (sum); softmax_sum holds its own
//                                          log-sum-exps (one per row) in the budget through the merge.
// The planning and its agreement are mpi::eval's (prepare_reduced: the same errors on every rank
// before any work); the gather buffers — (ranks + 2) · k keys of 16 bytes per row of a chunk, or
// ranks log-sum-exps per row — come from the rank's budget through a device accountant, and a
// second agreement, also before any work, sizes the chunks by the smallest room (every rank must
// send the same count) and refuses a budget below one row on every rank. The sums need no buffer.
// NCCL's own buffers are outside the budget, like MPI's. Results: selections equal one process's
// exactly; sums, log-sum-exps and softmax_sum to rounding (NCCL's order of additions).
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

/// n values set to v (a shard with no points: its log-sum-exps are −inf).
template <class T>
__global__ void fill(T* out, std::int64_t n, T v) {
  const std::int64_t q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q < n) out[q] = v;
}

/// Row r's log-sum-exp over the P ranks (rank p's of the chunk's nr rows at all + p·nr), combined
/// rank after rank in double as the host merge does (lse_combine: NaN, then +inf, win; −inf is nothing).
template <class T>
__device__ double lse_over_ranks(const T* all, int P, std::int64_t nr, std::int64_t r) {
  double l = double(all[r]);
  for (int p = 1; p < P; ++p) l = lse_combine(l, double(all[std::int64_t(p) * nr + r]));
  return l;
}

/// logsumexp: rows [r0, r0 + nr) of the result, from the gathered log-sum-exps.
template <class T>
__global__ void merge_lse(const T* all, int P, std::int64_t nr, std::int64_t r0, T* values) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < nr) values[r0 + r] = T(lse_over_ranks(all, P, nr, r));
}

/// softmax_sum, before the sum over the ranks: this rank's normalised output of rows [r0, r0 + nr)
/// (dv values per row) weighted by exp(lse_rank − lse), lse the row's log-sum-exp over all ranks;
/// weight 0 (and the output not read) where this rank's scores are all −inf or it holds no point;
/// NaN where the row has no finite log-sum-exp (a NaN or +inf score, or none finite), so that the
/// sum is NaN there, as the host merge's (the same lse_finite and lse_weight). One thread per row.
template <class T>
__global__ void weigh_softmax(const T* all, int P, int rank, std::int64_t nr, std::int64_t r0, std::int64_t dv,
                              T* values) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= nr) return;
  const double l = lse_over_ranks(all, P, nr, r);
  T* v = values + (r0 + r) * dv;
  if (!lse_finite(l)) {
    for (std::int64_t q = 0; q < dv; ++q) v[q] = math::detail::nan_v<T>();
    return;
  }
  const double w = lse_weight(double(all[std::int64_t(rank) * nr + r]), l);
  for (std::int64_t q = 0; q < dv; ++q) v[q] = w == 0.0 ? T(0) : T(w * double(v[q]));
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

/// Before any work, on every rank in step: the rows per chunk of a gather that every rank runs with
/// the same count (sized by the smallest room over the ranks). A rank needs `fixed` bytes beside
/// `per_row` bytes per row of a chunk, and at least `need` bytes (≥ fixed + per_row) in all; one whose
/// budget is below its need raises too_small naming that need, and every other rank a budget_error
/// naming the rank and `what`.
inline std::size_t agree_chunk(const mpi::plan& p, MPI_Comm comm, std::size_t budget, std::size_t need,
                               std::size_t fixed, std::size_t per_row, const std::string& what) {
  const std::size_t P = std::size_t(p.ranks);
  // Per rank: its budget, its need and its room for rows (0 below its need); `fixed` may differ
  // between ranks (a shard with no points holds no log-sum-exps).
  const std::uint64_t mine[3] = {budget, need, budget >= need ? budget - fixed : 0};
  std::vector<std::uint64_t> all(3 * P);
  check_mpi(MPI_Allgather(mine, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, comm), "MPI_Allgather");
  std::uint64_t least = UINT64_MAX;
  std::size_t poorest = 0;
  for (std::size_t r = 0; r < P; ++r)
    if (all[3 * r + 2] < least) least = all[3 * r + 2], poorest = r;
  if (least < per_row) {
    if (int(poorest) == p.rank)
      memsafe::plan::too_small(memsafe::detail::cat(memsafe::detail::msg{"memsafe::mpi (NCCL): ", what}), budget, need);
    throw budget_error(memsafe::detail::cat(memsafe::detail::msg{"memsafe::mpi: rank ", poorest, " cannot hold ", what,
                                                                 " within its budget"}),
                       std::size_t(all[3 * poorest]), std::size_t(all[3 * poorest + 1]));
  }
  return std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(least) / per_row, p.rows));
}

/// Selections: per row, its keys sent, every rank's gathered, and the merge's scratch, each buffer
/// rounded to 256 bytes.
inline std::size_t select_chunk(const mpi::plan& p, MPI_Comm comm, std::size_t budget, std::size_t k) {
  const std::size_t per_row = (std::size_t(p.ranks) + 2) * k * sizeof(nccl_kernels::rank_key), fixed = 3 * 256;
  return agree_chunk(p, comm, budget, fixed + per_row, fixed, per_row,
                     memsafe::detail::cat(memsafe::detail::msg{"the gathered lists of one row (", p.ranks,
                                                               " ranks × k = ", k,
                                                               " keys of 16 bytes, with the send and merge buffers)"}));
}

/// The selections' gather, in chunks of `chunk` rows (select_chunk) from the last to the first (a
/// local result with kl < k entries per row is read below where the merged rows are written).
template <class Rule, class T>
void gather_and_merge(const Rule& rule, const mpi::plan& p, std::size_t budget, std::size_t chunk, std::size_t kl,
                      bool empty, T* values, index_t* indices, const nccl_comm& nc, cudaStream_t st, device_stats& ds) {
  namespace cd = memsafe::cuda::detail;
  using nccl_kernels::rank_key;
  const std::size_t k = rule.k, P = std::size_t(p.ranks);
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

/// logsumexp and softmax_sum: each chunk's log-sum-exps (this rank's `lse`, rows r0…; −inf for a
/// shard with no points) gathered into `all` — in place, this rank's slot copied first — then
/// combined per row: logsumexp's rows written as the result, softmax_sum's local outputs weighted
/// by exp(lse_rank − lse) (weigh_softmax) for the sum over the ranks that follows.
template <bool Softmax, class T>
void gather_lse(const mpi::plan& p, memsafe::cuda::detail::device_accountant& acc, std::size_t chunk, const T* lse,
                bool empty, std::size_t dv, T* values, const nccl_comm& nc, cudaStream_t st, device_stats& ds) {
  namespace cd = memsafe::cuda::detail;
  const std::size_t P = std::size_t(p.ranks);
  cd::device_buffer<T> all(acc, P * chunk);
  const std::size_t chunks = (p.rows + chunk - 1) / chunk;
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t r0 = c * chunk, nr = std::min(chunk, p.rows - r0);
    T* slot = all.data() + std::size_t(p.rank) * nr;
    if (empty) {
      nccl_kernels::fill<T><<<cd::blocks_for(std::int64_t(nr)), 256, 0, st>>>(slot, std::int64_t(nr),
                                                                              -math::detail::inf_v<T>());
      MEMSAFE_CUDA_LAUNCHED("fill");
    } else {
      MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(slot, lse + r0, nr * sizeof(T), cudaMemcpyDeviceToDevice, st));
    }
    nccl_comm::check(ncclAllGather(slot, all.data(), nr, nccl_type<T>(), nc.get(), st), "ncclAllGather");
    if constexpr (Softmax) {
      nccl_kernels::weigh_softmax<T><<<cd::blocks_for(std::int64_t(nr), 128), 128, 0, st>>>(
          all.data(), int(P), p.rank, std::int64_t(nr), std::int64_t(r0), std::int64_t(dv), values);
      MEMSAFE_CUDA_LAUNCHED("weigh_softmax");
    } else {
      nccl_kernels::merge_lse<T><<<cd::blocks_for(std::int64_t(nr), 128), 128, 0, st>>>(
          all.data(), int(P), std::int64_t(nr), std::int64_t(r0), values);
      MEMSAFE_CUDA_LAUNCHED("merge_lse");
    }
    ds.comm.bytes_sent += nr * sizeof(T);
    ds.comm.bytes_received += (P - 1) * nr * sizeof(T);
  }
  ds.comm.chunk_rows = chunk;
  ds.comm.chunks = chunks;
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
  constexpr bool is_lse = std::is_same_v<Rule, detail::lse_rule<T>>, is_softmax = detail::is_softmax<X>;
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
  const std::size_t total = x.rows() * x.cols();

  // The gathers' chunks, agreed before any work (a budget too small for them fails on every rank):
  // the selections' ranking keys; the log-sum-exps of logsumexp and softmax_sum — softmax_sum holding
  // its own (rounded to 256 bytes) through the merge, and evaluating them under what that leaves.
  std::size_t chunk = 0;
  [[maybe_unused]] std::size_t lse_held = 0;
  if constexpr (requires { d.rule.k; }) {
    if (total) chunk = detail::select_chunk(p, nc.mpi(), d.budget, d.rule.k);
  } else if constexpr (is_lse || is_softmax) {
    lse_held = cd::device_accountant::round(d.lse_bytes);
    const std::size_t per_row = std::size_t(p.ranks) * sizeof(T), fixed = lse_held + 256;
    std::size_t need = fixed + per_row;
    if constexpr (is_softmax)
      if (!d.empty) need = std::max(need, lse_held + d.lse_need);  // planned by prepare_reduced
    if (total)
      chunk = detail::agree_chunk(p, nc.mpi(), d.budget, need, fixed, per_row,
                                  memsafe::detail::cat(memsafe::detail::msg{
                                      "the gathered log-sum-exps of one row (", p.ranks, " ranks × ", sizeof(T),
                                      " bytes", is_softmax ? ", beside this rank's, one per row" : "", ")"}));
  }

  std::unique_ptr<cd::stream> own;
  if (!o.stream) {  // an internal stream runs after what the caller queued on stream 0, as cuda::eval's
    own = std::make_unique<cd::stream>();
    cd::after_default_streams(own->get());
  }
  const cudaStream_t st = o.stream ? o.stream : own->get();
  memsafe::cuda::options lo = be.with(d.budget);
  lo.stream = st;

  device_stats ds;
  if (!d.empty) ds.stats = memsafe::cuda::eval_into(d.local, values, indices, lo);
  ds.stats.budget_bytes = d.budget;
  const auto t1 = std::chrono::steady_clock::now();
  comm_stats& cs = ds.comm;
  cs.ranks = p.ranks;
  cs.rank = p.rank;
  cs.global_extent = p.global_extent;
  cs.offset = p.offset;
  if constexpr (requires { d.rule.k; }) {
    if (total) detail::gather_and_merge(d.rule, p, d.budget, chunk, d.kl, d.empty, values, indices, nc, st, ds);
  } else {
    if constexpr (is_lse || is_softmax) {
      if (total) {
        cd::device_accountant acc(d.budget, st);
        {
          cd::device_buffer<T> lse;
          const T* own_lse = values;  // logsumexp: the local result is the rank's log-sum-exps
          if constexpr (is_softmax) {
            if (!d.empty) {
              lse = cd::device_buffer<T>(acc, x.rows());
              memsafe::cuda::options ll = be.with(d.budget - lse_held);
              ll.stream = st;
              const eval_stats ls = memsafe::cuda::eval_into(detail::local_lse(d.local), lse.data(), nullptr, ll);
              ds.stats.peak_temp_bytes = std::max(ds.stats.peak_temp_bytes, lse_held + ls.peak_temp_bytes);
            }
            own_lse = lse.data();
          }
          detail::gather_lse<is_softmax, T>(p, acc, chunk, own_lse, d.empty, x.cols(), values, nc, st, ds);
          MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
        }
        cs.buffer_bytes = acc.counter().peak() - lse_held;
        ds.stats.peak_temp_bytes = std::max(ds.stats.peak_temp_bytes, acc.counter().peak());
      }
    }
    if constexpr (!is_lse) {  // sums, products and the weighted softmax_sum outputs: added over the ranks
      if (d.empty && total && !is_softmax) MEMSAFE_CUDA_CHECK(cudaMemsetAsync(values, 0, total * sizeof(T), st));
      if (total)
        nccl_comm::check(ncclAllReduce(values, values, total, detail::nccl_type<T>(), ncclSum, nc.get(), st),
                         "ncclAllReduce");
      MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));
      const std::size_t reduced =
          p.ranks > 1 ? 2 * total * sizeof(T) * std::size_t(p.ranks - 1) / std::size_t(p.ranks) : 0;
      cs.bytes_sent += reduced;
      cs.bytes_received += reduced;
      if constexpr (!is_softmax) {
        cs.chunks = total ? 1 : 0;
        cs.chunk_rows = x.rows();
      }
    }
  }
  cs.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  ds.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ds;
}

}  // namespace memsafe::mpi
#endif
