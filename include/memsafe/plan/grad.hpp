// memsafe/plan/grad.hpp — the plan of a backward evaluation (a vjp): its passes, each a tile_plan,
// the forward pre-step it needs, and the bytes. Printable with describe(). Backend-neutral data;
// the host fills it in backend/host/grad.hpp. docs/design.md, "Gradients".
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "../core/budget.hpp"
#include "plan.hpp"

namespace memsafe {

struct grad_plan {
  std::string expression;           ///< the vjp as written
  std::string rewritten;            ///< the lazy matrix as rewritten
  std::string weights;              ///< how W = ∂L/∂E is formed per tile
  std::vector<std::string> rules;   ///< rewrite rules that fired
  std::string mode;                 ///< "rows", "fused", "split", "columns", "none"
  std::vector<std::string> labels;  ///< one per pass: what it computes
  std::vector<tile_plan> passes;
  std::vector<std::string> pre_labels;  ///< the forward pre-steps (logsumexp, softmax_sum)
  std::vector<tile_plan> pre;
  std::size_t persistent_bytes = 0;  ///< temporaries alive through every pass (lse, δ)
  std::size_t planned_bytes = 0;     ///< the largest of the phases' planned bytes
  std::size_t min_bytes = 0;         ///< the smallest budget the backward runs with
  std::size_t budget = 0;
  std::size_t threads = 0;  ///< the most threads any pass uses

  /// One "name: value" line each; built with detail::cat, not <sstream> (docs/design.md, "Compile time").
  std::string describe() const {
    using detail::cat, detail::msg;
    std::string o = cat(msg{"as rewritten: ", rewritten, "\nrules fired:  "});
    if (rules.empty()) o += "(none)";
    for (std::size_t k = 0; k < rules.size(); ++k) o += cat(msg{k ? "\n              " : "", rules[k]});
    o += cat(msg{"\nbackward:     ", weights, "\nmode:         ", mode, "\n"});
    for (std::size_t k = 0; k < pre.size(); ++k) {
      o += cat(msg{"pre-step ", k + 1, ":   ", pre_labels[k], "\n"});
      append_tiles(o, pre[k]);
    }
    for (std::size_t k = 0; k < passes.size(); ++k) {
      o += cat(msg{"pass ", k + 1, ":       ", labels[k], "\n"});
      append_tiles(o, passes[k]);
    }
    o += cat(msg{"temporaries:  ", format_bytes(planned_bytes), " planned (", format_bytes(persistent_bytes),
                 " through every pass), budget ", format_bytes(budget), ", minimum ", format_bytes(min_bytes), "\n"});
    return o;
  }

 private:
  static void append_tiles(std::string& o, const tile_plan& p) {
    using detail::cat, detail::msg;
    o += cat(msg{"              index space ", p.rows, " x ", p.cols});
    if (p.tile_rows)
      o += cat(msg{", tile ", p.tile_rows, " x ", p.tile_cols, " (", p.num_tiles, " tiles), ", p.threads,
                   p.threads == 1 ? " thread" : " threads", p.split_columns ? " splitting columns" : ""});
    o += cat(msg{", ", format_bytes(p.planned_bytes), " (", format_bytes(p.per_thread_bytes), " per thread), minimum ",
                 format_bytes(p.min_bytes), "\n"});
  }
};

}  // namespace memsafe
