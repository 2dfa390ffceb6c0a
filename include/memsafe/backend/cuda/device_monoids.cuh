// memsafe/backend/cuda/device_monoids.cuh — the host's reductions as device monoids.
//
// Same protocol as backend/host/monoids.hpp, per row and in registers:
//   init(s)                      identity
//   fold(s, v, jg, jl)           one entry: value v at global column jg (jl: column within the chunk)
//   merge(s, o)                  combine with a partial state over other columns
//   write(s, out, row)           finalise into the output row
// and the same semantics: sums accumulate in double; min/max/argmin/argmax/top-k rank by
// (value, index) with NaN after every number (rank_key), ties to the lower index; logsumexp is
// NaN if any NaN, else +inf if any +inf, with the online max/sum merge.
#pragma once
#include <cstdint>

#include "../../core/config.hpp"
#include "device_expr.cuh"

namespace memsafe::cuda::detail {

/// Where a device kernel writes a row's results: values (and indices) with element strides,
/// scaled by `scale` (hoisted scalar factors).
template <class T>
struct dev_out {
  T* values = nullptr;
  std::int64_t vrs = 0, vcs = 1;
  index_t* indices = nullptr;
  std::int64_t irs = 0, ics = 1;
  double scale = 1;
  MEMSAFE_HD void put(std::int64_t i, std::int64_t c, T v) const {
    values[i * vrs + c * vcs] = scale == 1 ? v : static_cast<T>(scale * static_cast<double>(v));
  }
  MEMSAFE_HD void put_index(std::int64_t i, std::int64_t c, index_t j) const {
    if (indices) indices[i * irs + c * ics] = j;
  }
};

template <class T>
struct dmon_sum {
  static constexpr const char* name = "sum";
  using state = double;
  MEMSAFE_HD void init(state& s) const { s = 0; }
  MEMSAFE_HD void fold(state& s, T v, std::int64_t, std::int64_t) const { s += static_cast<double>(v); }
  MEMSAFE_HD void merge(state& s, const state& o) const { s += o; }
  MEMSAFE_HD void write(const state& s, const dev_out<T>& out, std::int64_t i) const {
    out.put(i, 0, static_cast<T>(s));
  }
};

/// K·v: Σ_j k_ij v_j with v the chunk's slice (device).
template <class T>
struct dmon_matvec {
  static constexpr const char* name = "matvec";
  using state = double;
  const T* w = nullptr;  ///< the chunk's rows of v
  std::int64_t ws = 1;   ///< their stride
  MEMSAFE_HD void init(state& s) const { s = 0; }
  MEMSAFE_HD void fold(state& s, T v, std::int64_t, std::int64_t jl) const {
    s += static_cast<double>(v) * static_cast<double>(w[jl * ws]);
  }
  /// The fused kernel's tile partial sums (kernels_pairwise.cuh, tile_partial_sums).
  MEMSAFE_HD T weight(std::int64_t jl) const { return w[jl * ws]; }
  MEMSAFE_HD void add_partial(state& s, T part) const { s += static_cast<double>(part); }
  MEMSAFE_HD void merge(state& s, const state& o) const { s += o; }
  MEMSAFE_HD void write(const state& s, const dev_out<T>& out, std::int64_t i) const {
    out.put(i, 0, static_cast<T>(s));
  }
};

template <class T, bool Max, bool WithIndex>
struct dmon_best {
  static constexpr const char* name = Max ? (WithIndex ? "argmax" : "max") : (WithIndex ? "argmin" : "min");
  using state = rank_key;
  static constexpr bool max_first = Max;
  MEMSAFE_HD void init(state& s) const { s = empty_key(); }
  /// Whether an entry whose key is `c` would change the state (screening: c is a best case).
  MEMSAFE_HD bool admits(const state& s, const rank_key& c) const { return c < s; }
  /// The key an entry must rank before to change the state.
  MEMSAFE_HD rank_key worst_kept(const state& s) const { return s; }
  MEMSAFE_HD void fold(state& s, T v, std::int64_t jg, std::int64_t) const {
    const rank_key k = make_key<Max>(v, jg);
    if (k < s) s = k;
  }
  MEMSAFE_HD void merge(state& s, const state& o) const {
    if (o < s) s = o;
  }
  MEMSAFE_HD void write(const state& s, const dev_out<T>& out, std::int64_t i) const {
    const bool empty = s.i == ~0ull;  // no column at all (m = 0): ±inf and index -1, as on the host
    out.put(i, 0, empty ? (Max ? -math::detail::inf_v<T>() : math::detail::inf_v<T>()) : key_value<Max, T>(s));
    if (WithIndex) out.put_index(i, 0, empty ? index_t(-1) : index_t(s.i));
  }
};

/// The k best of a row, k ≤ K, kept sorted in registers (K is a compile-time capacity).
template <class T, bool Max, int K>
struct dmon_topk {
  static constexpr const char* name = Max ? "argkmax" : "argkmin";
  struct state {
    rank_key k[K];
  };
  int k = K;  ///< how many are reported
  static constexpr bool max_first = Max;
  /// Whether an entry whose key is `c` would enter the list (screening: c is a best case).
  MEMSAFE_HD bool admits(const state& s, const rank_key& c) const { return c < s.k[K - 1]; }
  /// The key an entry must rank before to enter the list.
  MEMSAFE_HD rank_key worst_kept(const state& s) const { return s.k[K - 1]; }
  MEMSAFE_HD void init(state& s) const {
MEMSAFE_UNROLL
    for (int q = 0; q < K; ++q) s.k[q] = empty_key();
  }
  MEMSAFE_HD static void insert(state& s, rank_key c) {
    if (!(c < s.k[K - 1])) return;
    // Shift the entries that rank after c one place right (the last drops out), then place c.
    // Unrolled with constant indices so the list stays in registers.
    bool placed = false;
MEMSAFE_UNROLL
    for (int q = K - 1; q >= 0; --q) {
      if (!placed) {
        if (q > 0 && c < s.k[q > 0 ? q - 1 : 0]) {
          s.k[q] = s.k[q > 0 ? q - 1 : 0];
        } else {
          s.k[q] = c;
          placed = true;
        }
      }
    }
  }
  MEMSAFE_HD void fold(state& s, T v, std::int64_t jg, std::int64_t) const { insert(s, make_key<Max>(v, jg)); }
  MEMSAFE_HD void merge(state& s, const state& o) const {
MEMSAFE_UNROLL
    for (int q = 0; q < K; ++q) insert(s, o.k[q]);
  }
  MEMSAFE_HD void write(const state& s, const dev_out<T>& out, std::int64_t i) const {
    for (int q = 0; q < k && q < K; ++q) {
      out.put(i, q, key_value<Max, T>(s.k[q]));
      out.put_index(i, q, s.k[q].i == ~0ull ? index_t(-1) : index_t(s.k[q].i));
    }
  }
};

template <class T>
struct dmon_logsumexp {
  static constexpr const char* name = "logsumexp";
  struct state {
    double mx, s;
    bool nan, pinf;
  };
  MEMSAFE_HD void init(state& s) const { s = {-math::detail::inf_v<double>(), 0.0, false, false}; }
  MEMSAFE_HD void fold(state& s, T v, std::int64_t, std::int64_t) const {
    const double x = static_cast<double>(v);
    if (x != x) { s.nan = true; return; }
    if (x == math::detail::inf_v<double>()) { s.pinf = true; return; }
    if (x == -math::detail::inf_v<double>()) return;
    if (x > s.mx) {
      s.s = s.s * ::exp(s.mx - x) + 1.0;
      s.mx = x;
    } else {
      s.s += ::exp(x - s.mx);
    }
  }
  MEMSAFE_HD void merge(state& s, const state& o) const {
    s.nan |= o.nan;
    s.pinf |= o.pinf;
    if (o.s == 0) return;
    if (s.s == 0) { s.mx = o.mx; s.s = o.s; return; }
    if (o.mx > s.mx) {
      s.s = s.s * ::exp(s.mx - o.mx) + o.s;
      s.mx = o.mx;
    } else {
      s.s += o.s * ::exp(o.mx - s.mx);
    }
  }
  MEMSAFE_HD void write(const state& s, const dev_out<T>& out, std::int64_t i) const {
    T v;
    if (s.nan) v = math::detail::nan_v<T>();
    else if (s.pinf) v = math::detail::inf_v<T>();
    else if (s.s == 0) v = -math::detail::inf_v<T>();
    else v = static_cast<T>(s.mx + ::log(s.s));
    out.put(i, 0, v);
  }
};

}  // namespace memsafe::cuda::detail
