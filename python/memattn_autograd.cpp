// memattn._autograd: the eager PyTorch path as a C++ torch::autograd::Function. Its forward and
// backward call the library on the tensors' memory; the library itself is memattn._C's, reached
// through the capsule of memattn_api.hpp.
//
// Why C++: a caller that synchronises after each call (a timing loop, the suite) pays all host
// time before the first kernel. Through the Python torch.autograd.Function (_ops._EagerAttention,
// the fallback where this module is not built) the backward spent 220-300 us there against
// FlashAttention's 90-120 us: the engine's Python node, the Python glue that describes eleven
// tensors to the binding, the binding's size query (a second validation and plan), and with the
// SDPA layout four transpose nodes. Here the engine calls C++ directly, the SDPA layout is a
// permutation of the descriptors (bhmd) instead of view nodes, and the workspace comes from the
// caching allocator inside the one plan.
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/extension.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "memattn_api.hpp"

namespace py = pybind11;

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;

const memattn::python::Api* api = nullptr;

// A failed Status as the exception Python expects of memattn (ValueError for bad arguments,
// NotImplementedError for what no backend supports, RuntimeError otherwise); c10's types so
// that the autograd engine carries them from the backward to the caller. Messages are one
// string each, built by concatenation: no stream formatting in an extension module (docs/
// decisions.md, "Experiments and front ends").
void check(const memattn::Status& s) {
  if (s.ok()) return;
  const std::string message = "memattn: " + s.message();
  if (s.code() == memattn::StatusCode::invalid_argument) TORCH_CHECK_VALUE(false, message);
  if (s.code() == memattn::StatusCode::unsupported) TORCH_CHECK_NOT_IMPLEMENTED(false, message);
  TORCH_CHECK(false, message);
}

memattn::DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return memattn::DType::bf16;
    case at::kHalf: return memattn::DType::f16;
    case at::kFloat: return memattn::DType::f32;
    case at::kDouble: return memattn::DType::f64;
    default:
      TORCH_CHECK_VALUE(false, std::string("memattn: dtype ") + c10::toString(t.scalar_type()) +
                                   " is not supported (bfloat16, float16, float32, float64)");
  }
}

// The library's view of a tensor; `bhmd` reads a [B, H, M, D] tensor as the BMHK one it is a
// transpose of (dimensions 1 and 2 swapped in the descriptor, no copy).
memattn::TensorRef ref(const at::Tensor& t, bool bhmd = false) {
  memattn::TensorRef r;
  if (!t.defined()) return r;
  TORCH_CHECK_VALUE(t.dim() <= 4, "memattn: tensors have at most 4 dims, got " + std::to_string(t.dim()));
  r.data = t.data_ptr();
  r.dtype = dtype_of(t);
  r.rank = int(t.dim());
  for (int d = 0; d < r.rank; ++d) {
    const int from = bhmd && r.rank == 4 && (d == 1 || d == 2) ? 3 - d : d;
    r.sizes[d] = t.size(from);
    r.strides[d] = t.stride(from);
  }
  return r;
}

memattn::TensorRef ref(const OptTensor& t) { return t ? ref(*t) : memattn::TensorRef{}; }

// Everything but the tensors, as the backward needs it again.
struct Settings {
  std::int64_t window_left, window_right;
  bool bottom_right;
  double dropout_p, scale;
  bool deterministic, bhmd;

  static constexpr std::array<const char*, 7> kKeys = {"window_left", "window_right", "bottom_right", "dropout_p",
                                                       "scale",       "deterministic", "bhmd"};
  void save(AutogradContext* ctx) const {
    ctx->saved_data[kKeys[0]] = window_left, ctx->saved_data[kKeys[1]] = window_right;
    ctx->saved_data[kKeys[2]] = bottom_right, ctx->saved_data[kKeys[3]] = dropout_p;
    ctx->saved_data[kKeys[4]] = scale, ctx->saved_data[kKeys[5]] = deterministic, ctx->saved_data[kKeys[6]] = bhmd;
  }
  static Settings load(AutogradContext* ctx) {
    const auto& d = ctx->saved_data;
    return {d.at(kKeys[0]).toInt(),    d.at(kKeys[1]).toInt(),  d.at(kKeys[2]).toBool(), d.at(kKeys[3]).toDouble(),
            d.at(kKeys[4]).toDouble(), d.at(kKeys[5]).toBool(), d.at(kKeys[6]).toBool()};
  }
};

// The options both passes share: backend from the tensors' device, mask, dropout, varlen, the
// current stream, and the workspace from torch's caching allocator (kept alive by `workspace`
// until the call has been issued; later work on the stream may reuse it, as stream order allows).
void fill_options(memattn::Options* o, const at::Tensor& q, const Settings& s, const OptTensor& rng,
                  const OptTensor& seqstart_q, const OptTensor& seqstart_k, const OptTensor& seqused_k,
                  at::Tensor* workspace) {
  const auto address = [](const OptTensor& t) { return t ? reinterpret_cast<std::uintptr_t>(t->data_ptr()) : 0; };
  memattn::python::CallOptions c{};
  c.backend = q.is_cuda() ? memattn::Backend::cuda
              : q.scalar_type() == at::kDouble ? memattn::Backend::reference
                                               : memattn::Backend::cpu;
  c.window_left = s.window_left, c.window_right = s.window_right, c.bottom_right = s.bottom_right;
  c.dropout_p = s.dropout_p;
  if (rng) {  // a CPU int64 tensor (seed, offset), made by memattn.attention
    const at::Tensor r = rng->to(at::kCPU, at::kLong).contiguous();
    TORCH_CHECK_VALUE(r.numel() == 2, "memattn: rng must hold (seed, offset)");
    c.seed = std::uint64_t(r.data_ptr<std::int64_t>()[0]);
    c.offset = std::uint64_t(r.data_ptr<std::int64_t>()[1]);
  }
  c.scale = s.scale;
  const auto index = [&](const OptTensor& t) -> memattn::python::CallOptions::Index {
    return t ? memattn::python::CallOptions::Index{address(t), t->numel(), t->stride(0)}
             : memattn::python::CallOptions::Index{0, 0, 1};
  };
  c.seqstart_q = index(seqstart_q), c.seqstart_k = index(seqstart_k), c.seqused_k = index(seqused_k);
  if (q.is_cuda())
    c.stream = reinterpret_cast<std::uintptr_t>(
        c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(q.device()).native_handle());
  c.apply(o);
  if (!q.is_cuda()) return;
  const at::TensorOptions bytes = at::TensorOptions().dtype(at::kByte).device(q.device());
  o->allocate_workspace = [workspace, bytes](std::size_t n) {
    *workspace = at::empty({std::int64_t(n)}, bytes);
    return workspace->data_ptr();
  };
}

struct Attention : torch::autograd::Function<Attention> {
  // (out, lse); with bhmd q, k, v and out are [B, H, M, D] (SDPA's layout), else BMHK.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const OptTensor& bias, std::int64_t window_left, std::int64_t window_right,
                               bool bottom_right, double dropout_p, const OptTensor& rng, double scale,
                               const OptTensor& seqstart_q, const OptTensor& seqstart_k, const OptTensor& seqused_k,
                               bool deterministic, bool bhmd) {
    TORCH_CHECK_VALUE(q.dim() == 4 && v.dim() == 4, "memattn: q and v must be 4-d tensors");
    // The library launches on the current device: make it q's (as torch's own ops do).
    const c10::OptionalDeviceGuard device_guard(q.device());
    const Settings s{window_left, window_right, bottom_right, dropout_p, scale, deterministic, bhmd};
    const std::int64_t batch = q.size(0), rows = q.size(bhmd ? 2 : 1), heads = q.size(bhmd ? 1 : 2);
    const std::int64_t dv = v.size(3);
    // Out in BMHK memory either way (bhmd: strides of the transposed view, as SDPA returns it).
    const at::Tensor out = bhmd ? at::empty_strided({batch, heads, rows, dv}, {rows * heads * dv, dv, heads * dv, 1},
                                                    q.options())
                                : at::empty({batch, rows, heads, dv}, q.options());
    const at::Tensor lse = at::empty({batch, heads, rows}, q.options().dtype(at::kFloat));
    memattn::ForwardArgs a;
    at::Tensor workspace;
    fill_options(&a, q, s, rng, seqstart_q, seqstart_k, seqused_k, &workspace);
    a.q = ref(q, bhmd), a.k = ref(k, bhmd), a.v = ref(v, bhmd), a.bias = ref(bias);
    a.out = ref(out, bhmd), a.lse = ref(lse);
    check(api->forward(a));

    const auto undefined = [](const OptTensor& t) { return t.value_or(at::Tensor()); };
    ctx->save_for_backward({q, k, v, undefined(bias), out, lse, undefined(rng), undefined(seqstart_q),
                            undefined(seqstart_k), undefined(seqused_k)});
    s.save(ctx);
    ctx->mark_non_differentiable({lse});
    ctx->set_materialize_grads(false);  // the LSE's gradient is never used: no zero tensor for it
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    constexpr std::size_t kInputs = 15;  // forward's arguments after ctx
    variable_list result(kInputs);
    if (!grads[0].defined()) return result;  // only the LSE was used, which has no gradient
    const at::Tensor dout = grads[0].stride(-1) == 1 ? grads[0] : grads[0].contiguous();
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &bias = saved[3];
    const c10::OptionalDeviceGuard device_guard(q.device());
    const auto optional = [](const at::Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; };
    const Settings s = Settings::load(ctx);
    const bool bias_grad = bias.defined() && ctx->needs_input_grad(3);

    at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
    at::Tensor dbias = bias_grad ? at::empty_like(bias) : at::Tensor();
    memattn::BackwardArgs a;
    at::Tensor workspace;
    fill_options(&a, q, s, optional(saved[6]), optional(saved[7]), optional(saved[8]), optional(saved[9]), &workspace);
    a.q = ref(q, s.bhmd), a.k = ref(k, s.bhmd), a.v = ref(v, s.bhmd), a.bias = ref(bias);
    a.out = ref(saved[4], s.bhmd), a.lse = ref(saved[5]), a.dout = ref(dout, s.bhmd);
    a.dq = ref(dq, s.bhmd), a.dk = ref(dk, s.bhmd), a.dv = ref(dv, s.bhmd), a.dbias = ref(dbias);
    a.deterministic = s.deterministic;
    check(api->backward(a));

    result[0] = std::move(dq), result[1] = std::move(dk), result[2] = std::move(dv), result[3] = std::move(dbias);
    if (!at::GradMode::is_enabled() || !grads[0].requires_grad()) return result;
    // create_graph: the gradients come from the library, not from differentiable ops. As
    // Python's once_differentiable does, they get a node that raises if a second backward
    // reaches it, rather than acting as constants in it.
    for (at::Tensor& g : result)
      if (g.defined()) g = g.detach().requires_grad_(true);
    torch::autograd::DelayedError error("memattn: the attention backward is not differentiable (no double backward)",
                                        std::int64_t(kInputs));
    return error.apply(std::move(result));
  }
};

py::tuple attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& bias,
                    std::int64_t window_left, std::int64_t window_right, bool bottom_right, double dropout_p,
                    const OptTensor& rng, double scale, const OptTensor& seqstart_q, const OptTensor& seqstart_k,
                    const OptTensor& seqused_k, bool deterministic, bool bhmd) {
  variable_list r;
  try {
    const py::gil_scoped_release release;
    r = Attention::apply(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                         seqstart_k, seqused_k, deterministic, bhmd);
  } catch (const c10::ValueError& e) {
    throw py::value_error(e.what_without_backtrace());
  } catch (const c10::NotImplementedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
    throw py::error_already_set();
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
  return py::make_tuple(r[0], r[1]);
}

}  // namespace

PYBIND11_MODULE(_autograd, m) {
  m.doc() = "memattn's eager autograd path in C++ (used by memattn._ops.attend)";
  const py::object capsule = py::module_::import("memattn._C").attr("_api");
  api = static_cast<const memattn::python::Api*>(PyCapsule_GetPointer(capsule.ptr(), memattn::python::kApiCapsuleName));
  if (api == nullptr) throw py::error_already_set();
  if (api->version != memattn::python::kApiVersion)
    throw std::runtime_error("memattn._autograd: memattn._C comes from another build (API version " +
                             std::to_string(api->version) + ", expected " +
                             std::to_string(memattn::python::kApiVersion) + ")");
  m.def("attention", &attention,
        "(out, lse) with autograd, for memattn._ops.attend's arguments and bhmd ([B, H, M, D] tensors).");
}
