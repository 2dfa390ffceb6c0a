// memsafe/memsafe.hpp — the core: everything that needs only a C++20 compiler (target
// memsafe::memsafe), the same header in every translation unit.
//
//   capture (expr/) → rewrite (rewrite/) → lower (lower/) → plan (plan/) → execute (backend/host/,
//   backend/cuda/ through <memsafe/cuda.cuh>) — the entry points eval, plan_for, explain in api/
//
// Opt-in entry headers add the parts that need more, each including this one:
//   <memsafe/linalg.hpp>  memsafe::linalg, dense linear algebra through BLAS/LAPACK (memsafe::lapack);
//   <memsafe/cuda.cuh>    memsafe::cuda, the CUDA backend, in files nvcc compiles (memsafe::cuda).
#pragma once

#include "core/accounting.hpp"
#include "core/budget.hpp"
#include "core/config.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "core/math.hpp"
#include "api/eval.hpp"
#include "expr/batched.hpp"
#include "expr/chain.hpp"
#include "expr/diag.hpp"
#include "expr/tensor.hpp"
#include "expr/formulas.hpp"
#include "expr/lazy.hpp"
#include "expr/reductions.hpp"
#include "expr/view.hpp"
#include "lower/job.hpp"
#include "plan/options.hpp"
#include "plan/plan.hpp"
#include "rewrite/chain.hpp"
#include "rewrite/normalize.hpp"

