// NaN / infinity / tie semantics of the reductions (backend/host/monoids.hpp header comment):
//   sum: IEEE propagation. min/max/argmin/argmax/top-k: NaN ranks after every number (for the
//   smallest and the largest), ties go to the lower index. logsumexp: NaN if any NaN, else +inf
//   if any +inf (−inf for an all −inf row). softmax_sum: NaN for a row containing NaN or +inf, or
//   whose scores are all −inf.
// Every check runs in float and double, and at the minimum budget (1×1 tiles: every column
// merged across tiles), twice the minimum and unlimited (one tile): the outputs must agree.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <memsafe/memsafe.hpp>

namespace {

template <class T>
constexpr T qnan = std::numeric_limits<T>::quiet_NaN();
template <class T>
constexpr T pinf = std::numeric_limits<T>::infinity();

template <class T>
const char* type_name() {
  return sizeof(T) == 4 ? "float" : "double";
}

/// a and b are the same result: both NaN, or the same bits (so +0 ≠ −0 and ±inf must match), or
/// (when rel_tol > 0 and both are finite) within rel_tol relatively.
template <class T>
bool same_value(T a, T b, double rel_tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::memcmp(&a, &b, sizeof(T)) == 0) return true;
  if (rel_tol > 0 && std::isfinite(a) && std::isfinite(b))
    return std::abs(double(a) - double(b)) <= rel_tol * std::max(std::abs(double(a)), std::abs(double(b)));
  return false;
}

/// Relative tolerance for results whose rounding depends on the tiling (logsumexp, softmax_sum).
template <class T>
constexpr double tiling_tol = sizeof(T) == 4 ? 1e-5 : 1e-12;

/// Evaluate at the minimum budget, at twice the minimum and unlimited; the outputs must agree
/// (bitwise unless rel_tol > 0 for finite values; indices always exactly). Returns the unlimited result.
template <class E>
auto eval_budgets(const E& e, double rel_tol) {
  using T = typename E::value_type;
  const std::size_t min = memsafe::plan_for(e, memsafe::budget_bytes(memsafe::unlimited)).min_bytes;
  REQUIRE(min > 0);
  auto hi = memsafe::eval(e, memsafe::budget_bytes(memsafe::unlimited));
  for (std::size_t b : {min, 2 * min}) {
    CAPTURE(b);
    auto lo = memsafe::eval(e, memsafe::budget_bytes(b));
    CHECK(lo.stats.peak_temp_bytes <= b);
    REQUIRE(lo.values.size() == hi.values.size());
    CHECK(lo.indices == hi.indices);
    for (std::size_t q = 0; q < hi.values.size(); ++q) {
      CAPTURE(q);
      CAPTURE(lo.values[q]);
      CAPTURE(hi.values[q]);
      CHECK(same_value<T>(lo.values[q], hi.values[q], rel_tol));
    }
  }
  return hi;
}

/// Small integer-coordinate data (exact distances in float and double).
///   X (5×2): row 1 has a NaN coordinate (its whole row of distances is NaN).
///   Yc (6×2): no NaN; y3 duplicates x0 (distance 0), y5 duplicates y1 (ties).
///   Yn (6×2): y1 and y4 have a NaN coordinate (columns 1 and 4 are NaN).
template <class T>
struct data {
  static constexpr std::size_t n = 5, m = 6, d = 2;
  std::vector<T> x{0, 0, qnan<T>, 1, 3, 1, -2, 4, 1, -1};
  std::vector<T> yc{1, 0, 0, 2, 4, 4, 0, 0, -1, -1, 0, 2};
  std::vector<T> yn{1, 0, qnan<T>, 0, 4, 4, 0, 0, 2, qnan<T>, 0, 2};
  std::vector<T> v{1, 0.5, 2, -1, 3, 0.25, 4, 2, 5, -3, 6, 1};  // 6×2 values for softmax_sum
  auto X() const { return memsafe::points(x.data(), n, d); }
  auto Yc() const { return memsafe::points(yc.data(), m, d); }
  auto Yn() const { return memsafe::points(yn.data(), m, d); }
  auto V() const { return memsafe::matrix(v.data(), m, 2); }
};

/// Reference squared distances in long double (NaN propagates), n×m row-major.
template <class T>
std::vector<long double> ref_sqdist(const std::vector<T>& x, const std::vector<T>& y, std::size_t d) {
  const std::size_t n = x.size() / d, m = y.size() / d;
  std::vector<long double> r(n * m);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      long double s = 0;
      for (std::size_t k = 0; k < d; ++k) {
        const long double t = (long double)x[i * d + k] - (long double)y[j * d + k];
        s += t * t;
      }
      r[i * m + j] = s;
    }
  return r;
}

/// Column order of one row under the documented total order: numbers first (ascending, or
/// descending when Max), NaN last, ties to the lower index.
template <bool Max>
std::vector<memsafe::index_t> ref_order(const long double* row, std::size_t m) {
  std::vector<memsafe::index_t> idx(m);
  std::iota(idx.begin(), idx.end(), memsafe::index_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](memsafe::index_t a, memsafe::index_t b) {
    const bool an = std::isnan(row[a]), bn = std::isnan(row[b]);
    if (an != bn) return bn;
    if (an) return false;
    return Max ? row[a] > row[b] : row[a] < row[b];
  });
  return idx;
}

template <class T>
void check_sum() {
  CAPTURE(type_name<T>());
  data<T> D;
  const auto ref = ref_sqdist(D.x, D.yc, D.d);
  auto r = eval_budgets(memsafe::sum(memsafe::sqdist(D.X(), D.Yc())), 0.0);
  for (std::size_t i = 0; i < D.n; ++i) {
    CAPTURE(i);
    if (i == 1) {
      CHECK(std::isnan(r[i]));
    } else {
      long double s = 0;
      for (std::size_t j = 0; j < D.m; ++j) s += ref[i * D.m + j];
      CHECK(r[i] == T(s));
    }
  }
  // A NaN column reaches every row.
  auto rn = eval_budgets(memsafe::sum(memsafe::sqdist(D.X(), D.Yn())), 0.0);
  for (std::size_t i = 0; i < D.n; ++i) CHECK(std::isnan(rn[i]));
  // Over i: the NaN row of X reaches every column.
  auto ri = eval_budgets(memsafe::sum(memsafe::sqdist(D.X(), D.Yc()), memsafe::over_i), 0.0);
  for (std::size_t j = 0; j < D.m; ++j) CHECK(std::isnan(ri[j]));
  // K·v: NaN only in the affected row.
  const std::vector<T> ones(D.m, T(1));
  auto rv = eval_budgets(memsafe::sqdist(D.X(), D.Yc()) * memsafe::vec(ones.data(), D.m), 0.0);
  for (std::size_t i = 0; i < D.n; ++i) CHECK(std::isnan(rv[i]) == (i == 1));
}

template <class T, bool Max>
void check_topk_nan_last() {
  CAPTURE(type_name<T>());
  CAPTURE(Max);
  data<T> D;
  const auto ref = ref_sqdist(D.x, D.yn, D.d);
  const auto E = memsafe::sqdist(D.X(), D.Yn());  // columns 1 and 4 NaN, row 1 all NaN
  for (std::size_t k = 1; k <= D.m; ++k) {
    CAPTURE(k);
    auto r = Max ? eval_budgets(memsafe::argkmax(E, k), 0.0) : eval_budgets(memsafe::argkmin(E, k), 0.0);
    REQUIRE(r.cols == k);
    for (std::size_t i = 0; i < D.n; ++i) {
      CAPTURE(i);
      const auto order = ref_order<Max>(&ref[i * D.m], D.m);
      for (std::size_t q = 0; q < k; ++q) {
        CAPTURE(q);
        CHECK(r.index(i, q) == order[q]);
        const long double want = ref[i * D.m + order[q]];
        if (std::isnan(want))
          CHECK(std::isnan(r(i, q)));
        else
          CHECK(r(i, q) == T(want));
      }
      if (i != 1) {
        // Four numbers per row: a NaN column never comes before them...
        for (std::size_t q = 0; q < std::min<std::size_t>(k, 4); ++q) {
          CHECK(r.index(i, q) != 1);
          CHECK(r.index(i, q) != 4);
          CHECK(!std::isnan(r(i, q)));
        }
        // ...and with k = m the NaN columns come last, in index order.
        if (k == D.m) {
          CHECK(r.index(i, 4) == 1);
          CHECK(r.index(i, 5) == 4);
        }
      } else if (k == D.m) {  // all NaN: index order
        for (std::size_t q = 0; q < k; ++q) CHECK(r.index(i, q) == memsafe::index_t(q));
      }
    }
  }
  // The single best: argmin / argmax.
  auto a = Max ? eval_budgets(memsafe::argmax(E), 0.0) : eval_budgets(memsafe::argmin(E), 0.0);
  for (std::size_t i = 0; i < D.n; ++i) {
    CAPTURE(i);
    const auto order = ref_order<Max>(&ref[i * D.m], D.m);
    CHECK(a.index(i) == order[0]);
    if (i == 1) {
      CHECK(std::isnan(a[i]));
      CHECK(a.index(i) == 0);
    } else {
      CHECK(a[i] == T(ref[i * D.m + order[0]]));
    }
  }
  // Over i: X's NaN row 1 ranks last in every column's order.
  const auto Ec = memsafe::sqdist(D.X(), D.Yc());
  auto ai = Max ? eval_budgets(memsafe::argkmax(Ec, D.n, memsafe::over_i), 0.0)
                : eval_budgets(memsafe::argkmin(Ec, D.n, memsafe::over_i), 0.0);
  for (std::size_t j = 0; j < D.m; ++j) {
    CAPTURE(j);
    CHECK(ai.index(j, D.n - 1) == 1);
    CHECK(std::isnan(ai(j, D.n - 1)));
  }
}

template <class T>
void check_min_max() {
  CAPTURE(type_name<T>());
  data<T> D;
  const auto ref = ref_sqdist(D.x, D.yn, D.d);
  const auto E = memsafe::sqdist(D.X(), D.Yn());
  auto mn = eval_budgets(memsafe::min(E), 0.0);
  auto mx = eval_budgets(memsafe::max(E), 0.0);
  for (std::size_t i = 0; i < D.n; ++i) {
    CAPTURE(i);
    if (i == 1) {  // the whole row is NaN
      CHECK(std::isnan(mn[i]));
      CHECK(std::isnan(mx[i]));
      continue;
    }
    long double lo = pinf<long double>, hi = -pinf<long double>;
    for (std::size_t j = 0; j < D.m; ++j)
      if (!std::isnan(ref[i * D.m + j])) lo = std::min(lo, ref[i * D.m + j]), hi = std::max(hi, ref[i * D.m + j]);
    CHECK(mn[i] == T(lo));
    CHECK(mx[i] == T(hi));
  }
  // A row whose only numbers are NaN and +inf: min is +inf (a number), not NaN.
  auto mi = eval_budgets(memsafe::min(1.0 / memsafe::sqdist(D.X(), D.Yn())), 0.0);
  CHECK(mi[0] == T(1) / T(32));  // x0 vs y0,y2,y3,y5 = 1, 32, 0 (→ +inf), 4
  auto ma = eval_budgets(memsafe::max(1.0 / memsafe::sqdist(D.X(), D.Yn())), 0.0);
  CHECK(ma[0] == pinf<T>);
  auto am = eval_budgets(memsafe::argmax(1.0 / memsafe::sqdist(D.X(), D.Yn())), 0.0);
  CHECK(am.index(0) == 3);
  CHECK(am[0] == pinf<T>);
}

template <class T>
long double ref_lse(const std::vector<long double>& row) {
  long double mx = -pinf<long double>;
  for (long double v : row) mx = std::max(mx, v);
  long double s = 0;
  for (long double v : row) s += std::exp(v - mx);
  return mx + std::log(s);
}

template <class T>
void check_logsumexp() {
  CAPTURE(type_name<T>());
  data<T> D;
  const auto dc = ref_sqdist(D.x, D.yc, D.d);
  const double tol = tiling_tol<T>;
  const double ref_tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  {  // 1/sqdist: row 0 has a +inf (y3 == x0), row 1 is NaN, rows 2..4 finite.
    auto r = eval_budgets(memsafe::logsumexp(1.0 / memsafe::sqdist(D.X(), D.Yc())), tol);
    CHECK(r[0] == pinf<T>);
    CHECK(std::isnan(r[1]));
    for (std::size_t i = 2; i < D.n; ++i) {
      CAPTURE(i);
      std::vector<long double> row;
      for (std::size_t j = 0; j < D.m; ++j) row.push_back(1.0L / dc[i * D.m + j]);
      const long double want = ref_lse<T>(row);
      CHECK(std::isfinite(r[i]));
      CHECK(std::abs((long double)r[i] - want) <= ref_tol * std::abs(want));
    }
  }
  {  // With NaN columns every row is NaN, even row 0 which also has a +inf.
    auto r = eval_budgets(memsafe::logsumexp(1.0 / memsafe::sqdist(D.X(), D.Yn())), tol);
    for (std::size_t i = 0; i < D.n; ++i) CHECK(std::isnan(r[i]));
  }
  {  // log(0·sqdist): every entry −inf, except the NaN row (0·NaN = NaN).
    auto r = eval_budgets(memsafe::logsumexp(memsafe::log(0.0 * memsafe::sqdist(D.X(), D.Yc()))), tol);
    for (std::size_t i = 0; i < D.n; ++i) {
      CAPTURE(i);
      if (i == 1)
        CHECK(std::isnan(r[i]));
      else
        CHECK(r[i] == -pinf<T>);
    }
  }
  {  // log(sqdist): row 0 mixes a −inf (log 0) with numbers: finite.
    auto r = eval_budgets(memsafe::logsumexp(memsafe::log(memsafe::sqdist(D.X(), D.Yc()))), tol);
    CHECK(std::isnan(r[1]));
    for (std::size_t i : {0, 2, 3, 4}) {
      CAPTURE(i);
      std::vector<long double> row;
      for (std::size_t j = 0; j < D.m; ++j) row.push_back(std::log(dc[i * D.m + j]));
      const long double want = ref_lse<T>(row);
      CHECK(std::isfinite(r[i]));
      CHECK(std::abs((long double)r[i] - want) <= ref_tol * std::abs(want));
    }
  }
  {  // −inf with +inf (no NaN): +inf.  log(sqdist) + 1/sqdist on row 0: log 0 + 1/0 = −inf + inf = NaN
     // at the duplicate, so use max(log(sqdist), 1/sqdist) instead: +inf there, finite elsewhere.
    const auto S = memsafe::sqdist(D.X(), D.Yc());
    auto r = eval_budgets(memsafe::logsumexp(memsafe::max(memsafe::log(S), 1.0 / S)), tol);
    CHECK(r[0] == pinf<T>);
    CHECK(std::isnan(r[1]));
  }
}

template <class T>
void check_softmax_sum() {
  CAPTURE(type_name<T>());
  data<T> D;
  const auto dc = ref_sqdist(D.x, D.yc, D.d);
  const double tol = tiling_tol<T>;
  const double ref_tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  auto ref_row = [&](const std::vector<long double>& s, std::size_t q) {
    long double mx = -pinf<long double>;
    for (long double v : s) mx = std::max(mx, v);
    long double num = 0, den = 0;
    for (std::size_t j = 0; j < s.size(); ++j) {
      const long double w = std::exp(s[j] - mx);
      num += w * (long double)D.v[j * 2 + q];
      den += w;
    }
    return num / den;
  };
  auto check_finite_row = [&](const auto& r, std::size_t i, auto score) {
    CAPTURE(i);
    std::vector<long double> s;
    for (std::size_t j = 0; j < D.m; ++j) s.push_back(score(dc[i * D.m + j]));
    for (std::size_t q = 0; q < 2; ++q) {
      CAPTURE(q);
      const long double want = ref_row(s, q);
      CHECK(std::isfinite(r(i, q)));
      CHECK(std::abs((long double)r(i, q) - want) <= ref_tol * std::max<long double>(1, std::abs(want)));
    }
  };
  {  // −sqdist: NaN row 1 only.
    auto r = eval_budgets(memsafe::softmax_sum(-memsafe::sqdist(D.X(), D.Yc()), D.V()), tol);
    REQUIRE(r.cols == 2);
    CHECK(std::isnan(r(1, 0)));
    CHECK(std::isnan(r(1, 1)));
    for (std::size_t i : {0, 2, 3, 4}) check_finite_row(r, i, [](long double d2) { return -d2; });
  }
  {  // 1/sqdist: row 0 has a +inf score → NaN; row 1 NaN; others finite.
    auto r = eval_budgets(memsafe::softmax_sum(1.0 / memsafe::sqdist(D.X(), D.Yc()), D.V()), tol);
    for (std::size_t q = 0; q < 2; ++q) {
      CHECK(std::isnan(r(0, q)));
      CHECK(std::isnan(r(1, q)));
    }
    for (std::size_t i : {2, 3, 4}) check_finite_row(r, i, [](long double d2) { return 1.0L / d2; });
  }
  {  // All scores −inf: NaN (no weights at all).
    auto r = eval_budgets(memsafe::softmax_sum(memsafe::log(0.0 * memsafe::sqdist(D.X(), D.Yc())), D.V()), tol);
    for (T v : r.values) CHECK(std::isnan(v));
  }
  {  // NaN columns: every row NaN.
    auto r = eval_budgets(memsafe::softmax_sum(-memsafe::sqdist(D.X(), D.Yn()), D.V()), tol);
    for (T v : r.values) CHECK(std::isnan(v));
  }
  {  // A −inf score among numbers has weight 0: finite. −log(sqdist) = +inf at the duplicate, so
     // use log(sqdist): row 0 has log 0 = −inf at column 3.
    auto r = eval_budgets(memsafe::softmax_sum(memsafe::log(memsafe::sqdist(D.X(), D.Yc())), D.V()), tol);
    for (std::size_t i : {0, 2, 3, 4}) check_finite_row(r, i, [](long double d2) { return std::log(d2); });
    CHECK(std::isnan(r(1, 0)));
  }
}

template <class T>
void check_ties() {
  CAPTURE(type_name<T>());
  // x0 = (0,0): distances 50, 1, 1, 1, 1, 1.  x1 = (1,0): 41, 0, 2, 0, 4, 2.
  const std::vector<T> x{0, 0, 1, 0};
  const std::vector<T> y{5, 5, 1, 0, 0, 1, 1, 0, -1, 0, 0, -1};
  const auto X = memsafe::points(x.data(), 2, 2), Y = memsafe::points(y.data(), 6, 2);
  const auto E = memsafe::sqdist(X, Y);
  using idx = std::vector<memsafe::index_t>;
  {
    auto r = eval_budgets(memsafe::argkmin(E, 6), 0.0);
    CHECK(idx(r.indices.begin(), r.indices.begin() + 6) == idx{1, 2, 3, 4, 5, 0});
    CHECK(idx(r.indices.begin() + 6, r.indices.end()) == idx{1, 3, 2, 5, 4, 0});
  }
  {
    auto r = eval_budgets(memsafe::argkmin(E, 3), 0.0);
    CHECK(r.indices == idx{1, 2, 3, 1, 3, 2});
  }
  {
    auto r = eval_budgets(memsafe::argmin(E), 0.0);
    CHECK(r.indices == idx{1, 1});
    CHECK(r[0] == T(1));
    CHECK(r[1] == T(0));
  }
  {  // The largest of −sqdist: the same ties, lower index first.
    auto r = eval_budgets(memsafe::argkmax(-E, 6), 0.0);
    CHECK(idx(r.indices.begin(), r.indices.begin() + 6) == idx{1, 2, 3, 4, 5, 0});
    CHECK(idx(r.indices.begin() + 6, r.indices.end()) == idx{1, 3, 2, 5, 4, 0});
    auto a = eval_budgets(memsafe::argmax(-E), 0.0);
    CHECK(a.indices == idx{1, 1});
  }
  {  // Ties over i: the same ties reached through transpose.
    auto r = eval_budgets(memsafe::argkmin(memsafe::sqdist(Y, X), 2, memsafe::over_i), 0.0);
    // For each x (a column of sqdist(Y, X)) the two nearest y.
    CHECK(idx(r.indices.begin(), r.indices.begin() + 2) == idx{1, 2});
    CHECK(idx(r.indices.begin() + 2, r.indices.end()) == idx{1, 3});
  }
}

template <class T>
void check_signed_zero_ties() {
  CAPTURE(type_name<T>());
  // E = sqdist(x, y_j) · dot(x, w_j): y1 and y3 duplicate x (distance +0); the sign of the dot with
  // w_j makes the entry −0 or +0.  Other entries: 256, 64, 144.
  const std::vector<T> x{1, 1};
  const std::vector<T> y{9, 9, 1, 1, 5, 5, 1, 1, 7, 7};
  const std::vector<T> wa{1, 1, -1, -1, 1, 1, 1, 1, 1, 1};  // entry 1 = −0, entry 3 = +0
  const std::vector<T> wb{1, 1, 1, 1, 1, 1, -1, -1, 1, 1};  // entry 1 = +0, entry 3 = −0
  const auto X = memsafe::points(x.data(), 1, 2), Y = memsafe::points(y.data(), 5, 2);
  using idx = std::vector<memsafe::index_t>;
  for (int variant = 0; variant < 2; ++variant) {
    CAPTURE(variant);
    const auto& w = variant == 0 ? wa : wb;
    const auto W = memsafe::points(w.data(), 5, 2);
    const auto E = memsafe::hadamard(memsafe::sqdist(X, Y), memsafe::dot(X, W));
    // −E, written so that no unary node sits above the binary one: rewrite::normalize does not
    // (yet) find its binary/transpose overloads from the unary one, so -E would not compile.
    const auto NE = memsafe::hadamard(memsafe::sqdist(X, Y) * -1.0, memsafe::dot(X, W));
    // The entries themselves: 256, ∓0, 64, ±0, 144.
    auto dense = memsafe::eval(memsafe::dense(E), memsafe::budget_bytes(memsafe::unlimited));
    REQUIRE(dense.values.size() == 5);
    CHECK(dense[0] == T(256));
    CHECK(dense[2] == T(64));
    CHECK(dense[4] == T(144));
    REQUIRE(dense[1] == T(0));
    REQUIRE(dense[3] == T(0));
    REQUIRE(std::signbit(dense[1]) == (variant == 0));
    REQUIRE(std::signbit(dense[3]) == (variant == 1));
    auto ndense = memsafe::eval(memsafe::dense(NE), memsafe::budget_bytes(memsafe::unlimited));
    REQUIRE(ndense.values.size() == 5);
    REQUIRE(std::signbit(ndense[1]) == (variant == 1));
    REQUIRE(std::signbit(ndense[3]) == (variant == 0));
    const bool neg1 = variant == 0;

    auto a = eval_budgets(memsafe::argmin(E), 0.0);
    CHECK(a.index(0) == 1);
    CHECK(std::signbit(a[0]) == neg1);  // the value of the lower index
    auto mn = eval_budgets(memsafe::min(E), 0.0);
    CHECK(mn[0] == T(0));
    CHECK(std::signbit(mn[0]) == neg1);
    auto k2 = eval_budgets(memsafe::argkmin(E, 2), 0.0);
    CHECK(k2.indices == idx{1, 3});
    auto k5 = eval_budgets(memsafe::argkmin(E, 5), 0.0);
    CHECK(k5.indices == idx{1, 3, 2, 4, 0});
    // The largest of −E: ±0 are the largest and tie the same way.
    auto ax = eval_budgets(memsafe::argmax(NE), 0.0);
    CHECK(ax.index(0) == 1);
    CHECK(std::signbit(ax[0]) == !neg1);
    auto kx = eval_budgets(memsafe::argkmax(NE, 3), 0.0);
    CHECK(kx.indices == idx{1, 3, 2});
    auto mx = eval_budgets(memsafe::max(NE), 0.0);
    CHECK(std::signbit(mx[0]) == !neg1);
  }
}

}  // namespace

TEST_SUITE("nan") {

TEST_CASE("nan: sum propagates NaN to the affected rows only") {
  check_sum<float>();
  check_sum<double>();
}

TEST_CASE("nan: argkmin and argmin rank NaN last") {
  check_topk_nan_last<float, false>();
  check_topk_nan_last<double, false>();
}

TEST_CASE("nan: argkmax and argmax rank NaN last") {
  check_topk_nan_last<float, true>();
  check_topk_nan_last<double, true>();
}

TEST_CASE("nan: min and max ignore NaN unless the whole row is NaN") {
  check_min_max<float>();
  check_min_max<double>();
}

TEST_CASE("nan: logsumexp with NaN and infinities") {
  check_logsumexp<float>();
  check_logsumexp<double>();
}

TEST_CASE("nan: softmax_sum with NaN and infinite scores") {
  check_softmax_sum<float>();
  check_softmax_sum<double>();
}

TEST_CASE_TEMPLATE("nan: softmax_sum refuses values V that are not finite at every budget and instruction set", T, float,
                   double) {
  // A score of −inf (log of a zero distance) gives V's row the weight 0, and 0 · inf is NaN: with
  // V[0] = inf behind a −inf score the result was 1 at some budgets or ISAs and NaN at others.
  const std::size_t m = 200;
  std::vector<T> x = {T(0)}, y(m), v(m, T(1));
  for (std::size_t j = 0; j < m; ++j) y[j] = j < 100 ? T(0) : T(1);
  const auto X = memsafe::points(x.data(), 1, 1), Y = memsafe::points(y.data(), m, 1);
  const auto S = memsafe::log(memsafe::sqdist(X, Y));
  for (const T bad : {std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                      std::numeric_limits<T>::quiet_NaN()}) {
    v[0] = bad;
    for (std::size_t budget : {std::size_t{320}, std::size_t{3840}, std::size_t{1} << 20}) {
      CAPTURE(budget);
      std::vector<T> out(1, T(-7));
      std::string msg = "no error";
      try {
        (void)memsafe::eval_into(memsafe::softmax_sum(S, memsafe::matrix(v.data(), m, 1)), out.data(), nullptr,
                                 memsafe::options{.budget = budget});
      } catch (const memsafe::argument_error& e) {
        msg = e.what();
      }
      CHECK(msg.find("softmax_sum(S, V): V(0, 0) is") != std::string::npos);
      CHECK(out[0] == T(-7));  // refused before anything is written
    }
  }
  v[0] = T(1);  // finite: the −inf scores count for nothing, the others average V = 1
  const auto r = memsafe::eval(memsafe::softmax_sum(S, memsafe::matrix(v.data(), m, 1)), memsafe::budget_bytes(320));
  CHECK(r.values[0] == doctest::Approx(1.0));
}

TEST_CASE("nan: equal distances tie to the lower index") {
  check_ties<float>();
  check_ties<double>();
}

TEST_CASE("nan: negative and positive zero tie") {
  check_signed_zero_ties<float>();
  check_signed_zero_ties<double>();
}

}  // TEST_SUITE("nan")
