// memsafe/plan/options.hpp — what every backend shares above its executor: the options an
// evaluation is planned with, the stats it reports, the result it returns, and the output checks.
// Backend-neutral: included by backend/host/, backend/cuda/ and the API layer (api/eval.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/accounting.hpp"
#include "../core/budget.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/math.hpp"
#include "../expr/overlap.hpp"
#include "plan.hpp"

namespace memsafe {

/// Run-time evaluation options.
struct options {
  std::optional<std::size_t> budget = std::nullopt;  ///< bytes of temporaries; unset: MEMSAFE_BUDGET, then default
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

/// Where an evaluation writes: the caller's buffers (eval_into), or a result that is sized only
/// when the evaluation asks for it, once its plan fits (eval), so that a budget that is too small
/// is refused before a result of any size is allocated. Calling it returns (values, indices). One
/// type for both, so that memsafe::precompiled holds one host::run per expression for both.
template <class T>
class output_target {
 public:
  output_target(T* values, index_t* indices) : values_(values), indices_(indices) {}
  output_target(result<T>& r, std::size_t count, bool with_indices)
      : result_(&r), count_(count), with_indices_(with_indices) {}
  std::pair<T*, index_t*> operator()() {
    if (result_) {
      try {
        result_->values.resize(count_);
        if (with_indices_) result_->indices.resize(count_);
      } catch (const std::bad_alloc&) {
        refused();
      }
      values_ = result_->values.data();
      indices_ = with_indices_ ? result_->indices.data() : nullptr;
      result_ = nullptr;
    }
    return {values_, indices_};
  }

 private:
  /// The system refused the result: out_of_memory saying that the budget does not bound it.
  [[noreturn]] MEMSAFE_COLD void refused() const {
    const std::size_t bytes = count_ * (sizeof(T) + (with_indices_ ? sizeof(index_t) : 0));
    throw out_of_memory(cat(msg{"memsafe: eval: the result of ", shape_str(result_->rows, result_->cols), " values",
                             with_indices_ ? " and as many indices" : "", " needs ", format_bytes(bytes),
                             " and could not be allocated. It is the caller's memory, not a temporary: the budget "
                             "does not bound it. Reduce the expression (sum, min, argkmin, a product with a "
                             "vector, ...), or evaluate it in parts with eval_into into buffers of your own"}),
                        bytes);
  }

  T* values_ = nullptr;
  index_t* indices_ = nullptr;
  result<T>* result_ = nullptr;
  std::size_t count_ = 0;
  bool with_indices_ = false;
};

/// The stats of an evaluation that followed plan p under an accountant (host or device).
template <class Accountant>
MEMSAFE_COLD eval_stats make_stats(tile_plan p, const Accountant& acc, std::size_t budget, double seconds) {
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

/// eval_into's argument checks (every backend's).
template <class X>
void check_outputs(const X& x, const typename X::value_type* values, const index_t* indices, const char* where) {
  const std::size_t count = checked_mul(x.rows(), x.cols(), where);
  if (!values && count != 0) throw argument_error(cat(msg{where, ": null output pointer"}));
  if constexpr (X::has_indices)
    if (!indices && count != 0)
      throw argument_error(cat(msg{where, ": ", x.str(), " returns indices: pass an index output"}));
  check_no_overlap(x, contiguous_block(values, count), "values", where);
  if constexpr (X::has_indices) {
    check_no_overlap(x, contiguous_block(indices, count), "indices", where);
    if (blocks_overlap(contiguous_block(values, count), contiguous_block(indices, count)))
      throw argument_error(cat(msg{where, ": the values and indices outputs share memory; give each its own buffer"}));
  }
}
/// A result for x, filled by run(output_target<T>&) -> eval_stats: the target sizes the result
/// when run calls it, after planning.
template <class X, class Run>
result<typename X::value_type> into_result(const X& x, Run&& run) {
  result<typename X::value_type> r;
  r.rows = x.rows();
  r.cols = x.cols();
  const std::size_t count = checked_mul(r.rows, r.cols, "memsafe: eval: the result");
  if (count > static_cast<std::size_t>(PTRDIFF_MAX) / (sizeof(typename X::value_type) + sizeof(index_t)))
    throw argument_error(cat(msg{"memsafe: eval: the result of ", shape_str(r.rows, r.cols),
                              " entries is more than can be addressed"}));
  output_target<typename X::value_type> target(r, count, X::has_indices);
  r.stats = run(target);
  return r;
}

template <class B>
inline constexpr bool valid_budget_param = is_budget<B>::value || std::is_same_v<B, no_budget>;

template <class B>
std::optional<std::size_t> static_budget() {
  if constexpr (is_budget<B>::value) return B::bytes;
  else return std::nullopt;
}

/// The options of a call whose budget is its template parameter (`plan_for<budget<N>>(expr)`).
template <class Budget>
options static_options() {
  static_assert(is_budget<Budget>::value,
                "memsafe: in eval_into<B>, plan_for<B> and explain<B>, B must be memsafe::budget<Bytes> "
                "(e.g. budget<64_MiB>)");
  return options{static_budget<Budget>(), 0};
}

}  // namespace detail
}  // namespace memsafe
