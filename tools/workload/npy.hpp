// Minimal .npy (NumPy format 1.0 - 3.0) reading and writing: little-endian float16/32/64 and
// int32, C order.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "memattn/status.hpp"

namespace memattn::tools {

struct NpyArray {
  std::string descr;  // "<f4", "<f2", "<f8", "<i4"
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> data;  // C order

  std::int64_t numel() const;
  std::size_t item_size() const;
  // Element e as double (float16/32/64 or int32).
  double get(std::int64_t e) const;
};

Status read_npy(const std::string& path, NpyArray* array);
Status write_npy(const std::string& path, const NpyArray& array);
// The same on a seekable stream (a file, or bytes in memory as the fuzz target gives them);
// `name` stands for the path in messages.
Status read_npy(std::istream& in, const std::string& name, NpyArray* array);
Status write_npy(std::ostream& out, const std::string& name, const NpyArray& array);

// A float32 array of the given shape.
NpyArray make_npy_f32(const std::vector<std::int64_t>& shape, const std::vector<float>& values);

}  // namespace memattn::tools
