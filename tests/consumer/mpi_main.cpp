// A downstream program linking memsafe::mpi (found as a package component or from the subproject):
// the k nearest over a database sharded across the ranks (run here as one process, MPI's
// singleton mode) equal the plain evaluation.
#include <memsafe/mpi.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::vector<double> x = {0, 0, 1, 1, 2, 2}, y = {0, 1, 1, 0, 2, 1, 3, 3};
  const auto X = memsafe::points(x.data(), 3, 2), Y = memsafe::points(y.data(), 4, 2);
  const auto e = memsafe::argkmin(memsafe::sqdist(X, Y), 2);
  const auto r = memsafe::mpi::eval(e, MPI_COMM_WORLD, memsafe::mpi::shard_reduced, memsafe::options{1 << 20, 1});
  const auto want = memsafe::eval(e, memsafe::options{1 << 20, 1});
  const bool ok = r.indices == want.indices && r.comm.ranks >= 1;
  std::printf("memsafe consumer (mpi): %s\n", ok ? "distributed k nearest equal the plain evaluation" : "FAILED");
  MPI_Finalize();
  return ok ? 0 : 1;
}
