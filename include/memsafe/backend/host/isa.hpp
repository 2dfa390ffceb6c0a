// memsafe/backend/host/isa.hpp — which instruction set the host's hand-vectorised kernels run with.
//
// The fused k-nearest kernels (select.hpp, simd.hpp) are compiled in every translation unit for
// each instruction set below, whatever its -march flags, and one is chosen at run time:
//
//   avx512    AVX-512F (16 floats / 8 doubles a register)
//   avx2      AVX2 + FMA (8 floats / 4 doubles)
//   portable  no fused kernel: the tile path (tile.hpp + monoids.hpp), compiled for the
//             translation unit's own target; also the reference the others are tested against
//
// The CPU is asked once per process (CPUID for the features, XGETBV for the operating system
// saving their registers: a feature the OS does not enable is not there), and every evaluation
// takes the best instruction set both the CPU and the translation unit have, unless
// MEMSAFE_ISA (core/env.hpp) forces one; forcing one that is not available is an argument_error
// naming what is. A translation unit has the SIMD kernels when GCC or Clang compiles it for
// x86-64, not under nvcc (__CUDACC__: its host code keeps the portable path) and not with
// MEMSAFE_NO_SIMD defined; then MEMSAFE_SIMD_DISPATCH is 1.
#pragma once
#include <cctype>
#include <string>
#include <string_view>

#include "../../core/config.hpp"
#include "../../core/env.hpp"
#include "../../core/error.hpp"
#include "../../core/maybe.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define MEMSAFE_X86_CPUID 1
#if !defined(MEMSAFE_NO_SIMD) && !defined(__CUDACC__)
#define MEMSAFE_SIMD_DISPATCH 1
#endif
#endif

namespace memsafe::host {

/// An instruction set of the host kernels; its value is its bit in the sets below.
enum class isa : unsigned { portable = 0, avx2 = 1, avx512 = 2 };
inline constexpr isa isa_all[] = {isa::avx512, isa::avx2, isa::portable};  ///< best first

constexpr unsigned isa_bit(isa i) { return 1u << static_cast<unsigned>(i); }

inline const char* isa_name(isa i) {
  switch (i) {
    case isa::avx512: return "avx512";
    case isa::avx2: return "avx2";
    default: return "portable";
  }
}

/// The instruction sets this translation unit has kernels for. Internal linkage (a namespace-scope
/// constexpr), so translation units compiled differently (nvcc) do not disagree about it; the
/// functions below take it as an argument for the same reason.
#if defined(MEMSAFE_SIMD_DISPATCH)
constexpr unsigned isa_compiled = isa_bit(isa::portable) | isa_bit(isa::avx2) | isa_bit(isa::avx512);
#else
constexpr unsigned isa_compiled = isa_bit(isa::portable);
#endif

/// Ask the CPU (see cpu_isas).
inline unsigned detect_cpu_isas() {
  unsigned bits = isa_bit(isa::portable);
#if defined(MEMSAFE_X86_CPUID)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return bits;
  const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u, fma = (c >> 12) & 1u;
  if (!osxsave || !avx || __get_cpuid_max(0, nullptr) < 7) return bits;
  unsigned xlo = 0, xhi = 0;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(xlo), "=d"(xhi) : "c"(0u));  // XGETBV(0): XCR0
  const unsigned long long xcr0 = (static_cast<unsigned long long>(xhi) << 32) | xlo;
  const bool ymm = (xcr0 & 0x6u) == 0x6u;    // SSE and AVX state
  const bool zmm = (xcr0 & 0xe6u) == 0xe6u;  // + opmask, upper ZMM0-15, ZMM16-31 state
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b >> 5) & 1u, avx512f = (b >> 16) & 1u;
  if (ymm && avx2 && fma) bits |= isa_bit(isa::avx2);
  if (ymm && zmm && avx2 && fma && avx512f) bits |= isa_bit(isa::avx512);
#endif
  return bits;
}

/// "avx2, portable": the names in `set`, best first. (A template on nothing: compiled only where a
/// message needs it.)
template <class = void>
MEMSAFE_COLD std::string isa_list(unsigned set) {
  std::string s;
  for (isa i : isa_all)
    if (set & isa_bit(i)) {
      if (!s.empty()) s += ", ";
      s += isa_name(i);
    }
  return s;
}

/// The instruction sets this CPU runs (bits as isa_bit), asked once per process.
inline unsigned cpu_isas() {
  static const unsigned bits = detect_cpu_isas();
  return bits;
}

/// Bit `bit` of CPUID.(EAX=7, ECX=1):EAX (instruction-set extensions) where the CPU runs the
/// kernels of instruction set i with their register state saved by the OS (cpu_isas), else false.
inline bool cpuid_7_1_eax_bit([[maybe_unused]] isa i, [[maybe_unused]] unsigned bit) {
#if defined(MEMSAFE_X86_CPUID)
  if (!(cpu_isas() & isa_bit(i)) || __get_cpuid_max(0, nullptr) < 7) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return ((a >> bit) & 1u) != 0;
#else
  return false;
#endif
}

/// Whether this CPU runs AVX512-BF16 (VDPBF16PS, the bfloat16 screen of select.hpp), with the OS
/// saving the ZMM state; asked once per process.
inline bool cpu_has_avx512bf16() {
  static const bool has = cpuid_7_1_eax_bit(isa::avx512, 5);
  return has;
}

/// Whether this CPU runs AVX-VNNI (the VEX-encoded VPDPWSSD on ymm registers: the int16 screen's
/// multiply-add in one instruction, simd.hpp), with the OS saving the YMM state (the AVX2 kernels'
/// condition); asked once per process. Intel from Alder Lake and Sapphire Rapids, AMD from Zen 5.
inline bool cpu_has_avx_vnni() {
  static const bool has = cpuid_7_1_eax_bit(isa::avx2, 4);
  return has;
}

/// Whether VDPBF16PS outruns the FP32 fused multiply-add on this CPU, so that the bfloat16 screen pays
/// (select_driver.hpp's default): AMD's cores (Zen 4, Zen 5) issue it as often as an FMA, for twice
/// the products — measured 1.6× faster at d = 100 —, Intel's (Sapphire Rapids and later) at half
/// the rate of their two FMA pipes — measured 0.54×, slower at every d; they have AMX instead.
/// Decided by the vendor, asked once per process.
inline bool cpu_dpbf16_pays() {
  static const bool pays = [] {
#if defined(MEMSAFE_X86_CPUID)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
#else
    return false;
#endif
  }();
  return pays;
}

/// Whether this process may run AMX-BF16 (TDPBF16PS on tiles, the tile form of the bfloat16
/// screen, amx_kernel.inc): the CPU has AMX-TILE and AMX-BF16 (and AVX512-BF16, whose kernels the
/// tile screen shares), the OS saves the tile state (XCR0 bits 17 and 18), and Linux granted this
/// process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, Linux ≥ 5.16; the grant holds for every
/// thread of the process). Asked once per process; false elsewhere (the screen then runs on
/// VDPBF16PS, with the same answers).
inline bool cpu_has_amx_bf16() {
  static const bool has = [] {
#if defined(MEMSAFE_X86_CPUID) && defined(__linux__)
    if (!cpu_has_avx512bf16()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;  // AMX-BF16, AMX-TILE
    unsigned xlo = 0;  // XGETBV(0): XCR0's low half (its high half, in edx, holds nothing asked here)
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(xlo) : "c"(0u) : "edx");
    if (((xlo >> 17) & 3u) != 3u) return false;  // XTILECFG and XTILEDATA state
    // arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18), syscall 158 on x86-64
    long r = 0;
    __asm__ volatile("syscall" : "=a"(r) : "0"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    return r == 0;
#else
    return false;
#endif
  }();
  return has;
}

/// The best instruction set in `set`.
inline isa best_isa(unsigned set) {
  for (isa i : isa_all)
    if (set & isa_bit(i)) return i;
  return isa::portable;
}

/// Whether a and b are the same text but for the case of ASCII letters.
inline bool ascii_iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (std::tolower(static_cast<unsigned char>(a[k])) != std::tolower(static_cast<unsigned char>(b[k]))) return false;
  return true;
}

/// "avx512", "avx2" or "portable", case insensitive, surrounding spaces allowed; none otherwise.
inline detail::maybe<isa> parse_isa(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  for (isa i : isa_all)
    if (ascii_iequal(s, isa_name(i))) return i;
  return {};
}

/// The instruction set of the fused kernels for one evaluation, in a translation unit that has
/// kernels for `compiled` (pass isa_compiled): portable under MEMSAFE_KERNELS=reference; else
/// MEMSAFE_ISA when set; else the best the CPU and the translation unit both have. Read at every
/// call (the CPU only once). Throws argument_error for a MEMSAFE_ISA that is not a name, or names
/// an instruction set not available here.
MEMSAFE_COLD inline isa choose_isa(unsigned compiled) {
  if (env::kernels() == "reference") return isa::portable;
  const unsigned cpu = cpu_isas(), have = compiled & cpu;
  const auto e = env::isa();
  if (e.empty()) return best_isa(have);
  const auto want = parse_isa(e);
  if (!want)
    throw argument_error(detail::cat(detail::msg{"memsafe: MEMSAFE_ISA must be avx512, avx2 or portable, got \"", e, "\""}));
  if (have & isa_bit(*want)) return *want;
  const char* n = isa_name(*want);
  if (!(cpu & isa_bit(*want)))
    throw argument_error(detail::cat(detail::msg{"memsafe: MEMSAFE_ISA=", n, ": this CPU does not run ", n,
                                      *want == isa::avx512 ? " (AVX-512F, with the OS saving its registers)"
                                                           : " (AVX2 and FMA, with the OS saving their registers)",
                                      "; it runs: ", isa_list(cpu)}));
  throw argument_error(detail::cat(detail::msg{"memsafe: MEMSAFE_ISA=", n, ": this translation unit has no ", n,
                                    " kernels (compiled by nvcc, with MEMSAFE_NO_SIMD, or not by GCC/Clang for "
                                    "x86-64); available: ", isa_list(have)}));
}

/// MEMSAFE_ISA checked as choose_isa checks it, for evaluations whose kernels read it only through
/// tile_avx2 (which falls back to the tile kernel of the translation unit's target): the gradient
/// and the GP row kernels refuse a bad value at planning, as the fused kernels do.
MEMSAFE_COLD inline void check_isa() { (void)choose_isa(isa_compiled); }

/// MEMSAFE_SCREEN's word: unset, fp32, bf16, amx or i16, else argument_error (what a valid word
/// does, and where it cannot, is choose_screen's, select_driver.hpp).
MEMSAFE_COLD inline void check_screen_word() {
  const auto e = env::screen();
  if (!e.empty() && e != "fp32" && e != "bf16" && e != "i16" && e != "amx")
    throw argument_error(detail::cat(detail::msg{"memsafe: MEMSAFE_SCREEN must be fp32, bf16, amx or i16, got \"", e, "\""}));
}

/// Both variables, checked by every host evaluation before it plans (host::run, planner_for): a
/// malformed value was refused only by evaluations whose kernels read it (K·v, selections) and
/// ignored by the rest (dense tiles, sums of formulas, lazy × lazy, chains).
MEMSAFE_COLD inline void check_kernel_env() {
  check_isa();
  check_screen_word();
}

}  // namespace memsafe::host
