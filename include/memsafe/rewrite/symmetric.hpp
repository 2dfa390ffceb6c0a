// memsafe/rewrite/symmetric.hpp — the rule symmetric_product.
//
//   symmetric_product  A·Aᵀ → the blocks on and below the diagonal, mirrored (Kuf·Kufᵀ)
//
// Decided by types (both factors are pairwise leaves of the same formula, possibly under a
// guarded scalar_hoist whose guard held) and guarded at run time: B's points are A's swapped
// (same views) and every parameter agrees. The type of the product is unchanged; the lowered
// product job carries the fact as a flag.
#pragma once
#include <type_traits>

#include "../expr/lazy.hpp"
#include "rules.hpp"

namespace memsafe::rewrite {

template <class E>
struct symmetric_leaf {
  using type = E;
};
template <class Fa, class Sl>
struct symmetric_leaf<guarded<Fa, Sl>> {
  using type = Fa;
};

template <class A, class B>
struct same_formula : std::false_type {};
template <class A, class B>
  requires requires { typename A::formula_type; typename B::formula_type; }
struct same_formula<A, B> : std::is_same<typename A::formula_type, typename B::formula_type> {};

/// Compile-time part: A and B (or their guarded split forms) are leaves of the same formula.
template <class A, class B>
inline constexpr bool symmetric_candidate =
    same_formula<typename symmetric_leaf<A>::type, typename symmetric_leaf<B>::type>::value;

/// Run-time guard: B is Aᵀ (points swapped, same parameters).
template <class A, class B>
bool is_symmetric_product(const A& a, const B& b) {
  if constexpr (!symmetric_candidate<A, B>) {
    return false;
  } else if constexpr (requires { a.use_fast; }) {
    return a.use_fast && is_symmetric_product(a.fast, b);
  } else if constexpr (requires { b.use_fast; }) {
    return b.use_fast && is_symmetric_product(a, b.fast);
  } else {
    const auto &pa = a.params, &pb = b.params;
    return same_view(a.x, b.y) && same_view(a.y, b.x) && pa.variance == pb.variance && pa.alpha == pb.alpha &&
           pa.acc_scale == pb.acc_scale && pa.per_dim == pb.per_dim && pa.kind == pb.kind && pa.y_sign == pb.y_sign;
  }
}

/// The rule with its log entry: whether only the lower block triangle is computed.
template <class A, class B>
bool symmetric_product(const A& a, const B& b, rule_log& log) {
  const bool ok = is_symmetric_product(a, b);
  if (ok) log.add("symmetric_product: A * transpose(A) -> lower block triangle, mirrored");
  return ok;
}

}  // namespace memsafe::rewrite
