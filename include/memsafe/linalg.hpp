// memsafe/linalg.hpp — the opt-in entry header of dense linear algebra: the core (memsafe.hpp) plus
// memsafe::linalg (cholesky, solve_lower, logdet_from_cholesky, gemm, syrk on views; BLAS thread
// control; blas_core and blas_core_note: which OpenBLAS kernels run) through BLAS/LAPACK. Link the
// CMake target memsafe::lapack, which defines MEMSAFE_HAS_LAPACK.
#pragma once
#if !defined(MEMSAFE_HAS_LAPACK)
#error "<memsafe/linalg.hpp> needs BLAS/LAPACK: link the CMake target memsafe::lapack (which defines MEMSAFE_HAS_LAPACK=1 and links LAPACK), not only memsafe::memsafe"
#else
#include "memsafe.hpp"
#include "linalg/dense.hpp"
#include "linalg/blas_core.hpp"
#endif
