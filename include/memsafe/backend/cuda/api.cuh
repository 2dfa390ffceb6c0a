// memsafe/backend/cuda/api.cuh — the public layer of the GPU backend: memsafe::cuda::eval,
// eval_into and plan_for, and the dispatch of an expression to its driver.
#pragma once
#include <chrono>
#include <memory>
#include <utility>

#include "../../core/budget.hpp"
#include "../../lower/job.hpp"
#include "../../plan/options.hpp"
#include "plan.cuh"
#include "product.cuh"
#include "rows.cuh"
#include "runtime.cuh"

namespace memsafe::cuda {
namespace detail {

/// Plan (and, unless plan_only, evaluate) with the driver of the expression's node.
template <class X>
tile_plan dispatch(const X& x, typename X::value_type* values, index_t* indices, const options& o,
                   std::size_t budget, const device_resources& dev, device_accountant* acc, bool plan_only,
                   rewrite::rule_log& log) {
  if constexpr (jobs::is_lazy_product<X>)  // node kinds as lowering reads them (lower/job.hpp)
    return product_eval<decltype(x.a), decltype(x.b)>::run(x, values, o, budget, dev, acc, plan_only, log);
  else return row_eval<X>::run(x, values, indices, o, budget, dev, acc, plan_only, log);
}

template <class X>
void check_node() {
  static_assert(jobs::is_rows_node<X> || jobs::is_lazy_product<X>,
                "memsafe::cuda: the GPU backend evaluates reductions (sum, min, argkmin, logsumexp, ...), products "
                "K*v, K*M, v*K, M*K, softmax_sum, dense(E) and lazy x lazy products; product chains, batches and "
                "diag/trace are evaluated on the host (memsafe::eval)");
}

template <class X, class T = typename X::value_type>
eval_stats run(const X& x, T* values, index_t* indices, const options& o) {
  check_node<X>();
  const std::size_t budget = memsafe::detail::resolve_budget(o.budget);
  const device_resources dev = device_resources::current();  // the same numbers plan_for uses
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<stream> own;
  if (!o.stream) own = std::make_unique<stream>();
  const cudaStream_t st = o.stream ? o.stream : own->get();
  rewrite::rule_log log;
  eval_stats stats;
  {
    // dispatch plans first: budget_error before anything is allocated or launched.
    device_accountant acc(budget, st);
    tile_plan p = dispatch(x, values, indices, o, budget, dev, &acc, false, log);
    if (o.synchronize || own) MEMSAFE_CUDA_CHECK(cudaStreamSynchronize(st));  // frees are stream-ordered
    p.rules = log.fired;
    stats = memsafe::detail::make_stats(std::move(p), acc.counter(), budget,
                                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return stats;
}

}  // namespace detail

/// Evaluate on the GPU into caller-owned outputs (device or host pointers), laid out as the host's
/// eval_into: contiguous row-major rows × cols; `indices` for arg-reductions.
template <evaluable X>
eval_stats eval_into(const X& x, typename X::value_type* values, index_t* indices, const options& o = {}) {
  memsafe::detail::check_outputs(x, values, indices, "memsafe::cuda::eval_into");
  return detail::run(x, values, indices, o);
}

/// Evaluate on the GPU; results in host vectors, as memsafe::eval returns them.
template <evaluable X>
result<typename X::value_type> eval(const X& x, const options& o = {}) {
  options oo = o;
  oo.synchronize = true;
  return memsafe::detail::into_result(x, [&](auto* v, index_t* ix) { return detail::run(x, v, ix, oo); });
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
  rewrite::rule_log log;
  auto p = detail::dispatch(x, nullptr, nullptr, o, memsafe::detail::resolve_budget(o.budget), dev, nullptr, true, log);
  p.rules = log.fired;
  return p;
}
/// The plan on the current device (its resources as eval queries them); cuda_error without a device.
template <evaluable X>
tile_plan plan_for(const X& x, const options& o = {}) {
  detail::check_node<X>();
  return plan_for(x, o, device_resources::current());
}

}  // namespace memsafe::cuda
