// memsafe/backend/host/eval.hpp — the host backend's driver: lower + plan + run.
//
//   jobs.hpp    plan_job(job, budget, threads, what) → tile_plan (pure) and run_job (executes;
//               fires no rule) for the jobs of lower/job.hpp
//   chain.hpp   plan_chain (the chain planner, plan/chain.hpp, over the host's step plans) and
//               run_chain for the chain_job of lower/chain.hpp
//   here        plan_and_run (lower once, plan, run), run (with stats), planner_for (lower once,
//               plan at any budget: plan_for and explain)
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/accounting.hpp"
#include "../../core/budget.hpp"
#include "../../core/clock.hpp"
#include "../../lower/chain.hpp"
#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "../../plan/plan.hpp"
#include "chain.hpp"
#include "jobs.hpp"

namespace memsafe::host {

using detail::monotonic_seconds;

/// lower → plan → outputs() → run. Every planning error (budget_error with the minimum, a shape or
/// argument error found while planning) comes before outputs() is called: eval allocates its
/// result only for a plan that fits. outputs() returns the (values, indices) pointers to write.
template <class X, class T = typename X::value_type>
tile_plan plan_and_run(const X& x, detail::output_target<T>& outputs, std::size_t budget, std::size_t threads,
                       accountant& acc, rewrite::rule_log& log) {
  auto job = jobs::lower(x, static_cast<T*>(nullptr), nullptr, log);
  if constexpr (jobs::is_chain_expr<X>) {
    const auto cp = plan_chain(job, budget, threads, log);
    run_chain(job, cp, outputs().first, threads, acc, log);
    return cp.shown;
  } else if constexpr (jobs::is_batched_node<X>) {
    const std::string what = x.str();
    tile_plan p = plan_batch(job, budget, threads, what, log);
    const auto [values, indices] = outputs();
    jobs::bind_outputs(job, x, values, indices);
    run_batch(job, budget, threads, what, acc);
    return p;
  } else {
    tile_plan p = plan_job(job, budget, threads, x.str());
    const auto [values, indices] = outputs();
    jobs::bind_outputs(job, x, values, indices);
    run_job(job, p, values, indices, acc);
    return p;
  }
}

/// Evaluates x into `out` (the caller's buffers, or eval's result, sized once the plan fits; see
/// plan_and_run). The function memsafe::precompiled instantiates (api/precompiled.hpp).
template <class X, class T = typename X::value_type>
eval_stats run(const X& x, detail::output_target<T> out, const options& o) {
  const std::size_t budget = resolve_budget(o.budget);
  const std::size_t threads = plan::resolve_threads(o.threads);
  check_kernel_env();
  const double t0 = monotonic_seconds();
  accountant acc(budget);
  rewrite::rule_log log;
  tile_plan p = plan_and_run(x, out, budget, threads, acc, log);
  p.rules = log.fired;
  return detail::make_stats(std::move(p), acc, budget, monotonic_seconds() - t0);
}

/// Evaluates x into caller-owned outputs.
template <class X, class T = typename X::value_type>
eval_stats run(const X& x, T* values, index_t* indices, const options& o) {
  return run(x, detail::output_target<T>(values, indices), o);
}

/// Lower x once and return planner(budget, threads) → tile_plan over that lowering (a chain's
/// planner is its order search).
template <class X>
auto planner_for(const X& x, rewrite::rule_log& log) {
  check_kernel_env();
  if constexpr (jobs::is_chain_expr<X>) {
    return [job = jobs::lower(x, static_cast<typename X::value_type*>(nullptr), nullptr, log), &log](
               std::size_t budget, std::size_t threads) mutable { return plan_chain(job, budget, threads, log).shown; };
  } else if constexpr (jobs::is_batched_node<X>) {
    return [job = jobs::lower(x, static_cast<typename X::value_type*>(nullptr), nullptr, log), &log,
            w = x.str()](std::size_t budget, std::size_t threads) { return plan_batch(job, budget, threads, w, log); };
  } else {
    return [job = jobs::lower(x, static_cast<typename X::value_type*>(nullptr), nullptr, log), w = x.str()](
               std::size_t budget, std::size_t threads) { return plan_job(job, budget, threads, w); };
  }
}
}  // namespace memsafe::host
