// memsafe/api/eval.hpp — the public entry points on the host: eval, eval_into, plan_for, explain.
//
// eval(expr, budget) = lower (lower/job.hpp: every rule fired once) → plan (tiles, threads, bytes;
// budget_error if the smallest plan does not fit) → run (one pass over tiles, temporaries from an
// accountant whose limit is the budget), in backend/host/eval.hpp. Outputs belong to the caller
// (eval_into) or to the returned result; they are not temporaries and do not count against the
// budget. The CUDA backend's entry points are memsafe::cuda::eval/eval_into/plan_for
// (<memsafe/cuda.cuh>); nothing under backend/ includes this layer.
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "../backend/host/eval.hpp"
#include "../core/budget.hpp"
#include "../expr/reductions.hpp"
#include "../plan/options.hpp"
#include "../plan/plan.hpp"
#include "precompiled.hpp"

namespace memsafe {

// Every entry point takes its budget one of three ways: options (`options{.budget = n, .threads = 2}`),
// budget_bytes(n) in their place (core/budget.hpp), or a template parameter
// (`eval<budget<64_MiB>>(expr)`, likewise eval_into, plan_for, explain); without one,
// MEMSAFE_BUDGET, then the default.

/// Evaluate into caller-owned, contiguous row-major outputs of shape rows × cols
/// (`expr.rows()`, `expr.cols()`); `indices` is required for argmin/argmax/argkmin/argkmax
/// and ignored otherwise. Returns the evaluation's stats. argument_error when an output shares
/// memory with an input (expr/overlap.hpp).
template <evaluable X>
eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, const options& o = {}) {
  detail::check_outputs(x, values, indices, "memsafe: eval_into");
  return host::run(x, values, indices, o);
}
/// With a compile-time budget: `eval_into<budget<64_MiB>>(expr, values, indices)`.
template <class Budget, evaluable X>
eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices) {
  return eval_into(x, values, indices, detail::static_options<Budget>());
}

/// Evaluate with run-time options (budget, threads).
template <evaluable X>
result<typename X::value_type> eval(const X& x, const options& o) {
  return detail::into_result(x, [&](auto& target) { return host::run(x, target, o); });
}

/// Evaluate with a compile-time budget (`eval<budget<64_MiB>>(e)`), or with MEMSAFE_BUDGET /
/// the default when no budget is given (`eval(e)`).
template <class Budget = detail::no_budget, evaluable X>
result<typename X::value_type> eval(const X& x) {
  static_assert(detail::valid_budget_param<Budget>,
                "memsafe: eval<B>(expr): B must be memsafe::budget<Bytes> (e.g. budget<64_MiB>)");
  return eval(x, options{detail::static_budget<Budget>(), 0});
}

/// Evaluate with a run-time budget.
template <class Budget = detail::no_budget, evaluable X>
result<typename X::value_type> eval(const X& x, budget_bytes b) {
  static_assert(std::is_same_v<Budget, detail::no_budget>,
                "memsafe: give the budget once: either eval<budget<N>>(expr) or eval(expr, budget_bytes(n))");
  return eval(x, options{b.bytes, 0});
}

/// The plan eval would follow (nothing is allocated or computed). Throws budget_error like eval.
template <evaluable X>
tile_plan plan_for(const X& x, const options& o = {}) {
  rewrite::rule_log log;
  auto p = host::planner_for(x, log)(detail::resolve_budget(o.budget), plan::resolve_threads(o.threads));
  p.rules = log.fired;
  return p;
}
template <class Budget, evaluable X>
tile_plan plan_for(const X& x) {
  return plan_for(x, detail::static_options<Budget>());
}

/// A human-readable account of an evaluation: the expression as written, as rewritten, the rules
/// that fired, and the plan (or why no plan fits and the minimum budget that would).
template <evaluable X>
std::string explain(const X& x, const options& o = {}) {
  std::string s = detail::cat(detail::msg{"as written:   ", x.str(), "\n"});
  if constexpr (precompiled_linked)
    s += precompiled_expr<X> ? "compiled:     in memsafe::precompiled\n"
                             : "compiled:     in this translation unit (not in memsafe::precompiled)\n";
  const std::size_t budget = detail::resolve_budget(o.budget);
  rewrite::rule_log log;
  auto planner = host::planner_for(x, log);
  try {
    auto p = planner(budget, plan::resolve_threads(o.threads));
    p.rules = log.fired;
    s += p.describe();
  } catch (const budget_error& e) {
    auto p = planner(unlimited, 1);
    p.rules = log.fired;
    p.budget = budget;
    s += detail::cat(detail::msg{p.describe_rewrite(), "plan:         does not fit: ", e.what(), "\n"});
  }
  return s;
}
template <class Budget, evaluable X>
std::string explain(const X& x) {
  return explain(x, detail::static_options<Budget>());
}

}  // namespace memsafe
