// memsafe/lower/chain.hpp — lower a product chain (expr/chain.hpp) to a chain_job.
//
// A chain F0·F1·…·F(N−1) lowers to the inputs of the rule chain_order (rewrite/chain.hpp: the
// factors' kinds, extents and entry costs) and a table of the steps lowered so far. The order itself
// depends on the budget, so the chain planner (plan/chain.hpp) solves chain_order and lists the
// chosen order's steps; each step — the product of two operands, or a pinned factor evaluated on
// its own — is lowered the first time the planner asks for it, exactly once (lower_step), with
// its rules recorded beside it. An operand that is an intermediate product does not exist while
// planning: the step is lowered over a placeholder of the right extents, and the executor binds the
// intermediate (bind_rhs) and re-checks the one guard that reads it (diag_in_product: a finite
// dense factor) when it runs the step. Code is instantiated per kind of step (step_kind: which
// operand is a factor used as it is), at most 4N + 1 kinds for O(N³) steps.
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

/// What a step's operands are decides its expression's type: `mid` — neither is a factor of the
/// chain used as it is (both are intermediates, or dense factors: a view either way); `left` — the
/// left operand is the factor Idx, the right an intermediate; `right` — the reverse, Idx the right
/// factor; `pair` — the factors Idx and Idx + 1; `pin` — the pinned factor Idx evaluated on its
/// own. A chain of N factors has O(N³) possible steps but at most 4N + 1 kinds of step, and the
/// code of a step — its lowering, planning and run — is instantiated per kind.
enum class step_class : unsigned char { mid, left, right, pair, pin };
inline constexpr std::size_t step_classes = 5;

template <step_class C, std::size_t Idx>
struct step_kind {
  static constexpr step_class cls = C;
  static constexpr std::size_t idx = Idx;
  static constexpr bool left_is_factor = C == step_class::left || C == step_class::pair;
  static constexpr bool right_is_factor = C == step_class::right || C == step_class::pair;
  static constexpr std::size_t right_factor = C == step_class::pair ? Idx + 1 : Idx;
};

/// The steps of one kind lowered so far (kind number K).
template <std::size_t K, class S>
struct kind_slots {
  S steps{};
};
/// The steps of kind number K in a step table (deduced from its base).
template <std::size_t K, class S>
S& kind_steps(kind_slots<K, S>& t) {
  return t.steps;
}

namespace chain_detail {
/// Whether the operand [i, k] is the factor i used as it is (lazy, or the view of a dense one).
template <std::size_t N>
constexpr bool is_factor_operand(const std::array<bool, N>& pinned, std::size_t i, std::size_t k) {
  return i == k && !pinned[i];
}

/// Whether some step of a chain with these pinned factors is of the kind (c, idx).
template <std::size_t N>
constexpr bool kind_exists(const std::array<bool, N>& pinned, step_class c, std::size_t idx) {
  // [i, s] with i ≤ s is an intermediate for some i iff s > 0 or the factor s is pinned; [s + 1, j]
  // with j < N iff s + 2 < N or the factor s + 1 is pinned.
  auto left_mid = [&](std::size_t s) { return s > 0 || pinned[s]; };
  auto right_mid = [&](std::size_t s) { return s + 2 < N || pinned[s + 1]; };
  switch (c) {
    case step_class::pin: return idx < N && pinned[idx];
    case step_class::pair: return idx + 1 < N && !pinned[idx] && !pinned[idx + 1];
    case step_class::left: return idx + 1 < N && !pinned[idx] && right_mid(idx);
    case step_class::right: return idx >= 1 && idx < N && !pinned[idx] && left_mid(idx - 1);
    case step_class::mid:
      if (idx != 0) return false;
      for (std::size_t s = 0; s + 1 < N; ++s)
        if (left_mid(s) && right_mid(s)) return true;
      return false;
  }
  return false;
}

/// The longest chain whose step slots are arrays in the job rather than vectors (which cost more
/// to compile: ≈ 0.5 G instructions for a chain of 3).
inline constexpr std::size_t small_chain = 4;

/// The types of a chain's steps, by kind: kind number K = class · N + index.
template <class T, class... Fs>
struct step_types {
  static constexpr std::size_t N = sizeof...(Fs);
  static constexpr std::array<bool, N> pinned{rewrite::is_pinned_factor<Fs>...};
  template <std::size_t I>
  using factor_t = std::tuple_element_t<I, std::tuple<Fs...>>;
  template <std::size_t I>
  using factor_operand_t = typename operand_of<T, factor_t<I>, true>::type;
  template <class Kind>
  using left_t = std::conditional_t<Kind::left_is_factor, factor_operand_t<Kind::idx>, matrix_view<const T>>;
  template <class Kind>
  using right_t =
      std::conditional_t<Kind::right_is_factor, factor_operand_t<Kind::right_factor % N>, matrix_view<const T>>;
  template <class Kind, bool Pinned = Kind::cls == step_class::pin>
  struct expr_of {
    using type = decltype(step_expr<T>(std::declval<left_t<Kind>>(), std::declval<right_t<Kind>>()));
  };
  template <class Kind>
  struct expr_of<Kind, true> {
    using type = typename pinned_inner<factor_t<Kind::idx>>::type;
  };
  template <class Kind>
  struct of_kind {
    using expr = typename expr_of<Kind>::type;
    using job = decltype(step_job(std::declval<const expr&>(), std::declval<rewrite::rule_log&>()));
    using entry = std::optional<step_entry<expr, job>>;
    // One slot per step of the kind: a pair or a pinned factor has one step; left has one per j,
    // right one per i, mid (all dense·dense) one per (i, s, j). Up to small_chain factors they
    // are arrays in the job; beyond, on the heap from the first one lowered (the job lives on the
    // caller's stack, and the slots grow as N³ for mid).
    static constexpr bool single = Kind::cls == step_class::pair || Kind::cls == step_class::pin;
    static constexpr std::size_t count = Kind::cls == step_class::mid ? N * N * N : N;
    using slots = std::conditional_t<single, entry,
                                     std::conditional_t<(N <= small_chain), std::array<entry, count>, std::vector<entry>>>;
    /// The slot of the step st among `count` (not single kinds).
    static std::size_t slot(const chain_step& st) {
      if constexpr (Kind::cls == step_class::mid) return (st.i * N + st.s) * N + st.j;
      else if constexpr (Kind::cls == step_class::left) return st.j;
      else return st.i;
    }
  };
  struct none {
    using slots = none;
  };
  template <std::size_t K>
  using kind_t = step_kind<static_cast<step_class>(K / N), K % N>;
  template <std::size_t K>
  using slots_t = typename std::conditional_t<kind_exists<N>(pinned, static_cast<step_class>(K / N), K % N),
                                              of_kind<kind_t<K>>, none>::slots;
  /// One base per kind (a pack expansion, not std::tuple's recursion: nvcc's front end gave up on
  /// a tuple of 125 elements).
  template <std::size_t... K>
  struct table_of : kind_slots<K, slots_t<K>>... {};
  template <std::size_t... K>
  static auto table(std::index_sequence<K...>) -> table_of<K...>;
  using table_t = decltype(table(std::make_index_sequence<step_classes * N>{}));
};
}  // namespace chain_detail

template <class... Fs>
struct chain_job;

/// The lowered form of F0·…·F(N−1).
template <class... Fs>
struct chain_job {
  using factors = std::tuple<Fs...>;
  using value_type = typename std::tuple_element_t<0, factors>::value_type;
  using T = value_type;
  using types = chain_detail::step_types<T, Fs...>;
  static constexpr std::size_t N = sizeof...(Fs);
  template <std::size_t I>
  using factor_t = std::tuple_element_t<I, factors>;

  factors f;
  rewrite::chain_order<N> ord;  ///< the rule's inputs; solved by the planner
  std::array<std::string, N> names;
  std::string expression;
  typename types::table_t steps{};  ///< the steps lowered so far, by kind (lower_step)

  /// The operand [I, I] as a step takes it: the lazy factor, or the view of a dense one.
  template <std::size_t I>
  typename types::template factor_operand_t<I> factor_operand() const {
    if constexpr (rewrite::is_dense_factor<factor_t<I>>) return std::get<I>(f).m;
    else return std::get<I>(f);
  }
  /// A placeholder view of the intermediate [i, k]'s extents.
  matrix_view<const T> intermediate(std::size_t i, std::size_t k) const {
    return matrix_view<const T>(chain_detail::placeholder<T>(), ord.dims[i], ord.dims[k + 1], 0, 0);
  }
  /// A step's operands [st.i, st.s] and [st.s + 1, st.j] while planning: the factor, or a placeholder.
  template <class Kind>
  typename types::template left_t<Kind> left_placeholder(const chain_step& st) const {
    if constexpr (Kind::left_is_factor) return factor_operand<Kind::idx>();
    else return intermediate(st.i, st.s);
  }
  template <class Kind>
  typename types::template right_t<Kind> right_placeholder(const chain_step& st) const {
    if constexpr (Kind::right_is_factor) return factor_operand<Kind::right_factor>();
    else return intermediate(st.s + 1, st.j);
  }

  /// The kind number of the step st (class · N + index).
  static std::size_t kind_of(const chain_step& st) {
    auto number = [](step_class c, std::size_t idx) { return static_cast<std::size_t>(c) * N + idx; };
    if (st.pinned_leaf()) return number(step_class::pin, st.i);
    const bool l = chain_detail::is_factor_operand<N>(types::pinned, st.i, st.s),
               r = chain_detail::is_factor_operand<N>(types::pinned, st.s + 1, st.j);
    if (l && r) return number(step_class::pair, st.i);
    if (l) return number(step_class::left, st.i);
    if (r) return number(step_class::right, st.j);
    return number(step_class::mid, 0);
  }
};

template <class Job, std::size_t K, class Fn>
void visit_kind(Fn& fn) {
  using Kind = typename Job::types::template kind_t<K>;
  if constexpr (chain_detail::kind_exists<Job::N>(Job::types::pinned, Kind::cls, Kind::idx)) fn(Kind{});
}
template <class Job, class Fn, std::size_t... K>
void visit_step_impl(std::size_t kind, Fn& fn, std::index_sequence<K...>) {
  (void)((kind == K ? (visit_kind<Job, K>(fn), true) : false) || ...);
}
/// Call fn(step_kind<C, Idx>{}) with the kind of the run-time step st of a Job (only the kinds
/// that occur in the chain are instantiated).
template <class Job, class Fn>
void visit_step(const chain_step& st, Fn&& fn) {
  visit_step_impl<Job>(Job::kind_of(st), fn, std::make_index_sequence<step_classes * Job::N>{});
}

/// Lower the step st (of the kind Kind) of `job` the first time it is asked for; its rules go to
/// the entry.
template <class Kind, class... Fs>
auto& lower_step(chain_job<Fs...>& job, const chain_step& st) {
  using Job = chain_job<Fs...>;
  constexpr std::size_t N = Job::N;
  using Of = typename Job::types::template of_kind<Kind>;
  auto& slots = kind_steps<static_cast<std::size_t>(Kind::cls) * N + Kind::idx>(job.steps);
  auto& slot = [&]() -> auto& {
    if constexpr (Of::single) {
      return slots;
    } else {
      if constexpr (N > chain_detail::small_chain)
        if (slots.empty()) slots.resize(Of::count);
      return slots[Of::slot(st)];
    }
  }();
  if (!slot) {
    rewrite::rule_log log;
    if constexpr (Kind::cls == step_class::pin) {
      const auto& x = std::get<Kind::idx>(job.f).x;
      auto jb = chain_detail::step_job(x, log);
      slot.emplace(typename std::remove_cvref_t<decltype(*slot)>{x, std::move(jb), {}});
    } else {
      auto x = chain_detail::step_expr<typename Job::T>(job.template left_placeholder<Kind>(st),
                                                        job.template right_placeholder<Kind>(st));
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
