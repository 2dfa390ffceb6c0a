// memsafe/cuda.cuh — the opt-in entry header of the CUDA backend: the core (memsafe.hpp) plus
// memsafe::cuda (eval, eval_into, plan_for, device_resources). Compile with nvcc (target memsafe::cuda).
#pragma once
#if !defined(__CUDACC__)
#error "<memsafe/cuda.cuh> is the CUDA backend and must be compiled by nvcc (CMake: link memsafe::cuda and compile the file as CUDA); host-only code includes <memsafe/memsafe.hpp>"
#else
#include "memsafe.hpp"
#include "backend/cuda/eval.cuh"
#endif
