// memsafe/api/precompiled.hpp — the evaluations memsafe::precompiled compiles once, and the
// explicit instantiation declarations that stop a translation unit from compiling them again.
//
// memsafe is header-only: every translation unit that evaluates an expression compiles its whole
// host path (lowering, planner, tile path, fused drivers and kernels for every instruction set),
// ≈ 1 s of g++ -O2 per expression. The optional CMake target memsafe::precompiled is a static
// library holding host::run for the expressions users write most: every reduction and product of
// ONE pairwise formula over dynamic-extent points (memsafe::points(ptr, n, d)), float and double —
//
//   sum, min, max, argmin, argmax, argkmin, argkmax, logsumexp   over j and over i
//   K·v, K·M (matmul_expr), v·K, M·K (matmul_expr of transpose), softmax_sum(K, V)
//
// for the formulas of MEMSAFE_PRECOMPILED_FOR_EACH_FORMULA. A target linking it gets
// MEMSAFE_PRECOMPILED=1, and this header then declares those instances `extern template`: the
// translation unit parses and type-checks them but emits no code for them; the linker takes
// them from the library. Nothing else changes — the same source, the same answers, the same
// budget accounting, run-time ISA dispatch inside the library. Expressions outside the list
// (static extents, maps, sums of formulas, lazy × lazy, the CUDA backend) are compiled as usual.
// `memsafe::precompiled_expr<X>` says whether X is in the list; `explain` says which ran.
//
// The library is built with MEMSAFE_PRECOMPILED_BUILD (the explicit instantiation definitions,
// src/precompiled.cpp, one object per formula). Configurations that would compile these
// functions differently must not mix with it: MEMSAFE_NO_SIMD is refused below; nvcc translation
// units never use the declarations (their host code has no SIMD kernels).
#pragma once
#include <cstddef>
#include <type_traits>

#include "../backend/host/eval.hpp"
#include "../core/config.hpp"
#include "../expr/lazy.hpp"
#include "../expr/reductions.hpp"
#include "../plan/options.hpp"

/// X(formula) for every formula memsafe::precompiled holds (each in its own object file).
#define MEMSAFE_PRECOMPILED_FOR_EACH_FORMULA(X) \
  X(sqdist) X(dist) X(l1) X(dot) X(cosine) X(rbf) X(matern12) X(matern32) X(matern52) X(rq) X(linear)

namespace memsafe {
namespace precompiled_types {
template <class F, class T>
using pw = detail::pairwise<F, T, dyn, dyn, dyn>;
template <class F, class T>
using pwt = detail::transpose_expr<pw<F, T>>;
}  // namespace precompiled_types

/// X(value type, expression type) for every expression of formula F (a name in memsafe::formula)
/// and value type T that memsafe::precompiled holds.
#define MEMSAFE_PRECOMPILED_FOR_EACH_EXPR(F, T, X)                                                          \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::sum, ::memsafe::precompiled_types::pw<F, T>>)         \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::min, ::memsafe::precompiled_types::pw<F, T>>)         \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::max, ::memsafe::precompiled_types::pw<F, T>>)         \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argmin, ::memsafe::precompiled_types::pw<F, T>>)      \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argmax, ::memsafe::precompiled_types::pw<F, T>>)      \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argkmin, ::memsafe::precompiled_types::pw<F, T>>)     \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argkmax, ::memsafe::precompiled_types::pw<F, T>>)     \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::logsumexp, ::memsafe::precompiled_types::pw<F, T>>)   \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::sum, ::memsafe::precompiled_types::pwt<F, T>>)        \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::min, ::memsafe::precompiled_types::pwt<F, T>>)        \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::max, ::memsafe::precompiled_types::pwt<F, T>>)        \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argmin, ::memsafe::precompiled_types::pwt<F, T>>)     \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argmax, ::memsafe::precompiled_types::pwt<F, T>>)     \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argkmin, ::memsafe::precompiled_types::pwt<F, T>>)    \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::argkmax, ::memsafe::precompiled_types::pwt<F, T>>)    \
  X(T, ::memsafe::detail::reduce_expr<::memsafe::red::logsumexp, ::memsafe::precompiled_types::pwt<F, T>>)  \
  X(T, ::memsafe::detail::matmul_expr<::memsafe::precompiled_types::pw<F, T>>)                              \
  X(T, ::memsafe::detail::matmul_expr<::memsafe::precompiled_types::pwt<F, T>, true>)                       \
  X(T, ::memsafe::detail::softmax_sum_expr<::memsafe::precompiled_types::pw<F, T>>)

/// Whether memsafe::precompiled holds expression type X (whether or not this translation unit
/// links it: see `precompiled_linked`): the list above, written as a few partial specializations
/// rather than one per listed type — 418 explicit specializations, each naming its expression
/// type, cost every translation unit that includes memsafe.hpp ≈ 60 M compiler instructions
/// (docs/design.md, "Compile time"). tests/test_headers.cpp checks the two agree.
namespace detail::precompiled_list {
template <class F>
inline constexpr bool formula = false;
#define MEMSAFE_PRECOMPILED_FORMULA_(F_) \
  template <>                            \
  inline constexpr bool formula<::memsafe::formula::F_> = true;
MEMSAFE_PRECOMPILED_FOR_EACH_FORMULA(MEMSAFE_PRECOMPILED_FORMULA_)
#undef MEMSAFE_PRECOMPILED_FORMULA_
/// pw<F, T> of a listed formula, T float or double
template <class E>
inline constexpr bool pw = false;
template <class F, class T>
inline constexpr bool pw<pairwise<F, T, dyn, dyn, dyn>> =
    formula<F> && (std::is_same_v<T, float> || std::is_same_v<T, double>);
/// the reductions of the list: all eight of red::
template <class R>
inline constexpr bool reduction =
    std::is_same_v<R, red::sum> || std::is_same_v<R, red::min> || std::is_same_v<R, red::max> ||
    std::is_same_v<R, red::argmin> || std::is_same_v<R, red::argmax> || std::is_same_v<R, red::argkmin> ||
    std::is_same_v<R, red::argkmax> || std::is_same_v<R, red::logsumexp>;
/// pwt<F, T>: the transpose of one
template <class E>
inline constexpr bool pwt = false;
template <class E>
inline constexpr bool pwt<transpose_expr<E>> = pw<E>;
}  // namespace detail::precompiled_list

template <class X>
inline constexpr bool precompiled_expr = false;
/// every reduction over j of pw, and over i (of pwt)
template <class R, class E>
inline constexpr bool precompiled_expr<detail::reduce_expr<R, E>> =
    detail::precompiled_list::reduction<R> && (detail::precompiled_list::pw<E> || detail::precompiled_list::pwt<E>);
/// K·v, K·M, and v·K, M·K (captured as the transpose's product, FromLeft)
template <class E, bool FromLeft>
inline constexpr bool precompiled_expr<detail::matmul_expr<E, FromLeft>> =
    FromLeft ? detail::precompiled_list::pwt<E> : detail::precompiled_list::pw<E>;
template <class E>
inline constexpr bool precompiled_expr<detail::softmax_sum_expr<E>> = detail::precompiled_list::pw<E>;

/// True in a translation unit that takes the listed evaluations from memsafe::precompiled
/// (MEMSAFE_PRECOMPILED_LINKED_, the one place the condition is written, also guards the extern
/// declarations below).
// MEMSAFE_PRECOMPILED is on when defined as nothing or as a non-zero number; -DMEMSAFE_PRECOMPILED=0
// is off (it was taken as on, and a unit without the library failed to link)
#if defined(MEMSAFE_PRECOMPILED) && ((MEMSAFE_PRECOMPILED + 0) != 0 || (1 - MEMSAFE_PRECOMPILED - 1) == 2)
#define MEMSAFE_PRECOMPILED_ON_ 1
#else
#define MEMSAFE_PRECOMPILED_ON_ 0
#endif
#if MEMSAFE_PRECOMPILED_ON_ && !defined(MEMSAFE_PRECOMPILED_BUILD) && !defined(__CUDACC__)
#define MEMSAFE_PRECOMPILED_LINKED_ 1
inline constexpr bool precompiled_linked = true;
#else
#define MEMSAFE_PRECOMPILED_LINKED_ 0
inline constexpr bool precompiled_linked = false;
#endif
}  // namespace memsafe

#if (MEMSAFE_PRECOMPILED_ON_ || defined(MEMSAFE_PRECOMPILED_BUILD)) && defined(MEMSAFE_NO_SIMD)
#error "memsafe: MEMSAFE_NO_SIMD changes the code memsafe::precompiled holds: link memsafe::memsafe instead"
#endif

/// The declaration (`extern template`) or definition (`template`) of host::run for X_.
/// (The expression type is the variadic part: its template arguments hold commas.)
#define MEMSAFE_PRECOMPILED_RUN_(T_, ...)                                                                  \
  template ::memsafe::eval_stats memsafe::host::run<__VA_ARGS__, T_>(                                       \
      const __VA_ARGS__&, ::memsafe::detail::output_target<T_>, const ::memsafe::options&);
#define MEMSAFE_PRECOMPILED_EXTERN_(T_, ...) extern MEMSAFE_PRECOMPILED_RUN_(T_, __VA_ARGS__)
#define MEMSAFE_PRECOMPILED_DECLARE_(F_)                                                        \
  MEMSAFE_PRECOMPILED_FOR_EACH_EXPR(::memsafe::formula::F_, float, MEMSAFE_PRECOMPILED_EXTERN_) \
  MEMSAFE_PRECOMPILED_FOR_EACH_EXPR(::memsafe::formula::F_, double, MEMSAFE_PRECOMPILED_EXTERN_)

#if MEMSAFE_PRECOMPILED_LINKED_
MEMSAFE_PRECOMPILED_FOR_EACH_FORMULA(MEMSAFE_PRECOMPILED_DECLARE_)
#endif
