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
#include "../rewrite/diagonal.hpp"
#include "../rewrite/linear.hpp"
#include "../rewrite/normalize.hpp"
#include "../rewrite/symmetric.hpp"
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
    return host::align64(sizeof(T)) + exec::tile_gen<E>::workspace_bytes(d.e, 1, 1);
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
    T* cell = exec::carve<T>(cur, 1);
    exec::tile_gen<E> gen(d.e);
    gen.bind(cur, 1, 1);
    for (std::size_t i = 0; i < n; ++i) {
      gen.fill(i, 1, i, 1, cell, 1);
      emit(i, *cell);
    }
  } else {  // diag_constant
    for (std::size_t i = 0; i < n; ++i) emit(i, d.value);
  }
}

template <class X>
inline constexpr bool is_lazy_product = requires(const X& x) { x.a; x.b; };
template <class X>
inline constexpr bool is_diag_node = false;
template <class E>
inline constexpr bool is_diag_node<diag_expr<E>> = true;
template <class E>
inline constexpr bool is_diag_node<trace_expr<E>> = true;
template <class X>
inline constexpr bool is_batched_node = false;
template <class R, class S>
inline constexpr bool is_batched_node<batched_reduce_expr<R, S>> = true;

// ---- lower: every rule fires here, once per evaluation ------------------------------------------

/// A lazy × lazy product, lowered: the factors (scalar_hoist applied with its guard), the
/// hoisted scale and whether only the lower block triangle is computed (symmetric_product).
template <class A, class B, class T>
struct product_job {
  A a;
  B b;
  linear_post<T> post;
  bool symmetric = false;
};
/// diag(K) or trace(K), lowered: the diagonal tree (rewrite/diagonal.hpp).
template <class D, bool Trace>
struct diag_job {
  D d;
  std::string expression;
};
/// A batch, lowered slice by slice (each slice once, into the same log).
template <class J, class T>
struct batch_job {
  std::vector<J> slices;
  std::vector<exec::out_spec<T>> outs;
};

/// The job for x: the rewritten expression(s) with every rule applied, `log` filled once.
/// Output pointers are bound here (row and batch jobs carry their output layout).
template <class X, class T = typename X::value_type>
auto lower(const X& x, T* values, index_t* indices, rewrite::rule_log& log) {
  if constexpr (is_lazy_product<X>) {
    linear_post<T> post;
    auto [a, b] = rewrite::split_product(rewrite::normalize(x.a, log), rewrite::normalize(x.b, log), post, log);
    const bool sym = rewrite::symmetric_product(a, b, log);
    return product_job<decltype(a), decltype(b), T>{a, b, std::move(post), sym};
  } else if constexpr (is_diag_node<X>) {
    auto e = rewrite::normalize(x.e, log);
    auto d = rewrite::diagonal(e, log);
    constexpr bool trace = std::is_same_v<X, trace_expr<std::remove_cvref_t<decltype(x.e)>>>;
    return diag_job<decltype(d), trace>{d, x.str().substr(0, 5) + "(" + e.str() + ")"};
  } else if constexpr (is_batched_node<X>) {
    using S = decltype(x.slice_expr(0));
    using J = decltype(row_job<S>::make(x.slice_expr(0), log));
    batch_job<J, T> job;
    const std::size_t B = x.s.batch();
    job.slices.reserve(B);
    job.outs.reserve(B);
    for (std::size_t b = 0; b < B; ++b) {
      const auto sx = x.slice_expr(b);
      const std::size_t off = b * sx.rows() * sx.cols();
      job.slices.push_back(row_job<S>::make(sx, log));
      job.outs.push_back(row_job<S>::out(sx, values ? values + off : nullptr, indices ? indices + off : nullptr));
    }
    return job;
  } else {
    struct bound {
      decltype(row_job<X>::make(x, log)) job;
      exec::out_spec<T> out;
    };
    return bound{row_job<X>::make(x, log), row_job<X>::out(x, values, indices)};
  }
}

// ---- plan: a pure function of the job, the budget and the threads --------------------------------

template <class A, class B, class T>
tile_plan plan_job(const product_job<A, B, T>& j, std::size_t budget, std::size_t threads, const std::string& what) {
  auto p = plan::tiles_3d(
      j.a.rows(), j.b.cols(), j.a.cols(), budget, threads,
      [&](std::size_t tp, std::size_t tq, std::size_t tt) { return exec::product_bytes(j.a, j.b, tp, tq, tt); }, what,
      j.symmetric);
  p.expression = j.a.str() + " * " + j.b.str();
  if (j.post.scale != 1) p.expression = std::to_string(j.post.scale) + " * (" + p.expression + ")";
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
template <class J>
  requires requires(const J& j) { j.job.mon; }
tile_plan plan_job(const J& b, std::size_t budget, std::size_t threads, const std::string& what) {
  const auto& job = b.job;
  auto p = exec::dispatch_select(
      job.e, job.mon, [&](const auto& leaf) { return exec::plan_select(leaf, job.mon, budget, threads, what); },
      [&](const auto& e) {
        auto q = plan::tiles_2d(
            e.rows(), e.cols(), budget, threads,
            [&](std::size_t ti, std::size_t tj) { return exec::per_thread_bytes(e, job.mon, ti, tj); }, what);
        q.reduction = std::string(decltype(job.mon)::name) + " over j, fused with tile generation";
        return q;
      });
  p.expression = job.e.str();
  if (job.post.scale != 1) p.expression = std::to_string(job.post.scale) + " * [" + p.expression + "]";
  for (std::size_t k = 0; k < job.post.diags.size(); ++k) p.expression += " + D" + std::to_string(k) + "·M";
  return p;
}
/// A batch: every slice planned before any runs (a guard may choose another form in one slice);
/// the plan shown is slice 0's with the largest minimum of all slices.
template <class J, class T>
std::vector<tile_plan> plan_slices(const batch_job<J, T>& b, std::size_t budget, std::size_t threads,
                                   const std::string& what) {
  std::vector<tile_plan> ps;
  ps.reserve(b.slices.size());
  for (std::size_t k = 0; k < b.slices.size(); ++k) {
    struct bound {
      const J& job;
    };
    ps.push_back(plan_job(bound{b.slices[k]}, budget, threads, what));
  }
  return ps;
}
template <class J, class T>
tile_plan plan_job(const batch_job<J, T>& b, std::size_t budget, std::size_t threads, const std::string& what) {
  const auto ps = plan_slices(b, budget, threads, what);
  tile_plan p = ps.empty() ? tile_plan{} : ps.front();
  for (const auto& q : ps) p.min_bytes = std::max(p.min_bytes, q.min_bytes);
  p.expression = "batch of " + std::to_string(b.slices.size()) + " x [" + p.expression + "]";
  return p;
}

// ---- run: executes a job under a plan, fires no rule ---------------------------------------------

template <class A, class B, class T>
void run_job(const product_job<A, B, T>& j, const tile_plan& p, T* values, index_t*, accountant& acc) {
  const std::size_t n = j.a.rows() * j.b.cols();
  exec::run_product(j.a, j.b, values, j.b.cols(), p, acc);
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
template <class Job, class Out>
void run_rows_job(Job job, const Out& out, const tile_plan& p, accountant& acc) {
  if constexpr (requires { job.mon.scale; }) {  // the scale is applied in double, before rounding to T
    job.mon.scale = job.post.scale;
    job.post.scale = 1;
  }
  exec::dispatch_select(
      job.e, job.mon, [&](const auto& leaf) { exec::run_select(leaf, job.mon, out, p, acc); },
      [&](const auto& e) { exec::run_rows(e, job.mon, out, p, acc); });
  apply_post(job.post, job.rhs, out, job.e.rows(), job.rhs.data() ? job.rhs.cols() : 1);
}
template <class J, class T>
  requires requires(const J& j) { j.job.mon; }
void run_job(const J& b, const tile_plan& p, T*, index_t*, accountant& acc) {
  run_rows_job(b.job, b.out, p, acc);
}
template <class J, class T>
void run_job(const batch_job<J, T>& b, const tile_plan&, T*, index_t*, accountant& acc, std::size_t budget,
             std::size_t threads, const std::string& what) {
  const auto ps = plan_slices(b, budget, threads, what);
  for (std::size_t k = 0; k < b.slices.size(); ++k) run_rows_job(b.slices[k], b.outs[k], ps[k], acc);
}

/// The plan eval would follow (lower + plan).
template <class X>
tile_plan make_plan(const X& x, std::size_t budget, std::size_t threads, rewrite::rule_log& log) {
  return plan_job(lower(x, static_cast<typename X::value_type*>(nullptr), nullptr, log), budget, threads, x.str());
}
/// lower + plan + run; the budget_error of a plan that does not fit comes before any allocation.
template <class X, class T = typename X::value_type>
tile_plan plan_and_run(const X& x, T* values, index_t* indices, std::size_t budget, std::size_t threads,
                       accountant& acc, rewrite::rule_log& log) {
  const auto job = lower(x, values, indices, log);
  tile_plan p = plan_job(job, budget, threads, x.str());
  if constexpr (is_batched_node<X>) run_job(job, p, values, indices, acc, budget, threads, x.str());
  else run_job(job, p, values, indices, acc);
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

namespace detail {
template <class X>
inline constexpr bool is_chain_node = false;
template <class... Fs>
inline constexpr bool is_chain_node<chain_expr<Fs...>> = true;

/// Lower x once and return planner(budget, threads) → tile_plan over that lowering (a chain's
/// planner is its order search).
template <class X>
auto planner_for(const X& x, rewrite::rule_log& log) {
  if constexpr (is_chain_node<X>) {
    return [&x, &log](std::size_t budget, std::size_t threads) { return make_plan(x, budget, threads, log); };
  } else {
    return [job = lower(x, static_cast<typename X::value_type*>(nullptr), nullptr, log), w = x.str()](
               std::size_t budget, std::size_t threads) { return plan_job(job, budget, threads, w); };
  }
}
}  // namespace detail

/// The plan eval would follow (nothing is allocated or computed). Throws budget_error like eval.
template <evaluable X>
tile_plan plan_for(const X& x, const options& o = {}) {
  rewrite::rule_log log;
  auto p = detail::planner_for(x, log)(resolve_budget(o.budget), plan::resolve_threads(o.threads));
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
  const std::size_t budget = resolve_budget(o.budget);
  rewrite::rule_log log;
  const auto planner = detail::planner_for(x, log);
  try {
    auto p = planner(budget, plan::resolve_threads(o.threads));
    p.rules = log.fired;
    s += p.describe();
  } catch (const budget_error& e) {
    auto p = planner(unlimited, 1);
    p.rules = log.fired;
    p.budget = budget;
    s += p.describe_rewrite() + "plan:         does not fit: " + e.what() + "\n";
  }
  return s;
}

}  // namespace memsafe
