// memsafe/mpi/eval.hpp — one expression evaluated by every rank of a communicator, each on its own
// shard of the data (views of its own memory), each under its own budget.
//
//   shard_reduced: each rank holds a shard of the points the reduction runs over (Y of a reduction
//                  over j, with v / M / V sharded alike; X of a reduction over i; the shared index
//                  of a lazy × lazy product); everything else is replicated. Each rank evaluates its
//                  shard with the host planner, the partial results are merged (mpi/merge.hpp) by a
//                  binomial-tree reduction and broadcast: every rank gets the whole result, equal
//                  to one process's (exactly for selections, to rounding for sums).
//   shard_rows:    each rank holds a shard of the result's rows (X of a reduction over j); the
//                  reduced operand is replicated. Each rank gets its own rows; nothing is sent but
//                  the agreement below.
//   shard_both:    each rank holds a shard of the result's rows (X) and a shard of the reduced
//                  operand (Y, with v / M / V sharded alike). The Y shards travel around a ring
//                  (mpi/ring.hpp) in chunks of rows all ranks agree on, two chunk buffers per rank
//                  (the one being evaluated and sent on, the one being received: nonblocking,
//                  overlapping the evaluation); each rank evaluates its X rows against every chunk
//                  with the host planner and merges into running partials by the same rules
//                  (mpi/merge.hpp). Each rank gets its own rows, equal to one process's; no rank
//                  ever holds another rank's whole shard.
//
// mpi::eval returns the rank's result; mpi::eval_into writes it into the caller's buffers (the same
// code: with shard_reduced the rank's partial result is evaluated into those outputs and the merged
// rows replace it there, so the rank holds the result once).
//
// Every call is collective and starts with an agreement (one MPI_Allgather of a fixed-size record
// per rank): each rank plans its shard first, and a budget too small, a bad argument or
// inconsistent shapes on any rank raises the same error on every rank before any work — never a
// hang. The communication buffers (two chunks of records — or, for shard_both, of Y rows: what a
// rank sends and what it receives) come from the rank's budget through the accountant, in chunks of
// rows all ranks agree on, as do shard_both's running partials; MPI's own internal buffers
// (eager-message pools) are outside it.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "../api/eval.hpp"
#include "merge.hpp"

namespace memsafe::mpi {

/// The reduced index is sharded across the ranks (see the file comment).
struct shard_reduced_t {};
/// The result's rows are sharded across the ranks (see the file comment).
struct shard_rows_t {};
/// Both: the result's rows and the reduced operand are sharded; the latter travels around a ring
/// in chunks of rows. `max_chunk_rows` (0: no cap) caps the chunks below what the budgets allow
/// (the least cap over the ranks wins): `mpi::shard_both_t{.max_chunk_rows = 4096}`.
struct shard_both_t {
  std::size_t max_chunk_rows = 0;
};
inline constexpr shard_reduced_t shard_reduced{};
inline constexpr shard_rows_t shard_rows{};
inline constexpr shard_both_t shard_both{};

/// What the distribution did on this rank.
struct comm_stats {
  int ranks = 1, rank = 0;
  std::size_t global_extent = 0;   ///< the reduced extent over all ranks (shard_reduced, shard_both)
  std::size_t offset = 0;          ///< this rank's first global index of the reduced extent
  std::size_t chunk_rows = 0;      ///< rows per communication chunk (the same on every rank)
  std::size_t chunks = 0;          ///< chunks of records (shard_reduced); chunk rounds of the ring (shard_both)
  std::size_t buffer_bytes = 0;    ///< communication buffers, counted in the budget
  std::size_t messages = 0;        ///< point-to-point messages this rank sent (shard_both)
  std::size_t bytes_sent = 0;      ///< point-to-point bytes this rank sent (tree reduction, ring)
  std::size_t bytes_received = 0;  ///< and received
  std::size_t bytes_broadcast = 0; ///< size of the broadcast result
  double seconds = 0;              ///< time in communication (agreement included)
};

/// A rank's result: memsafe::result plus what the distribution did.
template <class T>
struct result : memsafe::result<T> {
  comm_stats comm;
};

/// What mpi::eval_into did on this rank: its local evaluation and its communication.
struct rank_stats {
  eval_stats stats;  ///< the local evaluation's (with shard_reduced, the peak of the communication buffers included)
  comm_stats comm;
};

/// The distributed plan on this rank (collective: mpi::plan_for).
struct plan {
  std::string layout;           ///< "shard_reduced", "shard_rows" or "shard_both"
  std::string merge;            ///< how partial results merge (shard_reduced, shard_both)
  int ranks = 1, rank = 0;
  std::size_t local_extent = 0, global_extent = 0, offset = 0;
  std::size_t rows = 0, record_bytes = 0, chunk_rows = 0, chunks = 0, buffer_bytes = 0;
  std::size_t tree_steps = 0;   ///< ⌈log2 ranks⌉
  std::size_t bytes_per_rank = 0;  ///< what one rank sends at most in the tree, plus the broadcast; this rank's ring traffic
  // shard_both: the ring.
  std::size_t payload_row_bytes = 0;  ///< bytes of one row of the reduced operand on the wire (Y row + v/M/V row)
  std::size_t steps = 0;              ///< ring phases (chunk rounds × ranks), each one message per rank at most
  std::size_t partial_bytes = 0;      ///< running partials, a chunk's local result and the packing scratch;
                                      ///< shard_reduced: softmax_sum's log-sum-exps, held through the merge
  std::size_t eval_budget = 0;        ///< what a chunk's local evaluation may use (budget − buffers − partials)
  std::size_t bytes_received = 0;     ///< ring: what this rank receives
  tile_plan local;              ///< the local evaluation's plan (empty for an empty shard)
  bool local_empty = false;
  /// The distribution and its communication, then (with_local) the local evaluation's plan.
  std::string describe(bool with_local = true) const {
    std::ostringstream s;
    s << "distributed over " << ranks << " rank(s), this is rank " << rank << " (" << layout << ")\n";
    if (layout == "shard_reduced") {
      s << "  reduced index: this rank holds [" << offset << ", " << offset + local_extent << ") of " << global_extent
        << (local_empty ? " (empty shard: nothing evaluated here)" : "") << "\n";
      s << "  merge: " << merge << "; binomial-tree reduction (" << tree_steps << " step(s)) then broadcast\n";
      s << "  communication: " << rows << " row(s) × " << record_bytes << " B = " << format_bytes(rows * record_bytes)
        << " per message, in " << chunks << " chunk(s) of ≤ " << chunk_rows << " row(s); at most "
        << format_bytes(bytes_per_rank) << " sent per rank; buffers " << format_bytes(buffer_bytes)
        << " counted in the budget\n";
      if (partial_bytes)
        s << "  log-sum-exps of the scores: " << format_bytes(partial_bytes)
          << ", held through the merge, counted in the budget\n";
    } else if (layout == "shard_both") {
      s << "  result rows: this rank's " << rows << "; reduced index: this rank holds [" << offset << ", "
        << offset + local_extent << ") of " << global_extent << "\n";
      s << "  ring: the reduced operand's shards travel rank r -> r+1, " << payload_row_bytes << " B per row, in "
        << chunks << " chunk round(s) of <= " << chunk_rows << " row(s) (the same on every rank), " << steps
        << " step(s); two chunk buffers " << format_bytes(buffer_bytes) << ", nonblocking, overlapping the evaluation\n";
      s << "  merge: " << merge << ", into running partials (" << format_bytes(partial_bytes)
        << " with a chunk's local result)\n";
      s << "  communication: this rank sends " << format_bytes(bytes_per_rank) << " and receives "
        << format_bytes(bytes_received) << "; each chunk evaluated under " << format_bytes(eval_budget)
        << "; buffers and partials counted in the budget\n";
      if (!local_empty) s << "  this rank's rows against one chunk of " << chunk_rows << " row(s):\n";
    } else {
      s << "  this rank's rows: " << rows << "; no communication beyond the agreement\n";
    }
    if (with_local && !local_empty) s << local.describe();
    return s.str();
  }
};

namespace detail {
using namespace memsafe::detail;

/// The comm_stats a plan fixes before any message: ranks, extents, chunks and buffers.
inline comm_stats planned_comm(const mpi::plan& p) {
  comm_stats cs;
  cs.ranks = p.ranks;
  cs.rank = p.rank;
  cs.global_extent = p.global_extent;
  cs.offset = p.offset;
  cs.chunk_rows = p.chunk_rows;
  cs.chunks = p.chunks;
  cs.buffer_bytes = p.buffer_bytes;
  return cs;
}

/// One rank's planning outcome, exchanged by the agreement.
struct rank_info {
  std::uint64_t rows, cols, extent, need, budget, chunk_rows;
  std::uint64_t dim, rhs_cols;  // shard_both: what the ring's payload depends on
  std::uint64_t elem, kind;     // both layouts: the value size and the expression's type (reduction_kind)
  std::uint64_t dims;           // shard_reduced: the inputs' unsharded extents (input_dims)
  std::uint64_t params;         // both layouts: the formulas' parameters and the maps' constants (param_hash)
  std::int32_t failed;  // 0 ok, 1 budget_error, 2 shape_error, 3 argument_error, 4 other error
  char message[300];
};

/// FNV-1a (64-bit) over bytes: a checksum of what the ranks must hold alike (the agreement's hashes
/// here; mpi::sgpr's checksums of Z, the hyperparameters and the options).
struct checksum {
  std::uint64_t h = 14695981039346656037ull;
  void add(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void add(const T& v) {
    add(&v, sizeof(T));
  }
};
/// The expression's type, hashed: ranks that built different reductions (min here, max there) or
/// different expressions with one merge rule (rbf here, matern32 there; sqdist or l1; over i or j)
/// differ. (The merge rule's type alone let those through, merged.)
template <class X>
std::uint64_t reduction_kind() {
  const char* name = typeid(X).name();
  checksum c;
  c.add(name, std::strlen(name));
  return c.h;
}
/// Walks the expression tree in a fixed order: leaf(n) on each pairwise leaf (points x, y and the
/// formula's params), node(n) on every other class node before its operands (e; a, b).
template <class N, class Leaf, class Node>
void visit_nodes(const N& n, const Leaf& leaf, const Node& node) {
  if constexpr (requires { n.x.cols(); n.y.cols(); n.params; }) {
    leaf(n);
  } else if constexpr (std::is_class_v<N>) {
    node(n);
    if constexpr (requires { n.e; }) visit_nodes(n.e, leaf, node);
    if constexpr (requires { n.a; n.b; }) {
      visit_nodes(n.a, leaf, node);
      visit_nodes(n.b, leaf, node);
    }
  }
}
/// The extents no layout shards, hashed in the expression's order: each pairwise leaf's point
/// dimension d and each right-hand side's (v, M, softmax's V) columns. Ranks whose points differ in
/// d would merge distances of different spaces (shard_both compares d in its own agreement).
template <class X>
std::uint64_t input_dims(const X& x) {
  checksum c;
  const auto add = [&](std::size_t v) { c.add(std::uint64_t(v)); };
  visit_nodes(
      x,
      [&](const auto& p) {
        add(p.x.cols());
        add(p.y.cols());
      },
      [&](const auto& n) {
        if constexpr (requires { n.rhs.cols(); }) add(n.rhs.cols());
        if constexpr (requires { n.values.cols(); }) add(n.values.cols());
      });
  return c.h;
}
/// The run-time values of the expression, hashed by their bits: each pairwise formula's parameters
/// (variance, α, the lengthscale's scale, the sign of y, the ARD lengthscales or per-dimension
/// variances) and each elementwise map's constant. Ranks that built rbf(X, Y, 1) here and
/// rbf(X, Y, 3) there merged partials of two kernels (found by probing); the type hash cannot see it.
template <class X>
std::uint64_t param_hash(const X& x) {
  checksum c;
  visit_nodes(
      x,
      [&](const auto& p) {
        c.add(p.params.variance);
        c.add(p.params.alpha);
        c.add(p.params.acc_scale);
        c.add(p.params.y_sign);
        c.add(static_cast<int>(p.params.kind));
        if (p.params.per_dim)
          for (std::size_t k = 0; k < p.x.cols(); ++k) c.add(p.params.per_dim[k]);
      },
      [&](const auto& n) {
        if constexpr (requires { n.op.c; }) c.add(n.op.c);
      });
  return c.h;
}
/// argument_error when rank r's values or reduction differ from this rank's (rank-dependent code):
/// the records would not match in size, or would merge by another rule. who: "…: rank ".
template <class X>
void check_same_reduction(const rank_info& a, const rank_info& me, int r, int rank, const char* who, const X& x) {
  if (a.elem != me.elem)
    throw argument_error(cat(msg{who, r, "'s values are ", a.elem * 8, "-bit but rank ", rank, "'s are ", me.elem * 8,
                                 "-bit (", x.str(), ")"}));
  if (a.kind != me.kind)
    throw argument_error(cat(msg{who, r, "'s expression is not the one rank ", rank,
                                 " evaluates (another reduction, formula or form: ", x.str(), ")"}));
  if (a.params != me.params)
    throw argument_error(cat(msg{who, r, "'s formula parameters (lengthscale, variance, alpha, ARD lengthscales) or ",
                                 "elementwise constants differ from rank ", rank, "'s (", x.str(), ")"}));
}

inline void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw error(cat(msg{"memsafe::mpi: ", call, " failed: ", std::string_view(text, std::size_t(len))}));
}

inline void note_failure(rank_info& me, int kind, const char* what) {
  me.failed = kind;
  std::strncpy(me.message, what, sizeof(me.message) - 1);
  me.message[sizeof(me.message) - 1] = 0;
}

/// Every rank's info; the same error on every rank when any rank failed to plan.
inline std::vector<rank_info> agree(rank_info me, MPI_Comm comm, int rank) {
  int ranks = 1;
  check_mpi(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
  std::vector<rank_info> all(static_cast<std::size_t>(ranks) + 0);
  check_mpi(MPI_Allgather(&me, int(sizeof(rank_info)), MPI_BYTE, all.data(), int(sizeof(rank_info)), MPI_BYTE, comm),
            "MPI_Allgather");
  for (int r = 0; r < ranks; ++r) {
    const rank_info& x = all[std::size_t(r)];
    if (!x.failed) continue;
    const std::string text = r == rank ? std::string(x.message)
                                       : cat(msg{"memsafe::mpi: rank ", r, " cannot evaluate its shard: ", x.message});
    switch (x.failed) {
      case 1: throw budget_error(text, x.budget, x.need);
      case 2: throw shape_error(text);
      case 3: throw argument_error(text);
      default: throw error(text);
    }
  }
  return all;
}

/// A rank's own checks before it plans (mpi::eval_into's outputs), run inside the agreement so that
/// their error is raised on every rank: none.
struct no_check {
  void operator()() const {}
};

/// Runs `plan_local` (which returns the bytes the local evaluation needs at least), catching what
/// it throws into `me` so that the agreement can raise it on every rank.
template <class F>
void plan_guarded(rank_info& me, F&& plan_local) {
  try {
    me.need = std::max<std::uint64_t>(me.need, plan_local());
  } catch (const budget_error& e) {
    me.need = std::max<std::uint64_t>(me.need, e.minimum_bytes);
    note_failure(me, 1, e.what());
  } catch (const shape_error& e) {
    note_failure(me, 2, e.what());
  } catch (const argument_error& e) {
    note_failure(me, 3, e.what());
  } catch (const std::exception& e) {
    note_failure(me, 4, e.what());
  }
}

inline int rank_of(MPI_Comm comm) {
  int r = 0;
  check_mpi(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
  return r;
}

/// The local expression: a top-k over a shard with fewer than k points keeps what it has.
template <class X>
X localize(const X& x, std::size_t extent) {
  X l = x;
  if constexpr (requires { l.r.k; }) l.r.k = std::min<std::size_t>(l.r.k, extent);
  return l;
}

/// softmax_sum's merge rule (its partial sums come with the log-sum-exps of their scores).
template <class X>
inline constexpr bool is_softmax = std::is_same_v<typename rule_of<X>::type, softmax_rule<typename X::value_type>>;

/// How a rank evaluates its shard: on the host (this policy) or on its GPU (host_backend's twin
/// in mpi/cuda.cuh, chosen by passing memsafe::cuda::options). Both give memsafe::result<T>.
struct host_backend {
  options o;
  std::size_t budget() const { return resolve_budget(o.budget); }
  /// The least bytes a local evaluation needs (its plan's minimum).
  template <class X>
  std::size_t minimum(const X& x) const {
    return memsafe::plan_for(x, options{unlimited, o.threads}).min_bytes;
  }
  template <class X>
  tile_plan plan(const X& x, std::size_t b) const {
    return memsafe::plan_for(x, options{b, o.threads});
  }
  template <class X>
  memsafe::result<typename X::value_type> eval(const X& x, std::size_t b) const {
    return memsafe::eval(x, options{b, o.threads});
  }
  /// Into row-major outputs in host memory (checked by mpi::eval_into against the whole expression).
  template <class X>
  eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, std::size_t b) const {
    return host::run(x, values, indices, options{b, o.threads});
  }
  template <class X>
  std::string explain(const X& x) const {
    return memsafe::explain(x, o);
  }
  /// What the local evaluation would refuse after the agreement, checked before it (in
  /// plan_guarded, so that every rank raises it): softmax_sum's V must be finite (this rank's rows).
  template <class X>
  void check_values(const X& x) const {
    if constexpr (is_softmax<X>) host::check_softmax_values(x.values);
  }
  /// Rows [r0, r0 + nr) of `src` into `dst`, contiguous (the ring's own chunk, before it is sent).
  template <class T>
  void gather(T* dst, const matrix_view<const T>& src, std::size_t r0, std::size_t nr) const {
    const std::size_t c = src.cols(), rs = src.row_stride(), cs = src.col_stride();
    for (std::size_t r = 0; r < nr; ++r) {
      const T* a = src.data() + (r0 + r) * rs;
      if (cs == 1) std::memcpy(dst + r * c, a, c * sizeof(T));
      else
        for (std::size_t q = 0; q < c; ++q) dst[r * c + q] = a[q * cs];
    }
  }
  /// Whether gather can read `src` (it always can on the host).
  template <class T>
  void check_gather(const matrix_view<const T>&) const {}
};

/// Everything the distributed evaluation decides before any work (collective).
template <class X>
struct distributed {
  using rule_t = typename rule_of<X>::type;
  distributed(X l, rule_t r) : local(std::move(l)), rule(r) {}
  X local;
  rule_t rule;
  std::size_t extent = 0, kl = 0, budget = 0;
  std::size_t lse_bytes = 0;  ///< shard_reduced, softmax_sum: its scores' log-sum-exps, held through the merge
  std::size_t need = 0;       ///< the least budget this rank's evaluation fits in
  std::size_t lse_need = 0;   ///< softmax_sum: the least budget its log-sum-exps' evaluation fits in
  bool empty = false;
  mpi::plan p;
};

template <class X>
typename rule_of<X>::type make_rule(const X& x) {
  typename rule_of<X>::type r;
  if constexpr (requires { r.k; }) r.k = x.cols();
  if constexpr (requires { r.c; }) r.c = x.cols();
  if constexpr (requires { r.dv; }) r.dv = x.cols();
  return r;
}

/// softmax_sum's log-sum-exps of its scores (of this rank's shard, or of a chunk), the second
/// local evaluation beside its partial sums.
template <class E>
auto local_lse(const E& local) {
  return make_reduce<red::logsumexp>(local.e);
}

/// The least bytes a partial result needs: the local evaluation's plan minimum (and, for
/// softmax_sum, that of the log-sum-exp of its scores, the second local pass).
template <class X, class B>
std::size_t minimum_partial(const B& be, const X& local) {
  std::size_t need = be.minimum(local);
  if constexpr (is_softmax<X>) need = std::max(need, be.minimum(local_lse(local)));
  return need;
}
/// A partial result: the local evaluation (and, for softmax_sum, the log-sum-exp of its scores).
template <class X, class B, class T = typename X::value_type>
void eval_partial(const B& be, const X& local, std::size_t budget, memsafe::result<T>& loc, memsafe::result<T>& lse) {
  loc = be.eval(local, budget);
  if constexpr (is_softmax<X>) lse = be.eval(local_lse(local), budget);
}
/// A selection needs a point to return and k ≤ the reduced extent over all ranks (every rank
/// checks the same numbers, so every rank raises the same error).
template <class X, class Rule>
void check_global_k(const X& x, const Rule& rule, std::size_t global) {
  // (value-only min and max, k = 1, have the identity ±∞ over an empty index, as one process gives)
  if constexpr (requires { rule.k; } && rule_has_indices<Rule>) {
    if (global == 0)
      throw argument_error(cat(msg{"memsafe::mpi: ", x.str(),
                                   ": the reduced index is empty on every rank, so there is no index to return"}));
    if (rule.k > global)
      throw argument_error(cat(msg{"memsafe::mpi: ", x.str(), ": k = ", rule.k,
                                   " is larger than the reduced extent over all ranks (", global, ")"}));
  }
}

template <class X, class B, class Pre = no_check>
distributed<X> prepare_reduced(const X& x, MPI_Comm comm, const B& be, const Pre& pre = {}) {
  static_assert(rule_of<X>::supported,
                "memsafe::mpi: shard_reduced merges reductions (sum, min, max, argmin, argmax, argkmin, argkmax, "
                "logsumexp), products K*v, K*M, v*K, M*K, softmax_sum and lazy x lazy products; shard dense(E), "
                "product chains and batches by rows (memsafe::mpi::shard_rows)");
  const int rank = rank_of(comm);
  distributed<X> d{localize(x, rule_of<X>::extent(x)), make_rule(x)};
  d.extent = rule_of<X>::extent(x);
  d.empty = d.extent == 0;
  rank_info me{};
  me.rows = x.rows();
  me.cols = x.cols();
  me.extent = d.extent;
  me.elem = sizeof(typename X::value_type);
  me.kind = reduction_kind<X>();
  me.dims = input_dims(x);
  me.params = param_hash(x);
  plan_guarded(me, [&] {
    pre();
    be.check_values(d.local);
    d.budget = be.budget();
    me.budget = d.budget;
    // softmax_sum: the log-sum-exps of its scores (one per row) are evaluated after its partial
    // sums and held, in the budget, through the merge beside the communication buffers.
    if constexpr (is_softmax<X>)
      if (!d.empty)
        d.lse_bytes = checked_mul(x.rows(), sizeof(typename X::value_type), "memsafe::mpi: the log-sum-exps");
    if (d.rule.row_bytes() > std::size_t(INT_MAX))  // MPI counts are int: a message carries whole rows
      throw argument_error(cat(msg{"memsafe::mpi: shard_reduced: one row of the partial result of ", x.str(), " is ",
                                   d.rule.row_bytes(), " bytes, more than one MPI message carries (", INT_MAX,
                                   "); evaluate its columns in parts"}));
    std::size_t need = d.lse_bytes + 2 * d.rule.row_bytes();  // the smallest chunk: one row sent, one received
    if (!d.empty) {
      need = std::max(need, be.minimum(d.local));
      if constexpr (is_softmax<X>) {
        d.lse_need = be.minimum(local_lse(d.local));
        need = std::max(need, d.lse_bytes + d.lse_need);
      }
    }
    d.need = need;
    if (need > d.budget)
      memsafe::plan::too_small(cat(msg{"the shard of ", x.str(), is_softmax<X> ? ", its log-sum-exps" : "",
                                       " and its communication buffers"}),
                               d.budget, need);
    const std::size_t cap = std::size_t(INT_MAX) / 2;
    // A result with no columns (K·M with M of 0 columns) has rows of 0 bytes: nothing to send.
    me.chunk_rows = d.rule.row_bytes() == 0
                        ? std::max<std::size_t>(1, x.rows())
                        : std::max<std::size_t>(1, std::min(d.budget - d.lse_bytes, cap) / 2 / d.rule.row_bytes());
    return need;
  });
  const auto all = agree(me, comm, rank);
  const int ranks = int(all.size());
  std::size_t global = 0, offset = 0, chunk = SIZE_MAX;
  for (int r = 0; r < ranks; ++r) {
    const rank_info& a = all[std::size_t(r)];
    check_same_reduction(a, me, r, rank, "memsafe::mpi: shard_reduced: rank ", x);
    if (a.rows != me.rows || a.cols != me.cols)
      throw shape_error(cat(msg{"memsafe::mpi: shard_reduced: every rank must have a result of the same shape, ",
                                "but rank ", r, "'s is ", shape_str(a.rows, a.cols), " and rank ", rank, "'s is ",
                                shape_str(me.rows, me.cols), " (the reduced index is the sharded one: ", x.str(),
                                ")"}));
    if (a.dims != me.dims)
      throw shape_error(cat(msg{"memsafe::mpi: shard_reduced: rank ", r, "'s points or right-hand side differ from rank ",
                                rank, "'s in their dimension or columns (", x.str(), ")"}));
    global += a.extent;
    if (r < rank) offset += a.extent;
    chunk = std::min<std::size_t>(chunk, a.chunk_rows);
  }
  check_global_k(x, d.rule, global);
  d.kl = std::min<std::size_t>(x.cols(), d.extent);
  mpi::plan& p = d.p;
  p.layout = "shard_reduced";
  p.merge = rule_of<X>::type::name;
  p.ranks = ranks;
  p.rank = rank;
  p.local_extent = d.extent;
  p.global_extent = global;
  p.offset = offset;
  p.rows = x.rows();
  p.record_bytes = d.rule.row_bytes();
  p.chunk_rows = p.rows ? std::min(chunk, p.rows) : 0;
  p.chunks = p.chunk_rows ? (p.rows + p.chunk_rows - 1) / p.chunk_rows : 0;
  p.buffer_bytes = 2 * p.chunk_rows * p.record_bytes;
  std::size_t steps = 0;
  while ((std::size_t(1) << steps) < std::size_t(ranks)) ++steps;
  p.tree_steps = steps;
  p.bytes_per_rank = ranks > 1 ? p.rows * p.record_bytes * (1 + steps) : 0;
  p.partial_bytes = d.lse_bytes;
  p.local_empty = d.empty;
  if (!d.empty) p.local = be.plan(d.local, d.budget);
  return d;
}

/// Binomial-tree reduction to rank 0, then a broadcast: `buf` (nr records) ends up equal on every
/// rank. `tmp` receives a partner's records.
template <class Rule>
void tree_allreduce(const Rule& rule, std::byte* buf, std::byte* tmp, std::size_t nr, MPI_Comm comm, int rank,
                    int ranks, comm_stats& cs) {
  if (ranks == 1) return;  // one rank: its records are the result
  const int bytes = int(nr * rule.row_bytes());
  for (int mask = 1; mask < ranks; mask <<= 1) {
    if (rank & mask) {
      check_mpi(MPI_Send(buf, bytes, MPI_BYTE, rank - mask, 7301, comm), "MPI_Send");
      cs.bytes_sent += std::size_t(bytes);
      break;
    }
    if (rank + mask < ranks) {
      check_mpi(MPI_Recv(tmp, bytes, MPI_BYTE, rank + mask, 7301, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      cs.bytes_received += std::size_t(bytes);
      rule.merge(buf, tmp, nr);
    }
  }
  check_mpi(MPI_Bcast(buf, bytes, MPI_BYTE, 0, comm), "MPI_Bcast");
  cs.bytes_broadcast += std::size_t(bytes);
}

/// A target's own checks (mpi::eval_into's buffers), if it has any.
template <class X, class Target>
void check_target(const X& x, const Target& t) {
  if constexpr (requires { t.check(x); }) t.check(x);
}

/// A selection's rows of kl < k entries (a shard with fewer than k points), written at the front of
/// outputs sized for k per row: moved to their places k apart, from the last entry back (none is
/// overwritten before it has moved), and padded with "nothing" (NaN, index −1), which the merge
/// ranks after every point.
template <class T>
void spread_rows(T* values, index_t* indices, std::size_t rows, std::size_t kl, std::size_t k) {
  for (std::size_t r = rows; r-- > 0;)
    for (std::size_t q = k; q-- > 0;) {
      values[r * k + q] = q < kl ? values[r * kl + q] : std::numeric_limits<T>::quiet_NaN();
      if (indices) indices[r * k + q] = q < kl ? indices[r * kl + q] : -1;
    }
}

/// The backend's evaluation of `x` into row-major outputs: straight into them where the backend
/// evaluates into caller memory (the host's), else through its result, copied.
template <class B, class X, class T = typename X::value_type>
eval_stats eval_to(const B& be, const X& x, std::size_t budget, T* values, index_t* indices) {
  if constexpr (requires { be.eval_into(x, values, indices, budget); }) {
    return be.eval_into(x, values, indices, budget);
  } else {
    const memsafe::result<T> r = be.eval(x, budget);
    std::copy(r.values.begin(), r.values.end(), values);
    if constexpr (X::has_indices) std::copy(r.indices.begin(), r.indices.end(), indices);
    return r.stats;
  }
}

template <class X, class B, class Target, class T = typename X::value_type>
rank_stats run_reduced(const X& x, MPI_Comm comm, const B& be, Target&& target) {
  const auto t0 = std::chrono::steady_clock::now();
  distributed<X> d = prepare_reduced(x, comm, be, [&] { check_target(x, target); });
  const mpi::plan& p = d.p;
  const double t_agree = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const output<T> out = target(x.rows(), x.cols());  // the rank's outputs, once all is agreed and planned

  // The shard's partial result, evaluated into the outputs themselves (each chunk of rows is
  // packed into the communication buffer before its merged rows are unpacked over it); for
  // softmax_sum also the log-sum-exp of its scores.
  rank_stats st;
  std::size_t kl = d.kl;
  if (!d.empty) st.stats = eval_to(be, d.local, d.budget, out.values, out.indices);
  accountant acc(d.budget);
  // softmax_sum: the log-sum-exps of its scores, evaluated under what they leave of the budget.
  temp_buffer<T> lse(acc, d.lse_bytes / sizeof(T));
  if (!d.empty) {
    if constexpr (is_softmax<X>) {
      const eval_stats ls = eval_to(be, local_lse(d.local), d.budget - d.lse_bytes, lse.data(),
                                    static_cast<index_t*>(nullptr));
      st.stats.peak_temp_bytes = std::max(st.stats.peak_temp_bytes, d.lse_bytes + ls.peak_temp_bytes);
    }
    if constexpr (requires { d.rule.k; })
      if (kl < d.rule.k) {
        spread_rows(out.values, out.indices, p.rows, kl, d.rule.k);
        kl = d.rule.k;
      }
  }
  st.stats.budget_bytes = d.budget;
  const partial<T> loc{out.values, out.indices, lse.data()};

  const auto t1 = std::chrono::steady_clock::now();
  st.comm = planned_comm(p);
  comm_stats& cs = st.comm;
  {
    temp_buffer<std::byte> mine(acc, p.chunk_rows * p.record_bytes), theirs(acc, p.chunk_rows * p.record_bytes);
    for (std::size_t r0 = 0; r0 < p.rows; r0 += p.chunk_rows) {
      const std::size_t nr = std::min(p.chunk_rows, p.rows - r0);
      pack_rows(d.rule, loc, d.empty, kl, index_t(p.offset), r0, nr, mine.data());
      tree_allreduce(d.rule, mine.data(), theirs.data(), nr, comm, p.rank, p.ranks, cs);
      d.rule.unpack(mine.data(), r0, nr, out);
    }
    st.stats.peak_temp_bytes = std::max(st.stats.peak_temp_bytes, acc.peak());
  }
  cs.seconds = t_agree + std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  st.stats.min_budget_bytes = std::max<std::size_t>(st.stats.min_budget_bytes, d.need);
  st.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

template <class X, class B, class Pre = no_check>
mpi::plan prepare_rows(const X& x, MPI_Comm comm, const B& be, std::size_t& budget, const Pre& pre = {}) {
  const int rank = rank_of(comm);
  rank_info me{};
  me.rows = x.rows();
  me.cols = x.cols();
  plan_guarded(me, [&] {
    pre();
    // mpi::argkmin & co. leave k ≤ extent to the layout: here the reduced operand is whole on every
    // rank, so the local extent is the global one (k > m returned index −1 and NaN, unchecked)
    if constexpr (rule_of<X>::supported) check_global_k(x, make_rule(x), rule_of<X>::extent(x));
    budget = be.budget();
    me.budget = budget;
    const std::size_t need = be.minimum(x);
    if (need > budget) memsafe::plan::too_small(x.str(), budget, need);
    return need;
  });
  const auto all = agree(me, comm, rank);
  mpi::plan p;
  p.layout = "shard_rows";
  p.ranks = int(all.size());
  p.rank = rank;
  p.rows = x.rows();
  p.local = be.plan(x, budget);
  return p;
}

template <class X, class B, class Target>
rank_stats run_rows(const X& x, MPI_Comm comm, const B& be, Target&& target) {
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t budget = 0;
  const mpi::plan p = prepare_rows(x, comm, be, budget, [&] { check_target(x, target); });
  const double t_agree = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto out = target(x.rows(), x.cols());
  rank_stats st;
  st.stats = eval_to(be, x, budget, out.values, out.indices);
  st.comm.ranks = p.ranks;
  st.comm.rank = p.rank;
  st.comm.seconds = t_agree;
  return st;
}

template <class X, class B>
mpi::plan plan_of(const X& x, MPI_Comm comm, shard_reduced_t, const B& be) {
  return prepare_reduced(x, comm, be).p;
}
template <class X, class B>
mpi::plan plan_of(const X& x, MPI_Comm comm, shard_rows_t, const B& be) {
  std::size_t budget = 0;
  return prepare_rows(x, comm, be, budget);
}
template <class X, class B>
mpi::plan plan_of(const X& x, MPI_Comm comm, shard_both_t s, const B& be);  // mpi/ring.hpp
template <class X, class B, class Target>
rank_stats run_both(const X& x, MPI_Comm comm, shard_both_t s, const B& be, Target&& target);  // mpi/ring.hpp

/// mpi::eval's result, sized once the ranks have agreed and planned (a budget error allocates nothing).
template <class X, class Run, class T = typename X::value_type>
mpi::result<T> rank_result(const X&, Run&& run) {
  mpi::result<T> r;
  const rank_stats st = run([&](std::size_t rows, std::size_t cols) {
    r.rows = rows;
    r.cols = cols;
    r.values.assign(rows * cols, T(0));
    if constexpr (X::has_indices) r.indices.assign(rows * cols, -1);
    return output<T>{r.values.data(), X::has_indices ? r.indices.data() : nullptr};
  });
  r.stats = st.stats;
  r.comm = st.comm;
  return r;
}
/// mpi::eval_into's target: the caller's buffers, checked against the inputs and each other
/// (check, run inside the agreement: an error on one rank is raised on every rank).
template <class T>
struct caller_buffers {
  T* values;
  index_t* indices;
  template <class X>
  void check(const X& x) const {
    check_outputs(x, values, indices, "memsafe::mpi::eval_into");
  }
  output<T> operator()(std::size_t, std::size_t) const { return {values, indices}; }
};

template <class X, class Shard, class B>
std::string explain_of(const X& x, MPI_Comm comm, Shard s, const B& be) {
  const mpi::plan p = plan_of(x, comm, s, be);
  std::string out = p.describe();
  if constexpr (std::is_same_v<Shard, shard_both_t>)
    out = cat(msg{"as written:   ", x.str(), "\n", out});  // describe() ends with the plan of one chunk
  else if (!p.local_empty)  // the local explain already holds the local plan: print it once
    out = be.explain(localize(x, p.local_extent ? p.local_extent : x.cols())) + p.describe(false);
  return out;
}

}  // namespace detail

/// Evaluate a reduction whose reduced index is sharded across the ranks of `comm` (collective).
/// Every rank gets the whole result.
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_reduced_t, const options& o = {}) {
  return detail::rank_result(x, [&](auto&& target) { return detail::run_reduced(x, comm, detail::host_backend{o}, target); });
}
/// Evaluate an expression whose result rows are sharded across the ranks of `comm` (collective:
/// the ranks agree on the plans first). Each rank gets its own rows.
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_rows_t, const options& o = {}) {
  return detail::rank_result(x, [&](auto&& target) { return detail::run_rows(x, comm, detail::host_backend{o}, target); });
}
/// Evaluate a reduction whose result rows (X) and reduced operand (Y, with v / M / V) are both
/// sharded across the ranks of `comm` (collective): the Y shards travel around a ring in chunks.
/// Each rank gets its own rows, indices global (into the concatenation of the Y shards).
template <evaluable X>
mpi::result<typename X::value_type> eval(const X& x, MPI_Comm comm, shard_both_t s, const options& o = {}) {
  return detail::rank_result(x, [&](auto&& target) { return detail::run_both(x, comm, s, detail::host_backend{o}, target); });
}
/// mpi::eval into the caller's buffers: `values` (and `indices` for arg-reductions), contiguous
/// row-major rows × cols of what this rank gets — the whole result with shard_reduced, its own
/// rows with shard_rows and shard_both — host memory, as memsafe::eval_into takes them. Nothing
/// is allocated for the result: with shard_reduced the rank's partial result is evaluated into
/// the outputs and the merged rows replace it there. Collective; the same agreement first (an
/// error on any rank is raised on every rank before any output is written), which also checks the
/// outputs as memsafe::eval_into does: argument_error, on every rank, when on any rank an output
/// is null, an index output is missing, or an output shares memory with an input or the other.
template <evaluable X, class Shard>
rank_stats eval_into(const X& x, MPI_Comm comm, Shard s, typename X::value_type* values, index_t* indices,
                     const options& o = {}) {
  static_assert(std::is_same_v<Shard, shard_reduced_t> || std::is_same_v<Shard, shard_rows_t> ||
                    std::is_same_v<Shard, shard_both_t>,
                "memsafe::mpi::eval_into: the layout is mpi::shard_reduced, mpi::shard_rows or mpi::shard_both");
  const detail::caller_buffers<typename X::value_type> target{values, X::has_indices ? indices : nullptr};
  const detail::host_backend be{o};
  if constexpr (std::is_same_v<Shard, shard_reduced_t>) return detail::run_reduced(x, comm, be, target);
  else if constexpr (std::is_same_v<Shard, shard_rows_t>) return detail::run_rows(x, comm, be, target);
  else return detail::run_both(x, comm, s, be, target);
}
/// The distributed plan on this rank (collective; nothing evaluated).
template <evaluable X, class Shard>
mpi::plan plan_for(const X& x, MPI_Comm comm, Shard s, const options& o = {}) {
  return detail::plan_of(x, comm, s, detail::host_backend{o});
}
/// memsafe::explain of this rank's shard, then the distribution and its communication (collective).
template <evaluable X, class Shard>
std::string explain(const X& x, MPI_Comm comm, Shard s, const options& o = {}) {
  return detail::explain_of(x, comm, s, detail::host_backend{o});
}

/// Selections whose shard may hold fewer than k points, or none: built without the one-process
/// check k ≤ the (local) reduced extent; mpi::eval checks k against the extent over all ranks.
template <lazy_matrix E>
auto argkmin(const E& e, std::size_t k) {
  if (k == 0) throw argument_error("memsafe::mpi::argkmin: k must be at least 1");
  return memsafe::detail::make_reduce(e, red::argkmin{k});
}
template <lazy_matrix E>
auto argkmax(const E& e, std::size_t k) {
  if (k == 0) throw argument_error("memsafe::mpi::argkmax: k must be at least 1");
  return memsafe::detail::make_reduce(e, red::argkmax{k});
}
template <lazy_matrix E>
auto argmin(const E& e) { return memsafe::detail::make_reduce<red::argmin>(e); }
template <lazy_matrix E>
auto argmax(const E& e) { return memsafe::detail::make_reduce<red::argmax>(e); }

}  // namespace memsafe::mpi

#include "ring.hpp"
