// memsafe/core/threads.hpp — the little the host backend needs from threads: start and join a
// thread, a relaxed shared counter, the cores this process may use. Written on POSIX threads and
// the compiler's __atomic builtins rather than <thread>, <atomic> and <mutex>: under C++20 those
// headers (libstdc++ 12: <thread> brings <stop_token>, <semaphore> and <ostream>) cost ≈ 0.3 s of
// parsing in every translation unit that includes memsafe.hpp, about a third of including it
// (docs/design.md, "Compile time"). The library already needs GCC or Clang (target pragmas,
// vector extensions) and links the platform's threads (Threads::Threads), as <thread> does.
#pragma once
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cstddef>

namespace memsafe::detail {

/// An integer that threads update together, every access relaxed: work counters (the threads'
/// joins order everything else) and the accountant's statistics. Neither copyable nor movable.
template <class T>
class relaxed_counter {
 public:
  constexpr explicit relaxed_counter(T v = T(0)) noexcept : v_(v) {}
  relaxed_counter(const relaxed_counter&) = delete;
  relaxed_counter& operator=(const relaxed_counter&) = delete;
  T load() const noexcept { return __atomic_load_n(&v_, __ATOMIC_RELAXED); }
  T fetch_add(T d) noexcept { return __atomic_fetch_add(&v_, d, __ATOMIC_RELAXED); }
  T fetch_sub(T d) noexcept { return __atomic_fetch_sub(&v_, d, __ATOMIC_RELAXED); }
  /// As std::atomic's compare_exchange_weak: on failure `expected` receives the current value.
  bool compare_exchange_weak(T& expected, T desired) noexcept {
    return __atomic_compare_exchange_n(&v_, &expected, desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }

 private:
  T v_;
};

/// Whether the calling thread is the first to claim `flag` (false → true, acquire-release).
inline bool claim_first(bool& flag) noexcept { return !__atomic_exchange_n(&flag, true, __ATOMIC_ACQ_REL); }

/// One OS thread running fn(arg); start() reports false (nothing started) when the system refuses
/// a thread, e.g. no address space left for its stack. join() before destruction.
class os_thread {
 public:
  bool start(void* (*fn)(void*), void* arg) noexcept { return pthread_create(&id_, nullptr, fn, arg) == 0; }
  void join() noexcept { pthread_join(id_, nullptr); }

 private:
  pthread_t id_{};
};

/// Cores this process may run on: its CPU affinity mask where the platform has one (Linux), else
/// the processors online; at least 1.
inline std::size_t available_cores() {
#if defined(__linux__) && defined(CPU_COUNT)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int c = CPU_COUNT(&set);
    if (c > 0) return static_cast<std::size_t>(c);
  }
#endif
  const long hc = sysconf(_SC_NPROCESSORS_ONLN);
  return hc > 0 ? static_cast<std::size_t>(hc) : 1;
}

}  // namespace memsafe::detail
