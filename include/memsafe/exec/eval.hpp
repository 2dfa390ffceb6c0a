// memsafe/exec/eval.hpp — the public entry points: eval, eval_into, plan_for.
//
// eval(expr, budget) = rewrite (normalise) → plan (tiles, threads, bytes; budget_error if the
// smallest plan does not fit) → execute (one pass over tiles, temporaries from an accountant
// whose limit is the budget). Outputs belong to the caller (eval_into) or to the returned
// result; they are not temporaries and do not count against the budget.
#pragma once
#include <chrono>
#include <functional>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/accounting.hpp"
#include "../core/budget.hpp"
#include "../expr/batched.hpp"
#include "../expr/diag.hpp"
#include "../expr/reductions.hpp"
#include "../plan/plan.hpp"
#include "../rewrite/linear.hpp"
#include "../rewrite/normalize.hpp"
#include "chain.hpp"
#include "executor.hpp"
#include "monoids.hpp"
#include "select.hpp"

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

using rewrite::is_diag_plus;
using rewrite::linear_post;

/// What a node evaluates: the rewritten lazy matrix, the monoid, the output layout, the
/// linear post-step, and the rules that fired.
template <class E, class Mon, class T>
struct row_plan {
  E e;
  Mon mon;
  linear_post<T> post;
  matrix_view<const T> rhs{nullptr, 0, 0};  ///< the dense factor for the post-step (none: ones)
};

template <class X>
struct row_job;

template <class R, class E>
struct row_job<reduce_expr<R, E>> {
  using T = typename E::value_type;
  static auto make(const reduce_expr<R, E>& x, rewrite::rule_log& log) {
    auto n = rewrite::normalize(x.e, log);
    linear_post<T> post;
    if constexpr (std::is_same_v<R, red::sum>) {
      auto in = rewrite::split_linear_guarded<true>(n, post, matrix_view<const T>{nullptr, 0, 0}, log, "sum");
      return row_plan<decltype(in), decltype(monoid_for<R, T>(x.r)), T>{in, monoid_for<R, T>(x.r), post};
    } else {
      return row_plan<decltype(n), decltype(monoid_for<R, T>(x.r)), T>{n, monoid_for<R, T>(x.r), post};
    }
  }
  static exec::out_spec<T> out(const reduce_expr<R, E>& x, T* v, index_t* ix) { return row_major_out(v, ix, x.cols()); }
};
template <class E, bool L>
struct row_job<matmul_expr<E, L>> {
  using T = typename E::value_type;
  static auto make(const matmul_expr<E, L>& x, rewrite::rule_log& log) {
    linear_post<T> post;
    auto in = rewrite::split_linear_guarded<true>(rewrite::normalize(x.e, log), post, x.rhs, log, "product");
    return row_plan<decltype(in), exec::matmul_monoid<T>, T>{in, exec::matmul_monoid<T>{x.rhs}, post, x.rhs};
  }
  static exec::out_spec<T> out(const matmul_expr<E, L>& x, T* v, index_t*) {
    if (x.transpose_out)  // the computed (n×c) block is the transpose of the c×n result
      return {v, 1, std::ptrdiff_t(x.e.rows()), nullptr, 0, 0};
    return row_major_out<T>(v, nullptr, x.cols());
  }
};
template <class E>
struct row_job<softmax_sum_expr<E>> {
  using T = typename E::value_type;
  static auto make(const softmax_sum_expr<E>& x, rewrite::rule_log& log) {
    auto n = rewrite::normalize(x.e, log);
    return row_plan<decltype(n), exec::softmax_sum_monoid<T>, T>{n, exec::softmax_sum_monoid<T>{x.values}, {}};
  }
  static exec::out_spec<T> out(const softmax_sum_expr<E>& x, T* v, index_t*) { return row_major_out<T>(v, nullptr, x.cols()); }
};
template <class E>
struct row_job<dense_expr<E>> {
  using T = typename E::value_type;
  static auto make(const dense_expr<E>& x, rewrite::rule_log& log) {
    auto n = rewrite::normalize(x.e, log);
    return row_plan<decltype(n), exec::dense_monoid<T>, T>{n, exec::dense_monoid<T>{}, {}};
  }
  static exec::out_spec<T> out(const dense_expr<E>& x, T* v, index_t*) { return row_major_out<T>(v, nullptr, x.cols()); }
};

/// Apply the linear post-step: out(i, c) = scale·out(i, c) + Σ coef·d(i)·rhs(i, c).
template <class T>
void apply_post(const linear_post<T>& post, const matrix_view<const T>& rhs, const exec::out_spec<T>& out,
                std::size_t n, std::size_t c) {
  if (post.trivial()) return;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t q = 0; q < c; ++q) {
      double v = post.scale * static_cast<double>(out.v(i, q));
      const double r = rhs.data() ? static_cast<double>(rhs(i, q)) : 1.0;
      for (const auto& [coef, d] : post.diags) v += coef * static_cast<double>(d(i)) * r;
      out.v(i, q) = static_cast<T>(v);
    }
}

template <class X>
inline constexpr bool is_lazy_product = requires(const X& x) { x.a; x.b; };

/// Rule `symmetric_product`: B is Aᵀ for pairwise leaves over the same points and parameters
/// (A·Aᵀ, e.g. Kuf·Kufᵀ), so only the blocks on and below the diagonal are computed.
template <class A, class B>
bool is_gram(const A& a, const B& b) {
  if constexpr (requires { a.use_fast; }) {  // a guarded factor: its split form when the guard held
    return a.use_fast && is_gram(a.fast, b);
  } else if constexpr (requires { b.use_fast; }) {
    return b.use_fast && is_gram(a, b.fast);
  } else if constexpr (requires { typename A::formula_type; typename B::formula_type; } &&
                std::is_same_v<typename A::formula_type, typename B::formula_type>) {
    auto same = [](const auto& u, const auto& v) {
      return u.data() == v.data() && u.rows() == v.rows() && u.cols() == v.cols() &&
             u.row_stride() == v.row_stride() && u.col_stride() == v.col_stride();
    };
    const auto &pa = a.params, &pb = b.params;
    return same(a.x, b.y) && same(a.y, b.x) && pa.variance == pb.variance && pa.alpha == pb.alpha &&
           pa.acc_scale == pb.acc_scale && pa.per_dim == pb.per_dim && pa.kind == pb.kind && pa.y_sign == pb.y_sign;
  } else {
    return false;
  }
}

template <class X>
tile_plan make_plan(const X& x, std::size_t budget, std::size_t threads, rewrite::rule_log& log) {
  if constexpr (is_lazy_product<X>) {  // lazy × lazy
    linear_post<typename X::value_type> post;
    auto [a, b] = rewrite::split_product(rewrite::normalize(x.a, log), rewrite::normalize(x.b, log), post, log);
    const bool gram = is_gram(a, b);
    if (gram) log.add("symmetric_product: A * transpose(A) -> lower block triangle, mirrored");
    auto p = plan::tiles_3d(
        a.rows(), b.cols(), a.cols(), budget, threads,
        [&](std::size_t tp, std::size_t tq, std::size_t tt) { return exec::product_bytes(a, b, tp, tq, tt); }, x.str(),
        gram);
    p.expression = a.str() + " * " + b.str();
    if (post.scale != 1) p.expression = std::to_string(post.scale) + " * (" + p.expression + ")";
    p.reduction = "tiled lazy x lazy product (double accumulation)";
    return p;
  } else {
    auto job = row_job<X>::make(x, log);
    auto p = exec::dispatch_select(
        job.e, job.mon,
        [&](const auto& leaf) { return exec::plan_select(leaf, job.mon, budget, threads, x.str()); },
        [&](const auto& e) {
          auto q = plan::tiles_2d(
              e.rows(), e.cols(), budget, threads,
              [&](std::size_t ti, std::size_t tj) { return exec::per_thread_bytes(e, job.mon, ti, tj); }, x.str());
          q.reduction = std::string(decltype(job.mon)::name) + " over j, fused with tile generation";
          return q;
        });
    p.expression = job.e.str();
    if (job.post.scale != 1) p.expression = std::to_string(job.post.scale) + " * [" + p.expression + "]";
    for (std::size_t k = 0; k < job.post.diags.size(); ++k) p.expression += " + D" + std::to_string(k) + "·M";
    return p;
  }
}

template <class X, class T = typename X::value_type>
tile_plan plan_and_run(const X& x, T* values, index_t* indices, std::size_t budget, std::size_t threads,
                       accountant& acc, rewrite::rule_log& log) {
  tile_plan p = make_plan(x, budget, threads, log);  // throws budget_error before any allocation
  if constexpr (is_lazy_product<X>) {
    rewrite::rule_log quiet;
    linear_post<T> post;
    auto [a, b] = rewrite::split_product(rewrite::normalize(x.a, quiet), rewrite::normalize(x.b, quiet), post, quiet);
    exec::run_product(a, b, values, x.cols(), p, acc);
    if (post.scale != 1)
      for (std::size_t q = 0; q < x.rows() * x.cols(); ++q) values[q] = static_cast<T>(post.scale * values[q]);
  } else {
    rewrite::rule_log quiet;
    auto job = row_job<X>::make(x, quiet);
    if constexpr (requires { job.mon.scale; }) {  // the scale is applied in double, before rounding to T
      job.mon.scale = job.post.scale;
      job.post.scale = 1;
    }
    const auto out = row_job<X>::out(x, values, indices);
    exec::dispatch_select(
        job.e, job.mon, [&](const auto& leaf) { exec::run_select(leaf, job.mon, out, p, acc); },
        [&](const auto& e) { exec::run_rows(e, job.mon, out, p, acc); });
    apply_post(job.post, job.rhs, out, job.e.rows(), job.rhs.data() ? job.rhs.cols() : 1);
  }
  return p;
}

// ---- diag(K) and trace(K) ----------------------------------------------------------------------

template <class F>
inline constexpr bool stationary_kernel =
    std::is_same_v<F, formula::rbf> || std::is_same_v<F, formula::matern12> || std::is_same_v<F, formula::matern32> ||
    std::is_same_v<F, formula::matern52> || std::is_same_v<F, formula::rq>;
template <class F>
inline constexpr bool zero_diagonal_distance =
    std::is_same_v<F, formula::sqdist> || std::is_same_v<F, formula::dist> || std::is_same_v<F, formula::l1>;

/// Guard of rule stationary_diagonal: K(x_i, x_i) is known without evaluating it when Y is X
/// itself and every point is finite (a NaN or ±inf coordinate makes the entry NaN as written).
template <class P>
bool same_points(const P& e) {
  if (!(e.x.data() == e.y.data() && e.x.rows() == e.y.rows() && e.x.row_stride() == e.y.row_stride() &&
        e.x.col_stride() == e.y.col_stride() && e.params.y_sign == 1))
    return false;
  for (std::size_t i = 0; i < e.x.rows(); ++i)
    for (std::size_t k = 0; k < e.x.cols(); ++k)
      if (!std::isfinite(e.x(i, k))) return false;
  return true;
}

/// Bytes of temporaries the diagonal of a normalised lazy matrix needs.
template <class E>
std::size_t diag_bytes(const E& e, rewrite::rule_log& log) {
  using T = typename E::value_type;
  if (e.rows() == 0) return 0;  // an empty diagonal reads nothing
  if constexpr (requires { typename E::formula_type; }) {
    using F = typename E::formula_type;
    if constexpr (stationary_kernel<F> || zero_diagonal_distance<F>)
      if (same_points(e)) {
        log.add(std::string("stationary_diagonal: diag(") + F::name + "(X, X)) -> " +
                (stationary_kernel<F> ? "variance" : "0") + ", no pairs evaluated");
        return 0;
      }
  } else if constexpr (requires { e.use_fast; }) {
    return e.use_fast ? diag_bytes(e.fast, log) : diag_bytes(e.slow, log);
  } else if constexpr (is_diag_plus<E>) {
    log.add("diagonal_of_sum: diag(E + D) -> diag(E) + D");
    return diag_bytes(e.e, log);
  } else if constexpr (!std::is_void_v<typename unary_op_of<E>::type>) {
    log.add("diagonal_of_map: diag(op(E)) -> op(diag(E))");
    return diag_bytes(e.e, log);
  }
  return host::align64(sizeof(T)) + exec::tile_gen<E>::workspace_bytes(e, 1, 1);
}

/// emit(i, K_ii) for every i, reading pairs only where no rule knows the value.
template <class E, class Emit>
void diag_run(const E& e, const Emit& emit, accountant& acc, rewrite::rule_log& log) {
  using T = typename E::value_type;
  const std::size_t n = e.rows();
  if (n == 0) return;
  if constexpr (requires { typename E::formula_type; }) {
    using F = typename E::formula_type;
    if constexpr (stationary_kernel<F> || zero_diagonal_distance<F>) {
      if (same_points(e)) {
        const T v = stationary_kernel<F> ? e.params.variance : T(0);
        for (std::size_t i = 0; i < n; ++i) emit(i, v);
        return;
      }
    }
  } else if constexpr (requires { e.use_fast; }) {
    if (e.use_fast) diag_run(e.fast, emit, acc, log);
    else diag_run(e.slow, emit, acc, log);
    return;
  } else if constexpr (is_diag_plus<E>) {
    const auto d = e.d;
    diag_run(e.e, [&](std::size_t i, T v) { emit(i, v + d.template at<T>(i)); }, acc, log);
    return;
  } else if constexpr (!std::is_void_v<typename unary_op_of<E>::type>) {
    const auto op = e.op;
    diag_run(e.e, [&](std::size_t i, T v) { emit(i, op(v)); }, acc, log);
    return;
  }
  // Generic: one 1×1 tile per diagonal entry.
  temp_buffer<std::byte> ws(acc, diag_bytes(e, log));
  std::byte* cur = ws.data();
  T* cell = exec::carve<T>(cur, 1);
  exec::tile_gen<E> gen(e);
  gen.bind(cur, 1, 1);
  for (std::size_t i = 0; i < n; ++i) {
    gen.fill(i, 1, i, 1, cell, 1);
    emit(i, *cell);
  }
}

template <class X>
inline constexpr bool is_diag_node = false;
template <class E>
inline constexpr bool is_diag_node<diag_expr<E>> = true;
template <class E>
inline constexpr bool is_diag_node<trace_expr<E>> = true;

template <class X>
  requires is_diag_node<X>
tile_plan make_plan(const X& x, std::size_t budget, std::size_t, rewrite::rule_log& log) {
  auto e = rewrite::normalize(x.e, log);
  tile_plan p;
  p.expression = x.str().substr(0, 5) + "(" + e.str() + ")";
  p.reduction = "diagonal entries only (no pairs off the diagonal)";
  p.rows = e.rows();
  p.cols = 1;
  p.budget = budget;
  p.threads = 1;
  p.tile_rows = p.tile_cols = 1;
  p.per_thread_bytes = p.planned_bytes = p.min_bytes = diag_bytes(e, log);
  p.row_blocks = p.num_tiles = e.rows();
  p.col_blocks = 1;
  if (p.min_bytes > budget) plan::too_small(x.str(), budget, p.min_bytes);
  return p;
}
template <class X, class T = typename X::value_type>
  requires is_diag_node<X>
tile_plan plan_and_run(const X& x, T* values, index_t*, std::size_t budget, std::size_t threads, accountant& acc,
                       rewrite::rule_log& log) {
  tile_plan p = make_plan(x, budget, threads, log);
  rewrite::rule_log quiet;
  auto e = rewrite::normalize(x.e, quiet);
  if constexpr (std::is_same_v<X, trace_expr<decltype(x.e)>>) {
    double s = 0;
    diag_run(e, [&](std::size_t, T v) { s += static_cast<double>(v); }, acc, quiet);
    values[0] = static_cast<T>(s);
  } else {
    diag_run(e, [&](std::size_t i, T v) { values[i] = v; }, acc, quiet);
  }
  return p;
}

// ---- batches of lazy matrices (broadcast tensors with leading batch axes) ------------------------

template <class X>
inline constexpr bool is_batched_node = false;
template <class R, class S>
inline constexpr bool is_batched_node<batched_reduce_expr<R, S>> = true;

template <class X>
  requires is_batched_node<X>
tile_plan make_plan(const X& x, std::size_t budget, std::size_t threads, rewrite::rule_log& log) {
  tile_plan p = make_plan(x.slice_expr(0), budget, threads, log);
  p.expression = "batch of " + std::to_string(x.s.batch()) + " x [" + p.expression + "]";
  return p;
}
template <class X, class T = typename X::value_type>
  requires is_batched_node<X>
tile_plan plan_and_run(const X& x, T* values, index_t* indices, std::size_t budget, std::size_t threads,
                       accountant& acc, rewrite::rule_log& log) {
  tile_plan p = make_plan(x, budget, threads, log);
  const std::size_t B = x.s.batch();
  for (std::size_t b = 0; b < B; ++b) {
    const auto sx = x.slice_expr(b);
    const std::size_t off = b * sx.rows() * sx.cols();
    rewrite::rule_log quiet;
    plan_and_run(sx, values + off, indices ? indices + off : nullptr, budget, threads, acc, quiet);
  }
  return p;
}

inline eval_stats make_stats(tile_plan p, const accountant& acc, std::size_t budget, double seconds) {
  eval_stats s;
  s.seconds = seconds;
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

template <class X, class T = typename X::value_type>
eval_stats run(const X& x, T* values, index_t* indices, const options& o) {
  const std::size_t budget = resolve_budget(o.budget);
  const std::size_t threads = plan::resolve_threads(o.threads);
  const auto t0 = std::chrono::steady_clock::now();
  accountant acc(budget);
  rewrite::rule_log log;
  tile_plan p = plan_and_run(x, values, indices, budget, threads, acc, log);
  p.rules = log.fired;
  return make_stats(std::move(p), acc, budget,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

/// eval_into's argument checks (also used by the CUDA backend).
template <class X>
void check_outputs(const X& x, const typename X::value_type* values, const index_t* indices, const char* where) {
  const std::size_t count = checked_mul(x.rows(), x.cols(), where);
  if (!values && count != 0) throw argument_error(std::string(where) + ": null output pointer");
  if constexpr (X::has_indices)
    if (!indices && count != 0)
      throw argument_error(std::string(where) + ": " + x.str() + " returns indices: pass an index output");
}
/// A result sized for x, filled by run(values, indices) -> eval_stats.
template <class X, class Run>
result<typename X::value_type> into_result(const X& x, Run&& run) {
  result<typename X::value_type> r;
  r.rows = x.rows();
  r.cols = x.cols();
  const std::size_t count = checked_mul(r.rows, r.cols, "memsafe: eval: the result");
  r.values.resize(count);
  if constexpr (X::has_indices) r.indices.resize(count);
  r.stats = run(r.values.data(), X::has_indices ? r.indices.data() : nullptr);
  return r;
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
  detail::check_outputs(x, values, indices, "memsafe: eval_into");
  return detail::run(x, values, indices, o);
}

/// Evaluate with run-time options (budget, threads).
template <evaluable X>
result<typename X::value_type> eval(const X& x, const options& o) {
  return detail::into_result(x, [&](auto* v, index_t* ix) { return detail::run(x, v, ix, o); });
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
  auto p = detail::make_plan(x, resolve_budget(o.budget), plan::resolve_threads(o.threads), log);
  p.rules = log.fired;
  return p;
}
template <evaluable X>
tile_plan plan_for(const X& x, budget_bytes b) {
  return plan_for(x, options{b.bytes, 0});
}

/// A human-readable account of an evaluation: the expression as written, as rewritten, the rules
/// that fired, and the plan (or why no plan fits and the minimum budget that would).
template <evaluable X>
std::string explain(const X& x, const options& o = {}) {
  std::string s = "as written:   " + x.str() + "\n";
  try {
    s += plan_for(x, o).describe();
  } catch (const budget_error& e) {
    rewrite::rule_log log;
    auto p = detail::make_plan(x, unlimited, 1, log);
    p.rules = log.fired;
    p.budget = resolve_budget(o.budget);
    s += p.describe_rewrite() + "plan:         does not fit: " + e.what() + "\n";
  }
  return s;
}

}  // namespace memsafe
