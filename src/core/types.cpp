// Small public helpers: names of enums, tensor views, Status text, the dropout mapping.
#include <cmath>

#include "core/philox.hpp"
#include "memattn/dropout.hpp"
#include "memattn/status.hpp"
#include "memattn/types.hpp"

namespace memattn {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::f64: return 8;
  }
  return 0;
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::automatic: return "auto";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
    case Backend::reference: return "reference";
  }
  return "unknown";
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::automatic: return "auto";
    case Precision::ieee: return "ieee";
    case Precision::tf32x3: return "tf32x3";
  }
  return "unknown";
}

const char* to_string(Alignment alignment) {
  return alignment == Alignment::top_left ? "top-left" : "bottom-right";
}

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid argument";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::device_error: return "device error";
    case StatusCode::internal_error: return "internal error";
    case StatusCode::out_of_memory: return "out of memory";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(memattn::to_string(code_)) + ": " + message_;
}

std::int64_t TensorRef::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= sizes[d];
  return n;
}

TensorRef make_tensor(const void* data, DType dtype, std::initializer_list<std::int64_t> sizes) {
  TensorRef t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.rank = int(sizes.size() > 4 ? 4 : sizes.size());
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.sizes[d] = sizes.begin()[d];
    t.strides[d] = stride;
    stride *= t.sizes[d];
  }
  return t;
}

TensorRef make_tensor(const void* data, DType dtype, std::initializer_list<std::int64_t> sizes,
                      std::initializer_list<std::int64_t> strides) {
  TensorRef t = make_tensor(data, dtype, sizes);
  for (int d = 0; d < t.rank && d < int(strides.size()); ++d) t.strides[d] = strides.begin()[d];
  return t;
}

std::uint32_t dropout_threshold(double p) {
  if (!(p > 0.0)) return 0;
  const double t = std::nearbyint(p * 4294967296.0);
  return t >= 4294967295.0 ? 0xffffffffu : std::uint32_t(t);
}

void philox4x32_10(const std::uint32_t counter[4], const std::uint32_t key[2], std::uint32_t out[4]) {
  const detail::Philox4 r = detail::philox4x32_10(
      detail::Philox4{counter[0], counter[1], counter[2], counter[3]}, key[0], key[1]);
  out[0] = r.x;
  out[1] = r.y;
  out[2] = r.z;
  out[3] = r.w;
}

bool dropout_keep(std::uint64_t seed, std::uint64_t offset, std::int64_t b, std::int64_t h,
                  std::int64_t heads_q, std::int64_t i, std::int64_t j, double p) {
  const detail::DropoutKey key{std::uint32_t(seed), std::uint32_t(seed >> 32), std::uint32_t(offset),
                               dropout_threshold(p)};
  const detail::Philox4 r = detail::dropout_words(key, std::uint64_t(b * heads_q + h), i, j);
  return detail::philox_word(r, int(j & 3)) >= key.threshold;
}

}  // namespace memattn
