// The planner (plan/plan.hpp) on synthetic byte models: the one search routine (best_fit), the
// host's tile searches (tiles_2d, tiles_3d) — tile choice, the minimum budget, the thread
// resources — with no expression and nothing allocated.
#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <string>
#include <random>
#include <utility>
#include <vector>

#include <memsafe/memsafe.hpp>

namespace {
namespace plan = memsafe::plan;

/// A per-thread byte model of the usual shape: a fixed part plus a tile of `elem` bytes per entry.
struct affine_cost {
  std::size_t fixed = 256, elem = 8;
  std::size_t operator()(std::size_t ti, std::size_t tj) const { return fixed + ti * tj * elem; }
  std::size_t operator()(std::size_t tp, std::size_t tq, std::size_t tt) const {
    return fixed + (tp * tt + tt * tq + tp * tq) * elem;
  }
};
}  // namespace

TEST_SUITE("planner") {

TEST_CASE("best_fit: highest score among the candidates that fit, ties to the earlier, npos when none fits") {
  const std::vector<int> c{5, 9, 3, 9, 1};
  auto cost = [](int x) { return std::size_t(x) * 10; };
  // Constant score: the first candidate that fits (a backend's preference order).
  CHECK(plan::best_fit(c, 50, cost, [](int) { return 0; }) == 0);
  CHECK(plan::best_fit(c, 40, cost, [](int) { return 0; }) == 2);
  // Highest score that fits; equal scores keep the earlier candidate.
  CHECK(plan::best_fit(c, 100, cost, [](int x) { return x; }) == 1);
  CHECK(plan::best_fit(c, 60, cost, [](int x) { return x; }) == 0);
  CHECK(plan::best_fit(c, 9, cost, [](int) { return 0; }) == plan::npos);
  CHECK(plan::best_fit(std::vector<int>{}, 100, cost, [](int) { return 0; }) == plan::npos);
}

TEST_CASE("tiles_2d: the largest tile for the most threads, the exact bytes, budget_error naming cost(1, 1)") {
  const affine_cost cost;
  SUBCASE("an ample budget takes the largest candidate tile and every thread") {
    const auto p = plan::tiles_2d(1000, 5000, std::size_t(1) << 30, 2, cost, "synthetic");
    CHECK(p.tile_rows == 64);
    CHECK(p.tile_cols == 1024);
    CHECK(p.threads == 2);
    CHECK_FALSE(p.split_columns);
    CHECK(p.row_blocks == 16);
    CHECK(p.col_blocks == 5);
    CHECK(p.num_tiles == 80);
    CHECK(p.per_thread_bytes == cost(64, 1024));
    CHECK(p.planned_bytes == 2 * cost(64, 1024));
    CHECK(p.min_bytes == cost(1, 1));
  }
  SUBCASE("the minimum: cost(1, 1) with one thread fits exactly, one byte less is a budget_error") {
    const auto p = plan::tiles_2d(1000, 5000, cost(1, 1), 2, cost, "synthetic");
    CHECK(p.tile_rows == 1);
    CHECK(p.tile_cols == 1);
    CHECK(p.threads == 1);
    CHECK(p.planned_bytes == cost(1, 1));
    try {
      (void)plan::tiles_2d(1000, 5000, cost(1, 1) - 1, 2, cost, "synthetic");
      FAIL("expected budget_error");
    } catch (const memsafe::budget_error& e) {
      CHECK(e.minimum_bytes == cost(1, 1));
      CHECK(e.budget_bytes == cost(1, 1) - 1);
      CHECK(std::string(e.what()).find("synthetic") != std::string::npos);
    }
  }
  SUBCASE("ties in area go to the wider tile") {
    // 8·256 = 16·128 = 32·64 = 2048 entries fit, 4096 do not: the widest of the equal areas wins.
    const std::size_t budget = cost(8, 256);
    const auto p = plan::tiles_2d(1000, 5000, budget, 1, cost, "synthetic");
    CHECK(p.tile_rows * p.tile_cols == 2048);
    CHECK(p.tile_cols == 1024);
  }
  SUBCASE("threads: never more than the tiles, and columns split only up to the column blocks") {
    const auto one_row = plan::tiles_2d(1, 3000, std::size_t(1) << 30, 8, cost, "synthetic");
    CHECK(one_row.row_blocks == 1);
    CHECK(one_row.col_blocks == 3);
    CHECK(one_row.threads == 3);
    CHECK(one_row.split_columns);
    const auto tiny = plan::tiles_2d(3, 5, std::size_t(1) << 30, 8, cost, "synthetic");
    CHECK(tiny.num_tiles == 1);
    CHECK(tiny.threads == 1);
  }
  SUBCASE("fewer threads before tiles below a reasonable size") {
    // Two threads would get 1024-entry tiles (below 16×256): one thread with a 2048-entry tile.
    const std::size_t budget = 2 * cost(8, 128) + 8;
    const auto p = plan::tiles_2d(1000, 5000, budget, 2, cost, "synthetic");
    CHECK(p.threads == 1);
    CHECK(p.tile_rows * p.tile_cols == 2048);
  }
  SUBCASE("empty extents: nothing to tile, no temporaries") {
    const auto p = plan::tiles_2d(0, 5000, 0, 4, cost, "synthetic");
    CHECK(p.threads == 0);
    CHECK(p.planned_bytes == 0);
    CHECK(p.min_bytes == 0);
  }
  SUBCASE("every plan fits its budget, and a larger budget never plans a smaller tile (same threads)") {
    std::mt19937_64 rng(7);
    for (int it = 0; it < 300; ++it) {
      const std::size_t n = 1 + rng() % 5000, m = 1 + rng() % 5000, th = 1 + rng() % 4;
      const std::size_t budget = cost(1, 1) + rng() % (std::size_t(1) << 22);
      const auto p = plan::tiles_2d(n, m, budget, th, cost, "synthetic");
      REQUIRE(p.planned_bytes <= budget);
      CHECK(p.planned_bytes == p.threads * cost(p.tile_rows, p.tile_cols));
      CHECK(p.threads <= th);
      CHECK(p.tile_rows <= n);
      CHECK(p.tile_cols <= m);
      const auto q = plan::tiles_2d(n, m, budget * 2, 1, cost, "synthetic");
      const auto p1 = plan::tiles_2d(n, m, budget, 1, cost, "synthetic");
      CHECK(q.tile_rows * q.tile_cols >= p1.tile_rows * p1.tile_cols);
    }
  }
}

TEST_CASE("tiles_3d: output blocks and contraction tiles within the budget and square blocks when symmetric") {
  const affine_cost cost;
  const auto p = plan::tiles_3d(3000, 2000, 50000, std::size_t(1) << 30, 2, cost, "synthetic");
  CHECK(p.tile_rows == 256);
  CHECK(p.tile_cols == 256);
  CHECK(p.tile_inner == 512);
  CHECK(p.threads == 2);
  CHECK(p.planned_bytes == 2 * cost(256, 256, 512));
  CHECK(p.min_bytes == cost(1, 1, 1));
  CHECK_THROWS_AS((void)plan::tiles_3d(3000, 2000, 50000, cost(1, 1, 1) - 1, 2, cost, "synthetic"),
                  memsafe::budget_error);
  std::mt19937_64 rng(11);
  for (int it = 0; it < 200; ++it) {
    const std::size_t n = 1 + rng() % 3000, inner = 1 + rng() % 3000, th = 1 + rng() % 4;
    const std::size_t budget = cost(1, 1, 1) + rng() % (std::size_t(1) << 22);
    const auto s = plan::tiles_3d(n, n, inner, budget, th, cost, "synthetic", true);
    REQUIRE(s.planned_bytes <= budget);
    CHECK(s.tile_rows == s.tile_cols);
    CHECK(s.symmetric);
    CHECK(s.num_tiles == s.row_blocks * (s.row_blocks + 1) / 2 * s.inner_blocks);
  }
}

TEST_CASE("resources: a thread request above the usable cores is clamped to them") {
  const std::size_t cores = memsafe::available_cores();
  CHECK(cores >= 1);
  CHECK(plan::resolve_threads(1) == 1);
  CHECK(plan::resolve_threads(4000000000u) == cores);
}


TEST_CASE("chain planner: the walk over the ordered steps, the leanest order when the cheapest does not fit") {
  // A·B·C with p×q·q×r·r×s = 100×2·2×100·100×1, all dense, 8-byte entries.
  memsafe::rewrite::chain_order<3> o;
  o.dims = {100, 2, 100, 1};
  o.kind = {0, 0, 0};
  const std::array<std::string, 3> names{"A", "B", "C"};
  memsafe::rewrite::rule_log log;
  // Synthetic step workspaces: 1000 bytes for the product with the column C, 0 otherwise.
  std::vector<memsafe::jobs::chain_step> asked;
  auto step = [&](const memsafe::jobs::chain_step& st, std::size_t budget, std::size_t) {
    memsafe::tile_plan p;
    p.min_bytes = st.j == 2 ? 1000 : 0;
    p.budget = budget;
    asked.push_back(st);
    return p;
  };
  // The cheapest order is A·(B·C) (400 + 200 flops vs 40000 + 20000): B·C is a 2×1 intermediate.
  auto cp = plan::plan_chain(o, names, "A*B*C", std::size_t(1) << 20, 1, log, step);
  CHECK(cp.shown.expression == "(A (B C))");
  REQUIRE(cp.steps.size() == 2);
  CHECK((cp.steps[0].i == 1 && cp.steps[0].s == 1 && cp.steps[0].j == 2));
  CHECK((cp.steps[1].i == 0 && cp.steps[1].s == 0 && cp.steps[1].j == 2));
  CHECK(cp.steps[1].right == 0);  // the root consumes step 0's result
  CHECK(cp.steps[1].left == memsafe::jobs::chain_step::none);
  // Peak: B·C's result (16 B) beside its 1000-byte workspace; the root writes the caller's output.
  CHECK(cp.shown.min_bytes == 1016);
  CHECK(cp.step_budget[0] == (std::size_t(1) << 20) - 16);
  CHECK(cp.step_budget[1] == (std::size_t(1) << 20) - 16);  // B·C is alive while the root runs
  CHECK(log.fired.front() == "chain_order: (A (B C))");
  // Exactly the minimum fits; one byte less is a budget_error naming it.
  CHECK(plan::plan_chain(o, names, "A*B*C", 1016, 1, log, step).shown.min_bytes == 1016);
  try {
    plan::plan_chain(o, names, "A*B*C", 1015, 1, log, step);
    FAIL("expected a budget_error");
  } catch (const memsafe::budget_error& e) {
    CHECK(e.minimum_bytes == 1016);
  }
  // A pinned middle factor is a step of its own, before the product that reads it.
  o.kind = {0, 2, 0};
  auto pp = plan::plan_chain(o, names, "A*pin(B)*C", std::size_t(1) << 20, 1, log, step);
  REQUIRE(pp.steps.size() == 3);
  CHECK(pp.steps[0].pinned_leaf());
  CHECK(pp.steps[0].i == 1);
  CHECK(pp.shown.min_bytes == 1600 + 16 + 1000);  // pin(B) (2×100) beside B·C's result and workspace
}

TEST_CASE("chain planner: an order the solver ranks lower is taken when it alone fits, the minimum is the least walk") {
  // K·A·B, K lazy 1×1500, A 1500×1000, B 1000×1, 8-byte entries. (K A) B is cheaper and its
  // intermediate leaner (8000 B against A·B's 12000 B), but the step K·A needs an 8832-byte
  // workspace beside it (walk 16832), where K·(A B) needs 896 (walk 12896): the solver's orders
  // never find it, the walk over every order does.
  memsafe::rewrite::chain_order<3> o;
  o.dims = {1, 1500, 1000, 1};
  o.kind = {1, 0, 0};
  o.cost = {10, 0, 0};
  const std::array<std::string, 3> names{"K", "A", "B"};
  memsafe::rewrite::rule_log log;
  auto step = [&](const memsafe::jobs::chain_step& st, std::size_t budget, std::size_t) {
    memsafe::tile_plan p;
    p.min_bytes = (st.i == 0 && st.s == 0 && st.j == 1) ? 8832 : (st.i == 0 && st.s == 0 && st.j == 2) ? 896 : 0;
    p.budget = budget;
    return p;
  };
  const auto roomy = plan::plan_chain(o, names, "K*A*B", std::size_t(1) << 20, 1, log, step);
  CHECK(roomy.shown.expression == "((K A) B)");
  CHECK(roomy.shown.min_bytes == 12896);  // the least walk of any order, not the chosen one's 16832
  const auto tight = plan::plan_chain(o, names, "K*A*B", 14000, 1, log, step);
  CHECK(tight.shown.expression == "(K (A B))");
  CHECK(tight.shown.min_bytes == 12896);
  CHECK(plan::plan_chain(o, names, "K*A*B", 12896, 1, log, step).shown.expression == "(K (A B))");
  try {
    plan::plan_chain(o, names, "K*A*B", 12895, 1, log, step);
    FAIL("expected a budget_error");
  } catch (const memsafe::budget_error& e) {
    CHECK(e.minimum_bytes == 12896);
  }
}

TEST_CASE("chain planner: planned bytes are the largest step with its intermediates, not the budget, and explain below the minimum shows one order") {
  const std::size_t n = 150;
  std::vector<double> a(n * n), x(n * 2), v(n, 1.0);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.01 * double(i % 13) - 0.05;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1 * double(i % 11);
  const auto A = memsafe::matrix(static_cast<const double*>(a.data()), n, n);
  const auto X = memsafe::points(static_cast<const double*>(x.data()), n, 2);
  const auto e = memsafe::rbf(X, X, 1.0) * A * A * memsafe::vec(static_cast<const double*>(v.data()), n);
  const std::size_t budget = std::size_t{64} << 20;
  const auto r = memsafe::eval(e, memsafe::options{budget, 1});
  // it reported the budget itself as planned (1 GiB, or 16 EiB with no budget)
  CHECK(r.stats.planned_temp_bytes < budget);
  CHECK(r.stats.planned_temp_bytes >= r.stats.peak_temp_bytes);
  CHECK(r.stats.planned_temp_bytes >= r.stats.min_budget_bytes);
  CHECK(memsafe::plan_for(e, memsafe::options{memsafe::unlimited, 1}).planned_bytes < budget);
  // below the minimum explain re-plans without a limit: the failed attempt's order was logged too
  const std::string ex = memsafe::explain(e, memsafe::options{r.stats.min_budget_bytes - 1, 1});
  std::size_t orders = 0;
  for (std::size_t at = ex.find("chain_order:"); at != std::string::npos; at = ex.find("chain_order:", at + 1)) ++orders;
  CHECK_MESSAGE(orders == 1, ex);
}

}  // TEST_SUITE
