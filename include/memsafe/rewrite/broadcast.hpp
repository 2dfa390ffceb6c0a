// memsafe/rewrite/broadcast.hpp — rule `broadcast_sqdist` (match-and-replace).
//
// Matches exactly
//     sum<2>( Sq( X[:, None, :] ∓ Y[None, :, :] ) )       (either operand order)
// where Sq is square(·), pow(·, 2) or (·)*(·) of the same difference, and replaces it by the
// pairwise squared distance sqdist(X, ±Y): Σ(x−y)² = sqdist(x, y), Σ(x+y)² = sqdist(x, −y).
// Leading batch axes were sliced off before (expr/tensor.hpp), so the pattern is rank 3.
// Facts only known at run time (exponent 2, same factors, equal feature extents) guard the
// replacement (rewrite/rules.hpp); anything else is left as written and evaluated as written.
#pragma once
#include <type_traits>

#include "../core/error.hpp"
#include "../expr/lazy.hpp"
#include "../expr/tensor.hpp"
#include "rules.hpp"

namespace memsafe::rewrite {

namespace detail {

/// X[:, None, :] ∓ Y[None, :, :] or Y[None, :, :] ∓ X[:, None, :]: one leaf with the new axis at 1
/// (it gives the rows, i), the other with the new axis at 0 (the columns, j).
template <class Dif>
struct diff_pattern : std::false_type {};
template <class Op, class T, std::size_t A1, std::size_t D1, std::size_t A2, std::size_t D2>
  requires(std::is_same_v<Op, op::sub> || std::is_same_v<Op, op::add>) && ((A1 == 1 && A2 == 0) || (A1 == 0 && A2 == 1))
struct diff_pattern<tzip<Op, tleaf<T, 2, A1, D1>, tleaf<T, 2, A2, D2>>> : std::true_type {
  using Z = tzip<Op, tleaf<T, 2, A1, D1>, tleaf<T, 2, A2, D2>>;
  static constexpr bool x_first = A1 == 1;
  using X = std::conditional_t<x_first, tleaf<T, 2, A1, D1>, tleaf<T, 2, A2, D2>>;
  using Y = std::conditional_t<x_first, tleaf<T, 2, A2, D2>, tleaf<T, 2, A1, D1>>;
  static constexpr bool add = std::is_same_v<Op, op::add>;
  static const X& x(const Z& z) {
    if constexpr (x_first) return z.a;
    else return z.b;
  }
  static const Y& y(const Z& z) {
    if constexpr (x_first) return z.b;
    else return z.a;
  }
};

/// Two tensor expressions over the same memory with the same shapes, strides and operations.
template <class T, std::size_t R, std::size_t A, std::size_t D>
bool same_tensor(const tleaf<T, R, A, D>& a, const tleaf<T, R, A, D>& b) {
  return a.data == b.data && a.src_shape == b.src_shape && a.src_strides == b.src_strides;
}
template <class Op, class E>
bool same_tensor(const tmap<Op, E>& a, const tmap<Op, E>& b) {
  if constexpr (requires { a.op.c; })
    if (a.op.c != b.op.c) return false;
  return same_tensor(a.e, b.e);
}
template <class Op, class A, class B>
bool same_tensor(const tzip<Op, A, B>& a, const tzip<Op, A, B>& b) {
  return same_tensor(a.a, b.a) && same_tensor(a.b, b.b);
}

/// The squaring forms, with their run-time guard.
template <class S>
struct square_pattern : std::false_type {};
template <class Dif>
  requires diff_pattern<Dif>::value
struct square_pattern<tmap<op::square, Dif>> : std::true_type {
  using diff = Dif;
  static const Dif& get(const tmap<op::square, Dif>& s) { return s.e; }
  static const char* guard(const tmap<op::square, Dif>&) { return nullptr; }
};
template <class Dif>
  requires diff_pattern<Dif>::value
struct square_pattern<tmap<op::pow_scalar<double>, Dif>> : std::true_type {
  using diff = Dif;
  static const Dif& get(const tmap<op::pow_scalar<double>, Dif>& s) { return s.e; }
  static const char* guard(const tmap<op::pow_scalar<double>, Dif>& s) {
    return s.op.c == 2.0 ? nullptr : "the exponent is not 2";
  }
};
template <class Dif>
  requires diff_pattern<Dif>::value
struct square_pattern<tzip<op::mul, Dif, Dif>> : std::true_type {
  using diff = Dif;
  static const Dif& get(const tzip<op::mul, Dif, Dif>& s) { return s.a; }
  static const char* guard(const tzip<op::mul, Dif, Dif>& s) {
    return same_tensor(s.a, s.b) ? nullptr : "the two factors are different tensors";
  }
};

template <class L>
constexpr std::size_t feature_extent() {
  return L::static_last;
}

}  // namespace detail

/// Does `sum<2>(S)` match the naive squared-distance pattern (at the type level)?
template <class S>
inline constexpr bool is_broadcast_sqdist = detail::square_pattern<S>::value;

/// The rewritten type of a matched pattern: guarded<sqdist pairwise, the original>.
template <std::size_t Ax, class S, bool Swap>
auto broadcast_sqdist(const tsum<Ax, S, Swap>& e, rule_log& log) {
  if constexpr (Ax == 2 && detail::square_pattern<S>::value) {
    using SP = detail::square_pattern<S>;
    using DP = detail::diff_pattern<typename SP::diff>;
    using T = typename S::value_type;
    constexpr std::size_t D1 = DP::X::static_last, D2 = DP::Y::static_last;
    constexpr std::size_t D = D1 == D2 ? D1 : dyn;
    const auto& dif = SP::get(e.e);
    const auto& xl = DP::x(dif);
    const auto& yl = DP::y(dif);
    const char* why = SP::guard(e.e);
    if (!why && xl.src_shape[1] != yl.src_shape[1]) why = "the feature extents differ (broadcasting over features)";
    matrix_view<const T, dyn, D> X(xl.data, xl.src_shape[0], xl.src_shape[1], xl.src_strides[0], xl.src_strides[1]);
    matrix_view<const T, dyn, D> Y(yl.data, yl.src_shape[0], yl.src_shape[1], yl.src_strides[0], yl.src_strides[1]);
    formula_params<T> p;
    if constexpr (DP::add) p.y_sign = T(-1);
    using P = pairwise<formula::sqdist, T, dyn, dyn, D>;
    P fast = Swap ? P{{}, Y, X, p} : P{{}, X, Y, p};
    if (why) log.add(memsafe::detail::cat(memsafe::detail::msg{"broadcast_sqdist: not applied (", why, "); evaluated as written"}));
    else
      log.add(memsafe::detail::cat(memsafe::detail::msg{"broadcast_sqdist: sum<2>((X[:,None,:] ", DP::add ? "+" : "-",
                                    " Y[None,:,:])^2) -> sqdist(X, ", DP::add ? "-Y" : "Y", ")"}));
    return guarded<P, tsum<Ax, S, Swap>>{{}, fast, e, why == nullptr};
  } else {
    return e;
  }
}

}  // namespace memsafe::rewrite
