// memsafe/backend/host/tile_isa.hpp — the tile path's micro-kernel for AVX2 in a default-flags build.
//
// The tile path (tile.hpp) serves every expression the fused kernels do not: cosine and combined
// leaves in sums, more right-hand columns than a fused sum takes, the gradients' kernel tiles, dense
// materialisation, generic reductions. Its micro-kernel (tile_kernel.inc) is plain C++ that the
// compiler vectorises for the translation unit's target — in a build without -march (what a
// consumer gets) that is SSE2, 4 floats a register and no FMA. Where that target lacks AVX2, this
// header compiles the same kernel a second time in host::avx2_tile under `target("avx2,fma")`
// (GCC pragma / Clang attribute, as simd.hpp does for the fused kernels), and tile_rows_for picks it
// at run time when the instruction set chosen for the host kernels (choose_isa) is AVX2 or AVX-512.
// MEMSAFE_ISA=portable and MEMSAFE_KERNELS=reference keep the translation unit's own kernel, so the
// reference path stays the portable one. Where the target already has AVX2 (-march=native on such a
// CPU) nothing is compiled twice.
//
// The values are the formula's, rounded as the translation unit's own kernel rounds them: the region
// turns contraction of a·b + c into FMA off (GCC's GNU modes and Clang contract by default; madd,
// kernels.hpp, is a·b + c in a target without FMA). Where it was on, a tile entry differed from the
// SSE2 build's in the last bit, and so did a selection the tile loop serves below the fused
// kernels' smallest plan: its values, and indices on near ties, then depended on the budget
// (tests/consumer checks both budgets, built as a consumer builds it). The fused selections never
// go through this kernel (their exact re-evaluation is select.hpp's, compiled for the translation
// unit's target).
#pragma once
#include <cstddef>

#include "isa.hpp"
#include "kernels.hpp"

#if defined(MEMSAFE_SIMD_DISPATCH) && !defined(__AVX2__)
#define MEMSAFE_TILE_AVX2 1

#include "avx2_begin.inc"
// No contraction of a·b + c into one FMA here, whatever the translation unit's mode (GNU modes and
// Clang contract by default): the copy rounds as the translation unit's own kernel does.
#if defined(__clang__)
#pragma float_control(push)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")  // undone by avx2_end.inc's pop_options
#endif
namespace memsafe::host::avx2_tile {
#include "tile_kernel.inc"
}  // namespace memsafe::host::avx2_tile
#if defined(__clang__)
#pragma float_control(pop)
#endif
#include "avx2_end.inc"

#endif

namespace memsafe::host {

/// One tile kernel: some query rows of a formula over T against the packed panels (pairwise_rows
/// for a formula F and a row count R; the pointer's type depends on T alone).
template <class T>
using tile_rows_fn = void (*)(const T*, const T*, const T*, const T*, std::size_t, std::size_t, T*, std::size_t,
                              const formula_params<T>&);

/// Whether the tile kernels run the AVX2 copy (this translation unit's target lacks AVX2, and AVX2
/// or AVX-512 is the instruction set chosen for the host kernels on this CPU). A MEMSAFE_ISA that
/// choose_isa rejects is the fused kernels' error to report; the tile path then keeps its own kernel.
inline bool tile_avx2() {
#if defined(MEMSAFE_TILE_AVX2)
  try {
    const isa i = choose_isa(isa_compiled);
    return i == isa::avx2 || i == isa::avx512;
  } catch (const argument_error&) {
    return false;
  }
#else
  return false;
#endif
}

/// The tile kernel for R rows of F over T: the AVX2 copy when `avx2` (tile_avx2()), else the
/// translation unit's own.
template <class F, int R, class T>
tile_rows_fn<T> tile_rows_for([[maybe_unused]] bool avx2) {
#if defined(MEMSAFE_TILE_AVX2)
  if (avx2) return &avx2_tile::pairwise_rows<F, R, T>;
#endif
  return &pairwise_rows<F, R, T>;
}

}  // namespace memsafe::host
