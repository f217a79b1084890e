// The library's entry points as memattn._C hands them to memattn._autograd, in a capsule: the
// package carries one copy of the library (and of its kernels), in _C, while the torch-linked
// module calls it. Both modules are built by the same CMake build, so they agree on the layout of
// the argument structs; the version guards against mixing files from two builds.
#pragma once

#include <cstdint>
#include <optional>

#include "memattn/memattn.hpp"

namespace memattn::python {

// The options both passes share, as both front ends gather them (memattn._C from the Python
// side's dict, memattn._autograd from tensors): addresses as integers.
struct CallOptions {
  Backend backend;
  std::int64_t window_left, window_right;
  bool bottom_right;
  double dropout_p;
  std::uint64_t seed, offset;
  std::optional<double> scale;
  // Variable lengths: each array as (address, elements, stride); an absent one is (0, 0, 1).
  struct Index {
    std::uintptr_t data;
    std::int64_t size, stride;
    IndexRef ref() const { return {reinterpret_cast<const std::int32_t*>(data), size, stride}; }
  };
  Index seqstart_q, seqstart_k, seqused_k;
  std::int64_t max_seqlen_q, max_seqlen_k;  // Varlen's bounds; kUnknownLength: not given
  std::uintptr_t stream;
  std::int64_t precision;  // Precision's value

  void apply(Options* o) const {
    o->backend = backend;
    o->mask = Mask::window(window_left, window_right, bottom_right ? Alignment::bottom_right : Alignment::top_left);
    o->dropout = {dropout_p, seed, offset};
    o->scale = scale;
    o->varlen = {seqstart_q.ref(), seqstart_k.ref(), seqused_k.ref(), max_seqlen_q, max_seqlen_k};
    o->stream = reinterpret_cast<void*>(stream);
    o->precision = Precision(precision);
  }
};

struct Api {
  int version;
  Status (*forward)(const ForwardArgs&);
  Status (*backward)(const BackwardArgs&);
};

// 2: Options gained `overrides`; 3: Varlen holds sized, strided views; 4: and length bounds;
// 5: ForwardArgs gained `kv_cache`; 6: Options gained `precision`
constexpr int kApiVersion = 6;
constexpr const char* kApiCapsuleName = "memattn._C._api";

}  // namespace memattn::python
