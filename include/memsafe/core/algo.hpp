// memsafe/core/algo.hpp — the standard algorithms the headers call, without all of <algorithm>.
//
// Under C++20 libstdc++'s <algorithm> adds the ranges algorithms (<bits/ranges_algo.h>) and the
// parallel algorithms' declarations to the classic ones: ≈ 260 M compiler instructions on top of
// the standard headers the library includes anyway, of which the classic ones the library calls —
// std::min, max, fill, copy (<bits/stl_algobase.h>, which every container header includes) and
// std::find, sort, nth_element, push_heap, sort_heap (<bits/stl_algo.h>) — are ≈ 90 M
// (docs/design.md, "Compile time"). So with libstdc++ those two of its headers are included, the
// same declarations <algorithm> itself includes; with another standard library, or under nvcc,
// <algorithm>. A translation unit that includes <algorithm> itself pays for it there.
#pragma once
#include <cstddef>  // defines __GLIBCXX__ where the standard library is libstdc++
#if defined(__GLIBCXX__) && !defined(__CUDACC__) && __has_include(<bits/stl_algobase.h>) && \
    __has_include(<bits/stl_algo.h>)
#include <bits/stl_algobase.h>
#include <bits/stl_algo.h>
#else
#include <algorithm>
#endif
