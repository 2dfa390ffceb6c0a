// memsafe/mpi/sgpr.hpp — the SGPR bound and its gradient (gp::sgpr) as one collective call over the
// ranks of a communicator, each rank holding a shard of the training points (docs/design.md, "MPI",
// "The SGPR bound across ranks"). Reached through <memsafe/mpi_gp.hpp> (targets memsafe::mpi and
// memsafe::lapack).
//
//   auto r = memsafe::mpi::sgpr(MPI_COMM_WORLD, {X_r, y_r, n_r, d}, {Z, m, d}, h,
//                               {.budget = 64 << 20, .gradient = true});
//   // r.bound, r.grad, r.posterior: the whole data's (the concatenation of the ranks' shards), on every rank
//   std::cout << r.comm.describe();
//
// Each rank passes its own rows of X and entries of y (any n_r, 0 allowed); Z, the hyperparameters
// and the options (gradient, whitened) are replicated — the same on every rank, which is checked.
// The call composes the phases of gp::sgpr (gp/sgpr.hpp) — no second copy of the math:
//   agreement  one MPI_Allreduce (max) of three 64-bit checksums (of Z; of the hyperparameters; of
//              the options) and one MPI_Allgather of each rank's plan (mpi::detail::agree): a bad
//              argument, a budget too small, Kuu + jitter·I not positive definite, or m, d, Z,
//              hyperparameters or options that differ between ranks raise the same error on every
//              rank before any n-sized work — never a hang.
//   forward    each rank: Ψ₂ (or σ²AAᵀ whitened), b = Kuf·y, yᵀy and n over its shard in budgeted
//              chunks (accumulate); ONE allreduce (sum) of the m(m+1)/2 + m + 2 doubles (Ψ₂'s lower
//              triangle, b, yᵀy, n; tr Kff = n·σ_f²); the m×m algebra (finish) on every rank.
//   backward   Ḡ₂, ḡ₁, Ḡuu and ∂/∂σ² on every rank from the reduced quantities (backward_setup);
//              each rank contracts its own W chunks (contract_kuf) and a share of Kuu's rows
//              (contract_kuu: Kuu counts once, and its O(m²d) work is split); rank 0 adds the
//              constant −n/(2σ²) of ∂/∂σ_f²; ONE allreduce (sum) of the 1 + d + m·d gradient sums.
// The allreduces pack their doubles into a send and a receive buffer of at most `chunk` doubles each,
// from the rank's budget (through the call's accountant: stats.peak_temp_bytes includes them), with
// `chunk` the least any rank's budget allows, so every rank makes the same MPI_Allreduce calls. MPI's
// own internal buffers are outside the accounting, as in mpi/eval.hpp. The m×m outputs (L, LB, and
// with the gradient B and B⁻¹) are outputs of the call as in gp::sgpr: every rank holds them.
#pragma once

#if !defined(MEMSAFE_HAS_LAPACK)
#error "memsafe/mpi/sgpr.hpp needs MEMSAFE_HAS_LAPACK: include <memsafe/mpi_gp.hpp> and link memsafe::mpi and memsafe::lapack"
#endif

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "../gp/sgpr.hpp"
#include "eval.hpp"

namespace memsafe::mpi {

/// What the distribution of one mpi::sgpr call did on this rank.
struct sgpr_comm_stats {
  int ranks = 1, rank = 0;
  std::size_t n_local = 0, n_global = 0;   ///< training points on this rank, on all ranks
  std::size_t offset = 0;                  ///< this rank's first row in the concatenation of the shards
  std::size_t kuu_rows_begin = 0, kuu_rows_end = 0;  ///< Kuu's rows whose gradient contraction ran here
  std::size_t m = 0, d = 0;
  std::size_t forward_doubles = 0;   ///< length of the forward allreduce: m(m+1)/2 + m + 2
  std::size_t backward_doubles = 0;  ///< of the backward one: 1 + d + m·d (0 without the gradient)
  std::size_t chunk_doubles = 0;     ///< the largest message one MPI_Allreduce may carry (all ranks alike)
  std::size_t allreduce_calls = 0;   ///< MPI_Allreduce calls of the two passes (the same on every rank)
  std::size_t buffer_bytes = 0;      ///< send + receive buffers at their largest, counted in the budget
  std::size_t bytes_reduced = 0;     ///< 8 × the doubles this rank contributed to the allreduces
  double seconds = 0;                ///< in communication: the agreement and the allreduces (packing, and waiting
                                     ///< for the slowest rank to arrive, included)
  double seconds_agreement = 0;

  /// One line: the distribution and the communication volume of the call.
  std::string describe() const {
    std::ostringstream s;
    s << "mpi::sgpr over " << ranks << " rank(s), rank " << rank << ": training rows [" << offset << ", "
      << offset + n_local << ") of " << n_global << ", Kuu gradient rows [" << kuu_rows_begin << ", " << kuu_rows_end
      << ") of " << m << "; ";
    if (ranks == 1) {
      s << "one rank: nothing reduced";
    } else {
      s << "allreduce (sum) of " << forward_doubles << " doubles forward (m(m+1)/2 + m + 2)";
      if (backward_doubles) s << " and " << backward_doubles << " backward (1 + d + m·d)";
      s << " = " << format_bytes(bytes_reduced) << " per rank in " << allreduce_calls
        << " MPI_Allreduce call(s) of <= " << chunk_doubles << " doubles; buffers " << format_bytes(buffer_bytes)
        << " counted in the budget";
    }
    s << "; " << seconds << " s communicating (agreement " << seconds_agreement << " s)";
    return s.str();
  }
};

/// A rank's result: gp::sgpr_result (the whole data's bound, gradient and posterior) plus what the
/// distribution did. stats.peak_temp_bytes includes the communication buffers.
struct sgpr_result : memsafe::gp::sgpr_result {
  sgpr_comm_stats comm;
};

/// The smallest budget of mpi::sgpr: gp::sgpr_minimum_bytes, and at least room for a one-double send
/// and receive buffer.
inline std::size_t sgpr_minimum_bytes(std::size_t m, std::size_t d, bool gradient) {
  return std::max(memsafe::gp::sgpr_minimum_bytes(m, d, gradient),
                  memsafe::detail::gp::small_bytes(d, 1) + 2 * sizeof(double));
}

namespace detail {

/// Copies k doubles between the concatenation of segments (seg(s) → {pointer, count}) at the cursor
/// (s, o) and a flat buffer: op(segment pointer, count, position in the flat buffer).
template <class Seg, class Op>
void walk_segments(Seg& seg, std::size_t& s, std::size_t& o, std::size_t k, Op&& op) {
  std::size_t at = 0;
  while (at < k) {
    const auto [p, len] = seg(s);
    const std::size_t take = std::min(len - o, k - at);
    op(p + o, take, at);
    at += take;
    o += take;
    if (o == len) {
      ++s;
      o = 0;
    }
  }
}

/// In place on every rank: each double of the concatenation of the segments (total doubles, the
/// same layout on every rank) ← its sum over the ranks. MPI_Allreduce(MPI_SUM) in messages of at
/// most `chunk` doubles, packed into a send and a receive buffer from `acc` (counted in the budget).
template <class Seg>
void allreduce_sum(Seg&& seg, std::size_t total, std::size_t chunk, memsafe::detail::accountant& acc, MPI_Comm comm,
                   sgpr_comm_stats& cs) {
  if (cs.ranks == 1 || total == 0) return;  // one rank: its sums are the sums
  const std::size_t c = std::min(chunk, total);
  memsafe::detail::temp_buffer<double> send(acc, c), recv(acc, c);
  cs.buffer_bytes = std::max(cs.buffer_bytes, 2 * c * sizeof(double));
  std::size_t ps = 0, po = 0, us = 0, uo = 0;  // pack and unpack cursors
  for (std::size_t done = 0; done < total;) {
    const std::size_t k = std::min(c, total - done);
    walk_segments(seg, ps, po, k, [&](const double* p, std::size_t n, std::size_t at) {
      std::copy(p, p + n, send.data() + at);
    });
    check_mpi(MPI_Allreduce(send.data(), recv.data(), int(k), MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
    walk_segments(seg, us, uo, k, [&](double* p, std::size_t n, std::size_t at) {
      std::copy(recv.data() + at, recv.data() + at + n, p);
    });
    ++cs.allreduce_calls;
    done += k;
  }
  cs.bytes_reduced += total * sizeof(double);
}

}  // namespace detail

/// The SGPR collapsed bound (and with o.gradient its gradient) of the training points of all the
/// ranks of `comm` — the concatenation of the ranks' shards D, in rank order — at the replicated
/// inducing points I and hyperparameters h (collective). Every rank gets the whole result, equal
/// to gp::sgpr on the concatenated data to rounding (the sums are added in another order). Each rank
/// runs under its own budget (o.budget; communication buffers included) and threads (o.threads).
/// Errors — shape_error, argument_error, budget_error (with that rank's minimum) — are raised on
/// every rank, naming the rank at fault, before any n-sized work.
inline sgpr_result sgpr(MPI_Comm comm, const memsafe::gp::data_view& D, const memsafe::gp::inducing_view& I,
                        const memsafe::gp::hyperparameters& h, const memsafe::gp::sgpr_options& o = {}) {
  namespace dg = memsafe::detail::gp;
  using memsafe::detail::cat;
  using memsafe::detail::msg;
  using clock_type = std::chrono::steady_clock;
  const auto seconds_since = [](clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
  };
  const std::string fn = "memsafe::mpi::sgpr";
  const auto t0 = clock_type::now();
  const int rank = detail::rank_of(comm);
  int ranks = 1;
  detail::check_mpi(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");

  // What must be replicated: the checksums' maxima of (c, ~c) give their maximum and minimum.
  detail::checksum cz, ch, co;
  cz.add(I.m);
  cz.add(I.d);
  if (I.Z) cz.add(I.Z, I.m * I.d * sizeof(double));
  ch.add(static_cast<int>(h.kind));
  ch.add(h.variance);
  ch.add(h.lengthscales.size());
  if (!h.lengthscales.empty()) ch.add(h.lengthscales.data(), h.lengthscales.size() * sizeof(double));
  ch.add(h.noise);
  ch.add(h.jitter);
  co.add(o.gradient);
  co.add(o.whitened.has_value());
  co.add(o.whitened.value_or(false));
  std::uint64_t sums[6] = {cz.h, ~cz.h, ch.h, ~ch.h, co.h, ~co.h};
  detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, sums, 6, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  const bool same_z = sums[0] == ~sums[1], same_h = sums[2] == ~sums[3], same_o = sums[4] == ~sums[5];

  // Each rank's plan (and Kuu's Cholesky factor), then the agreement.
  sgpr_result R;
  R.has_gradient = o.gradient;
  std::optional<dg::sgpr_call> call;
  std::size_t budget = 0, minimum = 0;
  double seconds_kuu = 0;
  detail::rank_info me{};
  me.rows = I.m;
  me.cols = I.d;
  me.extent = D.n;
  detail::plan_guarded(me, [&]() -> std::size_t {
    const std::string f = cat(msg{fn, ": "});
    dg::validate_model(I, h, f);
    if (D.n > 0 && D.d != I.d)
      throw shape_error(cat(msg{f, "this rank's training points have d = ", D.d, " but the inducing points have d = ",
                                I.d}));
    if (D.n > 0 && (!D.X || !D.y))
      throw argument_error(cat(msg{f, "null data pointer (X or y) for ", D.n, " training points"}));
    if (D.n > 0) {
      dg::check_finite(D.X, D.n, D.d, "this rank's training input", f);
      dg::check_finite(D.y, D.n, 1, "this rank's training target", f);
    }
    budget = memsafe::detail::resolve_budget(o.budget);
    me.budget = budget;
    minimum = sgpr_minimum_bytes(I.m, I.d, o.gradient);
    if (budget < minimum)
      dg::too_small(fn, budget, minimum, I.m, o.gradient, "one column of Kuf (and the communication buffers)");
    if (!(same_z && same_h && same_o)) return minimum;  // raised on every rank after the agreement
    const std::size_t column_bytes = std::max<std::size_t>((o.gradient ? 2 : 1) * I.m, 2) * sizeof(double);
    call.emplace(I.m, I.d, h, o, budget, column_bytes);
    const auto tk = clock_type::now();
    dg::factor_kuu(*call, I, h, R.posterior, fn);
    seconds_kuu = seconds_since(tk);
    me.chunk_rows = std::min<std::size_t>((budget - call->fixed) / (2 * sizeof(double)), INT_MAX);
    return minimum;
  });
  const auto all = detail::agree(me, comm, rank);
  std::size_t n_global = 0, offset = 0, chunk = SIZE_MAX;
  for (int r = 0; r < ranks; ++r) {
    const detail::rank_info& a = all[std::size_t(r)];
    if (a.rows != me.rows || a.cols != me.cols)
      throw shape_error(cat(msg{fn, ": the inducing points are replicated, so every rank must pass the same m and d, ",
                                "but rank ", r, " has m = ", a.rows, ", d = ", a.cols, " and rank ", rank,
                                " has m = ", me.rows, ", d = ", me.cols}));
    n_global += a.extent;
    if (r < rank) offset += a.extent;
    chunk = std::min<std::size_t>(chunk, a.chunk_rows);
  }
  if (!same_z)
    throw argument_error(cat(msg{fn, ": the inducing points Z differ between the ranks (they are replicated: every "
                                     "rank must pass the same m×d values; compared by a 64-bit checksum)"}));
  if (!same_h)
    throw argument_error(cat(msg{fn, ": the hyperparameters (kernel, variance, lengthscales, noise, jitter) differ "
                                     "between the ranks (they are replicated: every rank must pass the same values)"}));
  if (!same_o)
    throw argument_error(cat(msg{fn, ": the options differ between the ranks (gradient and whitened — set or unset — "
                                     "must be the same on every rank; budget and threads may differ)"}));
  if (n_global == 0)
    throw shape_error(cat(msg{fn, ": no training data on any of the ", ranks, " rank(s)"}));

  dg::sgpr_call& c = *call;
  if (c.choose_order) {  // every rank's estimate is of the same Kuu; one decision, whitened if any rank says so
    int whitened = c.whitened ? 1 : 0;
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &whitened, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
    c.whitened = whitened != 0;
  }
  R.stats.whitened = c.whitened;
  R.stats.kuu_condition = c.kuu_condition;
  const std::size_t m = c.m, d = c.d;
  sgpr_comm_stats& cs = R.comm;
  cs.ranks = ranks;
  cs.rank = rank;
  cs.n_local = D.n;
  cs.n_global = n_global;
  cs.offset = offset;
  cs.m = m;
  cs.d = d;
  cs.forward_doubles = m * (m + 1) / 2 + m + 2;
  cs.backward_doubles = o.gradient ? 1 + d + m * d : 0;
  cs.chunk_doubles = std::min(chunk, std::max(cs.forward_doubles, cs.backward_doubles));
  cs.seconds_agreement = seconds_since(t0) - seconds_kuu;
  cs.seconds = cs.seconds_agreement;
  R.stats.budget_bytes = budget;
  R.stats.minimum_bytes = minimum;
  R.stats.threads = c.threads;
  R.stats.avx2_rows = c.avx2;
  const memsafe::gp::data_view local{D.X, D.y, D.n, d};  // an empty shard may say d = 0

  // Forward: this rank's sums, one allreduce, the m×m algebra.
  auto t1 = clock_type::now();
  dg::forward_sums S = dg::accumulate(c, local, h, R.posterior, R.stats);
  auto tc = clock_type::now();
  detail::allreduce_sum(
      [&](std::size_t s) -> std::pair<double*, std::size_t> {
        if (s < m) return {S.B.data() + s * m, s + 1};  // row s of Ψ₂'s lower triangle
        if (s == m) return {S.b.data(), m};
        return {s == m + 1 ? &S.yty : &S.n, 1};
      },
      cs.forward_doubles, cs.chunk_doubles, c.acc, comm, cs);
  cs.seconds += seconds_since(tc);
  dg::forward_state F = dg::finish(c, h, std::move(S), R, "memsafe::mpi::sgpr");
  R.stats.seconds_forward = seconds_kuu + seconds_since(t1);
  if (!o.gradient) {
    R.stats.peak_temp_bytes = c.acc.peak();
    return R;
  }

  // Backward: Ḡ₂, ḡ₁, Ḡuu on every rank; this rank's contractions; one allreduce.
  t1 = clock_type::now();
  const dg::backward_state Bk = dg::backward_setup(c, h, F, R);
  dg::gradient_sums g(m, d, rank == 0 ? -F.n / (2.0 * h.noise) : 0.0);
  cs.kuu_rows_begin = m * std::size_t(rank) / std::size_t(ranks);
  cs.kuu_rows_end = m * std::size_t(rank + 1) / std::size_t(ranks);
  const double* Z = R.posterior.Z.data();
  dg::contract_kuu(c, h, Z, Bk.Guu, cs.kuu_rows_begin, cs.kuu_rows_end, g);
  dg::contract_kuf(c, local, h, Z, Bk, g, R.stats);
  tc = clock_type::now();
  detail::allreduce_sum(
      [&](std::size_t s) -> std::pair<double*, std::size_t> {
        if (s == 0) return {&g.variance, 1};
        if (s == 1) return {g.l.data(), d};
        return {g.Z.data(), m * d};
      },
      cs.backward_doubles, cs.chunk_doubles, c.acc, comm, cs);
  cs.seconds += seconds_since(tc);
  dg::finalise_gradient(h, std::move(g), R);
  R.stats.seconds_backward = seconds_since(t1);
  R.stats.peak_temp_bytes = c.acc.peak();
  return R;
}

}  // namespace memsafe::mpi
