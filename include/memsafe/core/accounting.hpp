// memsafe/core/accounting.hpp — every temporary the library allocates goes through an accountant.
//
// The planner decides the bytes up front; the accountant enforces them (an allocation that would
// pass the limit throws instead of allocating) and records the peak, which each evaluation
// reports as `stats.peak_temp_bytes`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <utility>

#include "budget.hpp"
#include "error.hpp"
#include "threads.hpp"

namespace memsafe::detail {

class accountant {
 public:
  explicit accountant(std::size_t limit = unlimited) : limit_(limit) {}
  accountant(const accountant&) = delete;
  accountant& operator=(const accountant&) = delete;

  /// Count `bytes` against the limit without allocating (for memory another allocator hands out,
  /// e.g. device or pinned memory). Throws budget_error if the limit would be passed.
  void reserve(std::size_t bytes) {
    std::size_t cur = current_.load();
    std::size_t next;
    do {
      if (bytes > limit_ || cur > limit_ - bytes)
        throw budget_error(cat(msg{"memsafe: internal accounting refused ", bytes, " bytes: ", cur, " in use, limit ",
                                format_bytes(limit_)}),
                           limit_, cur + bytes);
      next = cur + bytes;
    } while (!current_.compare_exchange_weak(cur, next));
    std::size_t pk = peak_.load();
    while (next > pk && !peak_.compare_exchange_weak(pk, next)) {
    }
    count_.fetch_add(1);
  }
  /// Return bytes counted by reserve().
  void release(std::size_t bytes) noexcept { current_.fetch_sub(bytes); }

  /// Allocate `bytes` (64-byte aligned). Throws budget_error if the limit would be passed.
  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    // No object is larger than PTRDIFF_MAX; above SIZE_MAX − 63 the aligned operator new rounds
    // the size up to a multiple of 64, wraps around and hands out a few bytes (libstdc++)
    if (bytes > static_cast<std::size_t>(PTRDIFF_MAX)) refused(bytes);
    reserve(bytes);
    try {
      return ::operator new(bytes, std::align_val_t{64});
    } catch (const std::bad_alloc&) {
      release(bytes);
      refused(bytes);
    }
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    ::operator delete(p, std::align_val_t{64});
    release(bytes);
  }

  /// The system refused a temporary the budget allows: out_of_memory naming both.
  [[noreturn]] MEMSAFE_COLD void refused(std::size_t bytes) const {
    throw out_of_memory(cat(msg{"memsafe: a temporary of ", format_bytes(bytes),
                             limit_ == unlimited ? " (no budget)" : " within the budget of ",
                             limit_ == unlimited ? std::string() : format_bytes(limit_),
                             " could not be allocated, with ", format_bytes(current()),
                             " of temporaries already held: this machine has less memory to give than the budget "
                             "allows; choose a smaller budget"}),
                        bytes);
  }

  std::size_t limit() const { return limit_; }
  std::size_t current() const { return current_.load(); }
  std::size_t peak() const { return peak_.load(); }
  /// Number of allocations made (the tests use it to prove a temporary was never formed).
  std::size_t allocations() const { return count_.load(); }

 private:
  std::size_t limit_;
  relaxed_counter<std::size_t> current_{0}, peak_{0}, count_{0};
};

/// An owning, accounted buffer of `n` objects of trivially-copyable type T (uninitialised).
template <class T>
class temp_buffer {
 public:
  temp_buffer() = default;
  temp_buffer(accountant& a, std::size_t n)
      // n·sizeof(T) past std::size_t asks for all of it: the accountant's budget_error, never a
      // wrapped-around size
      : acc_(&a), n_(n), p_(static_cast<T*>(a.allocate(n > std::size_t(-1) / sizeof(T) ? std::size_t(-1) : n * sizeof(T)))) {}
  temp_buffer(const temp_buffer&) = delete;
  temp_buffer& operator=(const temp_buffer&) = delete;
  temp_buffer(temp_buffer&& o) noexcept { swap(o); }
  temp_buffer& operator=(temp_buffer&& o) noexcept {
    temp_buffer t(std::move(o));
    swap(t);
    return *this;
  }
  ~temp_buffer() {
    if (acc_) acc_->deallocate(p_, n_ * sizeof(T));
  }
  T* data() const { return p_; }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) const { return p_[i]; }

 private:
  void swap(temp_buffer& o) noexcept {
    std::swap(acc_, o.acc_);
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
  }
  accountant* acc_ = nullptr;
  std::size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace memsafe::detail
