// A minimal Python binding for the benchmark: memattn on raw device pointers that the caller
// takes from its own tensors (torch stays out of the C++ build). The PyTorch op proper is
// a separate front end.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "memattn/memattn.hpp"

namespace py = pybind11;

namespace {

// (data_ptr, dtype name, sizes, strides) -> TensorRef; None -> undefined.
memattn::TensorRef tensor(const py::object& t) {
  memattn::TensorRef r;
  if (t.is_none()) return r;
  const auto tup = t.cast<py::tuple>();
  r.data = reinterpret_cast<void*>(tup[0].cast<std::uintptr_t>());
  const std::string dtype = tup[1].cast<std::string>();
  r.dtype = dtype == "bf16" ? memattn::DType::bf16 : dtype == "fp16" ? memattn::DType::f16 : memattn::DType::f32;
  const auto sizes = tup[2].cast<std::vector<std::int64_t>>();
  const auto strides = tup[3].cast<std::vector<std::int64_t>>();
  r.rank = int(sizes.size());
  for (int d = 0; d < r.rank; ++d) {
    r.sizes[d] = sizes[d];
    r.strides[d] = strides[d];
  }
  return r;
}

}  // namespace

PYBIND11_MODULE(memattn_bench, m) {
  m.doc() = "memattn forward on raw device pointers (benchmark use)";
  m.def(
      "forward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& out, const py::object& lse,
         const py::object& bias, bool causal, std::uintptr_t stream) {
        memattn::ForwardArgs a;
        a.q = tensor(q);
        a.k = tensor(k);
        a.v = tensor(v);
        a.out = tensor(out);
        a.lse = tensor(lse);
        a.bias = tensor(bias);
        if (causal) a.mask = memattn::Mask::causal();
        a.stream = reinterpret_cast<void*>(stream);
        const memattn::Status s = memattn::forward(a);
        return s.ok() ? std::string() : s.to_string();
      },
      "Runs the forward; returns '' or the error.");
  m.def("plan", [](const py::object& q, const py::object& k, const py::object& v, const py::object& out,
                   const py::object& bias) {
    memattn::ForwardArgs a;
    a.q = tensor(q);
    a.k = tensor(k);
    a.v = tensor(v);
    a.out = tensor(out);
    a.bias = tensor(bias);
    std::string plan;
    const memattn::Status s = memattn::describe_plan(a, &plan);
    return s.ok() ? plan : s.to_string();
  });
}
