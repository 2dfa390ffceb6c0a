// memsafe/lower/grad.hpp — lower a captured vjp (expr/grad.hpp) to a grad_job, once per call.
//
//   terms      the lazy matrix as a sum of terms h(F(x_i, y_j)): a pairwise leaf under a chain of
//              elementwise maps (collect_terms, compile time; transpose already pushed into the
//              leaves by the rewrite stage). A static_assert names what has no derivative.
//   weights    W_ij = ∂L/∂E_ij of the reduction, formed per tile by a backend: low rank A·Bᵀ
//              (sum, K·v, K·M, …), a dense caller matrix (dense(E)), optionally times the softmax
//              P_ij = exp(E_ij − lse_i) minus a per-row δ_i (logsumexp, softmax_sum)
//   grad_job   the rewritten E and Eᵀ, the weights, which leaf side feeds which requested point
//              set (slots), the operand's output layout and the forward pre-step it needs
// Backend-neutral: the host plans and runs it in backend/host/grad.hpp. docs/design.md, "Gradients".
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../expr/derivatives.hpp"
#include "../expr/diag.hpp"
#include "../expr/grad.hpp"
#include "../expr/lazy.hpp"
#include "../expr/reductions.hpp"
#include "../expr/tensor.hpp"
#include "../expr/view.hpp"
#include "../rewrite/normalize.hpp"
#include "../rewrite/rules.hpp"
#include "job.hpp"

namespace memsafe::jobs {

// ---- chains of maps and terms ------------------------------------------------------------------

/// h(v) = v.
struct chain_id {
  static constexpr bool affine = true;
  template <class T>
  T der(T) const {
    return T(1);
  }
};
/// h(v) = outer(op(v)): h′(v) = outer′(op(v))·op′(v).
template <class Outer, class Op>
struct chain_of {
  static constexpr bool affine = Outer::affine && map_derivative<Op>::affine;
  Outer outer;
  Op op;
  template <class T>
  T der(T v) const {
    return outer.der(op(v)) * map_derivative<Op>::template der<T>(op, v);
  }
};

/// One term of a lazy matrix: h(F(x_i, y_j)) for the pairwise leaf `leaf` (which lives in the
/// job's rewritten expression) and the chain h of the maps above it.
template <class Leaf, class Chain>
struct grad_term {
  using leaf_type = Leaf;
  using chain_type = Chain;
  const Leaf* leaf;
  Chain chain;
};

namespace detail {
template <class Op>
constexpr void require_map_derivative() {
  if constexpr (std::is_same_v<Op, op::min> || std::is_same_v<Op, op::max>)
    static_assert(map_derivative<Op>::defined, "memsafe: grad: min/max of two lazy matrices has no derivative yet");
  else
    static_assert(map_derivative<Op>::defined, "memsafe: grad: this elementwise map has no derivative yet");
}
}  // namespace detail

/// The terms of a rewritten lazy matrix, as a std::tuple of grad_term (references into e).
template <class Chain, class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
auto collect_terms(const pairwise<F, T, RX, RY, D>& e, const Chain& h) {
  require_derivative<F>();
  return std::tuple<grad_term<pairwise<F, T, RX, RY, D>, Chain>>{{&e, h}};
}
template <class Chain, class Op, class E>
auto collect_terms(const unary_expr<Op, E>& e, const Chain& h) {
  detail::require_map_derivative<Op>();
  return collect_terms(e.e, chain_of<Chain, Op>{h, e.op});
}
template <class Chain, class Op, class A, class B>
auto collect_terms(const binary_expr<Op, A, B>& e, const Chain& h) {
  if constexpr (std::is_same_v<Op, op::add> || std::is_same_v<Op, op::sub>) {
    static_assert(Chain::affine,
                  "memsafe: grad: a nonlinear map (exp, log, pow, ...) over a sum of lazy matrices has no "
                  "derivative yet: maps may sit under + and -, not over them");
    if constexpr (std::is_same_v<Op, op::add>)
      return std::tuple_cat(collect_terms(e.a, h), collect_terms(e.b, h));
    else
      return std::tuple_cat(collect_terms(e.a, h), collect_terms(e.b, chain_of<Chain, op::neg>{h, {}}));
  } else if constexpr (std::is_same_v<Op, op::mul>) {
    static_assert(memsafe::detail::always_false<Op>,
                  "memsafe: grad: hadamard(A, B) of two lazy matrices has no derivative yet");
  } else if constexpr (std::is_same_v<Op, op::div>) {
    static_assert(memsafe::detail::always_false<Op>, "memsafe: grad: A / B of two lazy matrices has no derivative yet");
  } else {
    static_assert(memsafe::detail::always_false<Op>,
                  "memsafe: grad: min/max of two lazy matrices has no derivative yet");
  }
}
template <class Chain, class E, class Dg>
auto collect_terms(const diag_plus<E, Dg>& e, const Chain& h) {
  static_assert(Chain::affine, "memsafe: grad: a nonlinear map over a diagonal term (K + s*I) has no derivative yet");
  return collect_terms(e.e, h);  // the diagonal is a constant
}
template <class Chain, class Fa, class Sl>
auto collect_terms(const guarded<Fa, Sl>&, const Chain&) {
  static_assert(memsafe::detail::always_false<Fa>,
                "memsafe: grad: broadcast tensor expressions have no derivative yet; write the pairwise formula "
                "(sqdist(X, Y), rbf(X, Y, ...))");
}
template <class Chain, std::size_t Ax, class E, bool Swap>
auto collect_terms(const tsum<Ax, E, Swap>&, const Chain&) {
  static_assert(memsafe::detail::always_false<E>,
                "memsafe: grad: broadcast tensor expressions have no derivative yet; write the pairwise formula "
                "(sqdist(X, Y), rbf(X, Y, ...))");
}

template <class E>
auto collect_terms(const E& e) {
  return collect_terms(e, chain_id{});
}
template <class E>
using terms_t = decltype(collect_terms(std::declval<const E&>()));
template <class E>
inline constexpr std::size_t term_count = std::tuple_size_v<terms_t<E>>;

// ---- weights ----------------------------------------------------------------------------------

/// W_ij = ∂L/∂E_ij in the reduction's orientation (i < n rows of E, j < m columns):
///   low rank   W = A·Bᵀ, A n×r, B m×r (sum: A = ḡ, B = ones; K·M: A = Ḡ, B = M)
///   dense      W = G (n×m, caller memory)
/// times P_ij = exp(E_ij − lse_i) and minus δ_i inside, when `softmax`:
///   W_ij = P_ij·(A_i·B_j − δ_i)   (logsumexp: δ = 0; softmax_sum: δ_i = Ḡ_i·out_i)
template <class T>
struct grad_weights {
  bool dense = false;
  matrix_view<const T> a{nullptr, 0, 0}, b{nullptr, 0, 0}, g{nullptr, 0, 0};
  bool softmax = false;
  const T* lse = nullptr;    ///< n values, bound by the backend after the forward pre-step
  const T* delta = nullptr;  ///< n values (softmax_sum), bound likewise
  MEMSAFE_COLD std::string str() const {
    using memsafe::detail::cat, memsafe::detail::msg;
    std::string s = dense ? cat(msg{"W = G[", g.shape(), "] (dense, read per tile)"})
                          : cat(msg{"W = A[", a.shape(), "]·B[", b.shape(), "]ᵀ (rank ", a.cols(), ", formed per tile)"});
    if (softmax) s = cat(msg{"W = P∘(", std::string_view(s).substr(4), " − δ), P = exp(E − lse) per tile"});
    return s;
  }
};

/// The forward evaluation a backward needs first: none, lse_i (logsumexp), lse_i and δ_i (softmax_sum).
enum class grad_pre { none, logsumexp, softmax_sum };
template <class X>
inline constexpr grad_pre pre_of = grad_pre::none;
template <class E>
inline constexpr grad_pre pre_of<reduce_expr<red::logsumexp, E>> = grad_pre::logsumexp;
template <class E>
inline constexpr grad_pre pre_of<softmax_sum_expr<E>> = grad_pre::softmax_sum;

/// A vjp, lowered: everything the passes need, computed once.
///   e, et        the rewritten E (n×m) and Eᵀ (m×n); the terms are collect_terms(e) / (et), in the
///                same order (the leaves of et are those of e with their sides swapped)
///   row_slot[t]  the requested point set fed by term t's row side in e (leaf.x), or −1
///   col_slot[t]  the same for its column side (leaf.y); the row side of et's term t
///   op_out       the operand gradient: internal (j, q) (j < m, q < c) goes to op(j, q)
template <class En, class Et, class T, grad_pre Pre>
struct grad_job {
  using value_type = T;
  using expr_type = En;
  using texpr_type = Et;
  static constexpr std::size_t terms = term_count<En>;
  static constexpr grad_pre pre = Pre;
  En e;
  Et et;
  grad_weights<T> w;
  matrix_view<const T> values{nullptr, 0, 0};  ///< V of softmax_sum (for the pre-step)
  std::vector<matrix_view<const T>> points;    ///< requested point sets, in wrt order
  bool params = false, operand = false;
  std::array<int, terms> row_slot{}, col_slot{};
  bool diagonal = false;                  ///< diag(E) / trace(E): only the pairs (i, i), W_ii = A_i·B_i
  std::size_t op_rows = 0, op_cols = 0;  ///< the operand gradient's shape as the user sees it
  std::ptrdiff_t op_rs = 0, op_cs = 0;   ///< internal (j, q) → user offset j·op_rs + q·op_cs
  std::string expression, reduction;
};

namespace detail {
template <class E, class Fn>
void for_each_term(const E& e, Fn&& fn) {
  auto ts = collect_terms(e);
  std::apply(
      [&](const auto&... t) {
        std::size_t k = 0;
        (fn(k++, t), ...);
      },
      ts);
}
template <class T>
const T* ones_data() {
  static const T one = T(1);
  return &one;
}
}  // namespace detail

/// A vjp of a lazy × lazy product A·B (p×s · s×q, upstream Ḡ p×q), lowered: ∂L/∂A = Ḡ·Bᵀ and
/// ∂L/∂B = Aᵀ·Ḡ are the weights of a pass over A and a pass over B, formed per tile from a tile
/// of the other factor's transpose (Bᵀ: q rows × a chunk of s; Aᵀ: a chunk of s × p columns).
///   a_row/a_col[t]   the requested point set fed by A's term t's row (column) side, or −1
///   b_row/b_col[t]   the same for B's terms
template <class An, class Bn, class Atn, class Btn, class T>
struct grad_product_job {
  using value_type = T;
  static constexpr std::size_t terms_a = term_count<An>, terms_b = term_count<Bn>;
  An a;
  Bn b;
  Atn at;
  Btn bt;
  matrix_view<const T> g{nullptr, 0, 0};
  std::vector<matrix_view<const T>> points;
  bool params = false;
  std::array<int, terms_a> a_row{}, a_col{};
  std::array<int, terms_b> b_row{}, b_col{};
  std::string expression;
};

template <class E>
inline constexpr bool is_grad_product_job = false;
template <class An, class Bn, class Atn, class Btn, class T>
inline constexpr bool is_grad_product_job<grad_product_job<An, Bn, Atn, Btn, T>> = true;

/// Lower vjp(x, upstream, wrt): rewrite E and Eᵀ (rules into `log`), derive the weights, match
/// the requested point sets to the leaves' sides. Throws argument_error for a point set that
/// appears in no leaf and for an operand the reduction does not have.
template <class X>
auto lower_grad(const backward_expr<X>& b, rewrite::rule_log& log) {
  using T = typename X::value_type;
  const X& x = b.x;
  std::vector<bool> used(b.w.points.size(), false);
  auto slot_of = [&](const auto& v) {
    for (std::size_t k = 0; k < b.w.points.size(); ++k)
      if (rewrite::same_view(v, b.w.points[k])) {
        used[k] = true;
        return int(k);
      }
    return -1;
  };
  auto check_used = [&](const std::string& e) {
    for (std::size_t k = 0; k < b.w.points.size(); ++k)
      for (std::size_t q = 0; q < k; ++q)
        if (rewrite::same_view(b.w.points[q], b.w.points[k]))
          throw argument_error(memsafe::detail::cat(memsafe::detail::msg{
              "memsafe: grad: wrt(...): the point set #", k, " (", b.w.points[k].shape(), ") is the same view as #", q,
              ": name each point set once (its gradient covers every leaf it is a side of)"}));
    for (std::size_t k = 0; k < b.w.points.size(); ++k)
      if (!used[k])
        throw argument_error(memsafe::detail::cat(memsafe::detail::msg{
            "memsafe: grad: wrt(...): the point set #", k, " (", b.w.points[k].shape(),
            ") is not a side of any pairwise leaf of ", e, " (point sets are matched by address, extents and strides)"}));
  };
  if constexpr (requires {
                  x.a;
                  x.b;
                }) {  // lazy × lazy
    if (b.w.operand)
      throw argument_error("memsafe: grad: wrt(memsafe::operand): a lazy x lazy product has no dense operand");
    auto an = rewrite::normalize(x.a, log);
    auto bn = rewrite::normalize(x.b, log);
    rewrite::rule_log tlog;  // the transposes' rules: the same rules again, not shown twice
    auto atn = rewrite::normalize(transpose(x.a), tlog);
    auto btn = rewrite::normalize(transpose(x.b), tlog);
    grad_product_job<decltype(an), decltype(bn), decltype(atn), decltype(btn), T> j{
        an, bn, atn, btn, b.upstream, b.w.points, b.w.params, {}, {}, {}, {},
        memsafe::detail::cat(memsafe::detail::msg{an.str(), " * ", bn.str()})};
    detail::for_each_term(j.a, [&](std::size_t t, const auto& term) {
      j.a_row[t] = slot_of(term.leaf->x);
      j.a_col[t] = slot_of(term.leaf->y);
    });
    detail::for_each_term(j.b, [&](std::size_t t, const auto& term) {
      j.b_row[t] = slot_of(term.leaf->x);
      j.b_col[t] = slot_of(term.leaf->y);
    });
    check_used(j.expression);
    return j;
  } else {
    auto en = rewrite::normalize(x.e, log);
    rewrite::rule_log tlog;  // Eᵀ's rules are the same rules on the transposed tree: not shown twice
    auto et = rewrite::normalize(transpose(x.e), tlog);
    using En = decltype(en);
    using Et = decltype(et);
    static_assert(term_count<En> == term_count<Et>, "memsafe: internal: E and its transpose have different terms");
    grad_job<En, Et, T, pre_of<X>> j{en, et, {}, {nullptr, 0, 0}, {}, false, false, {}, {}, false, 0, 0, 0, 0, {}, {}};
    j.points = b.w.points;
    j.params = b.w.params;
    j.operand = b.w.operand;
    j.expression = en.str();
    const matrix_view<const T> ones(detail::ones_data<T>(), en.cols(), 1, 0, 1);
    auto no_operand = [&](const char* what) {
      if (b.w.operand)
        throw argument_error(memsafe::detail::cat(
            memsafe::detail::msg{"memsafe: grad: wrt(memsafe::operand): ", what, " has no dense operand"}));
    };
    if constexpr (requires { x.r; }) {  // reduce_expr: sum or logsumexp
      no_operand(std::remove_cvref_t<decltype(x.r)>::name);
      j.w.a = b.upstream;
      j.w.b = ones;
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x.r)>, red::logsumexp>) {
        j.w.softmax = true;
        j.reduction = "logsumexp over j";
      } else {
        j.reduction = "sum over j";
      }
    } else if constexpr (requires {
                           x.rhs;
                           x.transpose_out;
                         }) {                                                         // matmul_expr
      const matrix_view<const T> gi = x.transpose_out ? b.upstream.t() : b.upstream;  // n × c
      j.w.a = gi;
      j.w.b = x.rhs;
      j.reduction = memsafe::detail::cat(memsafe::detail::msg{"product with a dense operand [", x.rhs.shape(), "]"});
      j.op_rows = x.transpose_out ? x.rhs.cols() : x.rhs.rows();
      j.op_cols = x.transpose_out ? x.rhs.rows() : x.rhs.cols();
      j.op_rs = x.transpose_out ? 1 : std::ptrdiff_t(x.rhs.cols());
      j.op_cs = x.transpose_out ? std::ptrdiff_t(x.rhs.rows()) : 1;
      if (x.vector_out) j.op_cols = 1, j.op_rows = x.rhs.rows();
    } else if constexpr (requires { x.values; }) {  // softmax_sum_expr
      j.w.a = b.upstream;
      j.w.b = x.values;
      j.w.softmax = true;
      j.values = x.values;
      j.reduction = "softmax_sum over j";
      j.op_rows = x.values.rows();
      j.op_cols = x.values.cols();
      j.op_rs = std::ptrdiff_t(x.values.cols());
      j.op_cs = 1;
    } else if constexpr (is_diag_node<X>) {  // diag(E): W_ii = ḡ_i; trace(E): W_ii = ḡ (one value)
      no_operand("diag(E) / trace(E)");
      j.diagonal = true;
      j.w.a = b.upstream.rows() == en.rows() ? b.upstream : matrix_view<const T>(b.upstream.data(), en.rows(), 1, 0, 1);
      j.w.b = ones;
      j.reduction = "diagonal (the pairs (i, i) only)";
    } else {  // dense_expr
      no_operand("dense(E)");
      j.w.dense = true;
      j.w.g = b.upstream;
      j.reduction = "dense";
    }
    // Which requested point set each leaf side feeds.
    detail::for_each_term(j.e, [&](std::size_t t, const auto& term) {
      j.row_slot[t] = slot_of(term.leaf->x);
      j.col_slot[t] = slot_of(term.leaf->y);
    });
    check_used(en.str());
    return j;
  }
}

}  // namespace memsafe::jobs
