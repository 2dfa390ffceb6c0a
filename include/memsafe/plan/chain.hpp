// memsafe/plan/chain.hpp — the chain planner: solve chain_order for the budget, list the chosen
// order's steps, and walk them.
//
// The walk is the planner over the ordered list of steps (there is no dry mode of an executor):
// before step k runs, the intermediates alive are the results of earlier steps not yet consumed;
// step k needs its own result (unless it is the root, which writes into the caller's output) and
// its smallest workspace beside them. The peak over the walk is the order's minimum budget. The
// cheapest order whose intermediates fit is tried first; if its steps do not fit beside them, the
// leanest order; if even that does not fit, budget_error names its minimum before any work. Each
// step is then planned under what the intermediates alive beside it leave of the budget.
//
// Backend-neutral: the backend passes plan_step(step, budget, threads) → tile_plan, its byte model
// of one step (the host plans the step's lowered job, lower/chain.hpp).
#pragma once
#include "../core/algo.hpp"
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../core/budget.hpp"
#include "../lower/chain.hpp"
#include "../rewrite/chain.hpp"
#include "../rewrite/rules.hpp"
#include "plan.hpp"

namespace memsafe::plan {

/// A chain's plan: the order's steps in execution order and each step's plan.
struct chain_plan {
  tile_plan shown;                     ///< what plan_for and explain show
  std::vector<jobs::chain_step> steps;  ///< children before parents, left before right
  std::vector<tile_plan> step_plans;   ///< step k planned under the budget its intermediates leave
  std::vector<std::size_t> step_budget;
};

/// The steps of a solved order over [i, j], in execution order; returns the index of the step
/// whose result is [i, j] (npos for a factor used as it is).
template <std::size_t N>
std::size_t order_steps(const rewrite::chain_order<N>& o, std::size_t i, std::size_t j,
                        std::vector<jobs::chain_step>& out) {
  if (i == j) {
    if (o.kind[i] != 2) return jobs::chain_step::none;
    out.push_back({i, i, i});
    return out.size() - 1;
  }
  const std::size_t s = o.split[i * N + j];
  const std::size_t l = order_steps(o, i, s, out);
  const std::size_t r = order_steps(o, s + 1, j, out);
  out.push_back({i, s, j, l, r});
  return out.size() - 1;
}

/// Bytes of step k's result while it is alive (0 for the root: the caller's output).
template <std::size_t N>
double result_bytes(const rewrite::chain_order<N>& o, const jobs::chain_step& st) {
  if (st.i == 0 && st.j == N - 1 && !st.pinned_leaf()) return 0.0;
  return o.bytes(st.i, st.j);
}

/// The walk over the steps with their smallest workspaces: the peak, and for each step the live
/// bytes (intermediates alive plus its own result) it runs beside.
template <std::size_t N>
double walk(const rewrite::chain_order<N>& o, const std::vector<jobs::chain_step>& steps,
            const std::vector<std::size_t>& mins, std::vector<double>* beside = nullptr) {
  std::vector<double> held(steps.size(), 0.0);
  double live = 0, peak = 0;
  if (beside) beside->assign(steps.size(), 0.0);
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const auto& st = steps[k];
    held[k] = result_bytes(o, st);
    live += held[k];
    if (beside) (*beside)[k] = live;
    peak = std::max(peak, live + double(mins[k]));
    for (const std::size_t c : {st.left, st.right})
      if (c != jobs::chain_step::none) live -= std::exchange(held[c], 0.0);
  }
  return peak;
}

/// Plan a chain: `ord` holds the rule's inputs (lower/chain.hpp); plan_step(step, budget, threads)
/// is the backend's plan of one step. chain_order is recorded in `log`.
template <std::size_t N, class Names, class PlanStep>
chain_plan plan_chain(rewrite::chain_order<N> ord, const Names& names, const std::string& what, std::size_t budget,
                      std::size_t threads, rewrite::rule_log& log, PlanStep&& plan_step) {
  chain_plan cp;
  std::vector<std::size_t> mins;
  auto attempt = [&](double solve_budget) {
    ord.solve(solve_budget);
    cp.steps.clear();
    order_steps(ord, 0, N - 1, cp.steps);
    mins.clear();
    for (const auto& st : cp.steps) mins.push_back(plan_step(st, unlimited, std::size_t(1)).min_bytes);
    return walk(ord, cp.steps, mins);
  };
  double need = attempt(double(budget));
  if (need > double(budget)) need = attempt(0.0);  // the leanest order

  tile_plan& p = cp.shown;
  p.expression = ord.order(0, N - 1, names);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.4g flops (left to right: %.4g)", ord.flops[N - 1], ord.left_to_right());
  p.reduction = detail::cat(detail::msg{"matrix chain of ", N,
                                        " factors, order by dynamic programming over flops and temporary bytes: ", buf,
                                        "; each step planned and tiled on its own"});
  log.add(detail::cat(detail::msg{"chain_order: ", p.expression}));
  p.rows = ord.dims[0];
  p.cols = ord.dims[N];
  p.budget = budget;
  p.threads = threads;
  p.min_bytes = static_cast<std::size_t>(need);
  // Each step may use whatever the intermediates alive beside it leave of the budget.
  p.planned_bytes = p.per_thread_bytes = budget;
  if (need > double(budget)) too_small(what, budget, p.min_bytes);

  std::vector<double> beside;
  walk(ord, cp.steps, mins, &beside);
  for (std::size_t k = 0; k < cp.steps.size(); ++k) {
    const std::size_t left = budget == unlimited ? unlimited : budget - std::size_t(beside[k]);
    cp.step_budget.push_back(left);
    cp.step_plans.push_back(plan_step(cp.steps[k], left, threads));
  }
  return cp;
}

}  // namespace memsafe::plan
