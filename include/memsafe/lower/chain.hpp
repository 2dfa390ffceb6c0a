// memsafe/lower/chain.hpp — lower a product chain (expr/chain.hpp) to a chain_job.
//
// A chain F0·F1·…·F(N−1) lowers to the inputs of the rule chain_order (rewrite/chain.hpp: the
// factors' kinds, extents and entry costs) and a table of its possible steps. The order itself
// depends on the budget, so the chain planner (plan/chain.hpp) solves chain_order and lists the
// chosen order's steps; each step — the product of two operands, or a pinned factor evaluated on
// its own — is lowered the first time the planner asks for it, exactly once (lower_step), with
// its rules recorded beside it. An operand that is an intermediate product does not exist while
// planning: the step is lowered over a placeholder of the right extents, and the executor binds the
// intermediate (bind_rhs) and re-checks the one guard that reads it (diag_in_product: a finite
// dense factor) when it runs the step.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../expr/chain.hpp"
#include "../rewrite/chain.hpp"
#include "../rewrite/linear.hpp"
#include "job.hpp"

namespace memsafe::jobs {

/// One step of a chain's order: the product of the intervals [i, s] and [s+1, j]; i == s == j: a
/// pinned factor evaluated on its own. `left`/`right`: the index (in the order's list) of the step
/// whose result is that operand, npos for a factor used as it is.
struct chain_step {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::size_t i = 0, s = 0, j = 0;
  std::size_t left = none, right = none;
  bool pinned_leaf() const { return i == s && s == j; }
};

/// A product of two dense operands (no rule applies; BLAS where linked).
template <class T>
struct dense_step {
  using value_type = T;
  matrix_view<const T> a, b;
  MEMSAFE_COLD std::string str() const { return "M[" + a.shape() + "] * M[" + b.shape() + "]"; }
};

/// A lowered step: the step's expression (over placeholders for intermediates), its job, and the
/// rules its lowering fired.
template <class X, class J>
struct step_entry {
  X x;
  J job;
  std::vector<std::string> rules;
};

template <class... Fs, class T>
auto lower(const chain_expr<Fs...>& c, T*, index_t*, rewrite::rule_log&);

namespace chain_detail {
template <class T>
inline constexpr bool is_view = false;
template <class T>
inline constexpr bool is_view<matrix_view<const T>> = true;

template <class T, class F, bool Factor>
struct operand_of {
  using type = matrix_view<const T>;
};
template <class T, class F>
struct operand_of<T, F, true> {
  using type = std::conditional_t<rewrite::is_dense_factor<F>, matrix_view<const T>, F>;
};
template <class F>
struct pinned_inner {
  using type = void;
};
template <class X>
struct pinned_inner<pinned<X>> {
  using type = X;
};

template <class T>
const T* placeholder() {
  static const T z[1] = {T(0)};
  return z;
}

/// The product expression of two operands: dense·dense, lazy·dense (K·M), dense·lazy (M·K, as
/// (Kᵀ·Mᵀ)ᵀ) or lazy·lazy.
template <class T, class A, class B>
auto step_expr(const A& a, const B& b) {
  constexpr bool ad = is_view<A>, bd = is_view<B>;
  if constexpr (ad && bd) {
    return dense_step<T>{a, b};
  } else if constexpr (!ad && bd) {
    return matmul_expr<A>{{}, a, b, false, false};
  } else if constexpr (ad && !bd) {
    using Tt = transpose_expr<B>;
    return matmul_expr<Tt, true>{{}, Tt{{}, b}, a.t(), false, true};
  } else {
    return lazy_product_expr<A, B>{{}, a, b};
  }
}

/// The job of a step expression (rows jobs leave the output to be bound when the step runs).
template <class X>
auto step_job(const X& x, rewrite::rule_log& log) {
  using T = typename X::value_type;
  if constexpr (requires { x.a.shape(); x.b.shape(); }) return x;  // dense_step: nothing to lower
  else if constexpr (is_rows_node<X>) return rows_lowering<X>::make(x, log);
  else return lower(x, static_cast<T*>(nullptr), nullptr, log);
}
}  // namespace chain_detail

/// Whether a view is the placeholder of an intermediate not yet computed (intermediates are
/// contiguous and row-major once they exist).
template <class T>
bool is_placeholder(const matrix_view<const T>& v) {
  return v.data() == chain_detail::placeholder<T>() && v.row_stride() == 0 && v.col_stride() == 0;
}

template <class... Fs>
struct chain_job;

/// The lowered form of F0·…·F(N−1).
template <class... Fs>
struct chain_job {
  using factors = std::tuple<Fs...>;
  using value_type = typename std::tuple_element_t<0, factors>::value_type;
  using T = value_type;
  static constexpr std::size_t N = sizeof...(Fs);
  template <std::size_t I>
  using factor_t = std::tuple_element_t<I, factors>;

  factors f;
  rewrite::chain_order<N> ord;  ///< the rule's inputs; solved by the planner
  std::array<std::string, N> names;
  std::string expression;

  /// The operand [I, K]: the factor itself (lazy, or the view of a dense one) or an intermediate.
  template <std::size_t I, std::size_t K>
  static constexpr bool is_factor_operand = I == K && !rewrite::is_pinned_factor<factor_t<I>>;
  template <std::size_t I, std::size_t K>
  using operand_t = typename chain_detail::operand_of<T, factor_t<I>, is_factor_operand<I, K>>::type;

  /// The step (I, S, J) is a real step: a product (I ≤ S < J) or a pinned factor (I = S = J).
  template <std::size_t I, std::size_t S, std::size_t J>
  static constexpr bool valid = I < N && J < N &&
                                ((I <= S && S < J) || (I == S && S == J && rewrite::is_pinned_factor<factor_t<I>>));
  template <std::size_t I, std::size_t S, std::size_t J, bool Pinned = (I == S && S == J)>
  struct step_expr_of {
    using type =
        decltype(chain_detail::step_expr<T>(std::declval<operand_t<I, S>>(), std::declval<operand_t<S + 1, J>>()));
  };
  template <std::size_t I, std::size_t S, std::size_t J>
  struct step_expr_of<I, S, J, true> {
    using type = typename chain_detail::pinned_inner<factor_t<I>>::type;
  };
  struct no_step {
    using entry = std::false_type;
  };
  template <std::size_t I, std::size_t S, std::size_t J>
  struct step_types {
    using expr = typename step_expr_of<I, S, J>::type;
    using job = decltype(chain_detail::step_job(std::declval<const expr&>(), std::declval<rewrite::rule_log&>()));
    using entry = std::optional<step_entry<expr, job>>;
  };
  template <std::size_t K, std::size_t I = K / (N * N), std::size_t S = K / N % N, std::size_t J = K % N>
  using entry_t = typename std::conditional_t<valid<I, S, J>, step_types<I, S, J>,
                                              no_step>::entry;
  template <std::size_t... K>
  static auto table_type(std::index_sequence<K...>) -> std::tuple<entry_t<K>...>;
  using step_table = decltype(table_type(std::make_index_sequence<N * N * N>{}));
  step_table steps{};  ///< each step lowered at most once (lower_step)

  /// The operand [I, K] as it stands before the step runs: the factor, or a placeholder view of
  /// the intermediate's extents.
  template <std::size_t I, std::size_t K>
  operand_t<I, K> operand_placeholder() const {
    if constexpr (is_factor_operand<I, K>) {
      if constexpr (rewrite::is_dense_factor<factor_t<I>>) return std::get<I>(f).m;
      else return std::get<I>(f);
    } else {
      return matrix_view<const T>(chain_detail::placeholder<T>(), ord.dims[I], ord.dims[K + 1], 0, 0);
    }
  }
};

template <class Job, std::size_t K, class Fn>
void visit_one(Fn& fn) {
  constexpr std::size_t N = Job::N, I = K / (N * N), S = K / N % N, J = K % N;
  if constexpr (Job::template valid<I, S, J>)
    fn(std::integral_constant<std::size_t, I>{}, std::integral_constant<std::size_t, S>{},
       std::integral_constant<std::size_t, J>{});
}
template <class Job, class Fn, std::size_t... K>
void visit_step_impl(std::size_t key, Fn& fn, std::index_sequence<K...>) {
  (void)((key == K ? (visit_one<Job, K>(fn), true) : false) || ...);
}
/// Call fn(integral_constant I, S, J) for the run-time step st of a Job (only real steps are
/// instantiated).
template <class Job, class Fn>
void visit_step(const chain_step& st, Fn&& fn) {
  constexpr std::size_t N = Job::N;
  visit_step_impl<Job>((st.i * N + st.s) * N + st.j, fn, std::make_index_sequence<N * N * N>{});
}

/// Lower the step (I, S, J) of `job` the first time it is asked for; its rules go to the entry.
template <std::size_t I, std::size_t S, std::size_t J, class... Fs>
auto& lower_step(chain_job<Fs...>& job) {
  constexpr std::size_t N = sizeof...(Fs);
  auto& slot = std::get<(I * N + S) * N + J>(job.steps);
  if (!slot) {
    rewrite::rule_log log;
    if constexpr (I == S && S == J) {
      const auto& x = std::get<I>(job.f).x;
      auto jb = chain_detail::step_job(x, log);
      slot.emplace(typename std::remove_cvref_t<decltype(*slot)>{x, std::move(jb), {}});
    } else {
      auto x = chain_detail::step_expr<typename chain_job<Fs...>::T>(job.template operand_placeholder<I, S>(),
                                                                       job.template operand_placeholder<S + 1, J>());
      auto jb = chain_detail::step_job(x, log);
      slot.emplace(typename std::remove_cvref_t<decltype(*slot)>{x, std::move(jb), {}});
    }
    slot->rules = std::move(log.fired);
  }
  return *slot;
}

/// Bind the dense operand of a K·M step (the intermediate, or its transpose for M·K) into the
/// lowered job, and re-check the guard of diag_in_product against it. True if the guard now keeps
/// the original form (the step's plan was made for the split one).
template <class E, bool L, class J, class T>
bool bind_rhs(step_entry<matmul_expr<E, L>, J>& st, const matrix_view<const T>& rhs, rewrite::rule_log& log) {
  st.x.rhs = rhs;
  st.job.rhs = rhs;
  st.job.red.rhs = rhs;
  return rewrite::recheck_linear_guard(st.job.e, st.job.post, rhs, log, "product");
}

/// The lowering of a chain: the rule's inputs (extents, kinds, entry costs) and an empty step table.
template <class... Fs, class T>
auto lower(const chain_expr<Fs...>& c, T*, index_t*, rewrite::rule_log&) {
  chain_job<Fs...> job{c.f, {}, {}, c.str()};
  job.ord.elem = sizeof(T);
  job.ord.dims[0] = c.rows();
  std::size_t k = 0;
  std::apply(
      [&](const auto&... x) {
        ((job.ord.dims[k + 1] = x.cols(), job.ord.kind[k] = rewrite::factor_kind<std::remove_cvref_t<decltype(x)>>,
          job.ord.cost[k] = rewrite::factor_cost(x), job.names[k] = x.str(), ++k),
         ...);
      },
      c.f);
  return job;
}

}  // namespace memsafe::jobs
