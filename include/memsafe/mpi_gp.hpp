// memsafe/mpi_gp.hpp — opt-in: the GP module over the ranks of an MPI communicator. mpi::sgpr is
// gp::sgpr (the SGPR bound and its gradient) with each rank holding a shard of the training points,
// one allreduce per pass (docs/design.md, "MPI", "The SGPR bound across ranks"). Needs MPI and
// BLAS/LAPACK: link the CMake targets memsafe::mpi and memsafe::lapack.
//
//   auto r = memsafe::mpi::sgpr(MPI_COMM_WORLD, {X_r, y_r, n_r, d}, {Z, m, d}, h,
//                               {.budget = 64 << 20, .gradient = true});
//   r.bound; r.grad; r.posterior;       // the whole data's, on every rank
//   r.comm.describe();                  // the distribution and the communication volume
#pragma once
#if !defined(MEMSAFE_HAS_LAPACK)
#error "<memsafe/mpi_gp.hpp> needs BLAS/LAPACK and MPI: link the CMake targets memsafe::mpi and memsafe::lapack (which defines MEMSAFE_HAS_LAPACK=1), not only memsafe::mpi"
#else
#include "gp.hpp"
#include "mpi.hpp"
#include "mpi/sgpr.hpp"
#endif
