#include "workload/npy.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/numeric.hpp"
#include "workload/checked.hpp"

namespace memattn::tools {
namespace {

Status fail(const std::string& path, const std::string& why) {
  return {StatusCode::invalid_argument, path + ": " + why};
}

// Value of `key` in the header dict, e.g. 'descr': '<f4' -> <f4.
bool dict_value(const std::string& header, const std::string& key, std::string* value) {
  const std::size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return false;
  std::size_t p = header.find(':', k);
  if (p == std::string::npos) return false;
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p >= header.size()) return false;
  std::size_t end;
  if (header[p] == '\'') {
    end = header.find('\'', p + 1);
    if (end == std::string::npos) return false;
    *value = header.substr(p + 1, end - p - 1);
  } else if (header[p] == '(') {
    end = header.find(')', p);
    if (end == std::string::npos) return false;
    *value = header.substr(p + 1, end - p - 1);
  } else {
    end = header.find_first_of(",}", p);
    *value = header.substr(p, end - p);
  }
  return true;
}

}  // namespace

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

std::size_t NpyArray::item_size() const {
  if (descr == "<f2") return 2;
  if (descr == "<f8") return 8;
  return 4;
}

double NpyArray::get(std::int64_t e) const {
  const unsigned char* p = data.data() + std::size_t(e) * item_size();
  if (descr == "<f4") {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (descr == "<f8") {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (descr == "<f2") {
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    return detail::half_to_float(v);
  }
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Status read_npy(const std::string& path, NpyArray* array) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(path, "cannot open");
  return read_npy(in, path, array);
}

Status read_npy(std::istream& in, const std::string& path, NpyArray* array) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return fail(path, "not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t header_len = 0;
  if (major == 1) {
    unsigned char len[2];
    if (!in.read(reinterpret_cast<char*>(len), 2)) return fail(path, "truncated header");
    header_len = len[0] | (std::uint32_t(len[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char len[4];
    if (!in.read(reinterpret_cast<char*>(len), 4)) return fail(path, "truncated header");
    header_len = len[0] | (std::uint32_t(len[1]) << 8) | (std::uint32_t(len[2]) << 16) | (std::uint32_t(len[3]) << 24);
  } else {
    return fail(path, "unsupported .npy version " + std::to_string(major));
  }
  if (header_len > (1u << 20)) return fail(path, "header too large");
  std::string header(header_len, '\0');
  if (!in.read(&header[0], header_len)) return fail(path, "truncated header");
  std::string descr, order, shape;
  if (!dict_value(header, "descr", &descr) || !dict_value(header, "fortran_order", &order) ||
      !dict_value(header, "shape", &shape))
    return fail(path, "malformed header");
  if (descr != "<f4" && descr != "<f2" && descr != "<f8" && descr != "<i4")
    return fail(path, "dtype '" + descr + "' is not supported (float16, float32, float64 or int32)");
  if (order.find("True") != std::string::npos) return fail(path, "Fortran order is not supported (use C order)");
  array->descr = descr;
  array->shape.clear();
  std::stringstream ss(shape);
  std::string item;
  // Decimal dimensions separated by commas, as numpy writes them: "()", "(4,)", "(2, 3)" (an
  // old "3L" too). Anything else in the tuple is refused rather than half read ("2x" as 2).
  std::vector<std::string> items;
  while (std::getline(ss, item, ',')) items.push_back(item);
  for (std::size_t n = 0; n < items.size(); ++n) {
    std::string text = items[n];
    text.erase(0, std::min(text.find_first_not_of(' '), text.size()));
    text.erase(std::min(text.find_last_not_of(' ') + 1, text.size()));
    if (!text.empty() && text.back() == 'L') text.pop_back();
    if (text.empty() && n + 1 == items.size() && n > 0) break;  // the comma of "(4,)"
    long long v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || text[0] == '-' || r.ec != std::errc() || r.ptr != text.data() + text.size())
      return fail(path, "bad shape '(" + shape + ")': dimension " + std::to_string(n) + " is '" + items[n] +
                            "', not a non-negative integer");
    array->shape.push_back(v);
  }
  // The header's shape against the bytes the file holds, before anything is allocated: a header
  // may claim any size.
  std::string shape_text = "(";
  std::int64_t bytes = std::int64_t(array->item_size());
  bool overflow = false;
  for (std::size_t d = 0; d < array->shape.size(); ++d) {
    shape_text += (d ? ", " : "") + std::to_string(array->shape[d]);
    overflow = overflow || !checked_mul(bytes, array->shape[d], &bytes);
  }
  shape_text += ")";
  const std::streamoff data_start = in.tellg();
  in.seekg(0, std::ios::end);
  const std::int64_t held = std::int64_t(in.tellg() - data_start);
  in.seekg(data_start);
  const std::string needs = "its header's shape " + shape_text + " of " + descr + " needs " +
                            (overflow ? "more than 2^63" : std::to_string(bytes)) + " bytes of data";
  if (overflow || bytes > held)
    return fail(path, "file is shorter than its shape says: " + needs + ", the file holds " + std::to_string(held));
  if (bytes < held)
    return fail(path, "trailing bytes: " + needs + ", the file holds " + std::to_string(held) + " (" +
                          std::to_string(held - bytes) + " bytes after the data)");
  array->data.resize(std::size_t(bytes));
  if (bytes && !in.read(reinterpret_cast<char*>(array->data.data()), bytes))
    return fail(path, "file is shorter than its shape says");
  return Status::Ok();
}

Status write_npy(const std::string& path, const NpyArray& array) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return fail(path, "cannot create");
  return write_npy(out, path, array);
}

Status write_npy(std::ostream& out, const std::string& path, const NpyArray& array) {
  std::ostringstream h;
  h << "{'descr': '" << array.descr << "', 'fortran_order': False, 'shape': (";
  for (std::size_t d = 0; d < array.shape.size(); ++d) h << array.shape[d] << (array.shape.size() == 1 || d + 1 < array.shape.size() ? "," : "");
  h << "), }";
  std::string header = h.str();
  // Format 1.0 stores the header's length in 2 bytes; a longer header (thousands of dimensions)
  // takes format 2.0's 4 bytes, as numpy does.
  const bool v2 = header.size() + 1 + 64 > 0xffff;
  const std::size_t prefix_len = v2 ? 12 : 10;
  // Pad with spaces so that magic (6) + version (2) + length + header + '\n' is a multiple of 64.
  const std::size_t total = prefix_len + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  unsigned char prefix[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(v2 ? 2 : 1), 0};
  for (std::size_t b = 0; b + 8 < prefix_len; ++b) prefix[8 + b] = static_cast<unsigned char>(header.size() >> (8 * b));
  out.write(reinterpret_cast<const char*>(prefix), std::streamsize(prefix_len));
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(array.data.data()), std::streamsize(array.data.size()));
  if (!out) return fail(path, "write failed");
  return Status::Ok();
}

NpyArray make_npy_f32(const std::vector<std::int64_t>& shape, const std::vector<float>& values) {
  NpyArray a;
  a.descr = "<f4";
  a.shape = shape;
  a.data.resize(values.size() * 4);
  std::memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

}  // namespace memattn::tools
