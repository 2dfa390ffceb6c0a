// memsafe/mpi.cuh — opt-in: distributed evaluation over MPI ranks (memsafe/mpi.hpp) with the
// shards evaluated on the ranks' GPUs (pass memsafe::cuda::options). nvcc; targets memsafe::mpi and
// memsafe::cuda.
#pragma once
#include "cuda.cuh"
#include "mpi.hpp"
#include "mpi/cuda.cuh"
