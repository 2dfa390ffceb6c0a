// memsafe/rewrite/chain.hpp — the rule chain_order: the cheapest order of a product chain that fits.
//
// chain_order: for a chain F0·F1·…·F(N−1) (expr/chain.hpp) choose the parenthesisation of least
// flops among those whose intermediates fit the budget, by dynamic programming over the split
// points of every interval [i, j]; if none fits, the order of least peak. The factors' kinds are
// known at compile time (dense, lazy, pinned), the extents at run time:
//   dense·dense  2pqr (GEMM)          lazy·dense, dense·lazy  c·pq + 2pqr (tiled, fused)
//   lazy·lazy    c·(pq + qr)·regeneration + 2pqr (tiled lazy × lazy product)
// where c is the cost of generating one lazy entry (entry_cost). Every intermediate product is a
// dense temporary; the root writes into the caller's output; lazy factors are never materialised.
// Everything here is constexpr, so the choice is testable with static_assert (tests/test_rewrite.cpp).
#pragma once
#include "../core/algo.hpp"
#include <array>
#include <cstddef>
#include <limits>
#include <string>

#include "../expr/chain.hpp"

namespace memsafe::rewrite {

using namespace memsafe::detail;  // the chain factors (expr/chain.hpp)

template <class F>
inline constexpr bool is_dense_factor = false;
template <class T, std::size_t R, std::size_t C>
inline constexpr bool is_dense_factor<dense_factor<T, R, C>> = true;
template <class F>
inline constexpr bool is_pinned_factor = false;
template <class X>
inline constexpr bool is_pinned_factor<pinned<X>> = true;
/// A factor's kind in the order search: 0 dense, 1 lazy (generated per tile, never stored), 2 pinned
/// (materialised once, as a temporary).
template <class F>
inline constexpr int factor_kind = is_dense_factor<F> ? 0 : is_pinned_factor<F> ? 2 : 1;

/// Flops to generate one entry of a lazy factor (a rough, monotone estimate).
template <class E>
constexpr double entry_cost(const E& e) {
  if constexpr (requires { e.dim(); }) return 3.0 * double(e.dim()) + 20.0;
  else if constexpr (requires { e.e; }) return entry_cost(e.e) + 2.0;
  else if constexpr (requires { e.a; e.b; }) return entry_cost(e.a) + entry_cost(e.b) + 1.0;
  else if constexpr (requires { e.slow; }) return entry_cost(e.fast);
  else return 40.0;
}

/// A factor's cost in the order search: 0 for dense and pinned factors (their entries are read),
/// entry_cost for a lazy one (generated).
template <class F>
constexpr double factor_cost(const F& f) {
  if constexpr (factor_kind<F> == 1) return entry_cost(f);
  else return 0.0;
}

/// Order of a chain of N factors: per interval [i, j] the best split, flops and peak bytes.
template <std::size_t N>
struct chain_order {
  std::array<std::size_t, N + 1> dims{};
  std::array<int, N> kind{};  // 0 dense, 1 lazy, 2 pinned
  std::array<double, N> cost{};
  std::array<double, N * N> flops{};
  std::array<double, N * N> peak{};
  std::array<std::size_t, N * N> split{};
  std::size_t elem = 8;

  constexpr double bytes(std::size_t i, std::size_t j) const {  // a materialised [i, j]
    return double(dims[i]) * double(dims[j + 1]) * double(elem);
  }
  constexpr bool lazy_single(std::size_t i, std::size_t j) const { return i == j && kind[i] == 1; }
  /// Temporary bytes the result of [i, j] occupies while it is an operand.
  constexpr double held(std::size_t i, std::size_t j) const {
    if (i == j) return kind[i] == 2 ? bytes(i, i) : 0.0;
    return bytes(i, j);
  }
  constexpr double combine_flops(std::size_t i, std::size_t s, std::size_t j) const {
    const double p = double(dims[i]), q = double(dims[s + 1]), r = double(dims[j + 1]);
    const bool ll = lazy_single(i, s), rl = lazy_single(s + 1, j);
    double f = 2.0 * p * q * r;
    if (ll && rl) {
      f += cost[i] * p * q * std::max(1.0, r / 256.0) + cost[s + 1] * q * r * std::max(1.0, p / 256.0);
    } else {
      if (ll) f += cost[i] * p * q;
      if (rl) f += cost[s + 1] * q * r;
    }
    return f;
  }

  /// Fill the tables for a budget; the root [0, N−1] writes into the caller's output.
  constexpr void solve(double budget) {
    for (std::size_t i = 0; i < N; ++i) {
      flops[i * N + i] = 0;
      peak[i * N + i] = kind[i] == 2 ? bytes(i, i) : 0.0;
    }
    for (std::size_t len = 2; len <= N; ++len)
      for (std::size_t i = 0; i + len <= N; ++i) {
        const std::size_t j = i + len - 1;
        const bool root = i == 0 && j == N - 1;
        const double out = root ? 0.0 : bytes(i, j);
        double best = std::numeric_limits<double>::infinity(), bestpk = best;
        std::size_t bs = i;
        double minpk = std::numeric_limits<double>::infinity();
        std::size_t ms = i;
        for (std::size_t s = i; s < j; ++s) {
          const double hl = held(i, s), hr = held(s + 1, j);
          const double pk = std::max(std::max(peak[i * N + s], hl + peak[(s + 1) * N + j]), hl + hr + out);
          const double f = flops[i * N + s] + flops[(s + 1) * N + j] + combine_flops(i, s, j);
          if (pk < minpk) { minpk = pk; ms = s; }
          if (pk <= budget && f < best) { best = f; bestpk = pk; bs = s; }
        }
        if (best == std::numeric_limits<double>::infinity()) {  // nothing fits: keep the leanest
          bs = ms;
          bestpk = minpk;
          best = flops[i * N + ms] + flops[(ms + 1) * N + j] + combine_flops(i, ms, j);
        }
        split[i * N + j] = bs;
        flops[i * N + j] = best;
        peak[i * N + j] = bestpk;
      }
  }
  template <class Names>
  std::string order(std::size_t i, std::size_t j, const Names& names) const {
    if (i == j) return names[i];
    const std::size_t s = split[i * N + j];
    // appended, not `"(" + order(...)`: GCC 12 -O3 warns (-Wrestrict, a false positive) on that insert
    std::string o = "(";
    o += order(i, s, names);
    o += ' ';
    o += order(s + 1, j, names);
    o += ')';
    return o;
  }
  /// Flops of the left-to-right order, for comparison in explain.
  constexpr double left_to_right() const {
    double f = 0;
    for (std::size_t j = 1; j < N; ++j) f += combine_flops(0, j - 1, j);
    return f;
  }
};

}  // namespace memsafe::rewrite
