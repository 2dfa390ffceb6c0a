// memsafe/mpi_nccl.cuh — opt-in: distributed evaluation whose results stay in device memory, merged
// between the ranks' GPUs by NCCL (memsafe::mpi::nccl_comm, memsafe::mpi::eval_into; see
// memsafe/mpi/nccl.cuh). nvcc; target memsafe::nccl (memsafe::cuda + memsafe::mpi + NCCL).
#pragma once
#include "mpi.cuh"
#include "mpi/nccl.cuh"
