// memsafe/mpi/merge.hpp — how the partial results of a reduction evaluated on shards of its reduced
// index merge into the result one process would compute. No MPI here: each rule packs rows of a
// rank's local result into fixed-size records, merges two records row by row, and unpacks the
// merged records into the result. The transport (mpi/eval.hpp) moves records between ranks.
//
// Rules (the host's semantics, docs/budget.md "Semantics", kept exactly):
//   select  (min, max, argmin, argmax, argkmin, argkmax): k (value, global index) pairs per row,
//           sorted best first; numbers before NaN, ties to the lower global index; a shard that
//           holds fewer than k points (or none) pads with "nothing" (NaN at the largest index).
//           Merging two sorted lists is exact, so the indices equal one process's.
//   sum     (sum, K·v, K·M, v·K, M·K, lazy × lazy): the output row's values, added.
//   lse     (logsumexp): NaN if any NaN, else +inf if any +inf, else max + log Σ exp(l − max);
//           an empty shard contributes −inf.
//   softmax (softmax_sum): (lse_r, out_r) per row; out = Σ_r exp(lse_r − lse) out_r over the shards
//           whose scores are not all −inf; NaN for a row with NaN or +inf or no finite score.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include "../api/eval.hpp"
#include "../core/math.hpp"  // MEMSAFE_HD, inf_v, nan_v

namespace memsafe::mpi::detail {

using namespace memsafe::detail;

/// A (value, global index) pair of a selection, ordered as the host orders it (numbers before NaN,
/// smaller — or larger — first, ties to the lower index: host::ranks_before); `none` marks
/// "nothing" (no point behind it).
using host::ranked;
using host::ranks_before;
inline constexpr index_t none = std::numeric_limits<index_t>::max();

/// A partial result as the rules read it: row-major values (and, for arg-selections, indices;
/// for softmax_sum the log-sum-exp of each row's scores), wherever they live — a
/// memsafe::result's vectors or the caller's buffers of mpi::eval_into.
template <class T>
struct partial {
  const T* values = nullptr;
  const index_t* indices = nullptr;
  const T* lse = nullptr;
};
/// Where the merged rows go: row-major rows × cols values (and indices for arg-selections).
template <class T>
struct output {
  T* values = nullptr;
  index_t* indices = nullptr;
};

/// Selections: k pairs per row.
template <class T, bool Max, bool WithIndex>
struct select_rule;
/// Whether a merge rule returns indices (argmin, argmax, argkmin, argkmax), which need a point.
template <class Rule>
inline constexpr bool rule_has_indices = false;
template <class T, bool Max, bool WithIndex>
inline constexpr bool rule_has_indices<select_rule<T, Max, WithIndex>> = WithIndex;
template <class T, bool Max, bool WithIndex>
struct select_rule {
  using rec = ranked<T>;
  std::size_t k = 1;
  static constexpr const char* name = "k-way merge of sorted (value, global index) lists";

  std::size_t row_bytes() const { return k * sizeof(rec); }
  /// Rows [r0, r0 + nr) of a local result with `kl` entries per row (kl ≤ k; kl = 0: empty shard).
  void pack(const partial<T>& loc, std::size_t kl, index_t offset, std::size_t r0, std::size_t nr,
            std::byte* buf) const {
    rec* out = reinterpret_cast<rec*>(buf);
    for (std::size_t r = 0; r < nr; ++r)
      for (std::size_t q = 0; q < k; ++q) {
        rec x{std::numeric_limits<T>::quiet_NaN(), none};
        if (q < kl) {
          x.v = loc.values[(r0 + r) * kl + q];
          if constexpr (WithIndex) {
            const index_t li = loc.indices[(r0 + r) * kl + q];
            x.i = li < 0 ? none : li + offset;
          } else {
            x.i = offset;  // a value: the index only orders equal values, which are equal anyway
          }
        }
        out[r * k + q] = x;
      }
  }
  /// dst ← merge(dst, src), row by row (both sorted best first), in place and without scratch
  /// (nothing allocated outside the budget): a counting pass finds how many of the k best come
  /// from each list (prefixes of both), then they are merged from the back into dst, whose
  /// discarded tail is overwritten. Ties keep the forward order (src's entry first).
  void merge(std::byte* dst, const std::byte* src, std::size_t nr) const {
    rec* d = reinterpret_cast<rec*>(dst);
    const rec* s = reinterpret_cast<const rec*>(src);
    for (std::size_t r = 0; r < nr; ++r) {
      rec* a = d + r * k;
      const rec* b = s + r * k;
      std::size_t ia = 0, ib = 0;
      for (std::size_t q = 0; q < k; ++q)
        if (ib >= k || (ia < k && ranks_before<Max>(a[ia], b[ib]))) ++ia;
        else ++ib;
      std::size_t p = k;
      while (ib > 0) {  // a[0, ia) stays where it is once b's part is placed
        if (ia > 0 && !ranks_before<Max>(a[ia - 1], b[ib - 1])) a[--p] = a[--ia];
        else a[--p] = b[--ib];
      }
    }
  }
  void unpack(const std::byte* buf, std::size_t r0, std::size_t nr, const output<T>& out) const {
    const rec* in = reinterpret_cast<const rec*>(buf);
    for (std::size_t r = 0; r < nr; ++r)
      for (std::size_t q = 0; q < k; ++q) {
        const rec& x = in[r * k + q];
        const bool nothing = x.i == none;
        // Nothing at all (a reduced extent of 0): the host's identity, ±inf (and -1) for min/max,
        // NaN for top-k (unreachable: k ≤ the global extent is checked).
        T v = x.v;
        if (nothing)
          v = k == 1 ? (Max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity())
                     : std::numeric_limits<T>::quiet_NaN();
        out.values[(r0 + r) * k + q] = v;
        if constexpr (WithIndex) out.indices[(r0 + r) * k + q] = nothing ? -1 : x.i;
      }
  }
};

/// Sums and products: `c` values per row, added.
template <class T>
struct sum_rule {
  std::size_t c = 1;
  static constexpr const char* name = "sum of the partial results";
  std::size_t row_bytes() const { return c * sizeof(T); }
  void pack(const partial<T>& loc, bool empty, std::size_t r0, std::size_t nr, std::byte* buf) const {
    T* out = reinterpret_cast<T*>(buf);
    if (empty) std::fill(out, out + nr * c, T(0));
    else std::memcpy(out, loc.values + r0 * c, nr * c * sizeof(T));
  }
  void merge(std::byte* dst, const std::byte* src, std::size_t nr) const {
    T* d = reinterpret_cast<T*>(dst);
    const T* s = reinterpret_cast<const T*>(src);
    for (std::size_t q = 0; q < nr * c; ++q) d[q] += s[q];
  }
  void unpack(const std::byte* buf, std::size_t r0, std::size_t nr, const output<T>& out) const {
    std::memcpy(out.values + r0 * c, buf, nr * c * sizeof(T));
  }
};

/// log(exp(a) + exp(b)) with the host's special values: NaN wins, then +inf; −inf is nothing.
/// Host and device (the NCCL merge, mpi/nccl.cuh, combines the ranks' log-sum-exps with it on the GPU).
MEMSAFE_HD inline double lse_combine(double a, double b) {
  if (a != a || b != b) return memsafe::math::detail::nan_v<double>();
  constexpr double inf = memsafe::math::detail::inf_v<double>();
  if (a == inf || b == inf) return inf;
  if (a == -inf) return b;
  if (b == -inf) return a;
  const double m = a > b ? a : b;
  return m + ::log(::exp(a - m) + ::exp(b - m));
}

/// Whether a row's combined log-sum-exp l weighs its parts: false where it is NaN, +inf (a NaN or
/// +inf score) or −inf (no finite score on any rank), where softmax_sum's row is NaN.
MEMSAFE_HD inline bool lse_finite(double l) {
  constexpr double inf = memsafe::math::detail::inf_v<double>();
  return l == l && l != inf && l != -inf;
}

/// The weight exp(own − l) of one part's normalised softmax_sum outputs in the row's, l its combined
/// (finite) log-sum-exp; 0 for a part whose scores are all −inf (or that holds no point).
MEMSAFE_HD inline double lse_weight(double own, double l) {
  return own == -memsafe::math::detail::inf_v<double>() ? 0.0 : ::exp(own - l);
}

/// logsumexp: one value per row.
template <class T>
struct lse_rule {
  static constexpr const char* name = "max + log-sum-exp of the partial log-sum-exps";
  std::size_t row_bytes() const { return sizeof(T); }
  void pack(const partial<T>& loc, bool empty, std::size_t r0, std::size_t nr, std::byte* buf) const {
    T* out = reinterpret_cast<T*>(buf);
    for (std::size_t r = 0; r < nr; ++r) out[r] = empty ? -std::numeric_limits<T>::infinity() : loc.values[r0 + r];
  }
  void merge(std::byte* dst, const std::byte* src, std::size_t nr) const {
    T* d = reinterpret_cast<T*>(dst);
    const T* s = reinterpret_cast<const T*>(src);
    for (std::size_t r = 0; r < nr; ++r) d[r] = T(lse_combine(double(d[r]), double(s[r])));
  }
  void unpack(const std::byte* buf, std::size_t r0, std::size_t nr, const output<T>& out) const {
    std::memcpy(out.values + r0, buf, nr * sizeof(T));
  }
};

/// softmax_sum: per row the shard's log-sum-exp of the scores, then its normalised output (dv values).
template <class T>
struct softmax_rule {
  std::size_t dv = 1;
  static constexpr const char* name = "rescaled sum of the partial softmax outputs (by their log-sum-exps)";
  std::size_t row_bytes() const { return (1 + dv) * sizeof(T); }
  void pack(const partial<T>& loc, bool empty, std::size_t r0, std::size_t nr, std::byte* buf) const {
    T* o = reinterpret_cast<T*>(buf);
    for (std::size_t r = 0; r < nr; ++r) {
      T* row = o + r * (1 + dv);
      if (empty) {
        row[0] = -std::numeric_limits<T>::infinity();
        std::fill(row + 1, row + 1 + dv, T(0));
      } else {
        row[0] = loc.lse[r0 + r];
        std::memcpy(row + 1, loc.values + (r0 + r) * dv, dv * sizeof(T));
      }
    }
  }
  void merge(std::byte* dst, const std::byte* src, std::size_t nr) const {
    for (std::size_t r = 0; r < nr; ++r) {
      T* a = reinterpret_cast<T*>(dst) + r * (1 + dv);
      const T* b = reinterpret_cast<const T*>(src) + r * (1 + dv);
      const double la = a[0], lb = b[0];
      const double l = lse_combine(la, lb);
      if (!lse_finite(l)) {  // NaN / +inf / nothing finite: no weights to apply
        a[0] = T(l);
        continue;
      }
      const double wa = lse_weight(la, l), wb = lse_weight(lb, l);
      for (std::size_t q = 1; q <= dv; ++q) {
        const double va = wa == 0.0 ? 0.0 : wa * double(a[q]), vb = wb == 0.0 ? 0.0 : wb * double(b[q]);
        a[q] = T(va + vb);
      }
      a[0] = T(l);
    }
  }
  void unpack(const std::byte* buf, std::size_t r0, std::size_t nr, const output<T>& out) const {
    for (std::size_t r = 0; r < nr; ++r) {
      const T* row = reinterpret_cast<const T*>(buf) + r * (1 + dv);
      const bool bad = !lse_finite(double(row[0]));
      for (std::size_t q = 0; q < dv; ++q)
        out.values[(r0 + r) * dv + q] = bad ? std::numeric_limits<T>::quiet_NaN() : row[1 + q];
    }
  }
};

/// Rows [r0, r0 + nr) of a partial result as records, whatever the rule's pack takes: a selection
/// its `kl` entries per row (kl ≤ k; the shard's, or a chunk's, reduced extent) and the global
/// offset of its first point. `empty`: the partial of no points at all (the rule's identity:
/// "nothing", 0, −inf; nothing is read).
template <class Rule, class T>
void pack_rows(const Rule& rule, const partial<T>& loc, bool empty, std::size_t kl, index_t offset, std::size_t r0,
               std::size_t nr, std::byte* buf) {
  if constexpr (requires { rule.k; })
    rule.pack(loc, empty ? 0 : kl, offset, r0, nr, buf);
  else
    rule.pack(loc, empty, r0, nr, buf);
}

// ---- which rule a node merges by ----------------------------------------------------------------

template <class X>
struct rule_of {
  static constexpr bool supported = false;
};
template <class R, class E>
struct rule_of<reduce_expr<R, E>> {
  static constexpr bool supported = true;
  using T = typename E::value_type;
  static constexpr bool topk = std::is_same_v<R, red::argkmin> || std::is_same_v<R, red::argkmax>;
  static constexpr bool is_max = std::is_same_v<R, red::max> || std::is_same_v<R, red::argmax> || std::is_same_v<R, red::argkmax>;
  static constexpr bool select = topk || is_max || std::is_same_v<R, red::min> || std::is_same_v<R, red::argmin>;
  using type = std::conditional_t<select, select_rule<T, is_max, reduce_expr<R, E>::has_indices>,
                                  std::conditional_t<std::is_same_v<R, red::logsumexp>, lse_rule<T>, sum_rule<T>>>;
  static std::size_t extent(const reduce_expr<R, E>& x) { return x.e.cols(); }
};
template <class E, bool L>
struct rule_of<matmul_expr<E, L>> {
  static constexpr bool supported = true;
  using type = sum_rule<typename E::value_type>;
  static std::size_t extent(const matmul_expr<E, L>& x) { return x.e.cols(); }
};
template <class A, class B>
struct rule_of<lazy_product_expr<A, B>> {
  static constexpr bool supported = true;
  using type = sum_rule<typename A::value_type>;
  static std::size_t extent(const lazy_product_expr<A, B>& x) { return x.a.cols(); }
};
template <class E>
struct rule_of<softmax_sum_expr<E>> {
  static constexpr bool supported = true;
  using type = softmax_rule<typename E::value_type>;
  static std::size_t extent(const softmax_sum_expr<E>& x) { return x.e.cols(); }
};

}  // namespace memsafe::mpi::detail
