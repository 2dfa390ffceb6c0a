// memsafe/plan/chain.hpp — the chain planner: solve chain_order for the budget, list the chosen
// order's steps, and walk them.
//
// The walk is the planner over the ordered list of steps (there is no dry mode of an executor):
// before step k runs, the intermediates alive are the results of earlier steps not yet consumed;
// step k needs its own result (unless it is the root, which writes into the caller's output) and
// its smallest workspace beside them. The peak over the walk is the order's minimum budget. The
// cheapest order whose intermediates fit is tried first; if its steps do not fit beside them, the
// leanest order by intermediates. The order solver counts intermediates, not the steps' own
// workspaces, so an order it ranks higher (more flops, larger intermediates) may still have the
// smaller walk: when neither fits and the chain has at most max_enumerated_factors factors, every
// order is walked (at most 429 trees), and the cheapest whose walk fits is taken, or else the one
// with the smallest walk, whose minimum budget_error names before any work. Each step is then
// planned under what the intermediates alive beside it leave of the budget.
//
// Backend-neutral: the backend passes plan_step(step, budget, threads) → tile_plan, its byte model
// of one step (the host plans the step's lowered job, lower/chain.hpp).
#pragma once
#include "../core/algo.hpp"
#include <array>
#include <cstddef>
#include <cstdio>
#include <limits>
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

/// The longest chain whose orders are all walked when the solver's two do not fit (Catalan(7) = 429).
inline constexpr std::size_t max_enumerated_factors = 8;

/// Plan a chain: `ord` holds the rule's inputs (lower/chain.hpp); plan_step(step, budget, threads)
/// is the backend's plan of one step. chain_order is recorded in `log`.
template <std::size_t N, class Names, class PlanStep>
chain_plan plan_chain(rewrite::chain_order<N> ord, const Names& names, const std::string& what, std::size_t budget,
                      std::size_t threads, rewrite::rule_log& log, PlanStep&& plan_step) {
  chain_plan cp;
  std::vector<std::size_t> mins;
  std::vector<std::size_t> step_min(N * N * N, unlimited);  // (i, s, j) → its smallest workspace, planned once
  auto min_of = [&](const jobs::chain_step& st) {
    std::size_t& m = step_min[(st.i * N + st.s) * N + st.j];
    if (m == unlimited) m = plan_step(st, unlimited, std::size_t(1)).min_bytes;
    return m;
  };
  // The steps of ord's current splits into `steps`, their smallest workspaces into `ms`: the walk.
  auto walk_splits = [&](std::vector<jobs::chain_step>& steps, std::vector<std::size_t>& ms) {
    steps.clear();
    order_steps(ord, 0, N - 1, steps);
    ms.clear();
    for (const auto& st : steps) ms.push_back(min_of(st));
    return walk(ord, steps, ms);
  };
  auto attempt = [&](double solve_budget) {
    ord.solve(solve_budget);
    return walk_splits(cp.steps, mins);
  };
  double need = 0, least = 0;  // the chosen order's walk; the chain's minimum budget
  if constexpr (N > max_enumerated_factors) {
    // Too many orders to walk them all. The minimum is the smaller walk of two orders that do not
    // depend on the budget — the fewest flops, and the fewest bytes of intermediates — so that
    // plan.min_bytes and budget_error's minimum are the same at every budget, and a budget of that
    // minimum runs (the order falls back to the one of the two with the smaller walk). A smaller
    // budget may still find an order of its own that fits: the solver weighs flops against the
    // budget it is given.
    const double fewest_flops = attempt(double(unlimited));
    const double leanest = attempt(0.0);
    least = std::min(fewest_flops, leanest);
    need = attempt(double(budget));
    if (need > double(budget)) need = leanest <= fewest_flops ? attempt(0.0) : attempt(double(unlimited));
  } else {
    need = attempt(double(budget));
    if (need > double(budget)) need = attempt(0.0);  // the leanest order by intermediates
    least = need;
  }
  if constexpr (N <= max_enumerated_factors) {
    // Every order, walked with its steps' workspaces: the smallest walk is the minimum budget, and
    // when the solver's orders do not fit, the cheapest order that does is taken (or, if none, the
    // one with the smallest walk, for budget_error to name).
    const std::array<std::size_t, N * N> solved = ord.split;
    std::array<std::size_t, N * N> fit_split = solved, lean_split = solved;
    double fit_flops = std::numeric_limits<double>::infinity(), lean_walk = fit_flops, lean_flops = fit_flops;
    std::vector<jobs::chain_step> steps;
    std::vector<std::size_t> step_mins;
    std::vector<std::pair<std::size_t, std::size_t>> todo{{0, N - 1}};  // intervals still to split
    auto visit = [&](auto& self) -> void {
      if (todo.empty()) {  // a whole tree: walk it
        const double w = walk_splits(steps, step_mins);
        double f = 0;
        for (const auto& st : steps)
          if (!st.pinned_leaf()) f += ord.combine_flops(st.i, st.s, st.j);
        if (w <= double(budget) && f < fit_flops) fit_split = ord.split, fit_flops = f;
        if (w < lean_walk || (w == lean_walk && f < lean_flops)) lean_split = ord.split, lean_walk = w, lean_flops = f;
        return;
      }
      const auto [i, j] = todo.back();
      todo.pop_back();
      if (i == j) {
        self(self);
      } else {
        for (std::size_t sp = i; sp < j; ++sp) {
          ord.split[i * N + j] = sp;
          todo.push_back({i, sp});
          todo.push_back({sp + 1, j});
          self(self);
          todo.pop_back();
          todo.pop_back();
        }
      }
      todo.push_back({i, j});
    };
    visit(visit);
    least = lean_walk;
    ord.split = solved;  // the solver's order stands when it fits
    if (need > double(budget)) {
      const bool fits = fit_flops < std::numeric_limits<double>::infinity();
      ord.split = fits ? fit_split : lean_split;
      ord.flops[N - 1] = fits ? fit_flops : lean_flops;  // [0, N − 1]: what explain shows
      need = walk_splits(cp.steps, mins);
    }
  }

  tile_plan& p = cp.shown;
  p.expression = ord.order(0, N - 1, names);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.4g flops (left to right: %.4g)", ord.flops[N - 1], ord.left_to_right());
  p.reduction = detail::cat(detail::msg{"matrix chain of ", N,
                                        " factors, order by dynamic programming over flops and temporary bytes: ", buf,
                                        "; each step planned and tiled on its own"});
  p.rows = ord.dims[0];
  p.cols = ord.dims[N];
  p.budget = budget;
  p.threads = threads;
  p.min_bytes = static_cast<std::size_t>(least);
  if (need > double(budget)) too_small(what, budget, p.min_bytes);  // (then need = least)
  // logged once the order fits: explain re-plans a failed budget with the same log, and the failed
  // attempt's order stayed beside the one shown
  log.add(detail::cat(detail::msg{"chain_order: ", p.expression}));

  // Each step may use whatever the intermediates alive beside it leave of the budget; the chain's
  // planned bytes are the largest of (intermediates alive + the step's own plan), per thread the
  // largest step's.
  std::vector<double> beside;
  walk(ord, cp.steps, mins, &beside);
  p.planned_bytes = p.per_thread_bytes = 0;
  for (std::size_t k = 0; k < cp.steps.size(); ++k) {
    const std::size_t left = budget == unlimited ? unlimited : budget - std::size_t(beside[k]);
    cp.step_budget.push_back(left);
    cp.step_plans.push_back(plan_step(cp.steps[k], left, threads));
    p.planned_bytes =
        std::max(p.planned_bytes, saturating_add(std::size_t(beside[k]), cp.step_plans.back().planned_bytes));
    p.per_thread_bytes = std::max(p.per_thread_bytes, cp.step_plans.back().per_thread_bytes);
  }
  return cp;
}

}  // namespace memsafe::plan
