// memattn._autograd: the eager PyTorch path as a C++ torch::autograd::Function (and the eager KV
// cache call, which needs no autograd). Its forward and backward call the library on the tensors'
// memory; the library itself is memattn._C's, reached through the capsule of memattn_api.hpp.
//
// Why C++: a caller that synchronises after each call (a timing loop, the suite) pays all host
// time before the first kernel. Through the Python torch.autograd.Function (_ops._EagerAttention,
// the fallback where this module is not built) the backward spent 220-300 us there against
// FlashAttention's 90-120 us: the engine's Python node, the Python glue that describes eleven
// tensors to the binding, the binding's size query (a second validation and plan), and with the
// SDPA layout four transpose nodes. Here the engine calls C++ directly, the SDPA layout is a
// permutation of the descriptors (bhmd) instead of view nodes, and the workspace comes from the
// caching allocator inside the one plan.
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/extension.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#ifdef MEMATTN_C10_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "memattn_api.hpp"

namespace py = pybind11;

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;

const memattn::python::Api* api = nullptr;

// Python's MemoryError: torch translates its PyTorchError types by python_type(), also where the
// backward throws one through the autograd engine.
struct MemoryError : torch::PyTorchError {
  using PyTorchError::PyTorchError;
  PyObject* python_type() override { return PyExc_MemoryError; }
};

constexpr const char* kDoubleBackward = "memattn: the attention backward is not differentiable (no double backward)";

// Bytes of host memory still available (MemAvailable plus free swap), the library's measure, or
// -1 where the system does not say. Read with stdio: no iostreams in this module (see check()).
double host_memory_available() {
  std::FILE* meminfo = std::fopen("/proc/meminfo", "r");
  if (meminfo == nullptr) return -1;
  double available = -1, swap = 0, kib = 0;
  char key[64];
  while (std::fscanf(meminfo, "%63s %lf kB", key, &kib) == 2) {
    if (std::strcmp(key, "MemAvailable:") == 0) available = kib * 1024;
    if (std::strcmp(key, "SwapFree:") == 0) swap = kib * 1024;
  }
  std::fclose(meminfo);
  return available < 0 ? -1 : available + swap;
}

// Host allocations of this size or more are checked against the memory available before they are
// made: the allocator may promise memory it does not have (overcommit), and the library's writes
// would then meet the OOM killer instead of an error. Reading /proc/meminfo is nothing beside
// writing a GiB.
constexpr double kCheckedHostBytes = double(1 << 30);

std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "[";
  for (std::size_t d = 0; d < sizes.size(); ++d) text += (d ? ", " : "") + std::to_string(sizes[d]);
  return text + "]";
}

std::string bytes_text(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.0f", bytes);
  return text;
}

std::string available_text(double available) {
  return available < 0 ? "the system does not say how much is available" : bytes_text(available) + " are available";
}

// make() (an at::empty of `sizes`), with a failure to allocate as MemoryError naming what, the
// bytes needed and the bytes available; make's own message says the device's (CUDA's caching
// allocator reports its free memory).
template <class Make>
at::Tensor allocate(const char* what, at::IntArrayRef sizes, const at::TensorOptions& options, Make&& make) {
  double bytes = double(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  for (const std::int64_t n : sizes) bytes *= double(n);
  // Built only for an error: a backward allocates five times, and the text costs ~1 us each.
  const auto message = [&] {
    return std::string("memattn: ") + what + " " + shape_text(sizes) + " needs " + bytes_text(bytes) + " bytes on " +
           options.device().str();
  };
  const bool host = options.device().is_cpu();
  if (host && bytes >= kCheckedHostBytes) {
    const double available = host_memory_available();
    if (available >= 0 && bytes > available) throw MemoryError(message() + "; " + available_text(available));
  }
  try {
    return make();
  } catch (const c10::Error& e) {
    throw MemoryError(message() + "; " +
                      (host ? available_text(host_memory_available()) : std::string(e.what_without_backtrace())));
  }
}

at::Tensor empty(const char* what, at::IntArrayRef sizes, const at::TensorOptions& options) {
  return allocate(what, sizes, options, [&] { return at::empty(sizes, options); });
}

at::Tensor empty_like(const char* what, const at::Tensor& t) {
  return allocate(what, t.sizes(), t.options(), [&] { return at::empty_like(t); });
}

// A failed Status as the exception Python expects of memattn (ValueError for bad arguments,
// NotImplementedError for what no backend supports, MemoryError for memory the call cannot have,
// RuntimeError otherwise); types torch translates, so that the autograd engine carries them from
// the backward to the caller. Messages are one string each, built by concatenation: no iostreams
// in an extension module (docs/decisions.md, "Messages are built by string concatenation").
void check(const memattn::Status& s) {
  if (s.ok()) return;
  const std::string message = "memattn: " + s.message();
  if (s.code() == memattn::StatusCode::invalid_argument) TORCH_CHECK_VALUE(false, message);
  if (s.code() == memattn::StatusCode::unsupported) TORCH_CHECK_NOT_IMPLEMENTED(false, message);
  if (s.code() == memattn::StatusCode::out_of_memory) throw MemoryError(message);
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
  double dropout_p;
  std::optional<double> scale;  // none: the library's default, 1/sqrt(D)
  std::int64_t max_seqlen_q, max_seqlen_k;  // variable lengths' bounds, -1: not given
  bool deterministic;
  std::int64_t precision;  // memattn::Precision's value
  bool bhmd;

  static constexpr std::array<const char*, 10> kKeys = {"window_left",   "window_right", "bottom_right", "dropout_p",
                                                        "scale",         "max_seqlen_q", "max_seqlen_k",
                                                        "deterministic", "precision",    "bhmd"};
  void save(AutogradContext* ctx) const {
    ctx->saved_data[kKeys[0]] = window_left, ctx->saved_data[kKeys[1]] = window_right;
    ctx->saved_data[kKeys[2]] = bottom_right, ctx->saved_data[kKeys[3]] = dropout_p;
    ctx->saved_data[kKeys[4]] = scale ? c10::IValue(*scale) : c10::IValue();
    ctx->saved_data[kKeys[5]] = max_seqlen_q, ctx->saved_data[kKeys[6]] = max_seqlen_k;
    ctx->saved_data[kKeys[7]] = deterministic, ctx->saved_data[kKeys[8]] = precision;
    ctx->saved_data[kKeys[9]] = bhmd;
  }
  static Settings load(AutogradContext* ctx) {
    const auto& d = ctx->saved_data;
    const c10::IValue& scale = d.at(kKeys[4]);
    return {d.at(kKeys[0]).toInt(),
            d.at(kKeys[1]).toInt(),
            d.at(kKeys[2]).toBool(),
            d.at(kKeys[3]).toDouble(),
            scale.isNone() ? std::nullopt : std::optional<double>(scale.toDouble()),
            d.at(kKeys[5]).toInt(),
            d.at(kKeys[6]).toInt(),
            d.at(kKeys[7]).toBool(),
            d.at(kKeys[8]).toInt(),
            d.at(kKeys[9]).toBool()};
  }
};

// The CUDA workspace from torch's caching allocator, kept alive until the call has been issued
// (later work on the stream may reuse it, as stream order allows). A failure to allocate is kept
// and thrown after the call: the library's callback returns null instead (no exception may cross
// the library).
struct Workspace {
  at::Tensor tensor;
  std::optional<MemoryError> error;

  void check() {
    if (error) throw MemoryError(std::move(*error));
  }
};

// Torch's current CUDA stream on `device`. c10::Stream::native_handle names it from torch 2.11 on;
// before, c10_cuda and the CUDA toolkit's headers do (MEMATTN_C10_CUDA, set by CMakeLists.txt
// where both are there). Where neither is (MEMATTN_NO_STREAM), torch has no CUDA tensors or the
// library no CUDA backend, so that no stream is ever used.
std::uintptr_t current_stream(const c10::Device& device) {
#if defined(MEMATTN_C10_CUDA)
  return reinterpret_cast<std::uintptr_t>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
#elif defined(MEMATTN_NO_STREAM)
  return 0;
#else
  return reinterpret_cast<std::uintptr_t>(
      c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device).native_handle());
#endif
}

// An int32 index array (variable lengths, a KV cache's lengths) as the library takes it. Torch
// gives a tensor without elements a null data pointer, which the library reads as an absent
// array; its storage's address keeps it given, with 0 elements (memattn.attention gives such
// arrays storage).
memattn::python::CallOptions::Index index(const OptTensor& t) {
  if (!t) return {0, 0, 1};
  return {reinterpret_cast<std::uintptr_t>(t->numel() ? t->data_ptr() : t->storage().data()), t->numel(), t->stride(0)};
}

// The options both passes share: backend from the tensors' device, mask, dropout, varlen, the
// current stream, and the workspace.
void fill_options(memattn::Options* o, const at::Tensor& q, const Settings& s, const OptTensor& rng,
                  const OptTensor& seqstart_q, const OptTensor& seqstart_k, const OptTensor& seqused_k,
                  Workspace* workspace) {
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
  c.seqstart_q = index(seqstart_q), c.seqstart_k = index(seqstart_k), c.seqused_k = index(seqused_k);
  c.max_seqlen_q = s.max_seqlen_q, c.max_seqlen_k = s.max_seqlen_k;
  c.precision = s.precision;
  if (q.is_cuda()) c.stream = current_stream(q.device());
  c.apply(o);
  if (!q.is_cuda()) return;
  const at::TensorOptions bytes = at::TensorOptions().dtype(at::kByte).device(q.device());
  o->allocate_workspace = [workspace, bytes](std::size_t n) -> void* {
    try {
      workspace->tensor = empty("the workspace", {std::int64_t(n)}, bytes);
      return workspace->tensor.data_ptr();
    } catch (MemoryError& e) {
      workspace->error = std::move(e);
      return nullptr;
    }
  };
}

// An autograd node in the holder the installed torch uses: c10::intrusive_ptr from 2.13 on,
// std::shared_ptr before.
template <class Node, class... Args>
auto make_node(Args&&... args) {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, torch::autograd::Node>)
    return c10::make_intrusive<Node>(std::forward<Args>(args)...);
  else
    return std::make_shared<Node>(std::forward<Args>(args)...);
}

struct Attention : torch::autograd::Function<Attention> {
  // (out, lse); with bhmd q, k, v and out are [B, H, M, D] (SDPA's layout), else BMHK.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const OptTensor& bias, std::int64_t window_left, std::int64_t window_right,
                               bool bottom_right, double dropout_p, const OptTensor& rng, std::optional<double> scale,
                               const OptTensor& seqstart_q, const OptTensor& seqstart_k, const OptTensor& seqused_k,
                               std::int64_t max_seqlen_q, std::int64_t max_seqlen_k, bool deterministic,
                               std::int64_t precision, bool bhmd) {
    TORCH_CHECK_VALUE(q.dim() == 4 && v.dim() == 4, "memattn: q and v must be 4-d tensors");
    // The library launches on the current device: make it q's (as torch's own ops do).
    const c10::OptionalDeviceGuard device_guard(q.device());
    const Settings s{window_left, window_right, bottom_right, dropout_p, scale, max_seqlen_q, max_seqlen_k,
                     deterministic, precision, bhmd};
    const std::int64_t batch = q.size(0), rows = q.size(bhmd ? 2 : 1), heads = q.size(bhmd ? 1 : 2);
    const std::int64_t dv = v.size(3);
    // Out in BMHK memory either way (bhmd: strides of the transposed view, as SDPA returns it).
    const at::Tensor out =
        bhmd ? allocate("out", {batch, heads, rows, dv}, q.options(),
                        [&] {
                          return at::empty_strided({batch, heads, rows, dv}, {rows * heads * dv, dv, heads * dv, 1},
                                                   q.options());
                        })
             : empty("out", {batch, rows, heads, dv}, q.options());
    const at::Tensor lse = empty("lse", {batch, heads, rows}, q.options().dtype(at::kFloat));
    memattn::ForwardArgs a;
    Workspace workspace;
    fill_options(&a, q, s, rng, seqstart_q, seqstart_k, seqused_k, &workspace);
    a.q = ref(q, bhmd), a.k = ref(k, bhmd), a.v = ref(v, bhmd), a.bias = ref(bias);
    a.out = ref(out, bhmd), a.lse = ref(lse);
    const memattn::Status status = api->forward(a);
    workspace.check();
    check(status);

    const auto undefined = [](const OptTensor& t) { return t.value_or(at::Tensor()); };
    ctx->save_for_backward({q, k, v, undefined(bias), out, lse, undefined(rng), undefined(seqstart_q),
                            undefined(seqstart_k), undefined(seqused_k)});
    s.save(ctx);
    ctx->mark_non_differentiable({lse});
    ctx->set_materialize_grads(false);  // the LSE's gradient is never used: no zero tensor for it
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    constexpr std::size_t kInputs = 18;  // forward's arguments after ctx
    variable_list result(kInputs);
    if (!grads[0].defined()) return result;  // only the LSE was used, which has no gradient
    const at::Tensor dout = grads[0].stride(-1) == 1 ? grads[0] : grads[0].contiguous();
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &bias = saved[3];
    const c10::OptionalDeviceGuard device_guard(q.device());
    const auto optional = [](const at::Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; };
    const Settings s = Settings::load(ctx);
    const bool bias_grad = bias.defined() && ctx->needs_input_grad(3);

    at::Tensor dq = empty_like("dq", q), dk = empty_like("dk", k), dv = empty_like("dv", v);
    at::Tensor dbias = bias_grad ? empty_like("dbias", bias) : at::Tensor();
    memattn::BackwardArgs a;
    Workspace workspace;
    fill_options(&a, q, s, optional(saved[6]), optional(saved[7]), optional(saved[8]), optional(saved[9]), &workspace);
    a.q = ref(q, s.bhmd), a.k = ref(k, s.bhmd), a.v = ref(v, s.bhmd), a.bias = ref(bias);
    a.out = ref(saved[4], s.bhmd), a.lse = ref(saved[5]), a.dout = ref(dout, s.bhmd);
    a.dq = ref(dq, s.bhmd), a.dk = ref(dk, s.bhmd), a.dv = ref(dv, s.bhmd), a.dbias = ref(dbias);
    a.deterministic = s.deterministic;
    const memattn::Status status = api->backward(a);
    workspace.check();
    check(status);

    result[0] = std::move(dq), result[1] = std::move(dk), result[2] = std::move(dv), result[3] = std::move(dbias);
    if (!at::GradMode::is_enabled()) return result;
    // create_graph: the gradients come from the library, not from differentiable ops. Their
    // history is a node that raises, linked to q, k, v, the bias and dout, so that any second
    // backward through them reaches it rather than treating them as constants. (Torch's
    // once_differentiable links its node to fresh leaves, which a grad() with respect to q
    // never visits, and only when dout requires grad.)
    const auto node = make_node<torch::autograd::Error>(
        kDoubleBackward, torch::autograd::collect_next_edges(q, k, v, bias, grads[0]));
    for (at::Tensor& g : result)
      if (g.defined()) torch::autograd::set_history(g, node);
    return result;
  }
};

// out and lse of q over a KV cache after the append (memattn.attention_with_kvcache's eager calls;
// _ops._attention_kvcache's arguments): inference, so no autograd node, but the same host path as
// Attention's, where the Python one described seven tensors and a dict of options to memattn._C.
// The caches' version counters are the caller's to bump.
variable_list kvcache_forward(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                              const OptTensor& k_new, const OptTensor& v_new, const at::Tensor& cache_seqlens,
                              const OptTensor& cache_batch_idx, const OptTensor& block_table, std::int64_t window_left,
                              std::int64_t window_right, std::optional<double> scale, std::int64_t num_splits,
                              std::int64_t max_seqlen_k) {
  TORCH_CHECK_VALUE(q.dim() == 4 && v_cache.dim() == 4, "memattn: q and v_cache must be 4-d tensors");
  const c10::OptionalDeviceGuard device_guard(q.device());
  const at::Tensor out = empty("out", {q.size(0), q.size(1), q.size(2), v_cache.size(3)}, q.options());
  const at::Tensor lse = empty("lse", {q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  // Masks of a cache call are aligned bottom-right; no dropout, no variable lengths.
  const Settings s{window_left, window_right, true, 0.0, scale, -1, -1, false, 0, false};
  memattn::ForwardArgs a;
  Workspace workspace;
  fill_options(&a, q, s, std::nullopt, std::nullopt, std::nullopt, std::nullopt, &workspace);
  a.overrides.num_splits = int(num_splits);
  a.q = ref(q), a.k = ref(k_cache), a.v = ref(v_cache), a.out = ref(out), a.lse = ref(lse);
  memattn::KvCache& c = a.kv_cache;
  c.seqlens = index(cache_seqlens).ref(), c.batch_idx = index(cache_batch_idx).ref();
  if (block_table)
    c.block_table = {static_cast<const std::int32_t*>(block_table->data_ptr()), block_table->size(0),
                     block_table->size(1), block_table->stride(0)};
  c.k_new = ref(k_new), c.v_new = ref(v_new);
  c.max_seqlen_k = max_seqlen_k;
  const memattn::Status status = api->forward(a);
  workspace.check();
  check(status);
  return {out, lse};
}

// Runs `call` without the GIL, with the library's errors as the Python exceptions memattn raises.
template <class Call>
py::tuple call_without_gil(Call&& call) {
  variable_list r;
  try {
    const py::gil_scoped_release release;
    r = call();
  } catch (const c10::ValueError& e) {
    throw py::value_error(e.what_without_backtrace());
  } catch (const c10::NotImplementedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
    throw py::error_already_set();
  } catch (MemoryError& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
    throw py::error_already_set();
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
  return py::make_tuple(r[0], r[1]);
}

py::tuple attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& bias,
                    std::int64_t window_left, std::int64_t window_right, bool bottom_right, double dropout_p,
                    const OptTensor& rng, std::optional<double> scale, const OptTensor& seqstart_q,
                    const OptTensor& seqstart_k, const OptTensor& seqused_k, std::int64_t max_seqlen_q,
                    std::int64_t max_seqlen_k, bool deterministic, std::int64_t precision, bool bhmd) {
  return call_without_gil([&] {
    return Attention::apply(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                            seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision, bhmd);
  });
}

py::tuple kvcache(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const OptTensor& k_new,
                  const OptTensor& v_new, const at::Tensor& cache_seqlens, const OptTensor& cache_batch_idx,
                  const OptTensor& block_table, std::int64_t window_left, std::int64_t window_right,
                  std::optional<double> scale, std::int64_t num_splits, std::int64_t max_seqlen_k) {
  return call_without_gil([&] {
    return kvcache_forward(q, k_cache, v_cache, k_new, v_new, cache_seqlens, cache_batch_idx, block_table, window_left,
                           window_right, scale, num_splits, max_seqlen_k);
  });
}

}  // namespace

PYBIND11_MODULE(_autograd, m) {
  m.doc() = "memattn's eager paths in C++ (used by memattn._ops.attend and memattn._ops.kvcache)";
  const py::object capsule = py::module_::import("memattn._C").attr("_api");
  api = static_cast<const memattn::python::Api*>(PyCapsule_GetPointer(capsule.ptr(), memattn::python::kApiCapsuleName));
  if (api == nullptr) throw py::error_already_set();
  if (api->version != memattn::python::kApiVersion)
    throw std::runtime_error("memattn._autograd: memattn._C comes from another build (API version " +
                             std::to_string(api->version) + ", expected " +
                             std::to_string(memattn::python::kApiVersion) + ")");
  m.def("attention", &attention,
        "(out, lse) with autograd, for memattn._ops.attend's arguments and bhmd ([B, H, M, D] tensors).");
  m.def("kvcache", &kvcache, "(out, lse) over a KV cache after the append, for memattn._ops.kvcache's arguments.");
}
