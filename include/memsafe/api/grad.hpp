// memsafe/api/grad.hpp — the public entry points of gradients on the host: grad, plan_for and
// explain of a vjp (expr/grad.hpp), and the result type gradients<T>. docs/design.md, "Gradients".
//
//   auto g = memsafe::grad(memsafe::vjp(K * memsafe::vec(v, m), memsafe::vec(gbar, n),
//                                       memsafe::wrt(X, Z, memsafe::params, memsafe::operand)),
//                          memsafe::budget_bytes(64 << 20));
//   g.of(X), g.of(Z)        ∂L/∂X (n×d), ∂L/∂Z (m×d), row-major
//   g.params[0]             ∂L/∂σ², ∂L/∂ℓ (1 or d values), ∂L/∂α of the first pairwise leaf
//   g.operand               ∂L/∂v
// grad = lower (jobs::lower_grad, rules fired once) → plan (host::plan_grad; budget_error with the
// minimum before any work) → run (host::run_grad; every temporary from one accountant).
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/host/grad.hpp"
#include "../core/accounting.hpp"
#include "../core/budget.hpp"
#include "../core/clock.hpp"
#include "../core/libm.hpp"
#include "../expr/grad.hpp"
#include "../lower/grad.hpp"
#include "../plan/grad.hpp"
#include "../plan/options.hpp"
#include "../plan/plan.hpp"

namespace memsafe {

/// The gradient of one pairwise leaf's parameters (each empty when the formula lacks it).
template <class T>
struct param_gradient {
  std::string formula;
  std::vector<T> variance;     ///< ∂L/∂σ² (1 value), or ∂L/∂σ_k² of linear with ard variances (d values)
  std::vector<T> lengthscale;  ///< ∂L/∂ℓ (1 value: a scalar ℓ), or ∂L/∂ℓ_k (d values: ARD)
  std::vector<T> alpha;        ///< ∂L/∂α (rq)
};

/// What one backward evaluation did.
struct grad_stats {
  std::size_t budget_bytes = 0;
  std::size_t peak_temp_bytes = 0;     ///< measured by the accountant
  std::size_t planned_temp_bytes = 0;  ///< what the plan predicted
  std::size_t min_budget_bytes = 0;    ///< the smallest budget this backward could run with
  std::size_t temp_allocations = 0;
  std::size_t threads = 0;
  double seconds = 0;
  grad_plan plan;
};

/// The result of grad: one gradient per requested point set (rows × d, row-major, in wrt order),
/// one parameter gradient per pairwise leaf (in the order they are written; empty vectors unless
/// wrt(params)), the operand's gradient in the operand's shape (empty unless wrt(operand)).
template <class T>
struct gradients {
  std::vector<std::vector<T>> points;
  std::vector<matrix_view<const T>> wrt_points;
  std::vector<param_gradient<T>> params;
  std::vector<T> operand;
  std::size_t operand_rows = 0, operand_cols = 0;
  grad_stats stats;

  /// The gradient of a requested point set, found by its view.
  template <class U, std::size_t R, std::size_t C>
  const std::vector<T>& of(const matrix_view<U, R, C>& v) const {
    for (std::size_t k = 0; k < wrt_points.size(); ++k)
      if (rewrite::same_view(wrt_points[k], v)) return points[k];
    throw argument_error(
        detail::cat(detail::msg{"memsafe: gradients::of: the point set ", v.shape(), " was not in wrt(...)"}));
  }
};

namespace detail {
/// The parameter gradients of the leaves of E (in order) from a pass's accumulators
/// (host::grad_layout::poff order), appended to `out`.
template <class E, class T>
void append_param_gradients(const E& e, const host::grad_layout& L, const std::vector<double>& acc,
                            std::vector<param_gradient<T>>& out) {
  jobs::detail::for_each_term(e, [&](std::size_t t, const auto& term) {
    using Leaf = typename std::remove_cvref_t<decltype(term)>::leaf_type;
    using F = typename Leaf::formula_type;
    using Dv = derivative<F>;
    param_gradient<T> g;
    g.formula = F::name;
    if (t < L.par.size() && L.par[t]) {
      const detail::formula_params<T>& p = term.leaf->params;
      const std::size_t d = term.leaf->dim();
      const double* a = acc.data() + L.poff[t];
      const double* q = a + 2;
      double qs = 0;
      for (std::size_t k = 0; k < d; ++k) qs += q[k];
      if constexpr (Dv::kind == derivative_kind::stationary) {
        const double as = static_cast<double>(p.acc_scale);
        if constexpr (Dv::has_variance) g.variance = {static_cast<T>(a[0] / static_cast<double>(p.variance))};
        if constexpr (Dv::has_lengthscale) {
          if (p.kind == detail::per_dim_kind::inverse) {
            for (std::size_t k = 0; k < d; ++k)
              g.lengthscale.push_back(static_cast<T>(-2.0 * as * q[k] / static_cast<double>(p.per_dim[k])));
          } else {
            g.lengthscale = {static_cast<T>(-2.0 * as * libm::sqrt(as) * qs)};  // ℓ = 1/√acc_scale
          }
        }
        if constexpr (Dv::has_alpha) g.alpha = {static_cast<T>(a[1])};
      } else if constexpr (Dv::has_variance) {
        if (p.kind == detail::per_dim_kind::sqrt) {
          for (std::size_t k = 0; k < d; ++k) g.variance.push_back(static_cast<T>(q[k]));
        } else {
          g.variance = {static_cast<T>(qs)};
        }
      }
    }
    out.push_back(std::move(g));
  });
}

template <class X>
std::string grad_what(const backward_expr<X>& b) {
  return cat(msg{"the gradient of ", b.x.str()});
}
}  // namespace detail

/// Lower, plan and run a vjp with run-time options (budget, threads).
template <class X>
gradients<typename X::value_type> grad(const backward_expr<X>& b, const options& o) {
  using T = typename X::value_type;
  const std::size_t budget = detail::resolve_budget(o.budget);
  const std::size_t threads = plan::resolve_threads(o.threads);
  const double t0 = detail::monotonic_seconds();
  rewrite::rule_log log;
  const auto j = jobs::lower_grad(b, log);
  auto hp = host::plan_grad(j, budget, threads, detail::grad_what(b));
  hp.shown.rules = log.fired;
  hp.shown.expression = b.str();
  gradients<T> g;
  g.wrt_points = j.points;
  host::grad_outputs<T> out;
  g.points.resize(j.points.size());
  for (std::size_t k = 0; k < j.points.size(); ++k) {
    g.points[k].assign(detail::checked_mul(j.points[k].rows(), j.points[k].cols(), "memsafe: grad: a gradient"), T(0));
    out.points.push_back(g.points[k].data());
  }
  detail::accountant acc(budget);
  if constexpr (jobs::is_grad_product_job<std::remove_cvref_t<decltype(j)>>) {
    out.params.assign(hp.la.par_width, 0.0);
    out.params_b.assign(hp.lb.par_width, 0.0);
    host::run_grad(j, hp, out, acc);
    detail::append_param_gradients(j.a, hp.la, out.params, g.params);
    detail::append_param_gradients(j.b, hp.lb, out.params_b, g.params);
  } else {
    out.params.assign(hp.row_layout.par_width, 0.0);
    if (j.operand) {
      g.operand_rows = j.op_rows;
      g.operand_cols = j.op_cols;
      g.operand.assign(j.op_rows * j.op_cols, T(0));
      out.op = g.operand.data();
    }
    host::run_grad(j, hp, out, acc);
    detail::append_param_gradients(j.e, hp.row_layout, out.params, g.params);
  }
  if (!j.params)
    for (auto& p : g.params) p = param_gradient<T>{p.formula, {}, {}, {}};
  g.stats.seconds = detail::monotonic_seconds() - t0;
  g.stats.budget_bytes = budget;
  g.stats.peak_temp_bytes = acc.peak();
  g.stats.planned_temp_bytes = hp.shown.planned_bytes;
  g.stats.min_budget_bytes = hp.shown.min_bytes;
  g.stats.temp_allocations = acc.allocations();
  g.stats.threads = hp.shown.threads;
  g.stats.plan = std::move(hp.shown);
  return g;
}
/// With a run-time budget.
template <class Budget = detail::no_budget, class X>
gradients<typename X::value_type> grad(const backward_expr<X>& b, budget_bytes bb) {
  static_assert(std::is_same_v<Budget, detail::no_budget>,
                "memsafe: give the budget once: either grad<budget<N>>(...) or grad(..., budget_bytes(n))");
  return grad(b, options{bb.bytes, 0});
}
/// With a compile-time budget (`grad<budget<64_MiB>>(b)`), or MEMSAFE_BUDGET / the default.
template <class Budget = detail::no_budget, class X>
gradients<typename X::value_type> grad(const backward_expr<X>& b) {
  static_assert(detail::valid_budget_param<Budget>,
                "memsafe: grad<B>(...): B must be memsafe::budget<Bytes> (e.g. budget<64_MiB>)");
  return grad(b, options{detail::static_budget<Budget>(), 0});
}
/// grad(vjp(x, upstream, w), budget or options) in one call.
template <evaluable X, class U, class T, class O>
gradients<typename X::value_type> grad(const X& x, const U& upstream, const wrt_set<T>& w, const O& o) {
  return grad(vjp(x, upstream, w), o);
}
template <class Budget = detail::no_budget, evaluable X, class U, class T>
gradients<typename X::value_type> grad(const X& x, const U& upstream, const wrt_set<T>& w) {
  return grad<Budget>(vjp(x, upstream, w));
}

/// The backward plan grad would follow (nothing allocated or computed); budget_error like grad.
template <evaluable X>
grad_plan plan_for(const backward_expr<X>& b, const options& o = {}) {
  rewrite::rule_log log;
  const auto j = jobs::lower_grad(b, log);
  auto hp = host::plan_grad(j, detail::resolve_budget(o.budget), plan::resolve_threads(o.threads), detail::grad_what(b));
  hp.shown.rules = log.fired;
  hp.shown.expression = b.str();
  return hp.shown;
}
template <class Budget, class X>
grad_plan plan_for(const backward_expr<X>& b) {
  return plan_for(b, detail::static_options<Budget>());
}

/// The backward as written, as rewritten, its weights, mode, passes and bytes (or why no plan
/// fits and the minimum budget that would).
template <evaluable X>
std::string explain(const backward_expr<X>& b, const options& o = {}) {
  std::string s = detail::cat(detail::msg{"as written:   ", b.str(), "\n"});
  const std::size_t budget = detail::resolve_budget(o.budget);
  rewrite::rule_log log;
  const auto j = jobs::lower_grad(b, log);
  try {
    auto hp = host::plan_grad(j, budget, plan::resolve_threads(o.threads), detail::grad_what(b));
    hp.shown.rules = log.fired;
    s += hp.shown.describe();
  } catch (const budget_error& e) {
    auto hp = host::plan_grad(j, unlimited, 1, detail::grad_what(b));
    hp.shown.rules = log.fired;
    hp.shown.budget = budget;
    s += detail::cat(detail::msg{"as rewritten: ", hp.shown.rewritten, "\nbackward:     ", hp.shown.weights,
                                 "\nplan:         does not fit: ", e.what(), "\n"});
  }
  return s;
}
template <class Budget, class X>
std::string explain(const backward_expr<X>& b) {
  return explain(b, detail::static_options<Budget>());
}

}  // namespace memsafe
