// memsafe/lower/job.hpp — lower: an evaluable expression → a job, once per evaluation.
//
// `jobs::lower(x, values, indices, log)` fires every rule (rewrite/) exactly once, records each in
// `log`, and returns a job: plain data that both backends plan and run without rewriting again.
//
//   rows_job<E, R, T>        a row reduction: the rewritten lazy matrix E, the reduction tag R
//                            (red::sum, red::argkmin{k}, red::matmul<T>{rhs}, …), the linear post-step
//                            (scalar_hoist, diag_in_product) and the dense factor it multiplies
//   bound_rows<J, T>         a rows_job with its output layout (out_spec) bound
//   product_job<A, B, T>     a lazy × lazy product: the factors, the hoisted scale, symmetric_product
//   diag_job<D, Trace>       diag(K) / trace(K): the diagonal tree (rewrite/diagonal.hpp)
//   batch_job<X, T>          a batch: the batched expression, its slices lowered one at a time (their
//                            rules logged) where they are planned and again where they run
//
// A chain (expr/chain.hpp) lowers to a chain_job (lower/chain.hpp): the inputs of the rule
// chain_order, whose order depends on the budget, and its steps, each lowered once.
// The reduction tags are backend-neutral: the host maps them to its monoids
// (backend/host/eval.hpp), the CUDA backend to its device monoids (backend/cuda/plan.cuh).
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../expr/batched.hpp"
#include "../expr/chain.hpp"
#include "../expr/diag.hpp"
#include "../expr/reductions.hpp"
#include "../expr/view.hpp"
#include "../rewrite/diagonal.hpp"
#include "../rewrite/linear.hpp"
#include "../rewrite/normalize.hpp"
#include "../rewrite/symmetric.hpp"

namespace memsafe {

namespace red {  // the reduction tags of the nodes that are not reduce_expr (expr/reductions.hpp has the rest)
/// K·M: the dense factor M (m × c); `transposed`: the result is written transposed (M·K as (Kᵀ·Mᵀ)ᵀ).
template <class T>
struct matmul {
  static constexpr const char* name = "matmul";
  matrix_view<const T> rhs;
  bool transposed = false;
};
/// softmax_j(S)·V: the values V (m × c).
template <class T>
struct softmax_sum {
  static constexpr const char* name = "softmax_sum";
  matrix_view<const T> values;
};
/// dense(K): every entry.
struct dense {
  static constexpr const char* name = "dense";
};
}  // namespace red

namespace jobs {

// The nodes lowered here are implementation types (memsafe::detail).
using namespace memsafe::detail;

using rewrite::linear_post;

/// Where a row reduction writes: values (rows × cols, any strides) and optionally indices.
template <class T>
struct out_spec {
  T* values = nullptr;
  std::ptrdiff_t vrs = 0, vcs = 1;
  index_t* indices = nullptr;
  std::ptrdiff_t irs = 0, ics = 1;
  T& v(std::size_t i, std::size_t c) const { return values[std::ptrdiff_t(i) * vrs + std::ptrdiff_t(c) * vcs]; }
  index_t& ix(std::size_t i, std::size_t c) const { return indices[std::ptrdiff_t(i) * irs + std::ptrdiff_t(c) * ics]; }
};

template <class T>
out_spec<T> row_major_out(T* values, index_t* indices, std::size_t cols) {
  return {values, std::ptrdiff_t(cols), 1, indices, std::ptrdiff_t(cols), 1};
}

/// A row reduction, lowered: the rewritten lazy matrix, the reduction tag, the linear post-step
/// and the dense factor the post-step multiplies (none: ones).
template <class E, class R, class T>
struct rows_job {
  using value_type = T;
  using reduction = R;
  E e;
  R red;
  linear_post<T> post;
  matrix_view<const T> rhs{nullptr, 0, 0};
};
/// What split_linear took off a row job, around its shown reduction `s` (the rules' notation:
/// "c * (s) + D * v[m]" for a product, "s + sum(D)" for a sum); one per value type, not per job.
template <class T>
MEMSAFE_COLD std::string shown_post(std::string s, const linear_post<T>& post, std::size_t n, const char* reduction,
                                    const std::string& times, bool transposed) {
  if (post.scale != 1) s = detail::cat(detail::msg{post.scale, " * (", s, ")"});
  for (const auto& [coef, dg] : post.diags) {
    std::string d = dg.vector ? dg.vector->str(n) : dg.constant.str(n);
    if (coef != 1) d = detail::cat(detail::msg{coef, " * ", d});
    if (times.empty()) s += detail::cat(detail::msg{" + ", reduction, "(", d, ")"});
    else s += detail::cat(detail::msg{" + ", d, times});
  }
  return transposed ? detail::cat(detail::msg{"(", s, ")ᵀ"}) : s;
}
/// A row job as rewritten, for explain's "as rewritten" line: the reduction around the rewritten
/// lazy matrix, and what split_linear took off it, written as the rules that fired write it
/// ("c * (E * v[m]) + 0.1·I[n] * v[m]", "sum(E) + sum(0.1·I[n])").
template <class E, class R, class T>
MEMSAFE_COLD std::string shown(const rows_job<E, R, T>& j) {
  std::string s = j.e.str(), times;  // times: how a stripped diagonal term is applied (empty: summed)
  bool transposed = false;
  if constexpr (requires { j.red.rhs; }) {
    const auto& M = j.red.rhs;
    times = M.cols() == 1 ? detail::cat(detail::msg{" * v[", M.rows(), "]"}) : detail::cat(detail::msg{" * M[", M.shape(), "]"});
    s += times;
    transposed = j.red.transposed;
  } else if constexpr (requires { j.red.values; }) {
    s = detail::cat(detail::msg{"softmax_sum(", s, ", V[", j.red.values.shape(), "])"});
  } else {
    if constexpr (requires { j.red.k; }) s = detail::cat(detail::msg{R::name, "(", s, ", k=", j.red.k, ")"});
    else s = detail::cat(detail::msg{R::name, "(", s, ")"});
  }
  return shown_post(std::move(s), j.post, j.e.rows(), R::name, times, transposed);
}
/// A rows_job with its output layout.
template <class J, class T>
struct bound_rows {
  J job;
  out_spec<T> out;
};

/// How each row node lowers: make(x, log) → rows_job, out(x, values, indices) → out_spec.
template <class X>
struct rows_lowering;

template <class R, class E>
struct rows_lowering<reduce_expr<R, E>> {
  using T = typename E::value_type;
  static auto make(const reduce_expr<R, E>& x, rewrite::rule_log& log) {
    auto n = rewrite::normalize(x.e, log);
    if constexpr (std::is_same_v<R, red::sum>) {
      linear_post<T> post;
      auto in = rewrite::split_linear_guarded<true>(n, post, matrix_view<const T>{nullptr, 0, 0}, log, "sum");
      return rows_job<decltype(in), R, T>{in, x.r, std::move(post)};
    } else {
      return rows_job<decltype(n), R, T>{n, x.r, {}};
    }
  }
  static out_spec<T> out(const reduce_expr<R, E>& x, T* v, index_t* ix) { return row_major_out(v, ix, x.cols()); }
};
template <class E, bool L>
struct rows_lowering<matmul_expr<E, L>> {
  using T = typename E::value_type;
  static auto make(const matmul_expr<E, L>& x, rewrite::rule_log& log) {
    linear_post<T> post;
    auto in = rewrite::split_linear_guarded<true>(rewrite::normalize(x.e, log), post, x.rhs, log, "product");
    return rows_job<decltype(in), red::matmul<T>, T>{in, red::matmul<T>{x.rhs, x.transpose_out}, std::move(post), x.rhs};
  }
  static out_spec<T> out(const matmul_expr<E, L>& x, T* v, index_t*) {
    if (x.transpose_out)  // the computed (n×c) block is the transpose of the c×n result
      return {v, 1, std::ptrdiff_t(x.e.rows()), nullptr, 0, 0};
    return row_major_out<T>(v, nullptr, x.cols());
  }
};
template <class E>
struct rows_lowering<softmax_sum_expr<E>> {
  using T = typename E::value_type;
  static auto make(const softmax_sum_expr<E>& x, rewrite::rule_log& log) {
    auto n = rewrite::normalize(x.e, log);
    return rows_job<decltype(n), red::softmax_sum<T>, T>{n, red::softmax_sum<T>{x.values}, {}};
  }
  static out_spec<T> out(const softmax_sum_expr<E>& x, T* v, index_t*) { return row_major_out<T>(v, nullptr, x.cols()); }
};
template <class E>
struct rows_lowering<dense_expr<E>> {
  using T = typename E::value_type;
  static auto make(const dense_expr<E>& x, rewrite::rule_log& log) {
    auto n = rewrite::normalize(x.e, log);
    return rows_job<decltype(n), red::dense, T>{n, red::dense{}, {}};
  }
  static out_spec<T> out(const dense_expr<E>& x, T* v, index_t*) { return row_major_out<T>(v, nullptr, x.cols()); }
};

/// Apply the linear post-step: out(i, c) = scale·out(i, c) + Σ coef·d(i)·rhs(i, c).
template <class T>
void apply_post(const linear_post<T>& post, const matrix_view<const T>& rhs, const out_spec<T>& out, std::size_t n,
                std::size_t c) {
  if (post.trivial()) return;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t q = 0; q < c; ++q) {
      double v = post.scale * static_cast<double>(out.v(i, q));
      const double r = rhs.data() ? static_cast<double>(rhs(i, q)) : 1.0;
      for (const auto& [coef, d] : post.diags) v += coef * static_cast<double>(d(i)) * r;
      out.v(i, q) = static_cast<T>(v);
    }
}

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
/// A batch: the batched expression, whose slices are lowered one at a time where they are planned
/// and again where they run (backend/host/jobs.hpp, plan_batch and run_batch), so the memory its
/// jobs and plans take does not grow with the number of slices (held all at once, ≈ 0.8 KB per
/// slice outside the budget: 2²⁰ slices of a few points took 0.8 GB). The outputs are bound here.
template <class X, class T>
struct batch_job {
  X x;
  T* values = nullptr;
  index_t* indices = nullptr;
  std::size_t count() const { return x.s.batch(); }
  /// Whether the slices have rows (they all have slice 0's shape): with none there is nothing to run.
  bool empty() const { return count() == 0 || x.slice_expr(0).rows() == 0; }
  /// Slice b, lowered: its rules go into log.
  auto slice(std::size_t b, rewrite::rule_log& log) const {
    return rows_lowering<typename X::one_type>::make(x.slice_expr(b), log);
  }
  /// Slice b's output layout: the result is batch-major, entry (b, i, c) at ((b·n + i)·cols + c).
  out_spec<T> out(std::size_t b) const {
    const auto sx = x.slice_expr(b);
    const std::size_t off = b * sx.rows() * sx.cols();
    return rows_lowering<typename X::one_type>::out(sx, values ? values + off : nullptr, indices ? indices + off : nullptr);
  }
};

// ---- node kinds (read by both backends) -----------------------------------------------------------
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
template <class X>
inline constexpr bool is_chain_expr = false;
template <class... Fs>
inline constexpr bool is_chain_expr<chain_expr<Fs...>> = true;
/// A node lowered to a single rows_job (reduce, matmul, softmax_sum, dense).
template <class X>
inline constexpr bool is_rows_node = requires(const X& x, rewrite::rule_log& log) { rows_lowering<X>::make(x, log); };

/// Points a lowered job at the outputs it writes: row and batch jobs carry their output layout
/// (the others take the outputs when they run). lower binds the pointers it is given; eval lowers
/// with none, plans, allocates its result and binds it here (backend/host/eval.hpp).
template <class J, class T, class X>
void bind_outputs(bound_rows<J, T>& job, const X& x, T* values, index_t* indices) {
  job.out = rows_lowering<X>::out(x, values, indices);
}
template <class X, class T>
void bind_outputs(batch_job<X, T>& job, const X&, T* values, index_t* indices) {
  job.values = values;
  job.indices = indices;
}
template <class Job, class X, class T>
void bind_outputs(Job&, const X&, T*, index_t*) {}

/// The job for x: the rewritten expression(s) with every rule applied, `log` filled once (a batch's
/// rules are logged when it is planned).
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
    return diag_job<decltype(d), trace>{d, detail::cat(detail::msg{x.str().substr(0, 5), "(", e.str(), ")"})};
  } else if constexpr (is_batched_node<X>) {
    return batch_job<X, T>{x, values, indices};  // its slices are lowered where they are planned and run
  } else {
    static_assert(is_rows_node<X>, "memsafe: this node has no lowering (chains lower in lower/chain.hpp)");
    using J = decltype(rows_lowering<X>::make(x, log));
    return bound_rows<J, T>{rows_lowering<X>::make(x, log), rows_lowering<X>::out(x, values, indices)};
  }
}

}  // namespace jobs
}  // namespace memsafe
