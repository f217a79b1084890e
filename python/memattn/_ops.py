"""The torch custom ops behind memattn.attention: forward and backward as opaque ops with fake
(meta) implementations, so torch.compile traces them without graph breaks, and autograd wired
from the forward to the backward op. They run the C++ library on the tensors' memory: the CPU
backend for CPU tensors (the float64 reference for float64), the CUDA backend for CUDA tensors on
the current stream.

In eager mode memattn.attention skips the custom-op dispatch (`attend`): torch.library's dispatch
costs more host time per call than a ~1 ms attention kernel can hide when the caller synchronises
after each call. It takes the C++ autograd Function of memattn._autograd where the package was
built with torch (the least host time: no Python in the backward), else the same two functions
through a Python torch.autograd.Function. Anything that traces (torch.compile, export) takes the
custom ops."""
from typing import Optional

import torch
from torch import Tensor

from . import _C

try:
    from . import _autograd
except ImportError:  # built without torch's headers: the Python Function below
    _autograd = None

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
# The library's StatusCode values (memattn/status.hpp) as Python exceptions.
_ERRORS = {1: ValueError, 2: NotImplementedError, 3: RuntimeError, 4: RuntimeError, 5: MemoryError}
_DOUBLE_BACKWARD = "memattn: the attention backward is not differentiable (no double backward)"


def host_memory_available() -> Optional[int]:
    """Bytes of host memory still available (MemAvailable plus free swap), the library's measure;
    None where the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            fields = {key: int(value.split()[0]) * 1024 for key, value in (line.split(":", 1) for line in f)}
    except (OSError, ValueError):
        return None
    return None if "MemAvailable" not in fields else fields["MemAvailable"] + fields.get("SwapFree", 0)


# Host allocations of this size or more are checked against the memory available before they are
# made: the allocator may promise memory it does not have (overcommit), and the library's writes
# would then meet the OOM killer instead of an error. Reading /proc/meminfo (~15 us) is nothing
# beside writing a GiB.
_CHECKED_HOST_BYTES = 1 << 30


def _available(device) -> str:
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return f"{free} bytes of its {total} are free"
    available = host_memory_available()
    return "the system does not say how much is available" if available is None else f"{available} are available"


def allocate(what: str, shape, dtype, device, make=None) -> Tensor:
    """torch.empty(shape) (or make()), with a failure to allocate as MemoryError naming what, the
    bytes needed and the bytes available (torch raises RuntimeError, or its OutOfMemoryError on
    CUDA, whose allocator never overcommits)."""
    device = torch.device(device)
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n  # Python ints: no overflow

    def message():  # only for an error: formatting it costs more than the allocation
        return f"memattn: {what} {list(shape)} ({dtype}) needs {nbytes} bytes on {device}"

    if device.type == "cpu" and nbytes >= _CHECKED_HOST_BYTES:
        available = host_memory_available()
        if available is not None and nbytes > available:
            raise MemoryError(f"{message()}; {available} are available")
    try:
        return make() if make is not None else torch.empty(shape, dtype=dtype, device=device)
    except RuntimeError as e:
        raise MemoryError(f"{message()}; {_available(device)}") from e


def _desc(t: Optional[Tensor], bhmd=False):
    """The binding's view of a tensor; `bhmd` reads a [B, H, M, D] tensor as the BMHK one it is a
    transpose of (dimensions 1 and 2 swapped in the descriptor: no view, so no autograd node)."""
    if t is None:
        return None
    name = _DTYPES.get(t.dtype)
    if name is None:
        raise ValueError(f"memattn: dtype {t.dtype} is not supported (bfloat16, float16, float32, float64)")
    if bhmd:
        (b, h, m, d), (sb, sh, sm, sd) = t.shape, t.stride()
        return (t.data_ptr(), name, (b, m, h, d), (sb, sm, sh, sd))
    return (t.data_ptr(), name, t.shape, t.stride())  # the binding takes any sequence of ints


# The current stream's handle without building a torch.cuda.Stream (a few microseconds a call,
# which a synchronised caller pays before the first kernel starts); the public call where the
# private one is missing.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device) -> int:
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def _allocator(device):
    """The library's CUDA workspace from torch's caching allocator, on the current stream."""
    def allocate_workspace(nbytes):
        t = allocate("the workspace", (nbytes,), torch.uint8, device)
        return t.data_ptr(), t
    return allocate_workspace


def _index(t):
    """A variable-length array as the library takes it: (address, elements, stride). Torch gives a
    tensor without elements a null data pointer, which the library reads as an absent array; its
    storage's address keeps it given, with 0 elements (memattn.attention gives such arrays storage)."""
    if t is None:
        return (0, 0, 1)
    return (t.data_ptr() if t.numel() else t.untyped_storage().data_ptr(), t.numel(), t.stride(0))


# memattn::Precision's values (include/memattn/types.hpp), as the ops take them.
PRECISIONS = {"auto": 0, "ieee": 1, "tf32x3": 2}


def _options(q, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k,
             max_seqlen_q, max_seqlen_k, precision=0):
    seed, offset = (0, 0) if rng is None else (int(x) for x in rng.tolist())
    stream = _stream(q.device) if q.is_cuda else 0
    # The tensors' device picks the backend: the library never has to infer where memory lives.
    backend = "cuda" if q.is_cuda else "reference" if q.dtype == torch.float64 else "cpu"
    return dict(backend=backend, window_left=window_left, window_right=window_right, bottom_right=bottom_right, dropout_p=dropout_p,
                seed=seed, offset=offset, scale=scale,
                seqstart_q=_index(seqstart_q), seqstart_k=_index(seqstart_k), seqused_k=_index(seqused_k),
                max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, stream=stream, precision=precision,
                workspace=_allocator(q.device) if q.is_cuda else None)


def _check(result):
    code, message = result
    if code:
        raise _ERRORS.get(code, RuntimeError)(f"memattn: {message}")


def _forward(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k,
             seqused_k, max_seqlen_q, max_seqlen_k, precision, bhmd=False):
    """out and lse; with bhmd, q, k, v and out are [B, H, M, D] (SDPA's layout), out in BMHK memory
    (the strides of a transpose, as SDPA's backends return it)."""
    if bhmd:
        b, h, m, dv = (*q.shape[:-1], v.shape[-1])
        out = allocate("out", (b, h, m, dv), q.dtype, q.device,
                       lambda: torch.empty_strided((b, h, m, dv), (m * h * dv, dv, h * dv, 1), dtype=q.dtype,
                                                   device=q.device))
        lse = allocate("lse", (b, h, m), torch.float32, q.device)
    else:
        out = allocate("out", (*q.shape[:-1], v.shape[-1]), q.dtype, q.device)
        lse = allocate("lse", (q.shape[0], q.shape[2], q.shape[1]), torch.float32, q.device)
    opts = _options(q, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k,
                    max_seqlen_q, max_seqlen_k, precision)
    _check(_C.forward(_desc(q, bhmd), _desc(k, bhmd), _desc(v, bhmd), _desc(bias), _desc(out, bhmd), _desc(lse), opts))
    return out, lse


def _like(name, t):
    return allocate(name, tuple(t.shape), t.dtype, t.device, lambda: torch.empty_like(t))


def _backward_op(dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale,
                 seqstart_q, seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision, bias_grad,
                 bhmd=False):
    """dq, dk, dv (each with its input's strides) and dbias; bhmd as for _forward."""
    dq, dk, dv = _like("dq", q), _like("dk", k), _like("dv", v)
    dbias = _like("dbias", bias) if bias_grad else q.new_empty(0)
    opts = _options(q, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k,
                    max_seqlen_q, max_seqlen_k, precision)
    _check(_C.backward(_desc(q, bhmd), _desc(k, bhmd), _desc(v, bhmd), _desc(bias), _desc(out, bhmd), _desc(lse),
                       _desc(dout, bhmd), _desc(dq, bhmd), _desc(dk, bhmd), _desc(dv, bhmd),
                       _desc(dbias) if bias_grad else None, deterministic, opts))
    return dq, dk, dv, dbias


def _shape(t):
    return "[" + ", ".join(str(n) for n in t.shape) + "]"


def _check_shapes(q, k, v, bias, seqstart_q, max_seqlen_q, max_seqlen_k):
    """The library's rules on sizes and dtypes, for the fake implementations: under tracing there is
    no memory to hand the library, and a problem it would refuse must not trace to shapes. The
    messages are the library's (src/core/problem.cpp)."""
    for name, t, layout in (("q", q, "[B, Mq, Hq, D]"), ("k", k, "[B, Mk, Hk, D]"), ("v", v, "[B, Mk, Hk, Dv]")):
        if t.dim() != 4:
            raise ValueError(f"memattn: {name}: expected a rank-4 {layout} tensor, got {_shape(t)}")
        if t.dtype != q.dtype:
            raise ValueError(f"memattn: {name}: dtype {t.dtype} must be {q.dtype}")
    b, _, hq, d = q.shape
    mk, hk = k.shape[1], k.shape[2]
    if hk == 0 and hq > 0:
        raise ValueError(f"memattn: k: kv heads Hk = 0 (dimension 2) with Hq = {hq} query heads; Hk must be >= 1 "
                         "unless Hq = 0")
    for name, n, what in (("q", d, "D"), ("v", v.shape[3], "Dv")):
        if not 1 <= n <= 65536:
            raise ValueError(f"memattn: {name}: head dim {what} = {n} is outside [1, 65536]")
    for name, t, want in (("k", k, (b, mk, hk, d)), ("v", v, (b, mk, hk, v.shape[3]))):
        if tuple(t.shape) != want:
            raise ValueError(f"memattn: {name}: expected {list(want)}, got {_shape(t)}")
    if hk > 0 and hq % hk != 0:
        raise ValueError(f"memattn: k: query heads Hq = {hq} must be a multiple of kv heads Hk = {hk}")
    if bias is None:
        return
    if bias.dim() != 4:
        raise ValueError(f"memattn: bias: expected a rank-4 [B, Hq, Mq, Mk] tensor, got {_shape(bias)}")
    if bias.dtype not in (q.dtype, torch.float32):
        raise ValueError(f"memattn: bias: dtype {bias.dtype} must be {q.dtype} (the dtype of q) or float32")
    # With variable lengths B is the number of sequences, and Mq, Mk the longest ones (in the data,
    # unless bounded: then the bounds, and a larger bias is allowed).
    full = (b, hq, q.shape[1], mk) if seqstart_q is None else (seqstart_q.shape[0] - 1, hq)
    for dim, n in enumerate(full):
        if bias.shape[dim] not in (1, n):
            raise ValueError(f"memattn: bias: dimension {dim} has size {bias.shape[dim]}; it must be 1 (broadcast) "
                             f"or {n} to broadcast to [B, Hq, Mq, Mk]")
    if seqstart_q is not None:
        for dim, bound, total in ((2, max_seqlen_q, q.shape[1]), (3, max_seqlen_k, mk)):
            n = min(bound, total)
            if bound >= 0 and bias.shape[dim] != 1 and bias.shape[dim] < n:
                raise ValueError(f"memattn: bias: dimension {dim} has size {bias.shape[dim]}; it must be 1 (broadcast) "
                                 f"or {n} or more to broadcast to [B, Hq, Mq, Mk]")


@torch.library.custom_op("memattn::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], window_left: int, window_right: int,
                      bottom_right: bool, dropout_p: float, rng: Optional[Tensor], scale: Optional[float],
                      seqstart_q: Optional[Tensor], seqstart_k: Optional[Tensor], seqused_k: Optional[Tensor],
                      max_seqlen_q: int, max_seqlen_k: int, deterministic: bool,
                      precision: int) -> tuple[Tensor, Tensor]:
    """out [B, Mq, Hq, Dv] and lse [B, Hq, Mq] (float32) of BMHK q, k, v. `deterministic` is for the
    backward; rng is a CPU int64 tensor (seed, offset) when dropout_p > 0; scale None is 1/sqrt(D);
    max_seqlen_q/k bound variable lengths (-1: not given); precision is memattn::Precision's value."""
    return _forward(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                    seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, precision)


@attention_forward.register_fake
def _(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k,
      seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision):
    _check_shapes(q, k, v, bias, seqstart_q, max_seqlen_q, max_seqlen_k)
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("memattn::attention_backward", mutates_args=())
def attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], out: Tensor, lse: Tensor,
                       window_left: int, window_right: int, bottom_right: bool, dropout_p: float,
                       rng: Optional[Tensor], scale: Optional[float], seqstart_q: Optional[Tensor],
                       seqstart_k: Optional[Tensor], seqused_k: Optional[Tensor], max_seqlen_q: int,
                       max_seqlen_k: int, deterministic: bool, precision: int,
                       bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """dq, dk, dv and dbias (an empty tensor unless bias_grad) of the forward above."""
    return _backward_op(dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale,
                        seqstart_q, seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision,
                        bias_grad)


@attention_backward.register_fake
def _(dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
      seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision, bias_grad):
    _check_shapes(q, k, v, bias, seqstart_q, max_seqlen_q, max_seqlen_k)
    dbias = torch.empty_like(bias) if bias_grad else q.new_empty(0)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dbias


def _no_double_backward(ctx, *grads):
    raise RuntimeError(_DOUBLE_BACKWARD)


# The backward is once-differentiable: its results depend on q, k, v and the bias (and dout), so a
# graph built through it (create_graph) must not treat them as constants. With this formula a
# second backward that reaches the op raises instead.
attention_backward.register_autograd(_no_double_backward)


def _setup_context(ctx, inputs, output):
    (q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k,
     max_seqlen_q, max_seqlen_k, deterministic, precision) = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)  # the LSE is an auxiliary output; its gradient is not supported
    ctx.save_for_backward(q, k, v, bias, out, lse, rng, seqstart_q, seqstart_k, seqused_k)
    ctx.settings = (window_left, window_right, bottom_right, dropout_p, scale, max_seqlen_q, max_seqlen_k, deterministic,
                    precision)


def _backward_inputs(ctx, dout):
    q, k, v, bias, out, lse, rng, seqstart_q, seqstart_k, seqused_k = ctx.saved_tensors
    (window_left, window_right, bottom_right, dropout_p, scale, max_seqlen_q, max_seqlen_k, deterministic,
     precision) = ctx.settings
    bias_grad = bias is not None and ctx.needs_input_grad[3]
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    return (dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
            seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision, bias_grad)


_NON_TENSOR_INPUTS = 13  # attention_forward's inputs after q, k, v and the bias: no gradient


def _gradients(dq, dk, dv, dbias, bias_grad, more=0):
    """The gradients of attention_forward's inputs (and of `more` inputs after them)."""
    return (dq, dk, dv, (dbias if bias_grad else None)) + (None,) * (_NON_TENSOR_INPUTS + more)


def _backward(ctx, dout, dlse):
    args = _backward_inputs(ctx, dout)
    return _gradients(*attention_backward(*args), args[-1])


attention_forward.register_autograd(_backward, setup_context=_setup_context)


class _OnceDifferentiable(torch.autograd.Function):
    """The library's gradients under create_graph: they come from the library, not from
    differentiable ops, so their history is a node that raises, linked to q, k, v, the bias and
    dout; any second backward through them reaches it rather than treating them as constants.
    (torch's once_differentiable links its node to fresh leaves, which a grad() with respect to
    q never visits, and only when dout requires grad.)"""

    @staticmethod
    def forward(ctx, grads, *inputs):
        return grads

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(_DOUBLE_BACKWARD)


class _EagerAttention(torch.autograd.Function):
    """attention_forward with its backward, without the custom-op dispatch (eager mode only). Its
    last input, bhmd, takes SDPA's [B, H, M, D] tensors as they are (_forward): transposes around
    the call would add four view nodes to the forward and four to the backward."""

    @staticmethod
    def forward(ctx, q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision, bhmd):
        out, lse = _forward(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                            seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, precision, bhmd)
        _setup_context(ctx, (q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                             seqstart_k, seqused_k, max_seqlen_q, max_seqlen_k, deterministic, precision), (out, lse))
        ctx.bhmd = bhmd
        # The LSE's gradient is never used: without this autograd fills a zero tensor for it (a
        # kernel launch on the path to the backward's first kernel).
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        if dout is None:  # only the LSE was used, which has no gradient
            return _gradients(None, None, None, None, False, more=1)
        args = _backward_inputs(ctx, dout)
        with torch.no_grad():
            grads = _gradients(*_backward_op(*args, bhmd=ctx.bhmd), args[-1], more=1)
        if not torch.is_grad_enabled():
            return grads
        dq, dk, dv, dbias = _OnceDifferentiable.apply(grads[:4], dout, *args[1:5])
        return (dq, dk, dv, dbias, *grads[4:])


def _to_bmhk(t):
    return t.transpose(1, 2)


def _tracing(q) -> bool:
    """Whether the custom ops must run: anything that traces (torch.compile, export, meta tensors)."""
    return torch.compiler.is_compiling() or q.device.type not in ("cpu", "cuda")


def attend(*args, bhmd=False):
    """attention_forward(*args) with autograd: through the custom op when tracing, directly otherwise.
    bhmd: q, k, v are [B, H, M, D] (SDPA's layout) and so is the output."""
    tracing = _tracing(args[0])
    if not tracing:
        return (_autograd.attention if _autograd is not None else _EagerAttention.apply)(*args, bhmd)
    if bhmd:
        args = (*map(_to_bmhk, args[:3]), *args[3:])
    out, lse = attention_forward(*args)
    return (_to_bmhk(out) if bhmd else out), lse


def _table(t):
    """A block table as the library takes it: (address, rows, cols, row stride)."""
    return None if t is None else (t.data_ptr(), t.shape[0], t.shape[1], t.stride(0))


def _check_cache_shapes(q, k_cache, v_cache, k_new, v_new):
    """The library's rules on the sizes and dtypes of a cache call, for the fake implementation
    (src/core/problem.cpp, kv_cache.cpp); the values of the index arrays are the library's to check
    when it runs."""
    for name, t in (("q", q), ("k", k_cache), ("v", v_cache), ("kv_cache.k_new", k_new), ("kv_cache.v_new", v_new)):
        if t is not None and (t.dim() != 4 or t.dtype != q.dtype):
            raise ValueError(f"memattn: {name}: expected a rank-4 tensor of dtype {q.dtype}, got {t.dtype} {_shape(t)}")
    hk = k_cache.shape[2]
    if tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3]) or k_cache.shape[3] != q.shape[3]:
        raise ValueError(f"memattn: k: the cache {_shape(k_cache)} and v {_shape(v_cache)} must share their first "
                         f"three dimensions, and k's D must be q's ({q.shape[3]})")
    if hk == 0 and q.shape[2] > 0 or hk > 0 and q.shape[2] % hk != 0:
        raise ValueError(f"memattn: k: query heads Hq = {q.shape[2]} must be a multiple of kv heads Hk = {hk}")
    if (k_new is None) != (v_new is None):
        raise ValueError("memattn: kv_cache.k_new: new keys and new values come together")
    if k_new is not None:
        want_k = (q.shape[0], k_new.shape[1], hk, q.shape[3])
        want_v = (q.shape[0], k_new.shape[1], hk, v_cache.shape[3])
        for name, t, want in (("kv_cache.k_new", k_new, want_k), ("kv_cache.v_new", v_new, want_v)):
            if tuple(t.shape) != want:
                raise ValueError(f"memattn: {name}: expected {list(want)}, got {_shape(t)}")


def _attention_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Optional[Tensor], v_new: Optional[Tensor],
                      cache_seqlens: Tensor, cache_batch_idx: Optional[Tensor], block_table: Optional[Tensor],
                      window_left: int, window_right: int, scale: Optional[float],
                      num_splits: int, max_seqlen_k: int) -> tuple[Tensor, Tensor]:
    """out [B, Mq, Hq, Dv] and lse [B, Hq, Mq] of q over a KV cache (memattn.attention_with_kvcache),
    after writing k_new and v_new into k_cache and v_cache at cache_seqlens. Masks are aligned
    bottom-right. The cache is the op's declared in-place update. max_seqlen_k: -1, or a bound on
    every sequence's keys after the append (a CUDA call then reads no index on the host)."""
    out = allocate("out", (*q.shape[:-1], v_cache.shape[-1]), q.dtype, q.device)
    lse = allocate("lse", (q.shape[0], q.shape[2], q.shape[1]), torch.float32, q.device)
    opts = _options(q, window_left, window_right, True, 0.0, None, scale, None, None, None, -1, -1)
    opts.update(num_splits=num_splits, cache_seqlens=_index(cache_seqlens), cache_batch_idx=_index(cache_batch_idx),
                block_table=_table(block_table), cache_max_seqlen_k=max_seqlen_k)
    _check(_C.forward_kvcache(_desc(q), _desc(k_cache), _desc(v_cache), _desc(out), _desc(lse), _desc(k_new),
                              _desc(v_new), opts))
    return out, lse


attention_kvcache = torch.library.custom_op("memattn::attention_kvcache", mutates_args=("k_cache", "v_cache"))(
    _attention_kvcache)


def kvcache(*args):
    """attention_kvcache(*args): through the custom op when tracing or when an input asks for a
    gradient (the op has none, and torch says so), directly otherwise (memattn._autograd's C++ call
    where the package has it). torch's dispatch of a Python op that mutates its arguments took ~140
    us of host time per call on the H100 machine, more than a decode step's kernels; the direct call
    bumps the caches' version counters as the op does."""
    q, k_cache, v_cache = args[:3]
    if _tracing(q) or torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in args):
        return attention_kvcache(*args)
    result = (_autograd.kvcache if _autograd is not None else _attention_kvcache)(*args)
    for cache in (k_cache, v_cache):  # one tensor a call: torch 2.4 takes no list
        torch.autograd.graph.increment_version(cache)
    return result


@attention_kvcache.register_fake
def _(q, k_cache, v_cache, k_new, v_new, cache_seqlens, cache_batch_idx, block_table, window_left, window_right,
      scale, num_splits, max_seqlen_k):
    _check_cache_shapes(q, k_cache, v_cache, k_new, v_new)
    out = q.new_empty((*q.shape[:-1], v_cache.shape[-1]))
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse
