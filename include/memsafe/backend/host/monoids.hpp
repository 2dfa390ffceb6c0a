// memsafe/backend/host/monoids.hpp — reductions over the column index j as monoids.
//
// Each monoid is built per worker thread over a block of at most `ti` rows and keeps one
// accumulator per row in the thread's accounted workspace:
//   init(ni)                               identity for rows 0..ni
//   consume(tile, ld, ni, j0, nj)          fold a tile's rows in (tile values may be overwritten)
//   merge_from(other, ni)                  combine with another thread's partial over other columns
//   finish(i0, ni, out)                    finalise and write rows i0.. of the output
// Within one monoid, tiles arrive in increasing j; merges may come in any order, and the results
// do not depend on the order beyond floating-point reassociation of sums (min/argmin/top-k are
// exact: the order is a total order on (value, index)).
//
// NaN semantics (docs/budget.md, "Semantics"):
//   sum, products: IEEE propagation.  min/max/argmin/argmax/top-k: NaN ranks after every number
//   (for both the smallest and the largest), ties go to the lower index, so a NaN is returned
//   only when fewer than k numbers exist.  logsumexp: NaN if any NaN, else +inf if any +inf.
//   softmax_sum: NaN for a row containing NaN or +inf, or whose scores are all −inf.
#pragma once
#include "../../core/algo.hpp"
#include "../../core/libm.hpp"
#include <cstddef>
#include <limits>

#include "kernels.hpp"
#include "../../core/config.hpp"
#include "../../core/math.hpp"
#include "../../expr/view.hpp"
#include "tile.hpp"
#include "../../lower/job.hpp"

namespace memsafe::host {

using jobs::out_spec;

// ---- sum --------------------------------------------------------------------------------------
template <class T>
struct sum_monoid {
  static constexpr const char* name = "sum";
  static void identity(std::size_t i, const out_spec<T>& out) { out.v(i, 0) = T(0); }
  double* acc = nullptr;
  double scale = 1;  ///< rule scalar_hoist: applied to the double sum before it is rounded to T
  std::size_t accum_bytes(std::size_t ti) const { return host::align64(ti * sizeof(double)); }
  std::size_t scratch_bytes(std::size_t, std::size_t) const { return 0; }
  void bind(std::byte*& cur, std::size_t ti, std::size_t) { acc = carve<double>(cur, ti); }
  void init(std::size_t ni) { std::fill(acc, acc + ni, 0.0); }
  void consume(T* tile, std::size_t ld, std::size_t ni, std::size_t, std::size_t nj) {
    for (std::size_t r = 0; r < ni; ++r) acc[r] += host::row_sum(tile + r * ld, nj);
  }
  void merge_from(const sum_monoid& o, std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r) acc[r] += o.acc[r];
  }
  void finish(std::size_t i0, std::size_t ni, const out_spec<T>& out) const {
    for (std::size_t r = 0; r < ni; ++r) out.v(i0 + r, 0) = static_cast<T>(scale * acc[r]);
  }
};

// ---- lazy × dense (one or many right-hand sides) ----------------------------------------------
template <class T>
struct matmul_monoid {
  static constexpr const char* name = "matmul";
  void identity(std::size_t i, const out_spec<T>& out) const {
    for (std::size_t q = 0; q < c(); ++q) out.v(i, q) = T(0);
  }
  matrix_view<const T> rhs;  // m × c
  double* acc = nullptr;
  double scale = 1;  ///< rule scalar_hoist: applied to the double sums before they are rounded to T
  std::size_t c() const { return rhs.cols(); }
  std::size_t accum_bytes(std::size_t ti) const { return host::align64(ti * c() * sizeof(double)); }
  std::size_t scratch_bytes(std::size_t, std::size_t) const { return 0; }
  void bind(std::byte*& cur, std::size_t ti, std::size_t) { acc = carve<double>(cur, ti * c()); }
  void init(std::size_t ni) { std::fill(acc, acc + ni * c(), 0.0); }
  void consume(T* tile, std::size_t ld, std::size_t ni, std::size_t j0, std::size_t nj) {
    const std::size_t cc = c();
    const T* m = rhs.data() + j0 * rhs.row_stride();
    if (cc == 1) {
      for (std::size_t r = 0; r < ni; ++r) acc[r] += host::row_dot(tile + r * ld, m, rhs.row_stride(), nj);
    } else {
      host::row_block_product<T> prod{m, nj, rhs.row_stride(), rhs.col_stride(), cc};  // four rows at a time
      for (std::size_t r = 0; r < ni; ++r) prod.add(tile + r * ld, acc + r * cc);
      prod.flush();
    }
  }
  void merge_from(const matmul_monoid& o, std::size_t ni) {
    for (std::size_t q = 0; q < ni * c(); ++q) acc[q] += o.acc[q];
  }
  void finish(std::size_t i0, std::size_t ni, const out_spec<T>& out) const {
    const std::size_t cc = c();
    for (std::size_t r = 0; r < ni; ++r)
      for (std::size_t q = 0; q < cc; ++q) out.v(i0 + r, q) = static_cast<T>(scale * acc[r * cc + q]);
  }
};

// ---- ordering used by min/max/top-k -----------------------------------------------------------
template <class T>
struct ranked {
  T v;
  index_t i;
};
/// Strict total order "a ranks before b": numbers before NaN; smaller (Max: larger) values first;
/// ties to the lower index.
template <bool Max, class T>
inline bool ranks_before(const ranked<T>& a, const ranked<T>& b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an != bn) return bn;
  if (!an && a.v != b.v) return Max ? a.v > b.v : a.v < b.v;
  return a.i < b.i;
}

// ---- min / max / argmin / argmax ------------------------------------------------------------------
template <class T, bool Max, bool WithIndex>
struct best_monoid {
  static constexpr const char* name = Max ? (WithIndex ? "argmax" : "max") : (WithIndex ? "argmin" : "min");
  static void identity(std::size_t i, const out_spec<T>& out) {
    out.v(i, 0) = Max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    if (WithIndex && out.indices) out.ix(i, 0) = -1;
  }
  ranked<T>* acc = nullptr;
  std::size_t accum_bytes(std::size_t ti) const { return host::align64(ti * sizeof(ranked<T>)); }
  std::size_t scratch_bytes(std::size_t, std::size_t) const { return 0; }
  void bind(std::byte*& cur, std::size_t ti, std::size_t) { acc = carve<ranked<T>>(cur, ti); }
  void init(std::size_t ni) {
    // Identity: a NaN at index "infinity" ranks after everything, and is reported as ±inf / -1.
    for (std::size_t r = 0; r < ni; ++r) acc[r] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<index_t>::max()};
  }
  void consume(T* tile, std::size_t ld, std::size_t ni, std::size_t j0, std::size_t nj) {
    for (std::size_t r = 0; r < ni; ++r) {
      const T* row = tile + r * ld;
      // Best number in the row (first occurrence), then at most one NaN candidate.
      T bv = Max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
      std::size_t bj = nj, first_nan = nj;
      for (std::size_t j = 0; j < nj; ++j) {
        const T v = row[j];
        if (Max ? v > bv : v < bv) { bv = v; bj = j; }
        else if (v == bv && bj == nj) bj = j;  // the row's extreme equals ±inf itself
        else if (v != v && first_nan == nj) first_nan = j;
      }
      ranked<T> cand = bj < nj ? ranked<T>{bv, index_t(j0 + bj)}
                               : (first_nan < nj ? ranked<T>{row[first_nan], index_t(j0 + first_nan)} : acc[r]);
      if (ranks_before<Max>(cand, acc[r])) acc[r] = cand;
    }
  }
  void merge_from(const best_monoid& o, std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r)
      if (ranks_before<Max>(o.acc[r], acc[r])) acc[r] = o.acc[r];
  }
  void finish(std::size_t i0, std::size_t ni, const out_spec<T>& out) const {
    for (std::size_t r = 0; r < ni; ++r) {
      const bool empty = acc[r].i == std::numeric_limits<index_t>::max();
      out.v(i0 + r, 0) = empty ? (Max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity()) : acc[r].v;
      if (WithIndex && out.indices) out.ix(i0 + r, 0) = empty ? -1 : acc[r].i;
    }
  }
};

// ---- k smallest / largest with indices -------------------------------------------------------
template <class T, bool Max>
struct topk_monoid {
  static constexpr const char* name = Max ? "argkmax" : "argkmin";
  void identity(std::size_t i, const out_spec<T>& out) const {  // unreachable: k ≤ m is checked
    for (std::size_t q = 0; q < k; ++q) {
      out.v(i, q) = std::numeric_limits<T>::quiet_NaN();
      if (out.indices) out.ix(i, q) = -1;
    }
  }
  std::size_t k = 1;
  ranked<T>* best = nullptr;     // ti × k, each row sorted best first
  std::size_t* count = nullptr;  // ti
  ranked<T>* cand = nullptr;     // k + tj: scratch for one row's merge
  std::size_t accum_bytes(std::size_t ti) const {
    return host::align64(ti * k * sizeof(ranked<T>)) + host::align64(ti * sizeof(std::size_t));
  }
  std::size_t scratch_bytes(std::size_t, std::size_t tj) const { return host::align64((k + std::max(tj, k)) * sizeof(ranked<T>)); }
  void bind(std::byte*& cur, std::size_t ti, std::size_t tj) {
    best = carve<ranked<T>>(cur, ti * k);
    count = carve<std::size_t>(cur, ti);
    cand = carve<ranked<T>>(cur, k + std::max(tj, k));
  }
  void init(std::size_t ni) { std::fill(count, count + ni, std::size_t{0}); }

  static bool better_than(T v, const ranked<T>& worst) {
    // v arrives with a larger index than every kept entry, so a tie loses.
    if (worst.v != worst.v) return v == v;
    return Max ? v > worst.v : v < worst.v;
  }
  void keep_best(ranked<T>* row_best, std::size_t& cnt, std::size_t total) {
    auto cmp = [](const ranked<T>& a, const ranked<T>& b) { return ranks_before<Max>(a, b); };
    total = detail::sort_best(cand, total, k, cmp);
    std::copy(cand, cand + total, row_best);
    cnt = total;
  }
  void consume(T* tile, std::size_t ld, std::size_t ni, std::size_t j0, std::size_t nj) {
    for (std::size_t r = 0; r < ni; ++r) {
      const T* row = tile + r * ld;
      ranked<T>* rb = best + r * k;
      std::size_t cnt = count[r];
      std::size_t nc = 0;
      std::size_t j = 0;
      // Until k entries are held every value is a candidate.
      for (; j < nj && cnt + nc < k; ++j) cand[cnt + nc++] = {row[j], index_t(j0 + j)};
      if (cnt + nc < k || j == nj) {
        if (nc) {
          std::copy(rb, rb + cnt, cand);
          keep_best(rb, count[r], cnt + nc);
        }
        continue;
      }
      // Full: reject with one comparison against the running threshold.
      if (cnt < k) {  // the row just filled up: settle the order to know the threshold
        std::copy(rb, rb + cnt, cand);
        keep_best(rb, cnt, cnt + nc);
        nc = 0;
      }
      ranked<T> worst = rb[k - 1];
      for (; j < nj; ++j) {
        const T v = row[j];
        if (better_than(v, worst)) cand[k + nc++] = {v, index_t(j0 + j)};  // nc ≤ nj ≤ tj: fits
      }
      if (nc) {
        std::copy(rb, rb + k, cand);
        keep_best(rb, cnt, k + nc);
      }
      count[r] = cnt;
    }
  }
  void merge_from(const topk_monoid& o, std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r) {
      ranked<T>* rb = best + r * k;
      std::size_t na = count[r], nb = o.count[r], a = 0, b = 0, n = 0;
      const ranked<T>* ob = o.best + r * k;
      while (n < k && (a < na || b < nb)) {
        if (b >= nb || (a < na && ranks_before<Max>(rb[a], ob[b])))
          cand[n++] = rb[a++];
        else
          cand[n++] = ob[b++];
      }
      std::copy(cand, cand + n, rb);
      count[r] = n;
    }
  }
  void finish(std::size_t i0, std::size_t ni, const out_spec<T>& out) const {
    for (std::size_t r = 0; r < ni; ++r) {
      const ranked<T>* rb = best + r * k;
      for (std::size_t q = 0; q < k; ++q) {
        const bool have = q < count[r];
        out.v(i0 + r, q) = have ? rb[q].v : std::numeric_limits<T>::quiet_NaN();
        if (out.indices) out.ix(i0 + r, q) = have ? rb[q].i : -1;
      }
    }
  }
};

// ---- logsumexp --------------------------------------------------------------------------------
struct lse_state {
  double mx;   // running max (−inf when nothing finite seen)
  double s;    // Σ exp(v − mx)
  bool nan, pinf;
};
/// Max of a row ignoring NaN; reports whether NaN / +inf were seen.
template <class T>
inline T row_max(const T* row, std::size_t n, bool& nan, bool& pinf) {
  T m = -std::numeric_limits<T>::infinity();
  bool anynan = false;
  for (std::size_t j = 0; j < n; ++j) {
    const T v = row[j];
    anynan |= v != v;
    m = v > m ? v : m;
  }
  nan = anynan;
  pinf = m == std::numeric_limits<T>::infinity();
  return m;
}

template <class T>
struct logsumexp_monoid {
  static constexpr const char* name = "logsumexp";
  static void identity(std::size_t i, const out_spec<T>& out) { out.v(i, 0) = -std::numeric_limits<T>::infinity(); }
  lse_state* acc = nullptr;
  std::size_t accum_bytes(std::size_t ti) const { return host::align64(ti * sizeof(lse_state)); }
  std::size_t scratch_bytes(std::size_t, std::size_t) const { return 0; }
  void bind(std::byte*& cur, std::size_t ti, std::size_t) { acc = carve<lse_state>(cur, ti); }
  void init(std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r) acc[r] = {-std::numeric_limits<double>::infinity(), 0.0, false, false};
  }
  static void combine(lse_state& a, double mx, double s) {
    if (s == 0) return;
    if (a.s == 0) { a.mx = mx; a.s = s; return; }
    const double m = std::max(a.mx, mx);
    a.s = a.s * libm::exp(a.mx - m) + s * libm::exp(mx - m);
    a.mx = m;
  }
  void consume(T* tile, std::size_t ld, std::size_t ni, std::size_t, std::size_t nj) {
    for (std::size_t r = 0; r < ni; ++r) {
      lse_state& a = acc[r];
      T* row = tile + r * ld;
      bool nan, pinf;
      const T m = row_max(row, nj, nan, pinf);
      a.nan |= nan;
      a.pinf |= pinf;
      if (a.nan || a.pinf || m == -std::numeric_limits<T>::infinity()) continue;
      for (std::size_t j = 0; j < nj; ++j) row[j] = math::exp(row[j] - m);
      combine(a, static_cast<double>(m), host::row_sum(row, nj));
    }
  }
  void merge_from(const logsumexp_monoid& o, std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r) {
      acc[r].nan |= o.acc[r].nan;
      acc[r].pinf |= o.acc[r].pinf;
      combine(acc[r], o.acc[r].mx, o.acc[r].s);
    }
  }
  void finish(std::size_t i0, std::size_t ni, const out_spec<T>& out) const {
    for (std::size_t r = 0; r < ni; ++r) {
      const lse_state& a = acc[r];
      T v;
      if (a.nan) v = std::numeric_limits<T>::quiet_NaN();
      else if (a.pinf) v = std::numeric_limits<T>::infinity();
      else if (a.s == 0) v = -std::numeric_limits<T>::infinity();
      else v = static_cast<T>(a.mx + libm::log(a.s));
      out.v(i0 + r, 0) = v;
    }
  }
};

// ---- softmax-weighted sum (attention) ----------------------------------------------------------
template <class T>
struct softmax_sum_monoid {
  static constexpr const char* name = "softmax_sum";
  void identity(std::size_t i, const out_spec<T>& out) const {  // softmax over nothing: undefined
    for (std::size_t q = 0; q < dv(); ++q) out.v(i, q) = std::numeric_limits<T>::quiet_NaN();
  }
  matrix_view<const T> values;  // m × dv
  lse_state* st = nullptr;      // ti
  double* acc = nullptr;        // ti × dv
  std::size_t dv() const { return values.cols(); }
  std::size_t accum_bytes(std::size_t ti) const {
    return host::align64(ti * sizeof(lse_state)) + host::align64(ti * dv() * sizeof(double));
  }
  std::size_t scratch_bytes(std::size_t, std::size_t) const { return 0; }
  void bind(std::byte*& cur, std::size_t ti, std::size_t) {
    st = carve<lse_state>(cur, ti);
    acc = carve<double>(cur, ti * dv());
  }
  void init(std::size_t ni) {
    for (std::size_t r = 0; r < ni; ++r) st[r] = {-std::numeric_limits<double>::infinity(), 0.0, false, false};
    std::fill(acc, acc + ni * dv(), 0.0);
  }
  /// Rescale row r's state to a new max.
  void rescale(std::size_t r, double m) {
    lse_state& a = st[r];
    if (a.s != 0 && m != a.mx) {
      const double f = libm::exp(a.mx - m);
      a.s *= f;
      for (std::size_t q = 0; q < dv(); ++q) acc[r * dv() + q] *= f;
    }
    a.mx = m;
  }
  void consume(T* tile, std::size_t ld, std::size_t ni, std::size_t j0, std::size_t nj) {
    const std::size_t c = dv();
    // The rows that add this tile — a row skipped (decided, or only −inf here) adds nothing, not even
    // 0·V — go four at a time through rows_times_matrix.
    host::row_block_product<T> prod{values.data() + j0 * values.row_stride(), nj, values.row_stride(),
                                    values.col_stride(), c};
    for (std::size_t r = 0; r < ni; ++r) {
      lse_state& a = st[r];
      T* row = tile + r * ld;
      bool nan, pinf;
      const T m = row_max(row, nj, nan, pinf);
      a.nan |= nan || pinf;
      if (a.nan || m == -std::numeric_limits<T>::infinity()) continue;
      const double nm = a.s == 0 ? double(m) : std::max(a.mx, double(m));
      rescale(r, nm);
      const T mt = static_cast<T>(nm);
      for (std::size_t j = 0; j < nj; ++j) row[j] = math::exp(row[j] - mt);
      a.s += host::row_sum(row, nj);
      prod.add(row, acc + r * c);
    }
    prod.flush();
  }
  void merge_from(const softmax_sum_monoid& o, std::size_t ni) {
    const std::size_t c = dv();
    for (std::size_t r = 0; r < ni; ++r) {
      st[r].nan |= o.st[r].nan;
      if (o.st[r].s == 0) continue;
      lse_state b = o.st[r];
      const double m = st[r].s == 0 ? b.mx : std::max(st[r].mx, b.mx);
      rescale(r, m);
      const double f = libm::exp(b.mx - m);
      st[r].s += b.s * f;
      for (std::size_t q = 0; q < c; ++q) acc[r * c + q] += o.acc[r * c + q] * f;
    }
  }
  void finish(std::size_t i0, std::size_t ni, const out_spec<T>& out) const {
    const std::size_t c = dv();
    for (std::size_t r = 0; r < ni; ++r) {
      const bool bad = st[r].nan || st[r].s == 0;
      for (std::size_t q = 0; q < c; ++q)
        out.v(i0 + r, q) = bad ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(acc[r * c + q] / st[r].s);
    }
  }
};

// ---- materialise (the lazy matrix itself, written tile by tile into caller memory) ------------
template <class T>
struct dense_monoid {
  static constexpr const char* name = "dense";
  static void identity(std::size_t, const out_spec<T>&) {}
  const out_spec<T>* out = nullptr;
  std::size_t i0 = 0;
  std::size_t accum_bytes(std::size_t) const { return 0; }
  std::size_t scratch_bytes(std::size_t, std::size_t) const { return 0; }
  void bind(std::byte*&, std::size_t, std::size_t) {}
  void init(std::size_t) {}
  void consume(T* tile, std::size_t ld, std::size_t ni, std::size_t j0, std::size_t nj) {
    for (std::size_t r = 0; r < ni; ++r)
      for (std::size_t j = 0; j < nj; ++j) out->v(i0 + r, j0 + j) = tile[r * ld + j];  // i0: set per row block
  }
  void merge_from(const dense_monoid&, std::size_t) {}
  void finish(std::size_t, std::size_t, const out_spec<T>&) const {}
};

}  // namespace memsafe::host
