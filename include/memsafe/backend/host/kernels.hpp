// memsafe/backend/host/kernels.hpp — host micro-kernels for one tile.
//
// Pairwise tiles: Y's column tile is packed into panels of W points (W = one 64-byte vector),
// laid out [panel][k][lane], so the feature loop streams contiguously. A block of R query rows
// (R ≤ 4) keeps R×W accumulators in registers while it walks the features: every packed value
// loaded is used R times. All loops have compile-time trip counts the compiler vectorises.
#pragma once
#include "../../core/algo.hpp"
#include "../../core/libm.hpp"
#include <cstddef>

#include <limits>
#include <type_traits>

#include "../../core/config.hpp"
#include "../../core/math.hpp"
#include "../../expr/formulas.hpp"
#if defined(MEMSAFE_HAS_LAPACK)
#include "../../linalg/fortran.hpp"
#endif

namespace memsafe::host {

// The host backend runs the implementation types of memsafe::detail (nodes, the accountant, ...).
using namespace memsafe::detail;

template <class T>
inline constexpr std::size_t lanes = 64 / sizeof(T);

/// a·b + c with one rounding where the target has FMA, two where it has none — spelled out so
/// that every kernel computing a pairwise value (the tile path here, the fused selection's exact
/// re-evaluation in select.hpp, vectorised or not) rounds identically, whatever the compiler's
/// contraction choices.
template <class T>
inline T madd(T a, T b, T c) {
#if defined(__FMA__) || defined(__AVX512F__)
  return libm::fma(a, b, c);
#else
#if defined(__clang__)
#pragma clang fp contract(off)  // Clang marks a·b + c contractible here, at the source, and the AVX2 copies inline it
#endif
  return a * b + c;
#endif
}

inline constexpr std::size_t align64(std::size_t b) { return (b + 63) & ~std::size_t{63}; }

/// Number of W-wide panels covering `nj` points.
template <class T>
constexpr std::size_t panels(std::size_t nj) {
  return (nj + lanes<T> - 1) / lanes<T>;
}

/// Cosine works on unit vectors. Scale v[0], v[st], …, v[(d−1)·st] to unit length in place and
/// return its weight: 1 for a nonzero vector, 0 for a zero vector (left as it is), NaN (with NaN
/// coordinates) when a coordinate is NaN or infinite. The norm never overflows or underflows: the
/// coordinates are first scaled by 2^−e, 2^e ≤ max|v_k| < 2^(e+1) (exactly: no rounding, and a
/// product where a division by the largest magnitude would cost a division per coordinate), then
/// ‖v‖ = √s·2^e with s = Σ(v_k·2^−e)² ≥ 1 summed in double (by madd: one rounding per term where the
/// target has FMA, whatever the compiler contracts), and v_k ← v_k·(2^−e/√s). Where 2^±e
/// would leave double's normal range (|e| > unit_scale_max_e: double data beyond ~1e±301) the
/// coordinates are divided by the largest magnitude instead.
inline constexpr int unit_scale_max_e = 1000;

template <class T>
T normalize(T* v, std::size_t d, std::size_t st) {
  double amax = 0;
  bool finite = true;
  for (std::size_t k = 0; k < d; ++k) {
    const double a = libm::fabs(static_cast<double>(v[k * st]));
    finite = finite && a <= std::numeric_limits<double>::max();  // false for inf and NaN
    amax = a > amax ? a : amax;
  }
  if (!finite) {
    for (std::size_t k = 0; k < d; ++k) v[k * st] = std::numeric_limits<T>::quiet_NaN();
    return std::numeric_limits<T>::quiet_NaN();
  }
  if (amax == 0) return T(0);
  const int e = libm::ilogb(amax);
  if (e >= -unit_scale_max_e && e <= unit_scale_max_e) {  // normalize_panel's arithmetic, per point
    const double sc = libm::ldexp(1.0, -e);
    double s = 0;
    for (std::size_t k = 0; k < d; ++k) {
      const double u = static_cast<double>(v[k * st]) * sc;
      s = madd(u, u, s);  // not s += u·u: the compiler may contract that here and not in normalize_panel
    }
    const double inv = sc / libm::sqrt(s);
    for (std::size_t k = 0; k < d; ++k) v[k * st] = static_cast<T>(static_cast<double>(v[k * st]) * inv);
    return T(1);
  }
  double s = 0;  // double data beyond ~1e±301
  for (std::size_t k = 0; k < d; ++k) {
    const double u = static_cast<double>(v[k * st]) / amax;
    s = madd(u, u, s);
  }
  const double inv = 1.0 / (amax * libm::sqrt(s));  // amax·‖v/amax‖ = ‖v‖ in double
  if (libm::isfinite(inv) && inv > 0) {
    for (std::size_t k = 0; k < d; ++k) v[k * st] = static_cast<T>(static_cast<double>(v[k * st]) * inv);
  } else {  // scale in two steps
    const double inv_s = 1.0 / libm::sqrt(s);
    for (std::size_t k = 0; k < d; ++k) v[k * st] = static_cast<T>(static_cast<double>(v[k * st]) / amax * inv_s);
  }
  return T(1);
}

/// normalize for the nl points of one packed panel (v: d features × lanes<T> points, feature-major)
/// at once, writing their weights to w[0, nl): the same operations per point in the same order, so
/// the same bits as normalize(v + l, d, lanes<T>) for each, but as loops over the panel's lanes
/// (which vectorise) instead of strided loops over one point's features. Points that are not
/// finite, zero, or beyond unit_scale_max_e take normalize itself.
template <class T>
void normalize_panel(T* v, std::size_t d, std::size_t nl, T* w) {
  constexpr std::size_t W = lanes<T>;
  // Branch-free loops over the lanes (they vectorise): the largest magnitude in T (exact), nan[l]
  // NaN where a coordinate is NaN or infinite (a·0), and a lane that normalize takes itself is
  // multiplied by 1 (its values unchanged).
  T amax[W] = {}, nan[W] = {};
  double s[W] = {}, sc[W], inv[W];
  bool bad[W];
  for (std::size_t k = 0; k < d; ++k)
    for (std::size_t l = 0; l < W; ++l) {
      const T a = libm::fabs(v[k * W + l]);
      nan[l] += a * T(0);
      amax[l] = a > amax[l] ? a : amax[l];
    }
  for (std::size_t l = 0; l < W; ++l) {
    const int e = amax[l] > 0 ? libm::ilogb(static_cast<double>(amax[l])) : 0;
    bad[l] = nan[l] != nan[l] || !(amax[l] > 0) || e < -unit_scale_max_e || e > unit_scale_max_e;
    sc[l] = bad[l] ? 0.0 : libm::ldexp(1.0, -e);
  }
  for (std::size_t k = 0; k < d; ++k)
    for (std::size_t l = 0; l < W; ++l) {
      const double u = static_cast<double>(v[k * W + l]) * sc[l];
      s[l] = madd(u, u, s[l]);
    }
  for (std::size_t l = 0; l < W; ++l) inv[l] = bad[l] ? 1.0 : sc[l] / libm::sqrt(s[l]);
  for (std::size_t k = 0; k < d; ++k)
    for (std::size_t l = 0; l < W; ++l) v[k * W + l] = static_cast<T>(static_cast<double>(v[k * W + l]) * inv[l]);
  for (std::size_t l = 0; l < nl; ++l) w[l] = bad[l] ? normalize(v + l, d, W) : T(1);
}

/// The cosine distance of two unit vectors with dot product `dot` and weights wx, wy (normalize's):
/// 1 − dot, and exactly 1 when either vector is zero (similarity 0 with everything, even a
/// non-finite vector); NaN when either is not finite (then `dot` is NaN).
template <class T>
inline T cosine_finish(T dot, T wx, T wy) {
  return math::detail::select((wx == T(0)) | (wy == T(0)), T(1), T(1) - dot);
}

/// Pack rows y_{j0..j0+nj} of Y (scaled per dimension) into panels; pad with zeros.
/// `yw` (cosine only, else null) receives each point's weight, the points being packed as unit
/// vectors (normalize).
template <class T, class YV>
void pack_panels(const YV& Y, const formula_params<T>& p, std::size_t j0, std::size_t nj, T* pack, T* yw) {
  constexpr std::size_t W = lanes<T>;
  const std::size_t d = Y.cols(), np = panels<T>(nj);
  for (std::size_t pnl = 0; pnl < np; ++pnl) {
    T* dst = pack + pnl * d * W;
    for (std::size_t w = 0; w < W; ++w) {
      const std::size_t j = pnl * W + w;
      if (j < nj) {
        const T* y = Y.row(j0 + j);
        const std::size_t cs = Y.col_stride();
        if (p.kind == per_dim_kind::none)
          for (std::size_t k = 0; k < d; ++k) dst[k * W + w] = y[k * cs];
        else
          for (std::size_t k = 0; k < d; ++k) dst[k * W + w] = p.scale(k, y[k * cs]);
        if (p.y_sign != T(1))
          for (std::size_t k = 0; k < d; ++k) dst[k * W + w] *= p.y_sign;
      } else {
        for (std::size_t k = 0; k < d; ++k) dst[k * W + w] = T(0);
        if (yw) yw[pnl * W + w] = T(0);
      }
    }
    if (yw) normalize_panel(dst, d, nj - pnl * W < W ? nj - pnl * W : W, yw + pnl * W);
  }
}

/// Copy (and scale) one query row into contiguous storage. With `unit` (cosine) the row is made a
/// unit vector and its weight returned (normalize); otherwise the return value is 1.
template <class T, class XV>
T load_row(const XV& X, const formula_params<T>& p, std::size_t i, T* dst, bool unit) {
  const T* x = X.row(i);
  const std::size_t d = X.cols(), cs = X.col_stride();
  if (p.kind == per_dim_kind::none)
    for (std::size_t k = 0; k < d; ++k) dst[k] = x[k * cs];
  else
    for (std::size_t k = 0; k < d; ++k) dst[k] = p.scale(k, x[k * cs]);
  return unit ? normalize(dst, d, std::size_t{1}) : T(1);
}

/// The lane loop of pairwise_rows is the one to vectorise. GCC at -O3 (cunrolli) unrolls it and the
/// row loop completely before vectorising, leaving the feature loop innermost with R·W scalar
/// accumulators, which it then vectorises as in-order reductions (shuffles and spills): with
/// -O3 -march=native (AVX2, GCC 12) that ran a d = 100 tile 2.5× slower than plain -O2 did
/// (MEMSAFE_ISA=portable kNN n = 10⁶, m = 1000: 29 s against 12 s). Keeping the lane loop rolled
/// until the vectoriser has taken it gives 14× (-O3 -march=native) and ≈ 1.8× (-O2 -march=native)
/// in a stand-alone loop of the kernel (d = 100, 4 rows, 1024 points); under SSE2 only, plain -O2
/// does better without the hint, so it is given where AVX2 is the target. Per lane the same
/// operations in the same order: the values do not change.
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX2__)
#define MEMSAFE_LANE_LOOP _Pragma("GCC unroll 1")
#else
#define MEMSAFE_LANE_LOOP
#endif

#define MEMSAFE_TILE_LANE_LOOP MEMSAFE_LANE_LOOP
#include "tile_kernel.inc"
#undef MEMSAFE_TILE_LANE_LOOP

/// Σ_j row[j] (double accumulation in W lanes so the loop vectorises without reassociation flags).
template <class T>
double row_sum(const T* row, std::size_t n) {
  double lane[8] = {};
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int w = 0; w < 8; ++w) lane[w] += static_cast<double>(row[j + w]);
  double s = 0;
  for (; j < n; ++j) s += static_cast<double>(row[j]);
  for (int w = 0; w < 8; ++w) s += lane[w];
  return s;
}

/// Σ_j row[j]·v[j·stride]
template <class T>
double row_dot(const T* row, const T* v, std::size_t stride, std::size_t n) {
  double s = 0;
  if (stride == 1) {
    double lane[8] = {};
    std::size_t j = 0;
    for (; j + 8 <= n; j += 8)
      for (int w = 0; w < 8; ++w) lane[w] += static_cast<double>(row[j + w]) * static_cast<double>(v[j + w]);
    for (; j < n; ++j) s += static_cast<double>(row[j]) * static_cast<double>(v[j]);
    for (int w = 0; w < 8; ++w) s += lane[w];
  } else {
    for (std::size_t j = 0; j < n; ++j) s += static_cast<double>(row[j]) * static_cast<double>(v[j * stride]);
  }
  return s;
}

/// acc[0..c) += Σ_j row[j]·M[j, 0..c) (M rows with row stride rs and column stride cs).
template <class T>
void row_times_matrix(const T* row, std::size_t n, const T* M, std::size_t rs, std::size_t cs, std::size_t c,
                      double* acc) {
  for (std::size_t j = 0; j < n; ++j) {
    const double a = static_cast<double>(row[j]);
    const T* m = M + j * rs;
    if (cs == 1)
      for (std::size_t q = 0; q < c; ++q) acc[q] += a * static_cast<double>(m[q]);
    else
      for (std::size_t q = 0; q < c; ++q) acc[q] += a * static_cast<double>(m[q * cs]);
  }
}

/// rows_times_matrix's register block: four rows × QB columns from q0, M with unit column stride.
template <std::size_t QB, class T>
inline void rows_block_product(const T* const* rows, double* const* accs, std::size_t n, const T* M, std::size_t rs,
                               std::size_t q0) {
  constexpr std::size_t RB = 4;
  double s[RB][QB];
  for (std::size_t r = 0; r < RB; ++r)
    for (std::size_t q = 0; q < QB; ++q) s[r][q] = accs[r][q0 + q];
  for (std::size_t j = 0; j < n; ++j) {
    const T* m = M + j * rs + q0;
    double b[QB];
    for (std::size_t q = 0; q < QB; ++q) b[q] = static_cast<double>(m[q]);
    for (std::size_t r = 0; r < RB; ++r) {
      const double a = static_cast<double>(rows[r][j]);
      for (std::size_t q = 0; q < QB; ++q) s[r][q] += a * b[q];
    }
  }
  for (std::size_t r = 0; r < RB; ++r)
    for (std::size_t q = 0; q < QB; ++q) accs[r][q0 + q] = s[r][q];
}

/// acc_r[0..c) += Σ_j rows[r][j]·M[j, 0..c) for the nr rows of `rows` (n values each) and their
/// accumulators `accs` (c doubles each); M rows with row stride rs and column stride cs. Each
/// accumulator is summed over j in order, one multiply-add per term, exactly as row_times_matrix
/// does it, so the results are those of nr calls of it — only faster: for four rows and a block of
/// columns at a time (unit column stride; 8, 4, 2, then 1 for float) the block's sums stay in registers across the n terms
/// and every M value, widened once, serves the four rows (row_times_matrix loads and stores the
/// accumulators at every term).
template <class T>
void rows_times_matrix(const T* const* rows, double* const* accs, std::size_t nr, std::size_t n, const T* M,
                       std::size_t rs, std::size_t cs, std::size_t c) {
  std::size_t q0 = 0;
  if (nr == 4 && cs == 1) {
#if defined(__AVX2__) || defined(__AVX512F__)
    for (; q0 + 8 <= c; q0 += 8) rows_block_product<8>(rows, accs, n, M, rs, q0);  // two ymm of doubles per row
#endif
    for (; q0 + 4 <= c; q0 += 4) rows_block_product<4>(rows, accs, n, M, rs, q0);  // one ymm (two xmm) per row
    if (q0 + 2 <= c) rows_block_product<2>(rows, accs, n, M, rs, q0), q0 += 2;
    // A last single column: for float, whose widened products are exact in double (so contracting
    // a·b + s into an FMA cannot change a bit), a 1-wide block too; doubles keep the one-row loop,
    // as GCC 12 contracts a 1-wide block of them differently from it and the two must agree.
    if constexpr (std::is_same_v<T, float>)
      if (q0 < c) rows_block_product<1>(rows, accs, n, M, rs, q0), q0 += 1;
  }
  if (q0 < c)  // the columns left (or every column: fewer rows, a strided M)
    for (std::size_t r = 0; r < nr; ++r) row_times_matrix(rows[r], n, M + q0 * cs, rs, cs, c - q0, accs[r] + q0);
}

/// Collects (row, accumulator) pairs and hands them to rows_times_matrix four at a time, against
/// one right-hand matrix M (n rows of c values, row stride rs, column stride cs): add() each row
/// that takes part, then flush() for the rest.
template <class T>
struct row_block_product {
  const T* M;
  std::size_t n, rs, cs, c;
  const T* rows[4] = {};
  double* accs[4] = {};
  std::size_t live = 0;

  void add(const T* row, double* acc) {
    rows[live] = row;
    accs[live++] = acc;
    if (live == 4) flush();
  }
  void flush() {
    if (live) rows_times_matrix(rows, accs, live, n, M, rs, cs, c);
    live = 0;
  }
};

/// C[p×q] += A[p×t] · B[t×q] (all row-major with the given leading dimensions), double C.
/// With MEMSAFE_HAS_LAPACK and T = double this is one DGEMM (beta = 1): the row-major C is the
/// column-major Cᵀ, so it computes Cᵀ += Bᵀ·Aᵀ with no transposes. It runs inside memsafe's worker
/// threads, so the BLAS is kept to one thread (linalg::detail::single_threaded_blas). float tiles
/// keep the loops below (the accumulator is double, which SGEMM cannot accumulate into).
template <class T>
void gemm_acc(std::size_t p, std::size_t q, std::size_t t, const T* A, std::size_t lda, const T* B, std::size_t ldb,
              double* C, std::size_t ldc) {
#if defined(MEMSAFE_HAS_LAPACK)
  if constexpr (std::is_same_v<T, double>) {
    constexpr std::size_t imax = static_cast<std::size_t>(std::numeric_limits<int>::max());
    if (p == 0 || q == 0 || t == 0) return;
    // BLAS wants every leading dimension at least the length it spans, even where only one row is
    // read: the stride of a single row means nothing (vᵀ of v·K·w is a 1×n view of stride 1, which
    // DGEMM refused — argument 10 — leaving C as it was), and rows that overlap (a stride below the
    // width) have no BLAS form at all: those go to the loop below.
    if (p == 1) lda = std::max(lda, t), ldc = std::max(ldc, q);
    if (t == 1) ldb = std::max(ldb, q);
    if (lda >= t && ldb >= q && ldc >= q && p <= imax && q <= imax && t <= imax && lda <= imax && ldb <= imax &&
        ldc <= imax) {
      const int M = static_cast<int>(q), N = static_cast<int>(p), K = static_cast<int>(t);
      const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
      const double one = 1.0;
      const char no = 'N';
      linalg::detail::single_threaded_blas(
          [&] { dgemm_(&no, &no, &M, &N, &K, &one, B, &lb, A, &la, &one, C, &lc, 1, 1); });
      return;
    }
  }
#endif
  for (std::size_t a = 0; a < p; ++a) {
    double* c = C + a * ldc;
    const T* ar = A + a * lda;
    for (std::size_t s = 0; s < t; ++s) {
      const double av = static_cast<double>(ar[s]);
      const T* br = B + s * ldb;
      for (std::size_t b = 0; b < q; ++b) c[b] += av * static_cast<double>(br[b]);
    }
  }
}

}  // namespace memsafe::host
