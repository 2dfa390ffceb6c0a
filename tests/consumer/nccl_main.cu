// The installed memsafe::nccl as a consumer uses it: <memsafe/mpi_nccl.cuh> and NCCL's own header
// and library found through the package (find_package(memsafe COMPONENTS nccl)). The consumer test
// builds it and does not run it: NCCL's communicators need GPUs.
#include <memsafe/mpi_nccl.cuh>

#include <cstdio>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
  const memsafe::mpi::shard_reduced_t layout = memsafe::mpi::shard_reduced;
  (void)layout;
  std::printf("NCCL %d\n", version);
  return 0;
}
