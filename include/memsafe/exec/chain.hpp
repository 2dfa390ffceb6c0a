// memsafe/exec/chain.hpp — evaluate a product chain in the cheapest order that fits the budget.
//
// Rule `chain_order`. The factors' kinds are known at compile time (dense, lazy, pinned); the
// extents at run time. For every interval of factors the planner computes, by dynamic
// programming over the split points, the flops of the best order and the peak of temporaries it
// needs (every intermediate product is a dense temporary and counts against the budget; the
// final product is the caller's output; lazy factors are never materialised):
//   dense·dense  2pqr (GEMM)          lazy·dense, dense·lazy  c·pq + 2pqr (tiled, fused)
//   lazy·lazy    c·(pq + qr)·regeneration + 2pqr (tiled lazy × lazy product)
// where c is the cost of generating one lazy entry. Among orders whose peak fits the budget the
// cheapest is taken; if none fits, budget_error names the smallest peak, before any work.
// Execution follows the chosen splits by compile-time recursion over the intervals.
#pragma once
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>

#include "../core/budget.hpp"

#include "../core/accounting.hpp"
#include "../expr/chain.hpp"
#include "../plan/plan.hpp"
#include "../rewrite/rules.hpp"
#include "../backend/host/kernels.hpp"

namespace memsafe::detail {

template <class F>
inline constexpr bool is_dense_factor = false;
template <class T, std::size_t R, std::size_t C>
inline constexpr bool is_dense_factor<dense_factor<T, R, C>> = true;
template <class F>
inline constexpr bool is_pinned_factor = false;
template <class X>
inline constexpr bool is_pinned_factor<pinned<X>> = true;

/// Flops to generate one entry of a lazy factor (a rough, monotone estimate).
template <class E>
double entry_cost(const E& e) {
  if constexpr (requires { e.dim(); }) return 3.0 * double(e.dim()) + 20.0;
  else if constexpr (requires { e.e; }) return entry_cost(e.e) + 2.0;
  else if constexpr (requires { e.a; e.b; }) return entry_cost(e.a) + entry_cost(e.b) + 1.0;
  else if constexpr (requires { e.slow; }) return entry_cost(e.fast);
  else return 40.0;
}

/// Order of a chain of N factors: per interval [i, j] the best split, flops and peak bytes.
template <std::size_t N>
struct chain_order {
  std::array<std::size_t, N + 1> dims{};
  std::array<int, N> kind{};  // 0 dense, 1 lazy, 2 pinned
  std::array<double, N> cost{};
  std::array<double, N * N> flops{};
  std::array<double, N * N> peak{};
  std::array<std::size_t, N * N> split{};
  std::size_t elem = 8;

  double bytes(std::size_t i, std::size_t j) const {  // a materialised [i, j]
    return double(dims[i]) * double(dims[j + 1]) * double(elem);
  }
  bool lazy_single(std::size_t i, std::size_t j) const { return i == j && kind[i] == 1; }
  /// Temporary bytes the result of [i, j] occupies while it is an operand.
  double held(std::size_t i, std::size_t j) const {
    if (i == j) return kind[i] == 2 ? bytes(i, i) : 0.0;
    return bytes(i, j);
  }
  double combine_flops(std::size_t i, std::size_t s, std::size_t j) const {
    const double p = double(dims[i]), q = double(dims[s + 1]), r = double(dims[j + 1]);
    const bool ll = lazy_single(i, s), rl = lazy_single(s + 1, j);
    double f = 2.0 * p * q * r;
    if (ll && rl) {
      f += cost[i] * p * q * std::max(1.0, r / 256.0) + cost[s + 1] * q * r * std::max(1.0, p / 256.0);
    } else {
      if (ll) f += cost[i] * p * q;
      if (rl) f += cost[s + 1] * q * r;
    }
    return f;
  }

  /// Fill the tables for a budget; the root [0, N−1] writes into the caller's output.
  void solve(double budget) {
    for (std::size_t i = 0; i < N; ++i) {
      flops[i * N + i] = 0;
      peak[i * N + i] = kind[i] == 2 ? bytes(i, i) : 0.0;
    }
    for (std::size_t len = 2; len <= N; ++len)
      for (std::size_t i = 0; i + len <= N; ++i) {
        const std::size_t j = i + len - 1;
        const bool root = i == 0 && j == N - 1;
        const double out = root ? 0.0 : bytes(i, j);
        double best = std::numeric_limits<double>::infinity(), bestpk = best;
        std::size_t bs = i;
        double minpk = std::numeric_limits<double>::infinity();
        std::size_t ms = i;
        for (std::size_t s = i; s < j; ++s) {
          const double hl = held(i, s), hr = held(s + 1, j);
          const double pk = std::max({peak[i * N + s], hl + peak[(s + 1) * N + j], hl + hr + out});
          const double f = flops[i * N + s] + flops[(s + 1) * N + j] + combine_flops(i, s, j);
          if (pk < minpk) { minpk = pk; ms = s; }
          if (pk <= budget && f < best) { best = f; bestpk = pk; bs = s; }
        }
        if (best == std::numeric_limits<double>::infinity()) {  // nothing fits: keep the leanest
          bs = ms;
          bestpk = minpk;
          best = flops[i * N + ms] + flops[(ms + 1) * N + j] + combine_flops(i, ms, j);
        }
        split[i * N + j] = bs;
        flops[i * N + j] = best;
        peak[i * N + j] = bestpk;
      }
  }
  template <class Names>
  std::string order(std::size_t i, std::size_t j, const Names& names) const {
    if (i == j) return names[i];
    const std::size_t s = split[i * N + j];
    return "(" + order(i, s, names) + " " + order(s + 1, j, names) + ")";
  }
  /// Flops of the left-to-right order, for comparison in explain.
  double left_to_right() const {
    double f = 0;
    for (std::size_t j = 1; j < N; ++j) f += combine_flops(0, j - 1, j);
    return f;
  }
};

// Declared here, defined in exec/eval.hpp (the default template argument is given there).
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
    return is_dense_factor<F> ? 0 : is_pinned_factor<F> ? 2 : 1;
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

}  // namespace memsafe::detail
