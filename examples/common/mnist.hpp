// MNIST loader: gzip-compressed IDX files read with zlib (link with -lz).
//
//   auto dir = memsafe_examples::default_mnist_dir();          // or --data-dir
//   auto train = memsafe_examples::load_mnist_images<float>(
//       memsafe_examples::mnist_file(dir, memsafe_examples::mnist_train_images));
//   // train.pixels: train.n x train.dim() row-major, pixel / 255 in [0, 1]
//
// IDX format: big-endian uint32 magic (2051 = images), then one
// big-endian uint32 per dimension, then the unsigned bytes.  Every problem
// (missing file, bad magic, truncated or corrupt data, trailing bytes) throws
// std::runtime_error naming the file; a missing file also suggests --data-dir.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "data.hpp"

namespace memsafe_examples {

inline constexpr const char* mnist_train_images = "train-images-idx3-ubyte.gz";
inline constexpr const char* mnist_test_images = "t10k-images-idx3-ubyte.gz";

inline constexpr std::uint32_t idx_images_magic = 2051;  // 0x00000803: ubyte, 3 dims

/// The MNIST folder under the shared data folder (see default_data_subdir).
inline std::string default_mnist_dir() { return default_data_subdir("mnist"); }

inline std::string mnist_file(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

namespace detail {

struct gz_closer {
  void operator()(gzFile f) const noexcept {
    if (f != nullptr) gzclose(f);
  }
};
using gz_ptr = std::unique_ptr<std::remove_pointer_t<gzFile>, gz_closer>;

[[noreturn]] inline void idx_fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("MNIST file " + path + ": " + what);
}

inline gz_ptr idx_open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::runtime_error("MNIST file not found: " + path +
                             " (pass --data-dir DIR pointing at the folder holding the IDX .gz files,"
                             " or set MEMSAFE_DATA_DIR to the folder containing mnist/)");
  gz_ptr f(gzopen(path.c_str(), "rb"));
  if (!f) idx_fail(path, "cannot open");
  gzbuffer(f.get(), 1u << 17);
  return f;
}

// Reads exactly `len` bytes; returns the number read (short only at end of file).
inline std::size_t idx_read(gzFile f, const std::string& path, void* buf, std::size_t len) {
  auto* p = static_cast<unsigned char*>(buf);
  std::size_t done = 0;
  while (done < len) {
    unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(len - done, 1u << 30));
    int got = gzread(f, p + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      idx_fail(path, std::string("corrupt gzip data (") + (msg ? msg : "unknown zlib error") + ")");
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

inline std::uint32_t idx_u32(gzFile f, const std::string& path, const char* field) {
  std::array<unsigned char, 4> b{};
  if (idx_read(f, path, b.data(), 4) != 4) idx_fail(path, std::string("truncated header (") + field + ")");
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         std::uint32_t{b[3]};
}

inline void idx_magic(gzFile f, const std::string& path, std::uint32_t expected, const char* kind) {
  std::uint32_t magic = idx_u32(f, path, "magic");
  if (magic != expected)
    idx_fail(path, "bad magic " + std::to_string(magic) + ", expected " + std::to_string(expected) + " (" +
                       kind + "); is this an IDX file?");
}

// Reads `total` bytes in chunks of at most 1 MiB and hands each to sink(bytes, count); returns the
// bytes read, fewer than `total` only where the file ends first. The caller's storage grows with what
// the file holds: a header that promises more than is there (4·10⁹ images in a file of a few bytes)
// ends as a "truncated" error, not as an allocation of what it promised.
template <class Sink>
std::size_t idx_read_chunks(gzFile f, const std::string& path, std::size_t total, Sink&& sink) {
  std::vector<unsigned char> buf(std::min<std::size_t>(total, std::size_t{1} << 20));
  std::size_t done = 0;
  while (done < total) {
    const std::size_t want = std::min(buf.size(), total - done);
    const std::size_t got = idx_read(f, path, buf.data(), want);
    sink(static_cast<const unsigned char*>(buf.data()), got);
    done += got;
    if (got < want) break;
  }
  return done;
}

inline void idx_expect_end(gzFile f, const std::string& path) {
  unsigned char extra = 0;
  if (idx_read(f, path, &extra, 1) != 0) idx_fail(path, "unexpected trailing data after the last item");
}

}  // namespace detail

template <class T>
struct mnist_images {
  std::vector<T> pixels;  // n x (rows*cols), row-major, values in [0, 1]
  std::size_t n = 0;      // images loaded (<= count in the file)
  std::size_t rows = 0, cols = 0;
  std::size_t count_in_file = 0;
  std::size_t dim() const { return rows * cols; }
};

// Loads the first min(limit, count) images, pixel / 255 as T (float or double).
template <class T>
mnist_images<T> load_mnist_images(const std::string& path,
                                  std::size_t limit = std::numeric_limits<std::size_t>::max()) {
  static_assert(std::is_floating_point_v<T>);
  auto f = detail::idx_open(path);
  detail::idx_magic(f.get(), path, idx_images_magic, "images");
  std::uint32_t count = detail::idx_u32(f.get(), path, "image count");
  std::uint32_t rows = detail::idx_u32(f.get(), path, "rows");
  std::uint32_t cols = detail::idx_u32(f.get(), path, "cols");
  if (rows == 0 || cols == 0 || rows > 4096 || cols > 4096)
    detail::idx_fail(path, "implausible image size " + std::to_string(rows) + "x" + std::to_string(cols));

  mnist_images<T> out;
  out.count_in_file = count;
  out.n = std::min<std::size_t>(count, limit);
  out.rows = rows;
  out.cols = cols;
  const std::size_t total = out.n * out.dim();

  // Converted chunk by chunk, so the raw bytes are never held all at once.
  try {
    out.pixels.reserve(total);  // address space only: no page is touched until the pixels arrive
  } catch (const std::exception&) {
    // more than the system will reserve: grown as read (the file is then surely truncated)
  }
  const std::size_t done = detail::idx_read_chunks(f.get(), path, total, [&](const unsigned char* b, std::size_t got) {
    const std::size_t at = out.pixels.size();
    out.pixels.resize(at + got);
    for (std::size_t i = 0; i < got; ++i) out.pixels[at + i] = static_cast<T>(b[i]) / T(255);
  });
  if (done < total)
    detail::idx_fail(path, "truncated: header promises " + std::to_string(count) + " images of " +
                               std::to_string(rows) + "x" + std::to_string(cols) + " but only " +
                               std::to_string(done) + " of the first " + std::to_string(total) +
                               " pixel bytes are present");
  if (out.n == count) detail::idx_expect_end(f.get(), path);
  return out;
}

}  // namespace memsafe_examples
