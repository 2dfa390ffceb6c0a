// A device array for the GPU tests: cudaMalloc'd, optionally filled from a host vector, copied back
// by host(), freed on scope exit.
#pragma once
#include <memsafe/cuda.cuh>

#include <algorithm>
#include <cstddef>
#include <vector>

template <class T>
struct dvec {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dvec(const std::vector<T>& h) : n(h.size()) {
    MEMSAFE_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)));
    if (n) MEMSAFE_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit dvec(std::size_t count) : n(count) { MEMSAFE_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T))); }
  dvec(const dvec&) = delete;
  dvec& operator=(const dvec&) = delete;
  ~dvec() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    if (n) MEMSAFE_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};
