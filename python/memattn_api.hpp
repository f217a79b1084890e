// The library's entry points as memattn._C hands them to memattn._autograd, in a capsule: the
// package carries one copy of the library (and of its kernels), in _C, while the torch-linked
// module calls it. Both modules are built by the same CMake build, so they agree on the layout of
// the argument structs; the version guards against mixing files from two builds.
#pragma once

#include "memattn/memattn.hpp"

namespace memattn::python {

struct Api {
  int version;
  Status (*forward)(const ForwardArgs&);
  Status (*backward)(const BackwardArgs&);
};

constexpr int kApiVersion = 1;
constexpr const char* kApiCapsuleName = "memattn._C._api";

}  // namespace memattn::python
