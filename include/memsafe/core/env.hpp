// memsafe/core/env.hpp — the environment variables the library reads, all read here.
//
// Each variable has one function returning its text, or an empty view when it is unset or set to
// the empty string or spaces only (such a variable counts as unset everywhere; spaces around a value
// are dropped). The text is parsed where its meaning is owned; a malformed value is an
// argument_error quoting the text:
//
//   MEMSAFE_BUDGET       the budget of a call that gives none (docs/budget.md for the precedence).
//                        A number with an optional unit, case insensitive, spaces ignored:
//                        B, kB/KB, MB, GB, TB (powers of 10), KiB, MiB, GiB, TiB (powers of 2),
//                        fractions ("1.5GiB"), or unlimited / inf / none for no limit.
//                        Parsed by parse_bytes (core/budget.hpp); anything else, zero and more
//                        than 2^64 − 1 bytes included, is an argument_error.
//   MEMSAFE_NUM_THREADS  the worker threads of a call whose options::threads is 0. A positive
//                        decimal integer, surrounding spaces allowed, clamped to the cores this
//                        process may use; anything else ("2abc", "0", "-1") is an argument_error.
//                        Parsed by plan::resolve_threads (plan/plan.hpp). Unset: all those cores.
//   MEMSAFE_KERNELS      "reference" turns off every fused or run-time-dispatched kernel of the host
//                        backend (selections, kernel sums, the AVX2 copies of the tile, gradient and GP
//                        row kernels, attention's vector kernels): the portable path, for comparisons and
//                        debugging. Any other value leaves them on.
//   MEMSAFE_ISA          the instruction set of the host's run-time-dispatched kernels (fused
//                        selections and sums, tile, gradient, attention and GP row kernels): avx512, avx2 or portable
//                        (the tile path), case insensitive, surrounding spaces allowed. Unset: the
//                        best this CPU runs (backend/host/isa.hpp). Another text is an argument_error,
//                        and so is an instruction set this CPU (or this translation unit: nvcc,
//                        MEMSAFE_NO_SIMD, not x86-64) lacks; the message names what it has.
//                        Parsed by host::parse_isa. MEMSAFE_KERNELS=reference takes precedence.
//   MEMSAFE_SCREEN       the precision the fused k-nearest selection screens float sqdist, cosine
//                        and dot in, on the host: "fp32", "bf16" (VDPBF16PS), "amx" (bfloat16 on
//                        AMX tiles) or "i16" (int16, the AVX2 kernels; sqdist only), case
//                        sensitive. Unset: on the AVX-512 kernels amx at d ≥ 16 where the CPU and
//                        OS offer AMX-BF16, else bf16 at d ≥ 8 on a CPU with AVX512-BF16
//                        where it pays (AMD's), else fp32; on the AVX2 kernels i16 for
//                        sqdist at d ≥ 16 (backend/host/select_driver.hpp, choose_screen). A named
//                        screen is forced at every d where it applies (an argument_error where the
//                        CPU or the kernels lack it); "fp32" turns them off. Either way the answers are
//                        the same, bit for bit (backend/host/select.hpp). Another text is an
//                        argument_error.
//   MEMSAFE_SYMMETRIC    "off" (or "0") turns off the symmetric fused K·v of the host and CUDA
//                        backends (backend/host/sum_driver.hpp, backend/cuda/rows.cuh: k(X, X)·v
//                        with the same points on both sides takes each pair once): every such
//                        product evaluates all n² pairs, for comparisons. "on" makes the CUDA
//                        backend take it wherever it applies and fits the budget, also where its
//                        planner expects the plain form to be faster (small n; for tests). Any
//                        other value leaves the default.
//
// The variables are read at every call that needs them, never cached. MEMSAFE_BUDGET applies to
// the CUDA backend too. Other MEMSAFE_* variables (MEMSAFE_DATA_DIR, MEMSAFE_DATA_MIRROR,
// MEMSAFE_FUZZ_*) belong to the examples, benchmarks, scripts and tests, not to the library.
#pragma once
#include <cstdlib>
#include <string_view>

namespace memsafe::env {

/// The text of the environment variable `name` without surrounding spaces; empty when unset, empty
/// or all spaces. The view is valid until the environment is next modified.
inline std::string_view get(const char* name) {
  const char* e = std::getenv(name);
  if (!e) return {};
  std::string_view s(e);
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

/// MEMSAFE_BUDGET (see above).
inline std::string_view budget() { return get("MEMSAFE_BUDGET"); }

/// MEMSAFE_NUM_THREADS (see above).
inline std::string_view num_threads() { return get("MEMSAFE_NUM_THREADS"); }

/// MEMSAFE_KERNELS (see above).
inline std::string_view kernels() { return get("MEMSAFE_KERNELS"); }

/// MEMSAFE_ISA (see above).
inline std::string_view isa() { return get("MEMSAFE_ISA"); }

/// MEMSAFE_SCREEN (see above).
inline std::string_view screen() { return get("MEMSAFE_SCREEN"); }

/// MEMSAFE_SYMMETRIC (see above).
inline std::string_view symmetric() { return get("MEMSAFE_SYMMETRIC"); }
/// MEMSAFE_SYMMETRIC is "off" or "0": no symmetric K·v on either backend.
inline bool symmetric_off() {
  const auto v = symmetric();
  return v == "off" || v == "0";
}
/// MEMSAFE_SYMMETRIC is "on": the CUDA backend takes the symmetric K·v wherever it fits.
inline bool symmetric_forced() {
  const auto v = symmetric();
  return v == "on";
}

}  // namespace memsafe::env
