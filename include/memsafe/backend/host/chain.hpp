// memsafe/backend/host/chain.hpp — evaluate a product chain in the order the rule chain_order
// (rewrite/chain.hpp) chooses, on the host.
//
// The order is chosen once per evaluation: the cheapest order (in flops) whose intermediates fit
// the budget; a dry walk over that order adds each step's smallest workspace to the intermediates
// alive beside it, and if that does not fit, the leanest order is taken; if even that does not fit,
// budget_error names its minimum before any work. Execution follows the chosen splits by
// compile-time recursion over the intervals; every intermediate product is a dense temporary
// counted against the budget, the final product is the caller's output, lazy factors are never
// materialised, and each step is planned and tiled on its own with what the intermediates leave.
#pragma once
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>

#include "../../core/budget.hpp"

#include "../../core/accounting.hpp"
#include "../../expr/chain.hpp"
#include "../../plan/plan.hpp"
#include "../../rewrite/chain.hpp"
#include "../../rewrite/rules.hpp"
#include "kernels.hpp"

namespace memsafe::host {

// The host backend runs the implementation types of memsafe::detail (nodes, the accountant, ...).
using namespace memsafe::detail;

using rewrite::chain_order;
using rewrite::entry_cost;
using rewrite::is_dense_factor;
using rewrite::is_pinned_factor;


// Declared here, defined in backend/host/eval.hpp (the default template argument is given there).
template <class X>
tile_plan make_plan(const X& x, std::size_t budget, std::size_t threads, rewrite::rule_log& log);
template <class... Fs>
tile_plan make_plan(const chain_expr<Fs...>& x, std::size_t budget, std::size_t threads, rewrite::rule_log& log);
template <class X, class T>
tile_plan plan_and_run(const X& x, T* values, index_t* indices, std::size_t budget, std::size_t threads,
                       accountant& acc, rewrite::rule_log& log);
template <class... Fs, class T>
tile_plan plan_and_run(const chain_expr<Fs...>& x, T* values, index_t*, std::size_t budget, std::size_t threads,
                       accountant& acc, rewrite::rule_log& log);

template <class... Fs>
struct chain_eval {
  using C = chain_expr<Fs...>;
  using T = typename C::value_type;
  static constexpr std::size_t N = sizeof...(Fs);
  const C& c;
  chain_order<N> ord;
  std::array<std::string, N> names;
  std::size_t threads = 1;
  accountant* acc = nullptr;
  rewrite::rule_log* log = nullptr;  ///< the chain's log: each step's rules are reported with it
  // Dry run: walk the chosen order without data, adding each step's minimum workspace to the
  // intermediates alive at that point; the result is the smallest budget the order can run in.
  bool dry = false;
  double dry_cur = 0, dry_peak = 0;

  explicit chain_eval(const C& ch) : c(ch) {
    ord.elem = sizeof(T);
    ord.dims[0] = c.rows();
    std::size_t k = 0;
    std::apply(
        [&](const auto&... f) {
          ((ord.dims[k + 1] = f.cols(), ord.kind[k] = kind_of(f), ord.cost[k] = cost_of(f),
            names[k] = f.str(), ++k),
           ...);
        },
        c.f);
  }
  template <class F>
  static int kind_of(const F&) {
    return rewrite::factor_kind<F>;
  }
  template <class F>
  static double cost_of(const F& f) {
    if constexpr (is_dense_factor<F> || is_pinned_factor<F>) return 0.0;
    else return entry_cost(f);
  }

  /// A dense operand: a view plus the temporary that holds it (if any).
  struct dense_operand {
    temp_buffer<T> buf;
    matrix_view<const T> m{nullptr, 0, 0};
    chain_eval* dry_owner = nullptr;
    double dry_bytes = 0;
    dense_operand() = default;
    dense_operand(dense_operand&& o) noexcept
        : buf(std::move(o.buf)), m(o.m), dry_owner(std::exchange(o.dry_owner, nullptr)), dry_bytes(o.dry_bytes) {}
    dense_operand& operator=(dense_operand&& o) noexcept {
      release();
      buf = std::move(o.buf);
      m = o.m;
      dry_owner = std::exchange(o.dry_owner, nullptr);
      dry_bytes = o.dry_bytes;
      return *this;
    }
    void release() {
      if (dry_owner) dry_owner->dry_cur -= dry_bytes;
      dry_owner = nullptr;
    }
    ~dense_operand() { release(); }
  };
  static const T* dummy() {
    static const T z[1] = {T(0)};
    return z;
  }
  void dry_step(std::size_t min_bytes) { dry_peak = std::max(dry_peak, dry_cur + double(min_bytes)); }

  std::size_t left() const { return acc->limit() - acc->current(); }

  /// Evaluate [I, J] into `out` (row-major, ld = cols) when given, else into a new temporary.
  template <std::size_t I, std::size_t J>
  dense_operand materialise(T* out) {
    dense_operand d;
    const std::size_t r = ord.dims[I], q = ord.dims[J + 1];
    if (dry) {
      if (!out) {
        d.dry_owner = this;
        d.dry_bytes = double(host::align64(r * q * sizeof(T)));
        dry_cur += d.dry_bytes;
        dry_peak = std::max(dry_peak, dry_cur);
      }
      if constexpr (I == J) {
        dry_step(make_plan(std::get<I>(c.f).x, unlimited, 1, *log).min_bytes);
      } else {
        dispatch<I, J, I>(ord.split[I * N + J], nullptr);
      }
      d.m = matrix_view<const T>(dummy(), r, q, 0, 0);
      return d;
    }
    if (!out) {
      d.buf = temp_buffer<T>(*acc, r * q);
      out = d.buf.data();
    }
    if constexpr (I == J) {  // a pinned factor
      const auto& f = std::get<I>(c.f);
      plan_and_run(f.x, out, nullptr, left(), threads, *acc, *log);
    } else {
      dispatch<I, J, I>(ord.split[I * N + J], out);
    }
    d.m = matrix_view<const T>(out, r, q);
    return d;
  }
  template <std::size_t I, std::size_t J, std::size_t S>
  void dispatch(std::size_t s, T* out) {
    if constexpr (S < J) {
      if (s == S) combine<I, S, J>(out);
      else dispatch<I, J, S + 1>(s, out);
    }
  }
  /// The operand for [I, J]: the factor itself (lazy or dense) or a materialised product.
  template <std::size_t I, std::size_t J>
  decltype(auto) operand(dense_operand& hold) {
    if constexpr (I == J && !is_pinned_factor<std::tuple_element_t<I, std::tuple<Fs...>>>) {
      const auto& f = std::get<I>(c.f);
      if constexpr (is_dense_factor<std::remove_cvref_t<decltype(f)>>) return f.m;
      else return f;
    } else {
      hold = materialise<I, J>(nullptr);
      return hold.m;
    }
  }
  template <std::size_t I, std::size_t S, std::size_t J>
  void combine(T* out) {
    dense_operand hl, hr;
    const auto a = operand<I, S>(hl);
    const auto b = operand<S + 1, J>(hr);
    multiply(a, b, out);
  }

  static constexpr bool is_view(const matrix_view<const T>*) { return true; }
  template <class U>
  static constexpr bool is_view(const U*) { return false; }

  template <class A, class B>
  void multiply(const A& a, const B& b, T* out) {
    constexpr bool ad = is_view(static_cast<const A*>(nullptr)), bd = is_view(static_cast<const B*>(nullptr));
    auto step = [&](const auto& x) {
      if (dry) dry_step(make_plan(x, unlimited, 1, *log).min_bytes);
      else plan_and_run(x, out, nullptr, left(), threads, *acc, *log);
    };
    if constexpr (ad && bd) {
      if (dry) dry_step(dense_product_bytes(a, b));
      else dense_product(a, b, out);
    } else if constexpr (!ad && bd) {
      step(matmul_expr<A>{{}, a, b, false, false});
    } else if constexpr (ad && !bd) {
      using Tt = transpose_expr<B>;
      step(matmul_expr<Tt, true>{{}, Tt{{}, b}, a.t(), false, true});
    } else {
      step(lazy_product_expr<A, B>{{}, a, b});
    }
  }
  static std::size_t dense_product_bytes(const matrix_view<const T>& A, const matrix_view<const T>& B) {
    if (std::is_same_v<T, double> && A.col_stride() == 1 && B.col_stride() == 1) return 0;
    return host::align64(B.cols() * sizeof(double));
  }
  /// Minimum bytes of the order in `ord` (intermediates plus each step's smallest workspace).
  double dry_run() {
    dry = true;
    dry_cur = dry_peak = 0;
    materialise<0, N - 1>(const_cast<T*>(dummy()));
    dry = false;
    return dry_peak;
  }
  /// Pick the order: the cheapest whose held intermediates fit; if its steps do not fit beside
  /// them, the leanest order. Returns the minimum budget of the chosen order.
  double choose(double budget) {
    ord.solve(budget);
    double need = dry_run();
    if (need > budget) {
      ord.solve(0.0);
      need = dry_run();
    }
    return need;
  }
  /// out (p×r) = A (p×q) · B (q×r), double accumulation; contiguous operands go to gemm_acc
  /// (BLAS where linked), others through a strided loop.
  void dense_product(const matrix_view<const T>& A, const matrix_view<const T>& B, T* out) {
    const std::size_t p = A.rows(), q = A.cols(), r = B.cols();
    if constexpr (std::is_same_v<T, double>) {
      if (A.col_stride() == 1 && B.col_stride() == 1) {
        std::fill(out, out + p * r, 0.0);
        host::gemm_acc(p, r, q, A.data(), A.row_stride(), B.data(), B.row_stride(), out, r);
        return;
      }
    }
    temp_buffer<double> row(*acc, r);
    for (std::size_t i = 0; i < p; ++i) {
      std::fill(row.data(), row.data() + r, 0.0);
      for (std::size_t k = 0; k < q; ++k) {
        const double av = static_cast<double>(A(i, k));
        for (std::size_t j = 0; j < r; ++j) row[j] += av * static_cast<double>(B(k, j));
      }
      for (std::size_t j = 0; j < r; ++j) out[i * r + j] = static_cast<T>(row[j]);
    }
  }
};

/// Choose the order for `ce` and describe it as a plan; budget_error if even the leanest order
/// does not fit.
template <class... Fs>
tile_plan chain_plan(chain_eval<Fs...>& ce, std::size_t budget, std::size_t threads, rewrite::rule_log& log) {
  constexpr std::size_t N = sizeof...(Fs);
  ce.log = &log;
  const double need = ce.choose(double(budget));
  tile_plan p;
  p.expression = ce.ord.order(0, N - 1, ce.names);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.4g flops (left to right: %.4g)", ce.ord.flops[N - 1], ce.ord.left_to_right());
  p.reduction = "matrix chain of " + std::to_string(N) + " factors, order by dynamic programming over flops and " +
                "temporary bytes: " + buf + "; each step planned and tiled on its own";
  log.add("chain_order: " + p.expression);
  p.rows = ce.c.rows();
  p.cols = ce.c.cols();
  p.budget = budget;
  p.threads = threads;
  p.min_bytes = static_cast<std::size_t>(need);
  // Each step may use whatever the intermediates alive beside it leave of the budget.
  p.planned_bytes = p.per_thread_bytes = budget;
  if (need > double(budget)) plan::too_small(ce.c.str(), budget, p.min_bytes);
  return p;
}

template <class... Fs>
tile_plan make_plan(const chain_expr<Fs...>& x, std::size_t budget, std::size_t threads, rewrite::rule_log& log) {
  chain_eval<Fs...> ce(x);
  return chain_plan(ce, budget, threads, log);
}

template <class... Fs, class T>
tile_plan plan_and_run(const chain_expr<Fs...>& x, T* values, index_t*, std::size_t budget, std::size_t threads,
                       accountant& acc, rewrite::rule_log& log) {
  chain_eval<Fs...> ce(x);
  tile_plan p = chain_plan(ce, budget, threads, log);  // the order is chosen once, here
  ce.threads = threads;
  ce.acc = &acc;
  ce.template materialise<0, sizeof...(Fs) - 1>(values);
  return p;
}

}  // namespace memsafe::host
