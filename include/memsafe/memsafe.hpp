// memsafe/memsafe.hpp — the one header to include.
//
//   capture (expr/) → rewrite (rewrite/) → plan (plan/) → execute (exec/, backend/host/)
#pragma once

#include "core/accounting.hpp"
#include "core/budget.hpp"
#include "core/config.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "core/math.hpp"
#include "exec/eval.hpp"
#include "expr/batched.hpp"
#include "expr/chain.hpp"
#include "expr/diag.hpp"
#include "expr/tensor.hpp"
#include "expr/formulas.hpp"
#include "expr/lazy.hpp"
#include "expr/reductions.hpp"
#include "expr/view.hpp"
#include "plan/plan.hpp"
#include "rewrite/normalize.hpp"

// Dense linear algebra on views (Cholesky, triangular solves, GEMM) through BLAS/LAPACK: only with
// the CMake target memsafe::lapack, which defines MEMSAFE_HAS_LAPACK.
#if defined(MEMSAFE_HAS_LAPACK)
#include "linalg/dense.hpp"
#endif

// The CUDA backend (memsafe::cuda::eval): only in translation units compiled by nvcc, with the
// CMake target memsafe::cuda (cudart, cuBLAS, CCCL).
#if defined(__CUDACC__)
#include "backend/cuda/eval.cuh"
#endif
