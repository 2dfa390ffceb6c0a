// memsafe/plan/plan.hpp — choose the tiling from the runtime extents and the budget.
//
// The executor's memory is a pure function of the tile shape and the number of worker threads:
//   threads × per_thread(ti, tj)
// where per_thread counts the tile buffer, the generators' workspaces (packed column panels,
// scratch tiles of elementwise nodes), the reduction's accumulators and scratch, each rounded
// up to 64 bytes. The planner searches tile shapes from cache-sized (64×1024) down to 1×1 and
// thread counts from the requested number down to 1, and takes the first plan that fits.
// If even one thread with a 1×1 tile does not fit, it throws budget_error naming that minimum,
// before anything is allocated. Every planner's search (tiles_2d, tiles_3d here; the CUDA
// backend's row layouts and product blocks) is the one routine best_fit over the backend's own
// candidates and byte model; tests/test_planner.cpp drives it with synthetic costs.
#pragma once
#include "../core/algo.hpp"
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/budget.hpp"
#include "../core/config.hpp"
#include "../core/env.hpp"
#include "../core/maybe.hpp"
#include "../core/threads.hpp"
#include "../core/error.hpp"

namespace memsafe {

/// A tiling decision. Printable with describe().
struct tile_plan {
  std::string expression;          ///< the (rewritten) expression
  std::string reduction;           ///< what is folded per tile
  std::size_t rows = 0, cols = 0;  ///< extents of the tiled index space (i, j)
  std::size_t inner = 0;           ///< contracted extent for lazy × lazy products (0 otherwise)
  std::size_t tile_rows = 0, tile_cols = 0, tile_inner = 0;
  std::size_t threads = 1;
  std::size_t per_thread_bytes = 0;
  std::size_t planned_bytes = 0;  ///< threads × per_thread_bytes (+ shared bytes)
  std::size_t min_bytes = 0;      ///< the smallest plan that works (1 thread, smallest tiles)
  std::size_t budget = 0;
  /// num_tiles is their product, held at SIZE_MAX where it would pass it (extents near 2⁴⁰ on both
  /// sides: 2³⁵ × 2³⁵ blocks of 32 wrapped around to 0 tiles, and so to 0 threads).
  std::size_t row_blocks = 0, col_blocks = 0, inner_blocks = 0, num_tiles = 0;
  bool split_columns = false;  ///< threads share one row block's columns and merge partials
  bool symmetric = false;      ///< lazy × lazy A·Aᵀ: only blocks on and below the diagonal, mirrored
  /// A host row job runs the fused kernels (a selection or a sum, backend/host/select_driver.hpp),
  /// not the tile loop: set by the planner, read by the run so that both take the same form.
  bool fused = false;
  /// A host row job the fused kernels serve: their smallest plan (≥ min_bytes; above it where the
  /// tile loop's is smaller, and below this budget the tile loop runs). 0 for other jobs.
  std::size_t fused_min_bytes = 0;
  /// The instruction set of the host kernels a row job runs with: "avx512" or "avx2" for the fused
  /// selection (chosen at run time, backend/host/isa.hpp), "portable" for the tile path; empty
  /// where no such choice is made (other jobs, the CUDA backend).
  std::string isa;
  /// The fused selection's screening precision on the host: "fp32" or "fp64" (the value type's),
  /// "bf16" (AVX512-BF16 dot products), "amx" (the same on AMX tiles) or "i16" (int16 dot products
  /// on the AVX2 kernels; backend/host/select.hpp); empty for other jobs.
  std::string screen;
  std::vector<std::string> rules;  ///< rewrite rules that fired (rewrite/normalize.hpp)

  /// "as rewritten" and "rules fired" lines. (This and describe are templates on nothing, as
  /// detail::cat's callers elsewhere: compiled only where called, their std::string appends are not
  /// instantiated in every translation unit.)
  template <class = void>
  std::string describe_rewrite() const {
    std::string s = detail::cat(detail::msg{"as rewritten: ", expression, "\nrules fired:  "});
    if (rules.empty()) s += "(none)";
    for (std::size_t k = 0; k < rules.size(); ++k) {
      if (k) s += "\n              ";
      s += rules[k];
    }
    s += "\n";
    return s;
  }

  /// The plan, one "name: value" line each (std::string only: <sstream> would cost every
  /// translation unit ≈ 0.1 s of parsing).
  template <class = void>
  std::string describe() const {
    using detail::cat, detail::msg;
    std::string o = cat(msg{describe_rewrite(), "reduction:    ", reduction, "\n"});
    if (!isa.empty()) o += cat(msg{"isa:          ", isa, "\n"});
    if (!screen.empty()) o += cat(msg{"screen:       ", screen, "\n"});
    o += cat(msg{"index space:  ", rows, " x ", cols});
    if (inner) o += cat(msg{" (contracting ", inner, ")"});
    o += "\n";
    if (tile_rows) {
      o += cat(msg{"tile:         ", tile_rows, " x ", tile_cols});
      if (inner) o += cat(msg{" x ", tile_inner});
      const auto count = [](std::size_t k, const char* what) { return cat(msg{k, " ", what, k == 1 ? "" : "s"}); };
      o += cat(msg{" (", num_tiles == std::size_t(-1) ? std::string("2^64 or more tiles") : count(num_tiles, "tile"), ": ", count(row_blocks, "row block"), " x ",
                count(col_blocks, "column block")});
      if (inner) o += cat(msg{" x ", count(inner_blocks, "inner block")});
      o += cat(msg{")\nthreads:      ", threads,
                split_columns ? " (splitting columns, partials merged)" : " (over row blocks)", "\n"});
    }
    o += cat(msg{"temporaries:  ", format_bytes(planned_bytes), " planned (", format_bytes(per_thread_bytes),
              " per thread), budget ", format_bytes(budget), ", minimum ", format_bytes(min_bytes), "\n"});
    if (fused_min_bytes > min_bytes)
      o += cat(msg{"              (the fused kernels from ", format_bytes(fused_min_bytes), "; the tile loop below)\n"});
    return o;
  }
};

namespace plan {

/// Cores this process may run on (core/threads.hpp): its CPU affinity mask where the platform has
/// one (Linux), else the processors online; at least 1.
using detail::available_cores;

/// A positive decimal integer (surrounding spaces allowed); none for anything else, including
/// values that do not fit in 64 bits.
inline detail::maybe<std::uint64_t> parse_positive(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty()) return {};
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return {};
    if (v > (std::numeric_limits<std::uint64_t>::max() - std::uint64_t(c - '0')) / 10) return {};
    v = v * 10 + std::uint64_t(c - '0');
  }
  if (v == 0) return {};
  return v;
}

/// Worker threads to use when the caller asks for `requested` (0 = MEMSAFE_NUM_THREADS, else all
/// cores). More threads than the cores this process may use are never planned: the request is
/// clamped to available_cores() (the plan and the stats report what was used).
inline std::size_t resolve_threads(unsigned requested) {
  const std::size_t cores = available_cores();
  if (requested) return std::min<std::size_t>(requested, cores);
  if (const auto e = env::num_threads(); !e.empty()) {
    if (auto v = parse_positive(e)) return static_cast<std::size_t>(std::min<std::uint64_t>(*v, cores));
    throw argument_error(detail::cat(detail::msg{"memsafe: MEMSAFE_NUM_THREADS must be a positive integer, got \"", e, "\""}));
  }
  return cores;
}

template <class = void>
std::vector<std::size_t> candidates(std::size_t extent, std::initializer_list<std::size_t> prefs) {
  std::vector<std::size_t> v;
  for (std::size_t p : prefs) {
    std::size_t c = std::min(p, extent);
    if (c && !detail::contains(v, c)) v.push_back(c);
  }
  return v;
}

[[noreturn]] MEMSAFE_COLD inline void too_small(const std::string& what, std::size_t budget, std::size_t minimum) {
  throw budget_error(detail::cat(detail::msg{"memsafe: a budget of ", format_bytes(budget), " is too small for ", what,
                                  ": the smallest workable plan (one thread, smallest tiles) needs ",
                                  format_bytes(minimum), " of temporaries; use a budget of at least ", minimum,
                                  " bytes"}),
                     budget, minimum);
}

inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

/// a·b, or SIZE_MAX where it would pass it: a tile count (tile_plan::num_tiles).
constexpr std::size_t saturating_mul(std::size_t a, std::size_t b) {
  std::size_t r;
  return __builtin_mul_overflow(a, b, &r) ? npos : r;
}
/// a + b, or npos when it does not fit.
constexpr std::size_t saturating_add(std::size_t a, std::size_t b) {
  std::size_t r;
  return __builtin_add_overflow(a, b, &r) ? npos : r;
}

/// The one search routine of every planner (the host's tiles_2d/tiles_3d, the CUDA backend's row
/// layouts and product blocks): among `cands`, the index of the candidate of highest `score`
/// whose `cost` fits `limit`; equal scores keep the earlier candidate, so a constant score takes
/// the first that fits (a preference order). npos when none fits. Each backend brings its own
/// candidates and byte model; nothing here knows about tiles or devices.
template <class Cand, class Cost, class Score>
std::size_t best_fit(const std::vector<Cand>& cands, std::size_t limit, Cost&& cost, Score&& score) {
  std::size_t best = npos;
  using S = std::remove_cvref_t<decltype(score(cands.front()))>;
  S best_score{};
  for (std::size_t k = 0; k < cands.size(); ++k) {
    if (cost(cands[k]) > limit) continue;
    S sc = score(cands[k]);
    if (best == npos || best_score < sc) {
      best = k;
      best_score = std::move(sc);
    }
  }
  return best;
}

/// A planner's byte model, passed by reference without a template: the search routines below are
/// compiled once per translation unit whatever the callers' lambdas (a translation unit's compile
/// time grows with every distinct instantiation; docs/design.md, "Compile time"). It refers to
/// the callable it was made from, which must outlive it (a call's argument does).
template <class Sig>
class cost_ref;
template <class... A>
class cost_ref<std::size_t(A...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, cost_ref>)
  cost_ref(F&& f)  // NOLINT: implicit, as a lambda argument converts
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, A... a) -> std::size_t { return (*static_cast<std::remove_reference_t<F>*>(o))(a...); }) {}
  std::size_t operator()(A... a) const { return call_(obj_, a...); }

 private:
  void* obj_;
  std::size_t (*call_)(void*, A...);
};
using cost2 = cost_ref<std::size_t(std::size_t, std::size_t)>;
using cost3 = cost_ref<std::size_t(std::size_t, std::size_t, std::size_t)>;

/// Plan a 2-D tiling of an n×m index space. `cost(ti, tj)` gives the per-thread bytes.
/// `tis`/`tjs` are the tile extents to try (each ≤ the extent; the largest area that fits wins).
template <class = void>  // one instance, compiled only where used (a template on nothing)
MEMSAFE_COLD tile_plan tiles_2d(std::size_t n, std::size_t m, std::size_t budget, std::size_t max_threads, cost2 cost,
                               const std::string& what, const std::vector<std::size_t>& tis,
                          const std::vector<std::size_t>& tjs) {
  tile_plan p;
  p.rows = n;
  p.cols = m;
  p.budget = budget;
  if (n == 0 || m == 0) {  // nothing to tile (an empty reduction writes its identity): no temporaries
    p.threads = 0;
    return p;
  }
  p.min_bytes = cost(1, 1);
  if (p.min_bytes > budget) too_small(what, budget, p.min_bytes);
  const std::size_t reasonable = std::min<std::size_t>(n, 16) * std::min<std::size_t>(m, 256);
  std::vector<std::pair<std::size_t, std::size_t>> grid;  // (ti, tj)
  for (std::size_t ti : tis)
    for (std::size_t tj : tjs) grid.emplace_back(ti, tj);
  for (std::size_t T = max_threads; T >= 1; --T) {
    // The largest area that fits budget / T; equal areas: the wider tile.
    const std::size_t k = best_fit(
        grid, budget / T, [&](const auto& t) { return cost(t.first, t.second); },
        [](const auto& t) { return std::pair<std::size_t, std::size_t>(t.first * t.second, t.second); });
    if (k != npos && (grid[k].first * grid[k].second >= reasonable || T == 1)) {
      const auto [bi, bj] = grid[k];
      p.tile_rows = bi;
      p.tile_cols = bj;
      p.row_blocks = (n + bi - 1) / bi;
      p.col_blocks = (m + bj - 1) / bj;
      p.num_tiles = saturating_mul(p.row_blocks, p.col_blocks);
      p.threads = std::min<std::size_t>(T, p.num_tiles);
      p.split_columns = p.row_blocks < p.threads;
      // Threads sharing a row block each take a share of its column tiles: never more than there are.
      if (p.split_columns) p.threads = std::min(p.threads, p.col_blocks);
      p.split_columns = p.row_blocks < p.threads;
      p.per_thread_bytes = cost(bi, bj);
      p.planned_bytes = p.threads * p.per_thread_bytes;
      return p;
    }
    if (T == 1) break;
  }
  too_small(what, budget, p.min_bytes);  // unreachable: 1×1 with one thread fits
}

template <class = void>
tile_plan tiles_2d(std::size_t n, std::size_t m, std::size_t budget, std::size_t max_threads, cost2 cost,
                   const std::string& what) {
  return tiles_2d(n, m, budget, max_threads, cost, what, candidates(n, {64, 32, 16, 8, 4, 2, 1}),
                  candidates(m, {1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1}));
}

/// Plan a 3-D tiling (p×q output blocks, contracting over t) for lazy × lazy products.
/// `cost(tp, tq, tt)` gives the per-thread bytes. Threads take output blocks, or share the
/// contraction of one block (each with its own accumulator, merged) when blocks are fewer.
template <class = void>
MEMSAFE_COLD tile_plan tiles_3d(std::size_t P, std::size_t Q, std::size_t Tn, std::size_t budget, std::size_t max_threads,
                          cost3 cost, const std::string& what, bool symmetric = false) {
  tile_plan p;
  p.rows = P;
  p.cols = Q;
  p.inner = Tn;
  p.budget = budget;
  if (P == 0 || Q == 0 || Tn == 0) {
    p.threads = 0;
    return p;
  }
  p.min_bytes = cost(1, 1, 1);
  if (p.min_bytes > budget) too_small(what, budget, p.min_bytes);
  const auto tps = candidates(P, {256, 128, 64, 32, 16, 8, 4, 2, 1});
  const auto tqs = candidates(Q, {256, 128, 64, 32, 16, 8, 4, 2, 1});
  const auto tts = candidates(Tn, {512, 256, 128, 64, 32, 16, 8, 4, 2, 1});
  struct block {
    std::size_t tp, tq, tt;
  };
  std::vector<block> grid;
  for (std::size_t tp : tps)
    for (std::size_t tq : tqs)
      for (std::size_t tt : tts)
        if (!symmetric || tq == tp) grid.push_back({tp, tq, tt});  // symmetric: square blocks mirror
  // Work per generated entry grows with tp·tq/(tp+tq); favour wide contraction tiles too.
  const auto score = [](const block& b) {
    return double(b.tp) * double(b.tq) / double(b.tp + b.tq) * std::min<double>(double(b.tt), 64.0);
  };
  const double reasonable = double(std::min<std::size_t>(P, 16)) * double(std::min<std::size_t>(Q, 16)) /
                            double(std::min<std::size_t>(P, 16) + std::min<std::size_t>(Q, 16)) *
                            std::min<double>(double(std::min<std::size_t>(Tn, 64)), 64.0);
  for (std::size_t T = max_threads; T >= 1; --T) {
    const std::size_t k = best_fit(grid, budget / T, [&](const block& b) { return cost(b.tp, b.tq, b.tt); }, score);
    if (k != npos && (score(grid[k]) >= reasonable || T == 1)) {
      const auto [bp, bq, bt] = grid[k];
      p.tile_rows = bp;
      p.tile_cols = bq;
      p.tile_inner = bt;
      p.row_blocks = (P + bp - 1) / bp;
      p.col_blocks = (Q + bq - 1) / bq;
      p.inner_blocks = (Tn + bt - 1) / bt;
      p.symmetric = symmetric;
      // The blocks' count fits: the product's P×Q result is addressable (its checks come first).
      const std::size_t blocks = symmetric ? p.row_blocks * (p.row_blocks + 1) / 2 : p.row_blocks * p.col_blocks;
      p.num_tiles = saturating_mul(blocks, p.inner_blocks);
      p.threads = std::min<std::size_t>(T, p.num_tiles);
      if (blocks < p.threads) p.threads = std::min(p.threads, p.inner_blocks);  // a share of the contraction each
      p.split_columns = blocks < p.threads;  // threads share the contraction
      p.per_thread_bytes = cost(bp, bq, bt);
      p.planned_bytes = p.threads * p.per_thread_bytes;
      return p;
    }
    if (T == 1) break;
  }
  too_small(what, budget, p.min_bytes);
}

}  // namespace plan

using plan::available_cores;

}  // namespace memsafe
