// memattn._C: the C++ library on raw pointers, for the Python package. Tensors arrive as
// (data_ptr, dtype name, sizes, strides) tuples taken from torch tensors by the Python side, so
// this module does not link against torch and one build works with any torch version.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "memattn/memattn.hpp"
#include "memattn_api.hpp"

namespace py = pybind11;

namespace {

memattn::DType parse_dtype(const std::string& name) {
  if (name == "bf16") return memattn::DType::bf16;
  if (name == "fp16") return memattn::DType::f16;
  if (name == "fp32") return memattn::DType::f32;
  if (name == "fp64") return memattn::DType::f64;
  throw py::value_error("memattn: unsupported dtype " + name);
}

// (data_ptr, dtype, sizes, strides) -> TensorRef; None -> undefined.
memattn::TensorRef tensor(const py::object& t) {
  memattn::TensorRef r;
  if (t.is_none()) return r;
  const auto tup = t.cast<py::tuple>();
  r.data = reinterpret_cast<void*>(tup[0].cast<std::uintptr_t>());
  r.dtype = parse_dtype(tup[1].cast<std::string>());
  const auto sizes = tup[2].cast<std::vector<std::int64_t>>();
  const auto strides = tup[3].cast<std::vector<std::int64_t>>();
  if (sizes.size() > 4 || strides.size() != sizes.size()) throw py::value_error("memattn: tensors have at most 4 dims");
  r.rank = int(sizes.size());
  for (int d = 0; d < r.rank; ++d) {
    r.sizes[d] = sizes[d];
    r.strides[d] = strides[d];
  }
  return r;
}

memattn::Backend parse_backend(const std::string& name) {
  if (name == "cpu") return memattn::Backend::cpu;
  if (name == "cuda") return memattn::Backend::cuda;
  if (name == "reference") return memattn::Backend::reference;
  throw py::value_error("memattn: unknown backend " + name);
}

memattn::python::CallOptions::Index index(const py::dict& s, const char* name) {
  const auto t = s[name].cast<py::tuple>();  // (address, elements, stride)
  return {t[0].cast<std::uintptr_t>(), t[1].cast<std::int64_t>(), t[2].cast<std::int64_t>()};
}

memattn::python::CallOptions settings(const py::dict& s) {
  return {parse_backend(s["backend"].cast<std::string>()),
          s["window_left"].cast<std::int64_t>(),    s["window_right"].cast<std::int64_t>(),
          s["bottom_right"].cast<bool>(),           s["dropout_p"].cast<double>(),
          s["seed"].cast<std::uint64_t>(),          s["offset"].cast<std::uint64_t>(),
          s["scale"].cast<std::optional<double>>(), index(s, "seqstart_q"),
          index(s, "seqstart_k"),                   index(s, "seqused_k"),
          s["max_seqlen_q"].cast<std::int64_t>(),   s["max_seqlen_k"].cast<std::int64_t>(),
          s["stream"].cast<std::uintptr_t>(),      s["precision"].cast<std::int64_t>()};
}

// The workspace a CUDA call needs, from the caller's allocator: allocate(bytes) -> (pointer,
// owner), the owner kept alive until the call has been issued. (Without it the library allocates
// with cudaMallocAsync from the device's default pool, which returns its memory to the driver at
// every synchronisation and maps it again on the next call: ~0.7 ms per backward when the caller
// synchronises after each one, as a timing loop does.) The library asks once it has planned the
// call, with the GIL released; an exception of the allocator is raised again after the call.
class PyWorkspace {
 public:
  explicit PyWorkspace(const py::object& allocate) : allocate_(allocate) {}

  void attach(memattn::Options* o) {
    if (allocate_.is_none() || o->backend != memattn::Backend::cuda) return;
    o->allocate_workspace = [this](std::size_t bytes) -> void* {
      const py::gil_scoped_acquire gil;
      try {
        const auto given = allocate_(bytes).cast<py::tuple>();
        owner_ = given[1];
        return reinterpret_cast<void*>(given[0].cast<std::uintptr_t>());
      } catch (...) {
        error_ = std::current_exception();
        return nullptr;
      }
    };
  }

  // The allocator's exception, if it raised one (the library's status then only says "null").
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  py::object allocate_, owner_;
  std::exception_ptr error_;
};

// (code, message): code 0 ok, 1 invalid argument, 2 unsupported, 3 device error, 4 internal.
std::tuple<int, std::string> result(const memattn::Status& s) { return {int(s.code()), s.message()}; }

// Runs a pass (memattn::forward or memattn::backward) with the GIL released and the workspace from
// options["workspace"].
template <class Args>
std::tuple<int, std::string> run(memattn::Status (*pass)(const Args&), Args* a, const py::dict& options) {
  PyWorkspace workspace(options["workspace"]);
  workspace.attach(a);
  memattn::Status s;
  {
    const py::gil_scoped_release release;
    s = pass(*a);
  }
  workspace.rethrow();
  return result(s);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "memattn C++ library on raw pointers (used by the memattn package)";
  m.def("version", [] { return std::string(memattn::version()); });
  static const memattn::python::Api api{memattn::python::kApiVersion, &memattn::forward, &memattn::backward};
  m.add_object("_api", py::capsule(&api, memattn::python::kApiCapsuleName));
  m.def("cuda_available", [] { return memattn::cuda_available(); });
  m.def(
      "forward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& bias, const py::object& out,
         const py::object& lse, const py::dict& options) {
        memattn::ForwardArgs a;
        settings(options).apply(&a);
        a.q = tensor(q), a.k = tensor(k), a.v = tensor(v), a.bias = tensor(bias);
        a.out = tensor(out), a.lse = tensor(lse);
        return run(&memattn::forward, &a, options);
      },
      "Forward on (ptr, dtype, sizes, strides) tensors; returns (code, message).");
  m.def(
      "forward_kvcache",
      [](const py::object& q, const py::object& k_cache, const py::object& v_cache, const py::object& out,
         const py::object& lse, const py::object& k_new, const py::object& v_new, const py::dict& options) {
        memattn::ForwardArgs a;
        settings(options).apply(&a);
        a.overrides.num_splits = options["num_splits"].cast<int>();
        a.q = tensor(q), a.k = tensor(k_cache), a.v = tensor(v_cache), a.out = tensor(out), a.lse = tensor(lse);
        memattn::KvCache& c = a.kv_cache;
        c.seqlens = index(options, "cache_seqlens").ref();
        c.batch_idx = index(options, "cache_batch_idx").ref();
        if (const py::object table = options["block_table"]; !table.is_none()) {  // (address, rows, cols, row stride)
          const auto t = table.cast<py::tuple>();
          c.block_table = {reinterpret_cast<const std::int32_t*>(t[0].cast<std::uintptr_t>()), t[1].cast<std::int64_t>(),
                           t[2].cast<std::int64_t>(), t[3].cast<std::int64_t>()};
        }
        c.k_new = tensor(k_new), c.v_new = tensor(v_new);
        c.max_seqlen_k = options["cache_max_seqlen_k"].cast<std::int64_t>();
        return run(&memattn::forward, &a, options);
      },
      "Forward over a KV cache (appending k_new, v_new first); returns (code, message).");
  m.def(
      "backward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& bias, const py::object& out,
         const py::object& lse, const py::object& dout, const py::object& dq, const py::object& dk,
         const py::object& dv, const py::object& dbias, bool deterministic, const py::dict& options) {
        memattn::BackwardArgs a;
        settings(options).apply(&a);
        a.q = tensor(q), a.k = tensor(k), a.v = tensor(v), a.bias = tensor(bias);
        a.out = tensor(out), a.lse = tensor(lse), a.dout = tensor(dout);
        a.dq = tensor(dq), a.dk = tensor(dk), a.dv = tensor(dv), a.dbias = tensor(dbias);
        a.deterministic = deterministic;
        return run(&memattn::backward, &a, options);
      },
      "Backward on (ptr, dtype, sizes, strides) tensors; returns (code, message).");
  m.def(
      "dropout_keep",
      [](std::uintptr_t address, std::uint64_t seed, std::uint64_t offset, std::int64_t batch, std::int64_t heads,
         std::int64_t rows, std::int64_t cols, double p) {
        // memattn.dropout_mask has checked the arguments and allocated [batch, heads, rows, cols]
        // bytes at `address` (a torch bool tensor, one byte per element).
        auto* keep = reinterpret_cast<std::uint8_t*>(address);
        const py::gil_scoped_release release;
        for (std::int64_t b = 0; b < batch; ++b)
          for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t i = 0; i < rows; ++i)
              for (std::int64_t j = 0; j < cols; ++j)
                *keep++ = memattn::dropout_keep(seed, offset, b, h, heads, i, j, p) ? 1 : 0;
      },
      "Writes the dropout keep mask [batch, heads, rows, cols] (bytes of 0/1, as every backend applies it) to "
      "address.");
  m.def(
      "plan",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& bias, const py::object& out,
         const py::dict& options) {
        memattn::ForwardArgs a;
        settings(options).apply(&a);
        a.q = tensor(q), a.k = tensor(k), a.v = tensor(v), a.bias = tensor(bias), a.out = tensor(out);
        std::string plan;
        const memattn::Status s = memattn::describe_plan(a, &plan);
        return s.ok() ? plan : s.to_string();
      },
      "Which backend and kernel a forward would use.");
}
