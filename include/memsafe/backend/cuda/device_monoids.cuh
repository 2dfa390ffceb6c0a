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
#include <concepts>
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
  /// The selection protocol (kernels_fold.cuh, select_rows_kernel): the state is `capacity` keys,
  /// the last kept() of them the best ones in order; keys(s) points at the first.
  static constexpr int capacity = 1;
  MEMSAFE_HD int kept() const { return 1; }
  MEMSAFE_HD static rank_key* keys(state& s) { return &s; }
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

/// A key that ranks before every entry's key (no value's ordered form is 0, NaN's is all ones).
MEMSAFE_HD inline rank_key pad_key() { return {0, 0}; }
MEMSAFE_HD inline bool is_pad(const rank_key& k) { return k.v == 0 && k.i == 0; }

/// The k best of a row, k ≤ K, kept sorted in registers (K is a compile-time capacity). The list
/// starts with K − k pad keys that rank before everything, so its last slot is the k-th best: an
/// entry is compared with the k-th, not the K-th, and the slots stay constant-indexed (registers).
template <class T, bool Max, int K>
struct dmon_topk {
  static constexpr const char* name = Max ? "argkmax" : "argkmin";
  struct state {
    rank_key k[K];
  };
  int k = K;  ///< how many are kept and reported (1 ≤ k ≤ K)
  static constexpr bool max_first = Max;
  static constexpr int capacity = K;
  MEMSAFE_HD int kept() const { return k; }
  MEMSAFE_HD static rank_key* keys(state& s) { return s.k; }
  MEMSAFE_HD void init(state& s) const {
MEMSAFE_UNROLL
    for (int q = 0; q < K; ++q) s.k[q] = q < K - k ? pad_key() : empty_key();
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
    for (int q = 0; q < K; ++q)
      if (!is_pad(o.k[q])) insert(s, o.k[q]);
  }
  MEMSAFE_HD void write(const state& s, const dev_out<T>& out, std::int64_t i) const {
MEMSAFE_UNROLL
    for (int q = 0; q < K; ++q) {
      if (q < K - k) continue;
      const int c = q - (K - k);
      out.put(i, c, key_value<Max, T>(s.k[q]));
      out.put_index(i, c, s.k[q].i == ~0ull ? index_t(-1) : index_t(s.k[q].i));
    }
  }
};

/// A selection monoid in the warp-list protocol (kernels_fold.cuh, select_rows_kernel; the fused
/// selection kernel, kernels_pairwise.cuh): min/max/argmin/argmax and top-k in registers.
template <class Mon>
concept warp_selection = requires(typename Mon::state& s) {
  Mon::capacity;
  Mon::max_first;
  { Mon::keys(s) } -> std::same_as<rank_key*>;
};

/// A weighted-sum monoid (K·v) whose tile of weights the fused kernel stages in shared memory, and
/// whose per-pair products it sums in T over one tile (≤ 128 terms) before adding the partial to
/// the state once: no per-pair global load, widening or double FMA (the state stays a double).
template <class Mon>
concept tile_partial_sums = requires(const Mon& m, typename Mon::state& s) {
  m.weight(std::int64_t(0));
  m.add_partial(s, m.weight(std::int64_t(0)));
};

/// The fused selection kernel's shape: a warp owns fsel_rows query rows, a lane fsel_cols columns
/// of each step of 32·fsel_cols; fsel_warps warps per block share a tile of Y.
inline constexpr int fsel_warps = 8, fsel_rows = 8, fsel_cols = 2;
inline constexpr int fsel_block_rows = fsel_warps * fsel_rows;
inline constexpr int fsel_step = 32 * fsel_cols;

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
