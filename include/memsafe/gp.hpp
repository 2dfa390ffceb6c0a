// memsafe/gp.hpp — the opt-in entry header of the GP module: the SGPR (Titsias) collapsed bound, its
// gradient with respect to every hyperparameter and the inducing points, and predictions, with the
// n-sized work in budgeted chunks and the m×m work through LAPACK (docs/design.md, "The GP module").
// Needs BLAS/LAPACK: link the CMake target memsafe::lapack (which defines MEMSAFE_HAS_LAPACK).
//
//   memsafe::gp::hyperparameters h{memsafe::gp::kernel::matern32, 1.0, std::vector<double>(d, 1.0), 0.1};
//   auto r = memsafe::gp::sgpr({X, y, n, d}, {Z, m, d}, h, {.budget = 64 << 20, .gradient = true});
//   r.bound; r.grad.variance; r.grad.lengthscales; r.grad.noise; r.grad.Z;
//   memsafe::gp::predict(r.posterior, Xs, ns, mean, var, 64 << 20);
#pragma once
#if !defined(MEMSAFE_HAS_LAPACK)
#error "<memsafe/gp.hpp> needs BLAS/LAPACK: link the CMake target memsafe::lapack (which defines MEMSAFE_HAS_LAPACK=1 and links LAPACK), not only memsafe::memsafe"
#else
#include "linalg.hpp"
#include "gp/kernels.hpp"
#include "gp/sgpr.hpp"
#endif
