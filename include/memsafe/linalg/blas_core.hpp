// memsafe/linalg/blas_core.hpp — which kernel set the linked OpenBLAS runs, and a note when that set
// is narrower than the CPU.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's, conda's, the wheels') picks its kernels when it is
// loaded: the set OPENBLAS_CORETYPE names, else the one for the CPU it recognises (an OpenBLAS older
// than the CPU may not recognise it and fall back to an older set). memsafe's dense steps — gemm,
// syrk, cholesky; the SGPR bound and gradient's SYRK and GEMMs over the n-sized chunks — run on
// those kernels: on a Zen 5, Debian 12's 0.3.21 chooses its Cooperlake (AVX-512) set, and with
// OPENBLAS_CORETYPE=Haswell in the environment (set on the machine where this was measured) its
// AVX2 set runs the SGPR bound and gradient 1.27–1.50× slower (docs/design.md, *Kernels* under
// "Dependencies").
// memsafe cannot change the choice once the library is loaded; it can say what was chosen
// (blas_core) and when another choice would be faster (blas_core_note), for programs to print.
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

#include "../backend/host/isa.hpp"
#include "../core/error.hpp"

// Weak, as fortran.hpp's thread controls: null when the BLAS is not OpenBLAS.
extern "C" {
__attribute__((weak)) char* openblas_get_corename(void);
__attribute__((weak)) char* openblas_get_config(void);
}

namespace memsafe::linalg {

/// The kernel set OpenBLAS runs on this CPU ("Haswell", "Zen", "SkylakeX", "Cooperlake", …, as
/// OpenBLAS names it; OPENBLAS_CORETYPE chooses one), or "" when the BLAS is not OpenBLAS.
inline std::string_view blas_core() {
  if (&openblas_get_corename == nullptr) return {};
  const char* s = openblas_get_corename();
  return s ? std::string_view(s) : std::string_view();
}

/// OpenBLAS's build line ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"), or "".
inline std::string_view blas_config() {
  if (&openblas_get_config == nullptr) return {};
  const char* s = openblas_get_config();
  return s ? std::string_view(s) : std::string_view();
}

namespace detail {
/// Whether the CPU runs AVX-512 F, CD, BW, DQ and VL (the set OpenBLAS's SkylakeX kernels use) with
/// the OS saving the ZMM state; asked once per process.
inline bool cpu_has_avx512_skx() {
  static const bool has = [] {
#if defined(MEMSAFE_X86_CPUID)
    if (!(host::cpu_isas() & host::isa_bit(host::isa::avx512))) return false;  // F and the ZMM state
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    constexpr unsigned need = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);  // F DQ CD BW VL
    return (b & need) == need;
#else
    return false;
#endif
  }();
  return has;
}

/// blas_core_note's decision and text, from what it asks (a pure function, for the tests): `core`
/// OpenBLAS's kernel set ("" when not OpenBLAS), `cpu_avx512` cpu_has_avx512_skx(), `coretype` the
/// value of OPENBLAS_CORETYPE (null when unset), `config` blas_config(). The environment chose the
/// set when the variable names it; an empty or unknown name, which OpenBLAS ignores, did not.
template <class = void>
std::string blas_core_note_for(std::string_view core, bool cpu_avx512, const char* coretype, std::string_view config) {
  using memsafe::detail::cat;
  using memsafe::detail::msg;
  if (core.empty() || !cpu_avx512) return {};
  for (std::string_view wide : {"SkylakeX", "Cooperlake", "SapphireRapids"})  // OpenBLAS's AVX-512 sets
    if (host::ascii_iequal(core, wide)) return {};
  const char* faster =
      "its AVX-512 kernels, on which memsafe's dense steps (gemm, syrk, cholesky; the GP module's) run faster";
  if (coretype && host::ascii_iequal(coretype, core))
    return cat(msg{"memsafe: OPENBLAS_CORETYPE=", coretype, " in the environment makes OpenBLAS (", config, ") run its ",
                   core, " kernels on this CPU, which has AVX-512 (F, CD, BW, DQ, VL): unset it (OpenBLAS then "
                   "chooses for the CPU it recognises), or set OPENBLAS_CORETYPE=SkylakeX for ", faster});
  if (config.find("DYNAMIC_ARCH") == std::string_view::npos)
    return cat(msg{"memsafe: OpenBLAS (", config, ") was built for its ", core,
                   " kernels only, and this CPU has AVX-512 (F, CD, BW, DQ, VL): an OpenBLAS built for it (or with "
                   "DYNAMIC_ARCH) runs ", faster});
  return cat(msg{"memsafe: OpenBLAS (", config, ") runs its ", core,
                 " kernels on this CPU, which has AVX-512 (F, CD, BW, DQ, VL): an OpenBLAS older than the CPU does "
                 "not recognise it. OPENBLAS_CORETYPE=SkylakeX in the environment (set before the program starts) "
                 "selects ", faster});
}
}  // namespace detail

/// A note for the user when OpenBLAS runs kernels narrower than the CPU (an AVX2 set on a CPU with
/// AVX-512): why (OPENBLAS_CORETYPE in the environment, an OpenBLAS older than the CPU, or one built
/// for a single older target) and what selects the AVX-512 kernels. Empty otherwise, and with a BLAS
/// other than OpenBLAS. memsafe never prints it; programs may (the GP examples print it on stderr).
template <class = void>
std::string blas_core_note() {
  return detail::blas_core_note_for(blas_core(), detail::cpu_has_avx512_skx(), std::getenv("OPENBLAS_CORETYPE"),
                                    blas_config());
}

}  // namespace memsafe::linalg
