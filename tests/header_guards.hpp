// tests/header_guards.hpp — included by a test translation unit right after the library header(s)
// it checks, and before anything else: fails the build, naming the header, where they brought in a
// standard or system header the library chose not to include because it costs much to compile and
// the library uses little of it (docs/design.md, "Compile time"). No include guard: each
// translation unit includes it once.
#if defined(__GLIBCXX__) && !defined(__CUDACC__)
#ifdef _GLIBCXX_ALGORITHM
#error "the header under test includes <algorithm>: include core/algo.hpp instead"
#endif
#ifdef _STL_ALGO_H
#error "the header under test includes <bits/stl_algo.h> (sort, find, clamp, …): core/algo.hpp has what the library needs"
#endif
#ifdef _GLIBCXX_RANGES_ALGO_H
#error "the header under test includes <bits/ranges_algo.h> (the ranges algorithms of <algorithm>)"
#endif
#ifdef _GLIBCXX_CMATH
#error "the header under test includes <cmath>: call core/libm.hpp's functions instead"
#endif
#ifdef _GLIBCXX_CHRONO
#error "the header under test includes <chrono> (with <sstream>, under C++20): time with core/clock.hpp"
#endif
#if defined(_GLIBCXX_IOSTREAM) || defined(_GLIBCXX_OSTREAM) || defined(_GLIBCXX_SSTREAM)
#error "the header under test includes a stream header"
#endif
#ifdef _GLIBCXX_FUNCTIONAL
#error "the header under test includes <functional>"
#endif
#if defined(_GLIBCXX_MAP) || defined(_GLIBCXX_UNORDERED_MAP)
#error "the header under test includes <map> or <unordered_map>"
#endif
#endif

#if !defined(__CUDACC__) && (defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H))
#error "the header under test includes <immintrin.h>: write the kernels with vector types and builtins (backend/host/simd.hpp)"
#endif
