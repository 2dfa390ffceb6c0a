// memsafe/core/error.hpp — the exceptions memsafe throws.
#pragma once
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace memsafe {

/// Base of every memsafe exception but out_of_memory (below).
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

/// Memory that the plan fits in could not be had from the system: eval's result (the caller's
/// memory, outside the budget), or a temporary within a budget larger than the machine can give.
/// A std::bad_alloc, as every out-of-memory is, whose what() says what was asked for and what to do;
/// not a memsafe::error (an exception that were both would make `catch (const std::exception&)`
/// ambiguous, and match nothing). Thrown after planning, before any work.
struct out_of_memory : std::bad_alloc {
  std::size_t bytes = 0;  ///< what could not be allocated
  out_of_memory(const std::string& what, std::size_t b) : bytes(b), what_(what) {}
  const char* what() const noexcept override { return what_.what(); }

 private:
  std::runtime_error what_;  // its copies share the text and cannot throw
};

}  // namespace memsafe
