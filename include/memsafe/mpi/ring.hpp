// memsafe/mpi/ring.hpp — shard_both: the result's rows (X) and the reduced operand (Y, with the
// rows of v / M / V) both sharded across the ranks, as views of each rank's own memory; the Y
// shards travel around a ring. Reached through <memsafe/mpi.hpp> (mpi::eval(x, comm,
// mpi::shard_both, options)).
//
// The ring. All ranks agree on `chunk_rows` C (the least any rank's budget allows). Chunk t of
// shard q is rows [t·C, (t+1)·C) of rank q's Y shard (fewer, or none, at the end of a shorter
// shard). Round t, step s (s = 0 … P−1): rank r holds chunk t of shard q = r − s (mod P) in its
// current buffer — at s = 0 its own chunk, gathered there only to be sent (it is evaluated in
// place, as a view of the rank's memory) — and, while it evaluates its X rows against it, sends
// it on to r + 1 (MPI_Isend) and receives chunk t of shard r − s − 1 from r − 1 (MPI_Irecv) into
// its other buffer; then the two buffers swap. Every chunk visits every rank once; at step P − 1
// nothing is sent (the chunk has been everywhere). One rank: no buffers, its shard in one chunk
// (unless capped by shard_both_t::max_chunk_rows). A rank with no Y shard still forwards, a rank
// with no X rows still forwards and evaluates nothing. Two chunk buffers
// per rank — the one read (evaluated and sent) and the one written (received) — so the
// double buffering costs no more memory than a blocking MPI_Sendrecv would.
//
// Each chunk is evaluated with the backend's planner (the expression rebuilt with the chunk as
// its Y operand and v / M / V rows), and its partial result merges into running partials by the
// rules of mpi/merge.hpp, with the chunk's global offset (its shard's offset + t·C): selections
// exactly (ties to the lower global index), sums to rounding. At the end the partials unpack
// into the rank's rows of the result.
//
// Budget (per rank, through one accountant): the two chunk buffers (2·C·(d + c)·sizeof(T)), the
// running partials (rows × record bytes), a chunk's local result while it merges (reserved: it is
// a memsafe::result) and a packing scratch of 8 records; the local evaluation gets what is left. Two
// agreements (mpi/eval.hpp's detail::agree) precede any work: shapes, dimensions, value types and
// each rank's minimum first; then each rank's plan for a chunk of the agreed size. An error on any
// rank is raised on every rank, never a hang; a failure during the ring itself (not expected after
// the agreements, short of running out of system memory) lets the rank keep forwarding and is
// raised on every rank after the ring (one MPI_Allreduce).
#pragma once
#include <exception>
#include <typeinfo>

#include "eval.hpp"

namespace memsafe::mpi::detail {

/// Lazy trees the ring can rebuild around another column operand: pairwise leaves, elementwise
/// maps and transposes (not diag_plus, tensor sums or guarded nodes).
template <class E>
struct ring_tree : std::false_type {};
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
struct ring_tree<pairwise<F, T, RX, RY, D>> : std::true_type {};
template <class Op, class E>
struct ring_tree<unary_expr<Op, E>> : ring_tree<E> {};
template <class Op, class A, class B>
struct ring_tree<binary_expr<Op, A, B>> : std::bool_constant<ring_tree<A>::value && ring_tree<B>::value> {};
template <class E>
struct ring_tree<transpose_expr<E>> : ring_tree<E> {};

/// A lazy matrix with its column operand (the points indexed by j) replaced — or its row operand:
/// a transpose swaps the two. Replaced operands get dynamic row extents (a chunk's row count).
struct retarget {
  template <class T>
  using view = matrix_view<const T>;

  template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
  static auto cols(const pairwise<F, T, RX, RY, D>& p, const view<T>& y) {
    return pairwise<F, T, RX, dyn, D>{
        {}, p.x, matrix_view<const T, dyn, D>(y.data(), y.rows(), y.cols(), y.row_stride(), y.col_stride()), p.params};
  }
  template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
  static auto rows(const pairwise<F, T, RX, RY, D>& p, const view<T>& x) {
    return pairwise<F, T, dyn, RY, D>{
        {}, matrix_view<const T, dyn, D>(x.data(), x.rows(), x.cols(), x.row_stride(), x.col_stride()), p.y, p.params};
  }
  template <class Op, class E, class T>
  static auto cols(const unary_expr<Op, E>& u, const view<T>& y) {
    auto e = cols(u.e, y);
    return unary_expr<Op, decltype(e)>{{}, e, u.op};
  }
  template <class Op, class E, class T>
  static auto rows(const unary_expr<Op, E>& u, const view<T>& x) {
    auto e = rows(u.e, x);
    return unary_expr<Op, decltype(e)>{{}, e, u.op};
  }
  template <class Op, class A, class B, class T>
  static auto cols(const binary_expr<Op, A, B>& b, const view<T>& y) {
    auto l = cols(b.a, y);
    auto r = cols(b.b, y);
    return binary_expr<Op, decltype(l), decltype(r)>{{}, l, r, b.op};
  }
  template <class Op, class A, class B, class T>
  static auto rows(const binary_expr<Op, A, B>& b, const view<T>& x) {
    auto l = rows(b.a, x);
    auto r = rows(b.b, x);
    return binary_expr<Op, decltype(l), decltype(r)>{{}, l, r, b.op};
  }
  template <class E, class T>
  static auto cols(const transpose_expr<E>& t, const view<T>& y) {
    auto e = rows(t.e, y);
    return transpose_expr<decltype(e)>{{}, e};
  }
  template <class E, class T>
  static auto rows(const transpose_expr<E>& t, const view<T>& x) {
    auto e = cols(t.e, x);
    return transpose_expr<decltype(e)>{{}, e};
  }

  /// Every leaf's column operand (or row operand).
  template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
  static void col_views(const pairwise<F, T, RX, RY, D>& p, std::vector<view<T>>& out) {
    out.push_back(view<T>(p.y));
  }
  template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
  static void row_views(const pairwise<F, T, RX, RY, D>& p, std::vector<view<T>>& out) {
    out.push_back(view<T>(p.x));
  }
  template <class Op, class E, class T>
  static void col_views(const unary_expr<Op, E>& u, std::vector<view<T>>& out) { col_views(u.e, out); }
  template <class Op, class E, class T>
  static void row_views(const unary_expr<Op, E>& u, std::vector<view<T>>& out) { row_views(u.e, out); }
  template <class Op, class A, class B, class T>
  static void col_views(const binary_expr<Op, A, B>& b, std::vector<view<T>>& out) {
    col_views(b.a, out);
    col_views(b.b, out);
  }
  template <class Op, class A, class B, class T>
  static void row_views(const binary_expr<Op, A, B>& b, std::vector<view<T>>& out) {
    row_views(b.a, out);
    row_views(b.b, out);
  }
  template <class E, class T>
  static void col_views(const transpose_expr<E>& t, std::vector<view<T>>& out) { row_views(t.e, out); }
  template <class E, class T>
  static void row_views(const transpose_expr<E>& t, std::vector<view<T>>& out) { col_views(t.e, out); }
};

/// The evaluable nodes shard_both supports, rebuilt around a chunk: the reduced operand's points
/// `y` and (products, softmax_sum) the matching rows `rhs` of v / M / V.
template <class X>
struct ring_node {
  static constexpr bool supported = false;
};
template <class R, class E>
struct ring_node<reduce_expr<R, E>> {
  static constexpr bool supported = ring_tree<E>::value;
  static constexpr bool has_rhs = false;
  using T = typename E::value_type;
  static matrix_view<const T> rhs(const reduce_expr<R, E>&) { return {nullptr, 0, 0}; }
  static auto rebuild(const reduce_expr<R, E>& x, const matrix_view<const T>& y, const matrix_view<const T>&) {
    auto e = retarget::cols(x.e, y);
    return reduce_expr<R, decltype(e)>{{}, e, x.r};
  }
};
template <class E, bool L>
struct ring_node<matmul_expr<E, L>> {
  static constexpr bool supported = ring_tree<E>::value;
  static constexpr bool has_rhs = true;
  using T = typename E::value_type;
  static matrix_view<const T> rhs(const matmul_expr<E, L>& x) { return x.rhs; }
  static auto rebuild(const matmul_expr<E, L>& x, const matrix_view<const T>& y, const matrix_view<const T>& r) {
    auto e = retarget::cols(x.e, y);
    return matmul_expr<decltype(e), L>{{}, e, r, x.vector_out, x.transpose_out};
  }
};
template <class E>
struct ring_node<softmax_sum_expr<E>> {
  static constexpr bool supported = ring_tree<E>::value;
  static constexpr bool has_rhs = true;
  using T = typename E::value_type;
  static matrix_view<const T> rhs(const softmax_sum_expr<E>& x) { return x.values; }
  static auto rebuild(const softmax_sum_expr<E>& x, const matrix_view<const T>& y, const matrix_view<const T>& r) {
    auto e = retarget::cols(x.e, y);
    return softmax_sum_expr<decltype(e)>{{}, e, r};
  }
};

/// X evaluated against a chunk: `y` its rows of the reduced operand, `rhs` the matching rows of
/// v / M / V; a top-k keeps min(k, chunk rows).
template <class X, class T>
auto chunk_expr(const X& x, const matrix_view<const T>& y, const matrix_view<const T>& rhs) {
  return localize(ring_node<X>::rebuild(x, y, rhs), y.rows());
}

/// The reduced operand: the column operand every leaf shares (one point set travels).
template <class X, class T = typename X::value_type>
matrix_view<const T> ring_operand(const X& x) {
  std::vector<matrix_view<const T>> v;
  retarget::col_views(x.e, v);
  for (const auto& w : v)
    if (!rewrite::same_view(w, v.front()))
      throw argument_error(cat(msg{"memsafe::mpi: shard_both: ", x.str(),
                                   ": every pairwise leaf must take the same (sharded) points as its reduced operand — "
                                   "one point set travels around the ring; here they differ (",
                                   v.front().shape(), " and ", w.shape(), ")"}));
  return v.front();
}

/// Everything the ring decides before any work (collective).
template <class X>
struct ring_setup {
  using T = typename X::value_type;
  using rule_t = typename rule_of<X>::type;
  rule_t rule;
  matrix_view<const T> y{nullptr, 0, 0}, rhs{nullptr, 0, 0};
  std::size_t budget = 0, rows = 0, d = 0, c = 0;
  std::size_t payload = 0;       ///< bytes per row on the wire: d + c values
  std::size_t result_bytes = 0;  ///< a chunk's local result (memsafe::result), reserved while it merges
  std::size_t scratch_rows = 0;  ///< rows packed at a time before they merge
  std::size_t fixed = 0;         ///< partials + result + scratch
  std::size_t need = 0;          ///< this rank's least budget
  std::size_t chunk = 0, rounds = 0, eval_budget = 0;
  std::vector<std::size_t> extents, offsets;
  mpi::plan p;
  std::size_t rows_of(std::size_t q, std::size_t t) const {
    const std::size_t m = extents[q];
    return t * chunk >= m ? 0 : std::min(chunk, m - t * chunk);
  }
};

/// A chunk of `nr` rows for planning only: every row aliases the first of a small dummy (the host
/// planner's byte model does not depend on the row stride).
template <class X, class T>
auto planning_chunk(const X& x, const std::vector<T>& dummy, std::size_t nr, std::size_t d, std::size_t c) {
  return chunk_expr(x, matrix_view<const T>(dummy.data(), nr, d, 0, 1), matrix_view<const T>(dummy.data() + d, nr, c, 0, 1));
}

template <class X, class B, class Pre = no_check>
ring_setup<X> prepare_both(const X& x, MPI_Comm comm, shard_both_t opt, const B& be, const Pre& pre = {}) {
  static_assert(ring_node<X>::supported,
                "memsafe::mpi: shard_both ships the reduced operand around a ring: it supports reductions over j "
                "(sum, min, max, argmin, argmax, argkmin, argkmax, logsumexp), K*v, K*M, v*K and softmax_sum of "
                "pairwise formulas and elementwise maps of them; use shard_reduced (lazy x lazy) or shard_rows");
  using T = typename X::value_type;
  ring_setup<X> g;
  g.rule = make_rule(x);
  g.rows = x.rows();
  const int rank = rank_of(comm);
  int nranks = 1;
  check_mpi(MPI_Comm_size(comm, &nranks), "MPI_Comm_size");
  const bool ring = nranks > 1;  // one rank: nothing travels, no buffers
  const std::size_t rec = g.rule.row_bytes();
  rank_info me{};
  me.rows = x.rows();
  me.cols = x.cols();
  me.elem = sizeof(T);
  me.kind = reduction_kind<X>() ^ (ring_node<X>::has_rhs ? 1u : 0u);
  me.params = param_hash(x);
  std::size_t min_eval = 0;
  plan_guarded(me, [&] {
    pre();
    be.check_values(x);  // this rank's shard of the reduced operand, named by its own rows
    g.budget = be.budget();
    me.budget = g.budget;
    if constexpr (requires { x.transpose_out; })
      if (x.transpose_out)
        throw argument_error(cat(msg{"memsafe::mpi: shard_both: ", x.str(),
                                     ": M*K (a transposed result) is not supported; write it as K^T*M^T, or use "
                                     "shard_reduced"}));
    g.y = ring_operand(x);
    if constexpr (ring_node<X>::has_rhs) g.rhs = ring_node<X>::rhs(x);
    g.d = g.y.cols();
    g.c = g.rhs.cols();
    me.extent = g.y.rows();
    me.dim = g.d;
    me.rhs_cols = g.c;
    be.check_gather(g.y);
    if constexpr (ring_node<X>::has_rhs) be.check_gather(g.rhs);
    g.payload = std::max<std::size_t>(1, (g.d + g.c) * sizeof(T));
    if (g.payload > std::size_t(INT_MAX))  // MPI counts are int: a message carries whole rows
      throw argument_error(cat(msg{"memsafe::mpi: shard_both: one row of the points and dense operand of ", x.str(),
                                   " is ", g.payload, " bytes, more than one MPI message carries (", INT_MAX,
                                   "); shard by rows (shard_reduced) or split the columns"}));
    g.result_bytes = x.rows() * x.cols() * (sizeof(T) + (X::has_indices ? sizeof(index_t) : 0)) +
                     (is_softmax<X> ? x.rows() * sizeof(T) : 0);
    g.scratch_rows = std::min<std::size_t>(x.rows(), 8);
    g.fixed = checked_mul(x.rows(), rec, "memsafe::mpi: shard_both: the running partials") + g.result_bytes +
              g.scratch_rows * rec;
    if (x.rows() != 0) {
      // The largest chunk result a chunk can give: a top-k keeps k per row, so plan k rows.
      std::size_t rep = 1;
      if constexpr (requires { g.rule.k; }) rep = std::max<std::size_t>(1, g.rule.k);
      const std::vector<T> dummy(g.d + g.c + 1);
      min_eval = minimum_partial(be, planning_chunk(x, dummy, rep, g.d, g.c));
    }
    const std::size_t need = g.fixed + (ring ? 2 * g.payload : 0) + min_eval;
    if (need > g.budget)
      memsafe::plan::too_small(cat(msg{"the rows of ", x.str(), ", their running partials and two chunks of the ring"}),
                               g.budget, need);
    // Half of what is left after the partials and the evaluation's minimum goes to the two buffers.
    const std::size_t left = g.budget - g.fixed - min_eval;
    me.chunk_rows = std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(INT_MAX) / g.payload, left / 2 / (2 * g.payload)));
    if (opt.max_chunk_rows) me.chunk_rows = std::min(me.chunk_rows, opt.max_chunk_rows);
    return need;
  });
  g.need = me.need;
  const auto all = agree(me, comm, rank);
  const int ranks = int(all.size());
  std::size_t chunk = SIZE_MAX, maxext = 0;
  g.extents.resize(all.size());
  g.offsets.resize(all.size());
  std::size_t global = 0;
  for (int r = 0; r < ranks; ++r) {
    const rank_info& a = all[std::size_t(r)];
    const char* who = "memsafe::mpi: shard_both: rank ";
    check_same_reduction(a, me, r, rank, who, x);
    if (a.dim != me.dim)
      throw shape_error(cat(msg{who, r, "'s points have d = ", a.dim, " but rank ", rank, "'s have d = ", me.dim,
                                " (", x.str(), ")"}));
    if (a.rhs_cols != me.rhs_cols)
      throw shape_error(cat(msg{who, r, "'s dense operand (v / M / V) has ", a.rhs_cols, " column(s) but rank ", rank,
                                "'s has ", me.rhs_cols, " (", x.str(), ")"}));
    if (a.cols != me.cols)
      throw shape_error(cat(msg{who, r, "'s result has ", a.cols, " column(s) per row but rank ", rank, "'s has ",
                                me.cols, " (the same k, or c, everywhere: ", x.str(), ")"}));
    g.extents[std::size_t(r)] = a.extent;
    g.offsets[std::size_t(r)] = global;
    global += a.extent;
    maxext = std::max<std::size_t>(maxext, a.extent);
    chunk = std::min<std::size_t>(chunk, a.chunk_rows);
  }
  check_global_k(x, g.rule, global);
  // One rank: its shard in one chunk unless capped.
  if (!ring) chunk = opt.max_chunk_rows ? opt.max_chunk_rows : maxext;
  g.chunk = std::max<std::size_t>(1, std::min(chunk, maxext));
  g.rounds = (maxext + g.chunk - 1) / g.chunk;
  const std::size_t buffers = ring ? 2 * g.chunk * g.payload : 0;
  g.eval_budget = g.budget - g.fixed - buffers;

  mpi::plan& p = g.p;
  p.layout = "shard_both";
  p.merge = rule_of<X>::type::name;
  p.ranks = ranks;
  p.rank = rank;
  p.local_extent = g.extents[std::size_t(rank)];
  p.global_extent = global;
  p.offset = g.offsets[std::size_t(rank)];
  p.rows = g.rows;
  p.record_bytes = rec;
  p.chunk_rows = g.chunk;
  p.chunks = g.rounds;
  p.steps = g.rounds * std::size_t(ranks);
  p.payload_row_bytes = g.payload;
  p.buffer_bytes = buffers;
  p.partial_bytes = g.fixed;
  p.eval_budget = g.eval_budget;
  if (ranks > 1) {
    p.bytes_per_rank = (global - g.extents[std::size_t((rank + 1) % ranks)]) * g.payload;
    p.bytes_received = (global - p.local_extent) * g.payload;
  }
  p.local_empty = g.rows == 0 || maxext == 0;

  // Second agreement: each rank's plan for a chunk of the agreed size under what is left.
  rank_info me2{};
  me2.budget = g.budget;
  plan_guarded(me2, [&] {
    if (p.local_empty) return std::size_t(0);
    const std::vector<T> dummy(g.d + g.c + 1);
    // A backend may plan a chunk as its eval will see it (the GPU's: the chunk and the outputs in
    // host memory, staged), rather than as plan_for assumes.
    const auto plan_chunk = [&](const auto& e) {
      if constexpr (requires { be.plan_chunk(e, g.eval_budget); }) return be.plan_chunk(e, g.eval_budget);
      else return be.plan(e, g.eval_budget);
    };
    try {
      p.local = plan_chunk(planning_chunk(x, dummy, g.chunk, g.d, g.c));
      if constexpr (is_softmax<X>) (void)plan_chunk(local_lse(planning_chunk(x, dummy, g.chunk, g.d, g.c)));
    } catch (const budget_error& e) {
      memsafe::plan::too_small(cat(msg{"the rows of ", x.str(), " against a chunk of ", g.chunk, " row(s)"}), g.budget,
                               g.fixed + p.buffer_bytes + e.minimum_bytes);
    }
    return std::size_t(0);
  });
  (void)agree(me2, comm, rank);
  return g;
}

template <class X, class B, class Target>
rank_stats run_both(const X& x, MPI_Comm comm, shard_both_t opt, const B& be, Target&& target) {
  using T = typename X::value_type;
  using clock = std::chrono::steady_clock;
  const auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  const auto t0 = clock::now();
  const ring_setup<X> g = prepare_both(x, comm, opt, be, [&] { check_target(x, target); });
  const mpi::plan& p = g.p;
  double t_comm = since(t0);

  const output<T> out = target(x.rows(), x.cols());  // the rank's outputs, once all is agreed and planned
  rank_stats st;
  st.comm = planned_comm(p);
  comm_stats& cs = st.comm;

  const std::size_t rec = g.rule.row_bytes(), C = g.chunk, d = g.d, c = g.c;
  const int P = p.ranks, r = p.rank, next = (r + 1) % P, prev = (r + P - 1) % P;
  std::size_t peak = 0, evals = 0;
  std::exception_ptr failed;
  eval_stats last{};
  {
    accountant acc(g.budget);
    const std::size_t bufsize = P > 1 ? C * g.payload : 0;
    temp_buffer<std::byte> buf_a(acc, bufsize), buf_b(acc, bufsize), part(acc, g.rows * rec),
        scratch(acc, g.scratch_rows * rec);
    pack_rows(g.rule, partial<T>{}, true, 0, 0, 0, g.rows, part.data());  // the identity of the merge
    std::byte* cur = buf_a.data();
    std::byte* nxt = buf_b.data();
    for (std::size_t t = 0; t < g.rounds; ++t)
      for (int s = 0; s < P; ++s) {
        const std::size_t q = std::size_t((r - s + P) % P);  // whose chunk t this rank holds now
        const std::size_t nr = g.rows_of(q, t);
        if (s == 0 && nr && P > 1) {  // this rank's own chunk, packed to be sent
          be.gather(reinterpret_cast<T*>(cur), g.y, t * C, nr);
          if (c) be.gather(reinterpret_cast<T*>(cur) + nr * d, g.rhs, t * C, nr);
        }
        MPI_Request req[2];
        int nreq = 0;
        auto tc = clock::now();
        if (s + 1 < P) {
          if (nr) {
            check_mpi(MPI_Isend(cur, int(nr * g.payload), MPI_BYTE, next, 7302, comm, &req[nreq++]), "MPI_Isend");
            cs.bytes_sent += nr * g.payload;
            ++cs.messages;
          }
          const std::size_t ni = g.rows_of(std::size_t((r - s - 1 + 2 * P) % P), t);
          if (ni) {
            check_mpi(MPI_Irecv(nxt, int(ni * g.payload), MPI_BYTE, prev, 7302, comm, &req[nreq++]), "MPI_Irecv");
            cs.bytes_received += ni * g.payload;
          }
        }
        t_comm += since(tc);
        if (nr && g.rows && !failed) try {  // this rank's rows against the chunk it holds (being sent on meanwhile)
          // Its own chunk straight from its memory; another rank's from the buffer.
          const T* yb = reinterpret_cast<const T*>(cur);
          const matrix_view<const T> yv =
              s == 0 ? matrix_view<const T>(g.y.data() + t * C * g.y.row_stride(), nr, d, g.y.row_stride(), g.y.col_stride())
                     : matrix_view<const T>(yb, nr, d, d, 1);
          const matrix_view<const T> rv =
              s == 0 ? matrix_view<const T>(g.rhs.data() + t * C * g.rhs.row_stride(), nr, c, g.rhs.row_stride(),
                                            g.rhs.col_stride())
                     : matrix_view<const T>(yb + nr * d, nr, c, c, 1);
          const auto local = chunk_expr(x, yv, rv);
          acc.reserve(g.result_bytes);
          memsafe::result<T> loc, lse;
          try {
            eval_partial(be, local, g.eval_budget, loc, lse);
          } catch (...) {
            acc.release(g.result_bytes);
            throw;
          }
          peak = std::max(peak, acc.current() + std::max(loc.stats.peak_temp_bytes, lse.stats.peak_temp_bytes));
          const std::size_t kl = std::min<std::size_t>(x.cols(), nr);
          const index_t off = index_t(g.offsets[q] + t * C);
          for (std::size_t r0 = 0; r0 < g.rows; r0 += g.scratch_rows) {
            const std::size_t n2 = std::min(g.scratch_rows, g.rows - r0);
            pack_rows(g.rule, partial<T>{loc.values.data(), loc.indices.data(), lse.values.data()}, false, kl, off, r0,
                      n2, scratch.data());
            g.rule.merge(part.data() + r0 * rec, scratch.data(), n2);
          }
          last = loc.stats;
          ++evals;
          acc.release(g.result_bytes);
        } catch (...) {
          // Not expected after the agreements (short of running out of system memory); this rank
          // keeps forwarding so that no other rank waits forever, and raises it after the ring.
          failed = std::current_exception();
        }
        tc = clock::now();
        if (nreq) check_mpi(MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE), "MPI_Waitall");
        t_comm += since(tc);
        std::swap(cur, nxt);
      }
    if (g.rows) g.rule.unpack(part.data(), 0, g.rows, out);
    peak = std::max(peak, acc.peak());
  }
  // Whether any rank failed during the ring: then every rank raises (one MPI_Allreduce).
  int mine = failed ? p.rank + 1 : 0, first = 0;
  check_mpi(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (failed) std::rethrow_exception(failed);
  if (first)
    throw error(cat(msg{"memsafe::mpi: shard_both: rank ", first - 1,
                        " failed while evaluating its rows against the ring's chunks (its own error is raised there)"}));
  st.stats = last;
  st.stats.plan = p.local;
  st.stats.budget_bytes = g.budget;
  st.stats.peak_temp_bytes = peak;
  st.stats.planned_temp_bytes = g.fixed + p.buffer_bytes + p.local.planned_bytes;
  st.stats.min_budget_bytes = g.need;
  cs.seconds = t_comm;
  st.stats.seconds = since(t0);
  return st;
}

template <class X, class B>
mpi::plan plan_of(const X& x, MPI_Comm comm, shard_both_t s, const B& be) {
  return prepare_both(x, comm, s, be).p;
}

}  // namespace memsafe::mpi::detail
