// memsafe/core/algo.hpp — the standard algorithms the headers call, without all of <algorithm>.
//
// Under C++20 libstdc++'s <algorithm> adds the ranges algorithms (<bits/ranges_algo.h>) and the
// parallel algorithms' declarations to the classic ones: ≈ 260 M compiler instructions on top of
// the standard headers the library includes anyway. Of the classic ones the library calls std::min,
// max, fill, copy, swap (<bits/stl_algobase.h>, which every container header includes) and the
// heap operations (<bits/stl_heap.h>, ≈ 6 M); <bits/stl_algo.h> (find, sort, nth_element, clamp,
// reverse, max_element, …: ≈ 84 M) it does without — `contains`, `clamp`, `reverse_range`,
// `max_element`, `select_nth`, `sort_range` and `sort_best` below stand for the few calls it had
// (docs/design.md, "Compile time"). So with libstdc++ those two of its headers are included, the
// same declarations <algorithm> itself includes; with another standard library,
// or under nvcc, <algorithm>. A translation unit that includes <algorithm> itself pays for it there.
#pragma once
#include <cstddef>  // defines __GLIBCXX__ where the standard library is libstdc++
#if defined(__GLIBCXX__) && !defined(__CUDACC__) && __has_include(<bits/stl_algobase.h>) && \
    __has_include(<bits/stl_heap.h>)
#include <bits/stl_algobase.h>
#include <bits/stl_heap.h>
#else
#include <algorithm>
#endif

namespace memsafe::detail {

/// Whether `v` is an element of `c` (what `std::find(c.begin(), c.end(), v) != c.end()` says).
template <class C, class V>
bool contains(const C& c, const V& v) {
  for (const auto& e : c)
    if (e == v) return true;
  return false;
}

/// `v` held to [lo, hi], lo ≤ hi (what std::clamp gives).
template <class T>
constexpr const T& clamp(const T& v, const T& lo, const T& hi) {
  return v < lo ? lo : hi < v ? hi : v;
}

/// [first, last) in reverse order (what std::reverse does).
template <class It>
void reverse_range(It first, It last) {
  while (first != last && first != --last) {
    std::swap(*first, *last);
    ++first;
  }
}

/// The first largest element of [first, last), or last when it is empty (what std::max_element gives).
template <class It>
It max_element(It first, It last) {
  It best = first;
  if (first != last)
    while (++first != last)
      if (*best < *first) best = first;
  return best;
}

/// One quicksort partition of [lo, hi), hi − lo ≥ 3, in the strict weak order `before`: the median
/// of lo[1], the middle and hi[−1] becomes the pivot at *lo (so that lo[1..) holds an element not
/// after it and one not before it, which bound the two scans); returns `cut`, with [lo, cut) not
/// after the pivot and [cut, hi) not before it, lo < cut < hi.
template <class T, class Before>
T* partition_at_median(T* lo, T* hi, Before& before) {
  T* a = lo + 1;
  T* b = lo + (hi - lo) / 2;
  T* c = hi - 1;
  if (before(*b, *a)) std::swap(a, b);
  if (before(*c, *b)) b = before(*c, *a) ? a : c;
  std::swap(*lo, *b);
  T* l = lo + 1;
  T* r = hi;
  for (;;) {
    while (before(*l, *lo)) ++l;
    --r;
    while (before(*lo, *r)) --r;
    if (!(l < r)) return l;
    std::swap(*l, *r);
    ++l;
  }
}

/// Insertion sort of [lo, hi): what the two routines below finish short ranges with.
template <class T, class Before>
void insertion_sort(T* lo, T* hi, Before& before) {
  for (T* i = lo + 1; i < hi; ++i)
    for (T* j = i; j > lo && before(*j, j[-1]); --j) std::swap(*j, j[-1]);
}

/// 2·⌊log₂ n⌋: the partitions allowed before the two routines below fall back to a heap.
inline int partition_depth(std::size_t n) {
  int depth = 0;
  for (; n > 1; n >>= 1) depth += 2;
  return depth;
}

/// Reorders [first, first + n), n > k, so that first[k] is the element the strict weak order
/// `before` puts at position k, every element of [first, first + k) not after it and every element
/// after it not before it (std::nth_element's guarantee): quickselect, falling back to a heap
/// selection after 2·log₂ n partitions (O(n) on average, O(n log n) at worst); `depth`, when not
/// negative, is that limit instead (the tests' way to the heap selection).
template <class T, class Before>
void select_nth(T* first, std::size_t n, std::size_t k, Before before, int depth = -1) {
  if (depth < 0) depth = partition_depth(n);
  T* lo = first;
  T* hi = first + n;  // first[k] lies in [lo, hi)
  T* const nth = first + k;
  while (hi - lo > 8) {
    if (depth-- == 0) {  // the nth − lo + 1 best of [lo, hi) in a heap whose top is the worst of them
      std::make_heap(lo, nth + 1, before);
      for (T* i = nth + 1; i < hi; ++i)
        if (before(*i, *lo)) {
          std::pop_heap(lo, nth + 1, before);
          std::swap(*nth, *i);
          std::push_heap(lo, nth + 1, before);
        }
      std::swap(*lo, *nth);
      return;
    }
    T* cut = partition_at_median(lo, hi, before);
    if (cut <= nth) lo = cut;
    else hi = cut;
  }
  insertion_sort(lo, hi, before);
}

/// Sorts [first, first + n) in the strict weak order `before`: quicksort on the larger side's
/// loop and the smaller side's recursion, insertion sort below 16 elements, heap sort after
/// 2·log₂ n partitions (O(n log n) at worst) or `depth` when that is not negative.
template <class T, class Before>
void sort_range(T* first, std::size_t n, Before before, int depth = -1) {
  if (depth < 0) depth = partition_depth(n);
  T* lo = first;
  T* hi = first + n;
  while (hi - lo > 16) {
    if (depth-- == 0) {
      std::make_heap(lo, hi, before);
      std::sort_heap(lo, hi, before);
      return;
    }
    T* cut = partition_at_median(lo, hi, before);
    if (cut - lo < hi - cut) {
      sort_range(lo, static_cast<std::size_t>(cut - lo), before, depth);
      lo = cut;
    } else {
      sort_range(cut, static_cast<std::size_t>(hi - cut), before, depth);
      hi = cut;
    }
  }
  insertion_sort(lo, hi, before);
}

/// Moves the min(keep, n) best elements of [first, first + n) in the strict weak order `before` to
/// the front, sorted best first, and returns that count; the rest of the range is left in an
/// unspecified order. With a total order (no two elements equivalent) the result is the one
/// std::nth_element + std::sort gives.
template <class T, class Before>
std::size_t sort_best(T* first, std::size_t n, std::size_t keep, Before before) {
  if (keep < n) select_nth(first, n, keep, before);
  else keep = n;
  sort_range(first, keep, before);
  return keep;
}

}  // namespace memsafe::detail
