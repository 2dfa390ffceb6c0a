// memsafe/core/error.hpp — the exceptions memsafe throws.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace memsafe {

/// Base of every memsafe exception.
struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Extents that do not fit together (X's d vs Y's d, v's length vs the matrix, …).
struct shape_error : error {
  using error::error;
};

/// Invalid values: k out of range, non-positive lengthscale, null data, bad budget text.
struct argument_error : error {
  using error::error;
};

/// The budget cannot hold the smallest workable plan. Thrown before anything is allocated.
struct budget_error : error {
  std::size_t budget_bytes = 0;
  std::size_t minimum_bytes = 0;
  budget_error(const std::string& what, std::size_t budget, std::size_t minimum)
      : error(what), budget_bytes(budget), minimum_bytes(minimum) {}
};

}  // namespace memsafe
