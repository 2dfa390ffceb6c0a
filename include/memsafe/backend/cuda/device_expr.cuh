// memsafe/backend/cuda/device_expr.cuh — a normalised lazy matrix as a trivially copyable device
// functor: one pairwise leaf (its points, formula and parameters) and the elementwise map applied
// to the leaf's value. The same formula code (`F::finalise`, the `op::` functors, `math::`) runs on
// the host and on the device, so both backends compute the same function.
//
// Supported on the device: a pairwise leaf of any formula, any chain of unary and scalar maps over
// it, and `guarded` rewrites whose fast form is such an expression. Anything else (two different
// pairwise leaves combined, un-rewritten broadcast tensors, diagonal terms inside a non-linear
// reduction) is refused at compile time with a message naming the node.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../core/config.hpp"
#include "../../expr/formulas.hpp"
#include "../../expr/lazy.hpp"
#include "../../rewrite/rules.hpp"
#include "runtime.cuh"

/// `#pragma unroll` for the device pass only (host compilers warn about the unknown pragma in
/// __host__ __device__ functions).
#if defined(__CUDA_ARCH__)
#define MEMSAFE_UNROLL _Pragma("unroll")
#else
#define MEMSAFE_UNROLL
#endif

namespace memsafe::cuda::detail {

// The implementation types of the core (memsafe::detail) the device backend reads: the nodes it
// maps to device functors, the formula parameters and the accountant.
using memsafe::detail::accountant;
using memsafe::detail::base_kind;
using memsafe::detail::formula_params;
using memsafe::detail::guarded;
using memsafe::detail::lazy_product_expr;
using memsafe::detail::pairwise;
using memsafe::detail::per_dim_kind;
using memsafe::detail::resolve_budget;
using memsafe::detail::unary_expr;

// ---- points on the device ----------------------------------------------------------------------

/// n points of dimension d: element (i, k) at p[i * rs + k * cs]. p is a device pointer.
template <class T>
struct dev_points {
  const T* p = nullptr;
  std::int64_t rs = 0, cs = 1;
  std::int64_t n = 0, d = 0;
  MEMSAFE_HD T at(std::int64_t i, std::int64_t k) const { return p[i * rs + k * cs]; }
};

/// The coordinate transform a formula applies before its base: ARD scaling and the sign of y.
template <class T>
struct dev_scale {
  const T* per_dim = nullptr;  ///< device pointer (d values) or null
  per_dim_kind kind = per_dim_kind::none;
  MEMSAFE_HD T apply(std::int64_t k, T v) const {
    if (kind == per_dim_kind::inverse) return v / per_dim[k];
    if (kind == per_dim_kind::sqrt) return v * ::sqrt(per_dim[k]);
    return v;
  }
};

// ---- the elementwise map over the leaf ----------------------------------------------------------

template <class E>
struct dev_map_of {
  static constexpr bool supported = false;
};

/// value = F::finalise(base)
template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
struct dev_map_of<pairwise<F, T, RX, RY, D>> {
  static constexpr bool supported = true;
  using leaf = pairwise<F, T, RX, RY, D>;
  struct type {
    formula_params<T> p;
    MEMSAFE_HD T operator()(T base) const {
      if constexpr (F::has_finalise) F::finalise(&base, 1, p);
      return base;
    }
    /// The RBF kernel as amplitude() · 2^(log2_scale() · base): σ² and −log₂(e)/(2ℓ²), the product
    /// rounded once to T (kernels_pairwise.cuh, exp2_map).
    MEMSAFE_HD T log2_scale() const
      requires std::is_same_v<F, formula::rbf>
    {
      return static_cast<T>(-0.5 * 1.4426950408889634074 * static_cast<double>(p.acc_scale));
    }
    MEMSAFE_HD T amplitude() const
      requires std::is_same_v<F, formula::rbf>
    {
      return p.variance;
    }
  };
  static type make(const leaf& e) { return {e.params}; }
  static const leaf& leaf_of(const leaf& e) { return e; }
};

/// value = op(inner)
template <class Op, class E>
struct dev_map_of<unary_expr<Op, E>> {
  static constexpr bool supported = dev_map_of<E>::supported;
  using leaf = typename dev_map_of<E>::leaf;
  struct type {
    typename dev_map_of<E>::type in;
    Op op;
    MEMSAFE_HD auto operator()(decltype(in(0)) base) const { return op(in(base)); }
  };
  static type make(const unary_expr<Op, E>& e) { return {dev_map_of<E>::make(e.e), e.op}; }
  static const leaf& leaf_of(const unary_expr<Op, E>& e) { return dev_map_of<E>::leaf_of(e.e); }
};

/// Whether both forms of a guarded rewrite are maps over the same leaf (false, without naming a
/// leaf, when either form cannot run on the device).
template <class Fast, class Slow, bool = dev_map_of<Fast>::supported && dev_map_of<Slow>::supported>
struct same_leaf : std::false_type {};
template <class Fast, class Slow>
struct same_leaf<Fast, Slow, true>
    : std::is_same<typename dev_map_of<Fast>::leaf, typename dev_map_of<Slow>::leaf> {};

/// A guarded rewrite. When the original form is itself a map over the same leaf (the linear
/// rules: c·K kept as written when c is 0 or non-finite) both forms run on the device and the
/// run-time guard picks one per launch (a uniform branch). Otherwise (a broadcast tensor the
/// rewrite could not turn into a pairwise formula, diagonal terms kept with a non-finite operand)
/// only the fast form runs on the device.
template <class Fast, class Slow>
struct dev_map_of<guarded<Fast, Slow>> {
  static constexpr bool both = same_leaf<Fast, Slow>::value;
  static constexpr bool supported = dev_map_of<Fast>::supported;
  using leaf = typename dev_map_of<Fast>::leaf;
  struct pair_type {
    typename dev_map_of<Fast>::type fast;
    typename dev_map_of<Slow>::type slow;
    bool use_fast;
    template <class B>
    MEMSAFE_HD auto operator()(B base) const -> decltype(fast(base)) {
      return use_fast ? fast(base) : static_cast<decltype(fast(base))>(slow(base));
    }
  };
  using type = std::conditional_t<both, pair_type, typename dev_map_of<Fast>::type>;
  static void require_fast(const guarded<Fast, Slow>& e) {
    if (!e.use_fast)
      throw argument_error(cat(msg{"memsafe::cuda: ", e.slow.str(),
                                   ": the rewrite's run-time guard failed and the form kept as written (a broadcast "
                                   "tensor that does not reduce to a pairwise formula, or diagonal terms with a "
                                   "non-finite operand) is evaluated on the host only"}));
  }
  static type make(const guarded<Fast, Slow>& e) {
    if constexpr (both) {
      return {dev_map_of<Fast>::make(e.fast), dev_map_of<Slow>::make(e.slow), e.use_fast};
    } else {
      require_fast(e);
      return dev_map_of<Fast>::make(e.fast);
    }
  }
  static const leaf& leaf_of(const guarded<Fast, Slow>& e) {
    if constexpr (both) {
      return e.use_fast ? dev_map_of<Fast>::leaf_of(e.fast) : dev_map_of<Slow>::leaf_of(e.slow);
    } else {
      require_fast(e);
      return dev_map_of<Fast>::leaf_of(e.fast);
    }
  }
};

/// Whether a normalised lazy matrix can be evaluated by the CUDA backend.
template <class E>
inline constexpr bool device_supported = dev_map_of<E>::supported;

// ---- ranking keys (min/max/top-k) ----------------------------------------------------------------

/// (value, index) as two unsigned words whose lexicographic order is the host's ranking order
/// (host::ranks_before): numbers before NaN, smaller (largest first for Max) values first, ties to
/// the lower index; −0 and +0 tie. The empty key (all ones) ranks after every real entry.
struct rank_key {
  unsigned long long v, i;
};
MEMSAFE_HD inline bool operator<(const rank_key& a, const rank_key& b) {
  return a.v < b.v || (a.v == b.v && a.i < b.i);
}
MEMSAFE_HD inline rank_key empty_key() { return {~0ull, ~0ull}; }

template <bool Max, class T>
MEMSAFE_HD inline unsigned long long value_bits(T x) {
  if (x != x) return ~0ull;  // NaN: after every number
  if (x == T(0)) x = T(0);   // −0 → +0
  unsigned long long o;
  if constexpr (std::is_same_v<T, float>) {
    const unsigned u = math::detail::bitcast<unsigned>(x);
    o = (u & 0x80000000u) ? ~u & 0xffffffffu : u | 0x80000000u;
    if constexpr (Max) o = ~o & 0xffffffffull;
  } else {
    const unsigned long long u = math::detail::bitcast<unsigned long long>(x);
    o = (u & 0x8000000000000000ull) ? ~u : u | 0x8000000000000000ull;
    if constexpr (Max) o = ~o;
  }
  // NaN's key is all ones; a number's key never is (the ordered form of NaN patterns only).
  return o == ~0ull ? ~0ull - 1 : o;
}
template <bool Max, class T>
MEMSAFE_HD inline rank_key make_key(T x, std::int64_t j) {
  return {value_bits<Max>(x), static_cast<unsigned long long>(j)};
}
/// Whether value v ranks strictly after the threshold value thr (so its key, whatever its index,
/// cannot rank before thr's); false when either is NaN (the keys decide then).
template <bool Max, class T>
MEMSAFE_HD inline bool beyond_value(T v, T thr) {
  return Max ? v < thr : v > thr;
}

template <bool Max, class T>
MEMSAFE_HD inline T key_value(const rank_key& k) {
  if (k.v == ~0ull) return math::detail::nan_v<T>();
  if constexpr (std::is_same_v<T, float>) {
    unsigned o = static_cast<unsigned>(k.v);
    if constexpr (Max) o = ~o;
    const unsigned u = (o & 0x80000000u) ? o & 0x7fffffffu : ~o;
    return math::detail::bitcast<float>(u);
  } else {
    unsigned long long o = k.v;
    if constexpr (Max) o = ~o;
    const unsigned long long u = (o & 0x8000000000000000ull) ? o & 0x7fffffffffffffffull : ~o;
    return math::detail::bitcast<double>(u);
  }
}

}  // namespace memsafe::cuda::detail
