// memsafe/core/maybe.hpp — a value or none, for the library's own small internal results (a parsed
// environment variable, a planned choice, a tile's scale). std::optional's class template costs
// ≈ 14 M compiler instructions (g++ 12) for each type it is instantiated with, in every translation
// unit that includes the declarations using it — ≈ 65 M for the five types the main header had
// (docs/design.md, "Compile time"). The public options keep std::optional<std::size_t>.
#pragma once

namespace memsafe::detail {

/// A T, or none: T default-constructible and copyable (the library's enums, integers, bool).
template <class T>
struct maybe {
  constexpr maybe() = default;
  constexpr maybe(T v) : value_(v), ok_(true) {}
  constexpr explicit operator bool() const { return ok_; }
  constexpr bool has_value() const { return ok_; }
  constexpr const T& operator*() const { return value_; }
  constexpr T value_or(T fallback) const { return ok_ ? value_ : fallback; }
  constexpr void reset() { *this = maybe(); }
  friend constexpr bool operator==(const maybe& a, const maybe& b) {
    return a.ok_ == b.ok_ && (!a.ok_ || a.value_ == b.value_);
  }
  friend constexpr bool operator==(const maybe& a, const T& b) { return a.ok_ && a.value_ == b; }

 private:
  T value_{};
  bool ok_ = false;
};

}  // namespace memsafe::detail
