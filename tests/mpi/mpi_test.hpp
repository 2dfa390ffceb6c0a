// tests/mpi/mpi_test.hpp — what the MPI test programs share: this rank and the number of ranks, and
// a doctest main that initialises MPI and fails on every rank when any rank fails.
#pragma once
#include <doctest/doctest.h>
#include <mpi.h>

namespace mpi_test {

inline int ranks() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}
inline int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// doctest under MPI: every rank runs every case (the collective calls stay in step); the exit
/// status is the worst over the ranks.
inline int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

}  // namespace mpi_test
