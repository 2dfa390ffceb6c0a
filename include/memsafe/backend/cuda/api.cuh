// memsafe/backend/cuda/api.cuh — the public layer of the GPU backend: memsafe::cuda::eval,
// eval_into and plan_for. Each lowers the expression once (jobs::lower: every rule fired once, into
// one log), then plans the job with the pure plan_job (rows_plan.cuh, product_plan.cuh) and, for
// eval, runs it with run_job (rows.cuh, product.cuh), which follows the plan:
//   plan_for = lower + plan_job         (the device's resources given or queried; nothing allocated)
//   eval     = lower + plan_job + run_job
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/budget.hpp"
#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "plan.cuh"
#include "product.cuh"
#include "product_plan.cuh"
#include "rows.cuh"
#include "rows_plan.cuh"
#include "runtime.cuh"

namespace memsafe::cuda {
namespace detail {

/// The nodes the device evaluates: row jobs and lazy × lazy products (node kinds of lower/job.hpp).
template <class X>
inline constexpr bool device_node = jobs::is_rows_node<X> || jobs::is_lazy_product<X>;

template <class X>
void check_node() {
  static_assert(device_node<X>,
                "memsafe::cuda: the GPU backend evaluates reductions (sum, min, argkmin, logsumexp, ...), products "
                "K*v, K*M, v*K, M*K, softmax_sum, dense(E) and lazy x lazy products; product chains, batches and "
                "diag/trace are evaluated on the host (memsafe::eval)");
}

/// Whether X is (K + D)·M — a dense product whose lazy factor has diagonal terms at its top. The
/// lowering's guard reads M on the host (rewrite::split_is_exact: a non-finite entry keeps the
/// unsplit form) and D·M is added on the host after the device pass (rows.cuh,
/// apply_diagonal_terms), so M must be in host memory.
template <class X>
inline constexpr bool diag_product = false;
template <class E, bool L>
inline constexpr bool diag_product<memsafe::detail::matmul_expr<E, L>> = [] {
  using N = decltype(rewrite::normalize(std::declval<const E&>(), std::declval<rewrite::rule_log&>()));
  return !std::is_same_v<rewrite::split_linear_t<true, N>, rewrite::split_linear_t<false, N>>;
}();

/// eval: (K + D)·M with M in device memory is an argument_error before anything runs (the host
/// reading it crashed).
template <class X>
void check_diag_operand(const X& x) {
  if constexpr (diag_product<X>) {
    if (x.rhs.data() && space_of(x.rhs.data()) != memory_space::host)
      throw argument_error(cat(msg{"memsafe::cuda::eval: ", x.str(),
                                   ": a product with diagonal terms, (K + D)·M, adds D·M on the host after the device "
                                   "pass, so M must be in host memory on the GPU backend (or evaluate K·M and add D·M "
                                   "yourself)"}));
  }
}
/// plan_for takes the inputs as device-resident and reads none: the dense factor of (K + D)·M goes
/// to the lowering as a stand-in of the same shape whose rows all read one row of zeros (`zeros`,
/// M's column count; row stride 0, column stride 1), so the guard reads no caller memory and the
/// split form is planned.
template <class X>
X without_operand_values(const X& x, std::vector<typename X::value_type>& zeros) {
  X y = x;
  if constexpr (diag_product<X>) {
    zeros.assign(std::max<std::size_t>(x.rhs.cols(), 1), typename X::value_type(0));
    y.rhs = matrix_view<const typename X::value_type>(zeros.data(), x.rhs.rows(), x.rhs.cols(), 0, 1);
  }
  return y;
}

/// The job of x, its outputs not yet bound: every rule fired once, into `log`.
template <class X, class T = typename X::value_type>
auto lower(const X& x, rewrite::rule_log& log) {
  auto job = jobs::lower(x, static_cast<T*>(nullptr), nullptr, log);
  if constexpr (jobs::is_lazy_product<X>) return bind_output(std::move(job), static_cast<T*>(nullptr));
  else return job;
}
/// Point a lowered job at its outputs (after planning: eval allocates its result only for a plan
/// that fits).
template <class Job, class X, class T>
void bind_job_outputs(Job& job, const X& x, T* values, index_t* indices) {
  if constexpr (requires { job.out; }) jobs::bind_outputs(job, x, values, indices);
  else job.values = values;  // bound_product
}

/// lower → plan → outputs() → run. Every planning error (budget_error with the minimum, a shape or
/// argument error) comes before outputs() is called, so eval allocates its result only for a plan
/// that fits. `where`: residency::queried for eval_into's caller pointers (device or host memory),
/// residency::host_outputs for eval's result vectors (host memory, not yet allocated when planning).
template <class X, class T = typename X::value_type>
eval_stats run(const X& x, memsafe::detail::output_target<T>& outputs, residency where, const options& o) {
  check_node<X>();
  if constexpr (device_node<X>) {
    check_no_pending_error("memsafe::cuda::eval");
    const std::size_t budget = resolve_budget(o.budget);
    const device_resources dev = device_resources::current();  // the same numbers plan_for uses
    const auto t0 = std::chrono::steady_clock::now();
    check_diag_operand(x);
    rewrite::rule_log log;
    auto job = lower(x, log);
    if (where == residency::queried) {  // eval_into: where the caller's outputs live decides the plan
      const auto [v, ix] = outputs();
      bind_job_outputs(job, x, v, ix);
    }
    // Planned before the stream, the accountant and the outputs: argument_error or budget_error
    // before any allocation or launch.
    auto plan = plan_job(job, budget, dev, where, x.str());
    if (where != residency::queried) {  // eval: its result vectors exist only now
      const auto [values, indices] = outputs();
      bind_job_outputs(job, x, values, indices);
    }
    std::unique_ptr<stream> own;
    if (!o.stream) {
      own = std::make_unique<stream>();
      after_default_streams(own->get());
    }
    const cudaStream_t st = o.stream ? o.stream : own->get();
    eval_stats stats;
    {
      device_accountant acc(budget, st);
      run_job(job, plan, o, acc);
      if (o.synchronize || own) MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));  // frees are stream-ordered
      plan.plan.rules = log.fired;
      stats = memsafe::detail::make_stats(std::move(plan.plan), acc.counter(), budget,
                                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return stats;
  } else {
    return {};
  }
}

}  // namespace detail

/// Evaluate on the GPU into caller-owned outputs (device or host pointers), laid out as the host's
/// eval_into: contiguous row-major rows × cols; `indices` for arg-reductions.
template <evaluable X>
eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, const options& o = {}) {
  memsafe::detail::check_outputs(x, values, indices, "memsafe::cuda::eval_into");
  if constexpr (X::has_indices)  // the rows are written from one side: both outputs must live there
    if (values && indices &&
        (detail::space_of(values) == detail::memory_space::host) != (detail::space_of(indices) == detail::memory_space::host))
      throw argument_error("memsafe::cuda::eval_into: the values and indices outputs are in different memory spaces "
                           "(one in host memory, one on the device); give both in the same space");
  memsafe::detail::output_target<typename X::value_type> out(values, indices);
  return detail::run(x, out, detail::residency::queried, o);
}
/// Compile-time budget: memsafe::cuda::eval_into<memsafe::budget<1_GiB>>(expr, values, indices[, stream]).
template <class Budget, evaluable X>
  requires memsafe::detail::is_budget<Budget>::value
eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, cudaStream_t s = nullptr) {
  return eval_into(x, values, indices, options{Budget::bytes, s});
}

/// Evaluate on the GPU; results in host vectors, as memsafe::eval returns them.
template <evaluable X>
result<typename X::value_type> eval(const X& x, const options& o = {}) {
  options oo = o;
  oo.synchronize = true;
  return memsafe::detail::into_result(
      x, [&](auto& target) { return detail::run(x, target, detail::residency::host_outputs, oo); });
}
/// Compile-time budget: memsafe::cuda::eval<memsafe::budget<1_GiB>>(expr).
template <class Budget, evaluable X>
  requires memsafe::detail::is_budget<Budget>::value
result<typename X::value_type> eval(const X& x, cudaStream_t s = nullptr) {
  return eval(x, options{Budget::bytes, s});
}
/// Run-time budget.
template <evaluable X>
result<typename X::value_type> eval(const X& x, budget_bytes b, cudaStream_t s = nullptr) {
  return eval(x, options{b.bytes, s});
}

/// The plan a device evaluation would follow on a device with these resources (nothing allocated
/// or launched, no device needed; inputs are taken as device-resident and outputs as host vectors).
template <evaluable X>
tile_plan plan_for(const X& x, const options& o, const device_resources& dev) {
  detail::check_node<X>();
  if constexpr (detail::device_node<X>) {
    rewrite::rule_log log;
    std::vector<typename X::value_type> zeros;
    const auto job = detail::lower(detail::without_operand_values(x, zeros), log);
    tile_plan p = detail::plan_job(job, detail::resolve_budget(o.budget), dev, detail::residency::assumed, x.str()).plan;
    p.rules = log.fired;
    return p;
  } else {
    return {};
  }
}
/// The plan on the current device (its resources as eval queries them); cuda_error without a device.
template <evaluable X>
tile_plan plan_for(const X& x, const options& o = {}) {
  detail::check_node<X>();
  return plan_for(x, o, device_resources::current());
}
/// Compile-time budget: memsafe::cuda::plan_for<memsafe::budget<1_GiB>>(expr).
template <class Budget, evaluable X>
  requires memsafe::detail::is_budget<Budget>::value
tile_plan plan_for(const X& x) {
  return plan_for(x, options{Budget::bytes});
}

}  // namespace memsafe::cuda
