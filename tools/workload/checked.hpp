// Checked size arithmetic for the tools (the CLI's problem builder, the .npy loader): every size
// that decides an allocation is computed with these, so an overflow is an error, never a wrap.
#pragma once

#include <cstdint>

namespace memattn::tools {

// a * b and a + b of non-negative sizes; false (and *out untouched) when an operand is negative or
// the result does not fit in int64.
inline bool checked_mul(std::int64_t a, std::int64_t b, std::int64_t* out) {
  std::int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}
inline bool checked_add(std::int64_t a, std::int64_t b, std::int64_t* out) {
  std::int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

}  // namespace memattn::tools
