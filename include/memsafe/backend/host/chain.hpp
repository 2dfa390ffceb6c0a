// memsafe/backend/host/chain.hpp — plan and run a lowered chain (lower/chain.hpp) on the host.
//
// plan_chain: the chain planner (plan/chain.hpp) with the host's plan of one step as byte model; a
// step is lowered the first time the planner asks for it (jobs::lower_step) and planned with
// plan_job. run_chain walks the planned steps in order: a step's result is a dense temporary
// counted against the budget (the root writes into the caller's output), freed once the step that
// consumes it has run; lazy factors are never materialised. A K·M step whose M is an intermediate
// gets it bound (jobs::bind_rhs) just before it runs.
#pragma once
#include "../../core/algo.hpp"
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/accounting.hpp"
#include "../../core/budget.hpp"
#include "../../lower/chain.hpp"
#include "../../plan/chain.hpp"
#include "../../plan/plan.hpp"
#include "jobs.hpp"
#include "kernels.hpp"

namespace memsafe::host {

template <class J>
inline constexpr bool is_chain_job = false;
template <class... Fs>
inline constexpr bool is_chain_job<jobs::chain_job<Fs...>> = true;
template <class J>
inline constexpr bool is_dense_step = false;
template <class T>
inline constexpr bool is_dense_step<jobs::dense_step<T>> = true;
template <class J>
inline constexpr bool is_rows_job = false;
template <class E, class R, class T>
inline constexpr bool is_rows_job<jobs::rows_job<E, R, T>> = true;

/// Workspace of a dense·dense step: none for contiguous double operands (gemm_acc), else one
/// row of double accumulators. An intermediate (a placeholder while planning) is contiguous.
template <class T>
std::size_t dense_product_bytes(const jobs::dense_step<T>& s) {
  auto contiguous = [](const matrix_view<const T>& v) { return v.col_stride() == 1 || jobs::is_placeholder(v); };
  if (std::is_same_v<T, double> && contiguous(s.a) && contiguous(s.b)) return 0;
  return s.b.cols() * sizeof(double);
}

/// out (p×r) = A (p×q) · B (q×r), double accumulation; contiguous double operands go to gemm_acc
/// (BLAS where linked), others through a strided loop.
template <class T>
void dense_product(const matrix_view<const T>& A, const matrix_view<const T>& B, T* out, accountant& acc) {
  const std::size_t p = A.rows(), q = A.cols(), r = B.cols();
  if constexpr (std::is_same_v<T, double>) {
    if (A.col_stride() == 1 && B.col_stride() == 1) {
      std::fill(out, out + p * r, 0.0);
      host::gemm_acc(p, r, q, A.data(), A.row_stride(), B.data(), B.row_stride(), out, r);
      return;
    }
  }
  temp_buffer<double> row(acc, r);
  for (std::size_t i = 0; i < p; ++i) {
    std::fill(row.data(), row.data() + r, 0.0);
    for (std::size_t k = 0; k < q; ++k) {
      const double av = static_cast<double>(A(i, k));
      for (std::size_t j = 0; j < r; ++j) row[j] += av * static_cast<double>(B(k, j));
    }
    for (std::size_t j = 0; j < r; ++j) out[i * r + j] = static_cast<T>(row[j]);
  }
}

template <class... Fs>
plan::chain_plan plan_chain(jobs::chain_job<Fs...>& job, std::size_t budget, std::size_t threads,
                            rewrite::rule_log& log);

/// The host's plan of one lowered step under a budget.
template <class X, class J>
tile_plan plan_step(jobs::step_entry<X, J>& e, std::size_t budget, std::size_t threads) {
  if constexpr (is_dense_step<J>) {
    tile_plan p;
    p.expression = e.job.str();
    p.reduction = "dense product (double accumulation)";
    p.rows = e.job.a.rows();
    p.cols = e.job.b.cols();
    p.budget = budget;
    p.min_bytes = p.planned_bytes = p.per_thread_bytes = dense_product_bytes(e.job);
    if (p.min_bytes > budget) plan::too_small(p.expression, budget, p.min_bytes);
    return p;
  } else if constexpr (is_chain_job<J>) {  // a pinned chain: its own order, under this budget
    rewrite::rule_log nested;
    auto p = plan_chain(e.job, budget, threads, nested).shown;
    e.rules = std::move(nested.fired);  // the rules of its last planning, which is the one that runs
    return p;
  } else if constexpr (is_rows_job<J>) {
    return plan_rows(e.job, budget, threads, e.x.str());
  } else {
    return plan_job(e.job, budget, threads, e.x.str());
  }
}

template <class... Fs>
plan::chain_plan plan_chain(jobs::chain_job<Fs...>& job, std::size_t budget, std::size_t threads,
                            rewrite::rule_log& log) {
  using Job = jobs::chain_job<Fs...>;
  auto step_plan = [&](const jobs::chain_step& st, std::size_t b, std::size_t t) {
    tile_plan p;
    jobs::visit_step<Job>(st, [&](auto kind) { p = plan_step(jobs::lower_step<decltype(kind)>(job, st), b, t); });
    return p;
  };
  auto cp = plan::plan_chain(job.ord, job.names, job.expression, budget, threads, log, step_plan);
  for (const auto& st : cp.steps)  // the rules of the steps that will run
    jobs::visit_step<Job>(st, [&](auto kind) {
      for (const auto& r : jobs::lower_step<decltype(kind)>(job, st).rules) log.add(r);
    });
  return cp;
}

template <class... Fs, class T>
void run_chain(jobs::chain_job<Fs...>& job, const plan::chain_plan& cp, T* out, std::size_t threads,
               accountant& acc, rewrite::rule_log& log);

/// Run a pinned factor's job into `dst`.
template <class X, class J, class T>
void run_pinned(jobs::step_entry<X, J>& e, const tile_plan& p, std::size_t budget, T* dst, std::size_t threads,
                accountant& acc, rewrite::rule_log& log) {
  if constexpr (is_chain_job<J>) {
    rewrite::rule_log nested;  // planned as plan_step did, under the same budget: the same order
    run_chain(e.job, plan_chain(e.job, budget, threads, nested), dst, threads, acc, log);
  } else if constexpr (requires { e.job.job; e.job.out; }) {  // bound_rows: bind the output now
    run_rows_job(e.job.job, jobs::rows_lowering<X>::out(e.x, dst, nullptr), p, acc);
  } else if constexpr (is_rows_job<J>) {  // a pinned K·M (or M·K): its rows job, output bound here
    run_rows_job(e.job, jobs::rows_lowering<X>::out(e.x, dst, nullptr), p, acc);
  } else {
    run_job(e.job, p, dst, nullptr, acc);
  }
}

/// Run the step st, of the kind Kind, into `dst`; `views` holds the earlier steps' results.
template <class Kind, class... Fs, class T>
void run_step(jobs::chain_job<Fs...>& job, const jobs::chain_step& st, const std::vector<matrix_view<const T>>& views,
              const tile_plan& p, std::size_t budget, T* dst, std::size_t threads, accountant& acc,
              rewrite::rule_log& log) {
  auto& e = jobs::lower_step<Kind>(job, st);  // lowered by the planner
  using Jb = std::remove_cvref_t<decltype(e.job)>;
  if constexpr (Kind::cls == jobs::step_class::pin) {
    run_pinned(e, p, budget, dst, threads, acc, log);
  } else {
    const auto a = [&] {
      if constexpr (Kind::left_is_factor) return job.template factor_operand<Kind::idx>();
      else return views[st.left];
    }();
    const auto b = [&] {
      if constexpr (Kind::right_is_factor) return job.template factor_operand<Kind::right_factor>();
      else return views[st.right];
    }();
    if constexpr (is_dense_step<Jb>) {
      dense_product(a, b, dst, acc);
    } else if constexpr (is_rows_job<Jb>) {  // K·M, or M·K computed as (Kᵀ·Mᵀ)ᵀ: bind M (or Mᵀ)
      using X = std::remove_cvref_t<decltype(e.x)>;
      const matrix_view<const T> rhs = [&] {
        if constexpr (jobs::chain_detail::is_view<std::remove_cv_t<decltype(a)>>) return a.t();
        else return matrix_view<const T>(b);
      }();
      // If the guard now keeps the original form, the step is planned again under its budget.
      const bool replan = jobs::bind_rhs(e, rhs, log);
      run_rows_job(e.job, jobs::rows_lowering<X>::out(e.x, dst, nullptr),
                   replan ? plan_rows(e.job, budget, threads, e.x.str()) : p, acc);
    } else {
      run_job(e.job, p, dst, nullptr, acc);
    }
  }
}

template <class... Fs, class T>
void run_chain(jobs::chain_job<Fs...>& job, const plan::chain_plan& cp, T* out, std::size_t threads,
               accountant& acc, rewrite::rule_log& log) {
  using Job = jobs::chain_job<Fs...>;
  constexpr std::size_t N = Job::N;
  const std::size_t n = cp.steps.size();
  std::vector<temp_buffer<T>> held(n);
  std::vector<matrix_view<const T>> views(n, matrix_view<const T>(nullptr, 0, 0));
  for (std::size_t k = 0; k < n; ++k) {
    const auto& st = cp.steps[k];
    const std::size_t r = job.ord.dims[st.i], q = job.ord.dims[st.j + 1];
    T* dst = out;  // the root writes into the caller's output
    if (!(st.i == 0 && st.j == N - 1 && !st.pinned_leaf())) {
      held[k] = temp_buffer<T>(acc, r * q);
      dst = held[k].data();
    }
    jobs::visit_step<Job>(st, [&](auto kind) {
      run_step<decltype(kind)>(job, st, views, cp.step_plans[k], cp.step_budget[k], dst, threads, acc, log);
    });
    views[k] = matrix_view<const T>(dst, r, q);
    for (const std::size_t c : {st.left, st.right})  // the operands are consumed
      if (c != jobs::chain_step::none) held[c] = temp_buffer<T>();
  }
}

}  // namespace memsafe::host
