// memsafe/exec/eval.hpp — the public entry points: eval, eval_into, plan_for.
//
// eval(expr, budget) = rewrite (normalise) → plan (tiles, threads, bytes; budget_error if the
// smallest plan does not fit) → execute (one pass over tiles, temporaries from an accountant
// whose limit is the budget). Outputs belong to the caller (eval_into) or to the returned
// result; they are not temporaries and do not count against the budget.
#pragma once
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/accounting.hpp"
#include "../core/budget.hpp"
#include "../expr/reductions.hpp"
#include "../plan/plan.hpp"
#include "../rewrite/normalize.hpp"
#include "executor.hpp"
#include "monoids.hpp"

namespace memsafe {

/// Run-time evaluation options.
struct options {
  std::optional<std::size_t> budget;  ///< bytes of temporaries; unset: MEMSAFE_BUDGET, then default
  unsigned threads = 0;               ///< worker threads; 0: MEMSAFE_NUM_THREADS, then all cores
};

/// What one evaluation did.
struct eval_stats {
  std::size_t budget_bytes = 0;
  std::size_t peak_temp_bytes = 0;     ///< measured by the accountant
  std::size_t planned_temp_bytes = 0;  ///< what the plan predicted
  std::size_t min_budget_bytes = 0;    ///< the smallest budget this evaluation could run with
  std::size_t temp_allocations = 0;
  std::size_t tile_rows = 0, tile_cols = 0, tile_inner = 0, num_tiles = 0, threads = 0;
  double seconds = 0;
  tile_plan plan;
};

/// The result of eval: values (rows × cols, row-major), indices for arg-reductions, stats.
template <class T>
struct result {
  std::vector<T> values;
  std::vector<index_t> indices;
  std::size_t rows = 0, cols = 0;
  eval_stats stats;
  T operator()(std::size_t i, std::size_t j) const { return values[i * cols + j]; }
  T operator[](std::size_t i) const { return values[i]; }
  index_t index(std::size_t i, std::size_t j = 0) const { return indices[i * cols + j]; }
  std::size_t size() const { return values.size(); }
};

namespace detail {

template <class T>
exec::out_spec<T> row_major_out(T* values, index_t* indices, std::size_t cols) {
  return {values, std::ptrdiff_t(cols), 1, indices, std::ptrdiff_t(cols), 1};
}

template <class R, class T>
auto monoid_for(const R& r) {
  if constexpr (std::is_same_v<R, red::sum>) return exec::sum_monoid<T>{};
  else if constexpr (std::is_same_v<R, red::min>) return exec::best_monoid<T, false, false>{};
  else if constexpr (std::is_same_v<R, red::max>) return exec::best_monoid<T, true, false>{};
  else if constexpr (std::is_same_v<R, red::argmin>) return exec::best_monoid<T, false, true>{};
  else if constexpr (std::is_same_v<R, red::argmax>) return exec::best_monoid<T, true, true>{};
  else if constexpr (std::is_same_v<R, red::argkmin>) { exec::topk_monoid<T, false> m; m.k = r.k; return m; }
  else if constexpr (std::is_same_v<R, red::argkmax>) { exec::topk_monoid<T, true> m; m.k = r.k; return m; }
  else if constexpr (std::is_same_v<R, red::logsumexp>) return exec::logsumexp_monoid<T>{};
  else static_assert(always_false<R>, "memsafe: unknown reduction");
}

/// The normalised lazy matrix, the monoid and the output layout of a row-reduction node.
template <class X>
struct row_job;

template <class R, class E>
struct row_job<reduce_expr<R, E>> {
  using T = typename E::value_type;
  static auto make(const reduce_expr<R, E>& x) { return std::pair{rewrite::normalize(x.e), monoid_for<R, T>(x.r)}; }
  static exec::out_spec<T> out(const reduce_expr<R, E>& x, T* v, index_t* ix) { return row_major_out(v, ix, x.cols()); }
};
template <class E>
struct row_job<matmul_expr<E>> {
  using T = typename E::value_type;
  static auto make(const matmul_expr<E>& x) { return std::pair{rewrite::normalize(x.e), exec::matmul_monoid<T>{x.rhs}}; }
  static exec::out_spec<T> out(const matmul_expr<E>& x, T* v, index_t*) {
    if (x.transpose_out)  // the computed (n×c) block is the transpose of the c×n result
      return {v, 1, std::ptrdiff_t(x.e.rows()), nullptr, 0, 0};
    return row_major_out<T>(v, nullptr, x.cols());
  }
};
template <class E>
struct row_job<softmax_sum_expr<E>> {
  using T = typename E::value_type;
  static auto make(const softmax_sum_expr<E>& x) {
    return std::pair{rewrite::normalize(x.e), exec::softmax_sum_monoid<T>{x.values}};
  }
  static exec::out_spec<T> out(const softmax_sum_expr<E>& x, T* v, index_t*) { return row_major_out<T>(v, nullptr, x.cols()); }
};
template <class E>
struct row_job<dense_expr<E>> {
  using T = typename E::value_type;
  static auto make(const dense_expr<E>& x) { return std::pair{rewrite::normalize(x.e), exec::dense_monoid<T>{}}; }
  static exec::out_spec<T> out(const dense_expr<E>& x, T* v, index_t*) { return row_major_out<T>(v, nullptr, x.cols()); }
};

template <class X>
tile_plan make_plan(const X& x, std::size_t budget, std::size_t threads) {
  if constexpr (requires { x.a; x.b; }) {  // lazy × lazy
    auto a = rewrite::normalize(x.a);
    auto b = rewrite::normalize(x.b);
    auto p = plan::tiles_3d(
        a.rows(), b.cols(), a.cols(), budget, threads,
        [&](std::size_t tp, std::size_t tq, std::size_t tt) { return exec::product_bytes(a, b, tp, tq, tt); }, x.str());
    p.expression = a.str() + " * " + b.str();
    p.reduction = "tiled lazy x lazy product (double accumulation)";
    return p;
  } else {
    auto [e, mon] = row_job<X>::make(x);
    auto p = plan::tiles_2d(
        e.rows(), e.cols(), budget, threads,
        [&](std::size_t ti, std::size_t tj) { return exec::per_thread_bytes(e, mon, ti, tj); }, x.str());
    p.expression = e.str();
    p.reduction = std::string(decltype(mon)::name) + " over j, fused with tile generation";
    return p;
  }
}

template <class X, class T = typename X::value_type>
eval_stats run(const X& x, T* values, index_t* indices, const options& o) {
  const std::size_t budget = resolve_budget(o.budget);
  const std::size_t threads = plan::resolve_threads(o.threads);
  const auto t0 = std::chrono::steady_clock::now();
  tile_plan p = make_plan(x, budget, threads);  // throws budget_error before any allocation
  accountant acc(budget);
  if constexpr (requires { x.a; x.b; }) {
    auto a = rewrite::normalize(x.a);
    auto b = rewrite::normalize(x.b);
    exec::run_product(a, b, values, x.cols(), p, acc);
  } else {
    auto [e, mon] = row_job<X>::make(x);
    exec::run_rows(e, mon, row_job<X>::out(x, values, indices), p, acc);
  }
  eval_stats s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.budget_bytes = budget;
  s.peak_temp_bytes = acc.peak();
  s.planned_temp_bytes = p.planned_bytes;
  s.min_budget_bytes = p.min_bytes;
  s.temp_allocations = acc.allocations();
  s.tile_rows = p.tile_rows;
  s.tile_cols = p.tile_cols;
  s.tile_inner = p.tile_inner;
  s.num_tiles = p.num_tiles;
  s.threads = p.threads;
  s.plan = std::move(p);
  return s;
}

template <class B>
inline constexpr bool valid_budget_param = is_budget<B>::value || std::is_same_v<B, no_budget>;

template <class B>
std::optional<std::size_t> static_budget() {
  if constexpr (is_budget<B>::value) return B::bytes;
  else return std::nullopt;
}

}  // namespace detail

/// Evaluate into caller-owned, contiguous row-major outputs of shape rows × cols
/// (`expr.rows()`, `expr.cols()`); `indices` is required for argmin/argmax/argkmin/argkmax
/// and ignored otherwise. Returns the evaluation's stats.
template <evaluable X>
eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, const options& o = {}) {
  if (!values && x.rows() * x.cols() != 0) throw argument_error("memsafe: eval_into: null output pointer");
  if constexpr (X::has_indices)
    if (!indices && x.rows() * x.cols() != 0)
      throw argument_error("memsafe: eval_into: " + x.str() + " returns indices: pass an index output");
  return detail::run(x, values, indices, o);
}

/// Evaluate with run-time options (budget, threads).
template <evaluable X>
result<typename X::value_type> eval(const X& x, const options& o) {
  result<typename X::value_type> r;
  r.rows = x.rows();
  r.cols = x.cols();
  r.values.resize(r.rows * r.cols);
  if constexpr (X::has_indices) r.indices.resize(r.rows * r.cols);
  r.stats = detail::run(x, r.values.data(), X::has_indices ? r.indices.data() : nullptr, o);
  return r;
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
  return detail::make_plan(x, resolve_budget(o.budget), plan::resolve_threads(o.threads));
}
template <evaluable X>
tile_plan plan_for(const X& x, budget_bytes b) {
  return plan_for(x, options{b.bytes, 0});
}

/// A human-readable account of an evaluation: the expression and the plan.
template <evaluable X>
std::string explain(const X& x, const options& o = {}) {
  return "as written:   " + x.str() + "\n" + plan_for(x, o).describe();
}

}  // namespace memsafe
