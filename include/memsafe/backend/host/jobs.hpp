// memsafe/backend/host/jobs.hpp — the host's plan and run of one lowered job (lower/job.hpp).
//
//   plan_job(job, budget, threads, what) → tile_plan      pure: nothing allocated or computed
//   run_job(job, plan, values, indices, accountant)       executes; fires no rule
//   plan_batch / run_batch                                a batch, one slice at a time (its rules
//                                                         are logged when it is planned)
// The reduction tags of a job map to the host's monoids (monoids.hpp) in monoid_for; the fused
// selection kernels (select_driver.hpp) and the fused sums (sum_driver.hpp) take the row jobs they
// can serve. Chains: chain.hpp;
// the driver (lower + plan + run): eval.hpp.
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/algo.hpp"
#include "../../core/accounting.hpp"
#include "../../core/maybe.hpp"
#include "../../core/budget.hpp"
#include "../../lower/job.hpp"
#include "../../plan/plan.hpp"
#include "executor.hpp"
#include "monoids.hpp"
#include "select_driver.hpp"
#include "sum_driver.hpp"

namespace memsafe::host {

using jobs::batch_job;
using jobs::bound_rows;
using jobs::diag_job;
using jobs::product_job;

/// The host monoid of a reduction tag.
template <class T, class R>
auto monoid_for(const R& r) {
  if constexpr (std::is_same_v<R, red::sum>) return sum_monoid<T>{};
  else if constexpr (std::is_same_v<R, red::min>) return best_monoid<T, false, false>{};
  else if constexpr (std::is_same_v<R, red::max>) return best_monoid<T, true, false>{};
  else if constexpr (std::is_same_v<R, red::argmin>) return best_monoid<T, false, true>{};
  else if constexpr (std::is_same_v<R, red::argmax>) return best_monoid<T, true, true>{};
  else if constexpr (std::is_same_v<R, red::argkmin>) { topk_monoid<T, false> m; m.k = r.k; return m; }
  else if constexpr (std::is_same_v<R, red::argkmax>) { topk_monoid<T, true> m; m.k = r.k; return m; }
  else if constexpr (std::is_same_v<R, red::logsumexp>) return logsumexp_monoid<T>{};
  else if constexpr (std::is_same_v<R, red::matmul<T>>) return matmul_monoid<T>{r.rhs};
  else if constexpr (std::is_same_v<R, red::softmax_sum<T>>) return softmax_sum_monoid<T>{r.values};
  else if constexpr (std::is_same_v<R, red::dense>) return dense_monoid<T>{};
  else static_assert(detail::always_false<R>, "memsafe: the host has no monoid for this reduction");
}
/// Bytes of temporaries a diagonal tree (rewrite/diagonal.hpp) needs: a 1×1 tile where pairs
/// are read, nothing elsewhere.
template <class D>
std::size_t diag_bytes(const D& d) {
  using T = typename D::value_type;
  if (d.rows() == 0) return 0;  // an empty diagonal reads nothing
  if constexpr (requires { d.use_fast; }) {
    return d.use_fast ? diag_bytes(d.fast) : diag_bytes(d.slow);
  } else if constexpr (requires { d.d; }) {  // diag_map, diag_add
    return diag_bytes(d.d);
  } else if constexpr (requires { d.e; }) {  // diag_entries
    using E = std::remove_cvref_t<decltype(d.e)>;
    return host::align64(sizeof(T)) + host::tile_gen<E>::workspace_bytes(d.e, 1, 1);
  } else {  // diag_constant
    return 0;
  }
}

/// emit(i, K_ii) for every i of a diagonal tree.
template <class D, class Emit>
void diag_run(const D& d, const Emit& emit, accountant& acc) {
  using T = typename D::value_type;
  const std::size_t n = d.rows();
  if (n == 0) return;
  if constexpr (requires { d.use_fast; }) {
    if (d.use_fast) diag_run(d.fast, emit, acc);
    else diag_run(d.slow, emit, acc);
  } else if constexpr (requires { d.term; }) {  // diag_add
    const auto& t = d.term;
    diag_run(d.d, [&](std::size_t i, T v) { emit(i, v + t.template at<T>(i)); }, acc);
  } else if constexpr (requires { d.op; }) {  // diag_map
    const auto& op = d.op;
    diag_run(d.d, [&](std::size_t i, T v) { emit(i, op(v)); }, acc);
  } else if constexpr (requires { d.e; }) {  // diag_entries: one 1×1 tile per entry
    using E = std::remove_cvref_t<decltype(d.e)>;
    temp_buffer<std::byte> ws(acc, diag_bytes(d));
    std::byte* cur = ws.data();
    T* cell = host::carve<T>(cur, 1);
    host::tile_gen<E> gen(d.e);
    gen.bind(cur, 1, 1);
    for (std::size_t i = 0; i < n; ++i) {
      gen.fill(i, 1, i, 1, cell, 1);
      emit(i, *cell);
    }
  } else {  // diag_constant
    for (std::size_t i = 0; i < n; ++i) emit(i, d.value);
  }
}

// ---- plan: a pure function of the job, the budget and the threads --------------------------------

template <class A, class B, class T>
tile_plan plan_job(const product_job<A, B, T>& j, std::size_t budget, std::size_t threads, const std::string& what) {
  auto p = plan::tiles_3d(
      j.a.rows(), j.b.cols(), j.a.cols(), budget, threads,
      [&](std::size_t tp, std::size_t tq, std::size_t tt) { return host::product_bytes(j.a, j.b, tp, tq, tt); }, what,
      j.symmetric);
  p.expression = detail::cat(detail::msg{j.a.str(), " * ", j.b.str()});
  if (j.post.scale != 1) p.expression = detail::cat(detail::msg{j.post.scale, " * (", p.expression, ")"});
  p.reduction = "tiled lazy x lazy product (double accumulation)";
  return p;
}
template <class D, bool Trace>
tile_plan plan_job(const diag_job<D, Trace>& j, std::size_t budget, std::size_t, const std::string& what) {
  tile_plan p;
  p.expression = j.expression;
  p.reduction = "diagonal entries only (no pairs off the diagonal)";
  p.rows = j.d.rows();
  p.cols = 1;
  p.budget = budget;
  p.threads = 1;
  p.tile_rows = p.tile_cols = 1;
  p.per_thread_bytes = p.planned_bytes = p.min_bytes = diag_bytes(j.d);
  p.row_blocks = p.num_tiles = j.d.rows();
  p.col_blocks = 1;
  if (p.min_bytes > budget) plan::too_small(what, budget, p.min_bytes);
  return p;
}
/// A row job: the fused selection when it serves the expression and reduction, else the tile loop.
template <class E, class R, class T>
MEMSAFE_COLD tile_plan plan_rows(const jobs::rows_job<E, R, T>& job, std::size_t budget, std::size_t threads,
                    const std::string& what) {
  const auto mon = monoid_for<T>(job.red);
  auto p = host::dispatch_select(
      job.e, mon, [&](const auto& leaf) { return host::plan_select(leaf, mon, budget, threads, what); },
      [&](const auto& e) {
        return host::dispatch_sum(
            e, mon, [&](const auto& leaf) { return host::plan_fsum(leaf, mon, budget, threads, what); },
            [&](const auto& g) {
              auto q = plan::tiles_2d(
                  g.rows(), g.cols(), budget, threads,
                  [&](std::size_t ti, std::size_t tj) { return host::per_thread_bytes(g, mon, ti, tj); }, what);
              q.reduction = detail::cat(detail::msg{R::name, " over j, fused with tile generation"});
              return q;
            });
      });
  p.expression = jobs::shown(job);
  return p;
}
template <class J, class T>
tile_plan plan_job(const bound_rows<J, T>& b, std::size_t budget, std::size_t threads, const std::string& what) {
  return plan_rows(b.job, budget, threads, what);
}
/// A batch: every slice lowered (its rules into log) and planned before any runs — a guard may
/// choose another form in one slice, and a budget too small for any slice is an error before any
/// work. Only slice 0's plan is kept: the plan shown is it, with the largest minimum of all slices.
/// Slices without rows (they all have slice 0's shape) have nothing to run: slice 0 is planned alone.
template <class X, class T>
tile_plan plan_batch(const batch_job<X, T>& b, std::size_t budget, std::size_t threads, const std::string& what,
                     rewrite::rule_log& log) {
  tile_plan p;
  const std::size_t count = b.count(), planned = b.empty() ? std::min<std::size_t>(count, 1) : count;
  for (std::size_t k = 0; k < planned; ++k) {
    tile_plan q = plan_rows(b.slice(k, log), budget, threads, what);
    if (k == 0) p = std::move(q);
    else p.min_bytes = std::max(p.min_bytes, q.min_bytes);
  }
  p.expression = detail::cat(detail::msg{"batch of ", count, " x [", p.expression, "]"});
  return p;
}

// ---- run: executes a job under a plan, fires no rule ---------------------------------------------

template <class A, class B, class T>
void run_job(const product_job<A, B, T>& j, const tile_plan& p, T* values, index_t*, accountant& acc) {
  const std::size_t n = j.a.rows() * j.b.cols();
  host::run_product(j.a, j.b, values, j.b.cols(), p, acc);
  if (j.post.scale != 1)
    for (std::size_t q = 0; q < n; ++q) values[q] = static_cast<T>(j.post.scale * values[q]);
}
template <class D, bool Trace, class T>
void run_job(const diag_job<D, Trace>& j, const tile_plan&, T* values, index_t*, accountant& acc) {
  if constexpr (Trace) {
    double s = 0;
    diag_run(j.d, [&](std::size_t, T v) { s += static_cast<double>(v); }, acc);
    values[0] = static_cast<T>(s);
  } else {
    diag_run(j.d, [&](std::size_t i, T v) { values[i] = v; }, acc);
  }
}
/// argument_error naming the first entry of softmax_sum's V that is not finite. A score of −∞ gives
/// its row of V the weight 0 inside every tile that row shares with others, and 0 · ∞ is NaN: such
/// an entry reached some rows and not others depending on the tiles the budget chose and on the
/// fused or tile form. One read of V, before any work (attention refuses the same,
/// api/attention.hpp).
template <class T>
void check_softmax_values(const matrix_view<const T>& V) {
  for (std::size_t j = 0; j < V.rows(); ++j) {
    const std::size_t c = detail::first_nonfinite(V.data() + j * V.row_stride(), V.cols(), V.col_stride());
    if (c == V.cols()) continue;
    throw argument_error(detail::cat(detail::msg{"memsafe: softmax_sum(S, V): V(", j, ", ", c, ") is ",
                                                 static_cast<double>(V(j, c)),
                                                 ": V must be finite (a zero weight times it is NaN)"}));
  }
}

template <class E, class R, class T>
void run_rows_job(const jobs::rows_job<E, R, T>& job, const jobs::out_spec<T>& out, const tile_plan& p,
                  accountant& acc) {
  if constexpr (std::is_same_v<R, red::softmax_sum<T>>) check_softmax_values(job.red.values);
  auto mon = monoid_for<T>(job.red);
  auto post = job.post;
  if constexpr (requires { mon.scale; }) {  // the scale is applied in double, before rounding to T
    mon.scale = post.scale;
    post.scale = 1;
  }
  host::dispatch_select(
      job.e, mon, [&](const auto& leaf) { host::run_select(leaf, mon, out, p, acc); },
      [&](const auto& e) {
        host::dispatch_sum(
            e, mon, [&](const auto& leaf) { host::run_fsum(leaf, mon, out, p, acc); },
            [&](const auto& g) { host::run_rows(g, mon, out, p, acc); }, detail::maybe<bool>(p.fused));
      },
      detail::maybe<bool>(p.fused));
  jobs::apply_post(post, job.rhs, out, job.e.rows(), job.rhs.data() ? job.rhs.cols() : 1);
}
template <class J, class T>
void run_job(const bound_rows<J, T>& b, const tile_plan& p, T*, index_t*, accountant& acc) {
  run_rows_job(b.job, b.out, p, acc);
}
/// A batch runs each slice under its own plan, lowered and planned again as plan_batch did (the
/// same inputs give the same forms and plans; the rules were logged there).
template <class X, class T>
void run_batch(const batch_job<X, T>& b, std::size_t budget, std::size_t threads, const std::string& what,
               accountant& acc) {
  if (b.empty()) return;
  rewrite::rule_log again;
  for (std::size_t k = 0; k < b.count(); ++k) {
    const auto job = b.slice(k, again);
    run_rows_job(job, b.out(k), plan_rows(job, budget, threads, what), acc);
  }
}

}  // namespace memsafe::host
