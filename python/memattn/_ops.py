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
_ERRORS = {1: ValueError, 2: NotImplementedError, 3: RuntimeError, 4: RuntimeError}


def _desc(t: Optional[Tensor]):
    if t is None:
        return None
    name = _DTYPES.get(t.dtype)
    if name is None:
        raise ValueError(f"memattn: dtype {t.dtype} is not supported (bfloat16, float16, float32, float64)")
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
    def allocate(nbytes):
        t = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return t.data_ptr(), t
    return allocate


def _index(t):
    """A variable-length array as the library takes it: (address, elements, stride)."""
    return (0, 0, 1) if t is None else (t.data_ptr(), t.numel(), t.stride(0))


def _options(q, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k):
    seed, offset = (0, 0) if rng is None else (int(x) for x in rng.tolist())
    stream = _stream(q.device) if q.is_cuda else 0
    # The tensors' device picks the backend: the library never has to infer where memory lives.
    backend = "cuda" if q.is_cuda else "reference" if q.dtype == torch.float64 else "cpu"
    return dict(backend=backend, window_left=window_left, window_right=window_right, bottom_right=bottom_right, dropout_p=dropout_p,
                seed=seed, offset=offset, scale=scale,
                seqstart_q=_index(seqstart_q), seqstart_k=_index(seqstart_k), seqused_k=_index(seqused_k),
                stream=stream,
                workspace=_allocator(q.device) if q.is_cuda else None)


def _check(result):
    code, message = result
    if code:
        raise _ERRORS.get(code, RuntimeError)(f"memattn: {message}")


def _forward(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k,
             seqused_k):
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    opts = _options(q, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k)
    _check(_C.forward(_desc(q), _desc(k), _desc(v), _desc(bias), _desc(out), _desc(lse), opts))
    return out, lse


def _backward_op(dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale,
                 seqstart_q, seqstart_k, seqused_k, deterministic, bias_grad):
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dbias = torch.empty_like(bias) if bias_grad else q.new_empty(0)
    opts = _options(q, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k)
    _check(_C.backward(_desc(q), _desc(k), _desc(v), _desc(bias), _desc(out), _desc(lse), _desc(dout), _desc(dq),
                       _desc(dk), _desc(dv), _desc(dbias) if bias_grad else None, deterministic, opts))
    return dq, dk, dv, dbias


@torch.library.custom_op("memattn::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], window_left: int, window_right: int,
                      bottom_right: bool, dropout_p: float, rng: Optional[Tensor], scale: float,
                      seqstart_q: Optional[Tensor], seqstart_k: Optional[Tensor], seqused_k: Optional[Tensor],
                      deterministic: bool) -> tuple[Tensor, Tensor]:
    """out [B, Mq, Hq, Dv] and lse [B, Hq, Mq] (float32) of BMHK q, k, v. `deterministic` is for the
    backward; rng is a CPU int64 tensor (seed, offset) when dropout_p > 0."""
    return _forward(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                    seqstart_k, seqused_k)


@attention_forward.register_fake
def _(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k,
      seqused_k, deterministic):
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("memattn::attention_backward", mutates_args=())
def attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], out: Tensor, lse: Tensor,
                       window_left: int, window_right: int, bottom_right: bool, dropout_p: float,
                       rng: Optional[Tensor], scale: float, seqstart_q: Optional[Tensor], seqstart_k: Optional[Tensor],
                       seqused_k: Optional[Tensor], deterministic: bool,
                       bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """dq, dk, dv and dbias (an empty tensor unless bias_grad) of the forward above."""
    return _backward_op(dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale,
                        seqstart_q, seqstart_k, seqused_k, deterministic, bias_grad)


@attention_backward.register_fake
def _(dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
      seqstart_k, seqused_k, deterministic, bias_grad):
    dbias = torch.empty_like(bias) if bias_grad else q.new_empty(0)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dbias


def _setup_context(ctx, inputs, output):
    (q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k,
     deterministic) = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)  # the LSE is an auxiliary output; its gradient is not supported
    ctx.save_for_backward(q, k, v, bias, out, lse, rng, seqstart_q, seqstart_k, seqused_k)
    ctx.settings = (window_left, window_right, bottom_right, dropout_p, scale, deterministic)


def _backward_inputs(ctx, dout):
    q, k, v, bias, out, lse, rng, seqstart_q, seqstart_k, seqused_k = ctx.saved_tensors
    window_left, window_right, bottom_right, dropout_p, scale, deterministic = ctx.settings
    bias_grad = bias is not None and ctx.needs_input_grad[3]
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    return (dout, q, k, v, bias, out, lse, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
            seqstart_k, seqused_k, deterministic, bias_grad)


def _gradients(dq, dk, dv, dbias, bias_grad):
    return dq, dk, dv, (dbias if bias_grad else None), None, None, None, None, None, None, None, None, None, None


def _backward(ctx, dout, dlse):
    args = _backward_inputs(ctx, dout)
    return _gradients(*attention_backward(*args), args[-1])


attention_forward.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """attention_forward with its backward, without the custom-op dispatch (eager mode only)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                seqstart_k, seqused_k, deterministic):
        out, lse = _forward(q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                            seqstart_k, seqused_k)
        _setup_context(ctx, (q, k, v, bias, window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q,
                             seqstart_k, seqused_k, deterministic), (out, lse))
        # The LSE's gradient is never used: without this autograd fills a zero tensor for it (a
        # kernel launch on the path to the backward's first kernel).
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dlse):
        if dout is None:  # only the LSE was used, which has no gradient
            return _gradients(None, None, None, None, False)
        args = _backward_inputs(ctx, dout)
        return _gradients(*_backward_op(*args), args[-1])


def _to_bmhk(t):
    return t.transpose(1, 2)


def attend(*args, bhmd=False):
    """attention_forward(*args) with autograd: through the custom op when tracing, directly otherwise.
    bhmd: q, k, v are [B, H, M, D] (SDPA's layout) and so is the output."""
    q = args[0]
    tracing = torch.compiler.is_compiling() or q.device.type not in ("cpu", "cuda")
    if _autograd is not None and not tracing:
        return _autograd.attention(*args, bhmd)
    if bhmd:
        args = (*map(_to_bmhk, args[:3]), *args[3:])
    out, lse = attention_forward(*args) if tracing else _EagerAttention.apply(*args)
    return (_to_bmhk(out) if bhmd else out), lse
