// Builds and prints ONE JSON object on one line, keys in insertion order.
//
//   memsafe_examples::json_line j;
//   j.add("example", "knn").add("n", n).add("seconds", 0.25).add("ok", true);
//   j.print();   // {"example": "knn", "n": 100000, "seconds": 0.25, "ok": true}
//
// Strings are escaped per RFC 8259 and the line is always valid JSON (UTF-8): valid UTF-8
// sequences are kept as they are, and each byte of an invalid one (a stray continuation byte, a
// truncated or overlong sequence, a surrogate, a code point above U+10FFFF, a byte UTF-8 never
// holds: 0xC0, 0xC1, 0xF5–0xFF; e.g. a Latin-1 file name) is written as \u00XX, the byte's value
// read as a Latin-1 character (so no byte is lost, and the line stays one JSON text). Doubles print in
// shortest round-trip form (std::to_chars); NaN and infinities print as null.  Adding an existing
// key replaces its value in place.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memsafe_examples {

/// The length of the valid UTF-8 sequence (RFC 3629: no overlong form, no surrogate, at most
/// U+10FFFF) that starts s[i] (a byte >= 0x80), or 0 when none starts there.
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // not overlong
    if (c == 0xED) hi = 0x9F;  // not a surrogate (U+D800–U+DFFF)
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // not overlong
    if (c == 0xF4) hi = 0x8F;  // not above U+10FFFF
  } else {
    return 0;  // a continuation byte, 0xC0, 0xC1 or 0xF5–0xFF
  }
  if (i + len > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return len;
}

inline std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {
      if (const std::size_t len = utf8_sequence_length(s, i)) {  // valid UTF-8: as it is
        out.append(s.substr(i, len));
        i += len - 1;
      } else {  // not UTF-8: this byte as the Latin-1 character \u00XX (see the file comment)
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "null";
  return std::string(buf, p);
}

class json_line {
 public:
  json_line& add(std::string_view key, std::string_view v) { return put(key, json_escape(v)); }
  json_line& add(std::string_view key, const char* v) { return put(key, json_escape(v)); }
  json_line& add(std::string_view key, const std::string& v) { return put(key, json_escape(v)); }
  json_line& add(std::string_view key, bool v) { return put(key, v ? "true" : "false"); }
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  json_line& add(std::string_view key, I v) {
    return put(key, std::to_string(v));
  }
  template <std::floating_point F>
  json_line& add(std::string_view key, F v) {
    return put(key, json_number(static_cast<double>(v)));
  }
  json_line& add_null(std::string_view key) { return put(key, "null"); }

  /// An array of numbers: [a, b, ...] (integers exactly; non-finite floating entries as null).
  template <class N>
    requires((std::integral<N> && !std::same_as<N, bool>) || std::floating_point<N>)
  json_line& add_array(std::string_view key, const std::vector<N>& values) {
    std::string s = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) s += ", ";
      if constexpr (std::integral<N>)
        s += std::to_string(values[i]);
      else
        s += json_number(static_cast<double>(values[i]));
    }
    s += ']';
    return put(key, std::move(s));
  }

  std::string str() const {
    std::string out = "{";
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (i) out += ", ";
      out += json_escape(items_[i].first);
      out += ": ";
      out += items_[i].second;
    }
    out += '}';
    return out;
  }

  // Writes the object and a newline, then flushes.
  void print(std::FILE* f = stdout) const {
    std::string s = str();
    s += '\n';
    std::fputs(s.c_str(), f);
    std::fflush(f);
  }

 private:
  json_line& put(std::string_view key, std::string value) {
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

// Prints {"error": "<message>"} on stdout.
inline void print_json_error(std::string_view message) { json_line{}.add("error", message).print(); }

}  // namespace memsafe_examples
