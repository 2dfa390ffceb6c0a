// memsafe/rewrite/rules.hpp — the rule log and the runtime-guarded rewrite node.
//
// Rules are type-to-type functions (rewrite/normalize.hpp). Which rules apply is decided at
// compile time from the types; each application is also recorded at run time in a rule_log so
// that `explain` can list them. A few rules need a fact only known at run time (the exponent of
// pow is 2; the two factors of x*x are the same tensor; the feature extents agree): they produce
// a `guarded` node that holds both the rewritten and the original form and picks one per
// evaluation. Both forms are budgeted; the original is only slower.
#pragma once
#include "../core/algo.hpp"
#include <string>
#include <vector>

#include "../expr/lazy.hpp"

namespace memsafe::rewrite {

// The rules match and build the capture nodes, which are implementation types (memsafe::detail).
using namespace memsafe::detail;

/// The rules applied to one expression, in the order they fired (each listed once).
struct rule_log {
  std::vector<std::string> fired;
  template <class = void>
  void add(const std::string& r) {
    if (!detail::contains(fired, r)) fired.push_back(r);
  }
  template <class = void>
  MEMSAFE_COLD std::string str() const {
    if (fired.empty()) return "(none)";
    std::string s;
    for (const auto& r : fired) s += (s.empty() ? "" : "\n              ") + r;
    return s;
  }
};

/// Whether two views are the same memory with the same layout (expr/view.hpp).
using memsafe::detail::same_view;

}  // namespace memsafe::rewrite

namespace memsafe::detail {

/// The op of a unary_expr (void for any other node), for rules that look one level down.
template <class E>
struct unary_op_of {
  using type = void;
};
template <class Op, class C>
struct unary_op_of<unary_expr<Op, C>> {
  using type = Op;
};

/// A rewritten form `fast` valid when `use_fast` (checked at run time), else the original `slow`.
template <class Fast, class Slow>
struct guarded : lazy_tag {
  using value_type = typename Slow::value_type;
  using fast_type = Fast;
  using slow_type = Slow;
  static constexpr std::size_t static_rows = Slow::static_rows, static_cols = Slow::static_cols;
  Fast fast;
  Slow slow;
  bool use_fast = true;
  std::size_t rows() const { return slow.rows(); }
  std::size_t cols() const { return slow.cols(); }
  MEMSAFE_COLD std::string str() const { return use_fast ? fast.str() : slow.str(); }
};

}  // namespace memsafe::detail
