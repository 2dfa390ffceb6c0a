// One JSON object on one line, like memsafe_examples::json_line, plus arrays of numbers.
//
//   memsafe_bench::json_record j;
//   j.add("bench", "knn").add("n", n).add_array("times_s", times).add_null("budget_bytes");
//   j.print();   // {"bench": "knn", "n": 100000, "times_s": [0.5, 0.49], "budget_bytes": null}
//
// Keys keep insertion order; adding an existing key replaces its value in place. Strings and
// numbers are written by the examples' json_escape / json_number (NaN and infinities -> null).
#pragma once

#include <concepts>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.hpp"

namespace memsafe_bench {

class json_record {
 public:
  json_record& add(std::string_view key, std::string_view v) { return put(key, memsafe_examples::json_escape(v)); }
  json_record& add(std::string_view key, const char* v) { return put(key, memsafe_examples::json_escape(v)); }
  json_record& add(std::string_view key, const std::string& v) { return put(key, memsafe_examples::json_escape(v)); }
  json_record& add(std::string_view key, bool v) { return put(key, v ? "true" : "false"); }
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  json_record& add(std::string_view key, I v) {
    return put(key, std::to_string(v));
  }
  template <std::floating_point F>
  json_record& add(std::string_view key, F v) {
    return put(key, memsafe_examples::json_number(static_cast<double>(v)));
  }
  json_record& add_null(std::string_view key) { return put(key, "null"); }

  /// An array of numbers: [a, b, ...] (non-finite entries as null).
  template <std::floating_point F>
  json_record& add_array(std::string_view key, const std::vector<F>& values) {
    std::string s = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) s += ", ";
      s += memsafe_examples::json_number(static_cast<double>(values[i]));
    }
    s += ']';
    return put(key, std::move(s));
  }

  std::string str() const {
    std::string out = "{";
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (i) out += ", ";
      out += memsafe_examples::json_escape(items_[i].first);
      out += ": ";
      out += items_[i].second;
    }
    out += '}';
    return out;
  }

  /// Writes the object and a newline, then flushes.
  void print(std::FILE* f = stdout) const {
    std::string s = str();
    s += '\n';
    std::fputs(s.c_str(), f);
    std::fflush(f);
  }

 private:
  json_record& put(std::string_view key, std::string value) {
    for (auto& kv : items_)
      if (kv.first == key) {
        kv.second = std::move(value);
        return *this;
      }
    items_.emplace_back(std::string(key), std::move(value));
    return *this;
  }

  std::vector<std::pair<std::string, std::string>> items_;
};

}  // namespace memsafe_bench
