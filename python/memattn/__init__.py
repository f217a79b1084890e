"""memattn: exact, memory-efficient attention for PyTorch (forward and backward).

    out = memattn.attention(q, k, v, causal=True)           # BMHK: q [B, Mq, Hq, D], k/v [B, Mk, Hk, D/Dv]
    out = memattn.scaled_dot_product_attention(q, k, v)     # SDPA's [B, H, M, D] layout and arguments

CPU tensors run on memattn's CPU backend (float64 on its float64 reference), CUDA tensors on its
CUDA backend. Both are torch custom ops (memattn::attention_forward / attention_backward) with fake
implementations, so torch.compile traces them, and gradients flow to q, k, v and the bias; eager
calls skip the custom-op dispatch and, where the package was built with torch, run a C++ autograd
Function (host time per call, see _ops.py).
"""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C, _ops

__version__ = _C.version()
__all__ = ["attention", "scaled_dot_product_attention", "dropout_mask", "__version__"]

_UNBOUNDED = -1


def _window(causal: bool, window: Optional[Tuple[Optional[int], Optional[int]]]) -> Tuple[int, int]:
    left, right = (None, None) if window is None else window
    if causal:
        if right not in (None, 0):
            raise ValueError("memattn: causal=True means window right = 0; give one or the other")
        right = 0
    for name, value in (("left", left), ("right", right)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"memattn: window {name} must be a non-negative int or None (unbounded), got {value!r}")
    return (_UNBOUNDED if left is None else left), (_UNBOUNDED if right is None else right)


def _bias(bias: Optional[Tensor], q: Tensor) -> Optional[Tensor]:
    """A boolean mask becomes additive (True = attend); fewer than 4 dims are broadcast from the left;
    dimensions broadcast by stride 0 (torch's expand) become size 1, so that the library sums the
    gradient over them once and autograd's expand backward does the rest."""
    if bias is None:
        return None
    if bias.dtype == torch.bool:
        bias = torch.zeros(bias.shape, dtype=q.dtype, device=bias.device).masked_fill(~bias, float("-inf"))
    if bias.dim() > 4:
        raise ValueError(f"memattn: bias has {bias.dim()} dims; it must broadcast to [B, Hq, Mq, Mk]")
    while bias.dim() < 4:
        bias = bias.unsqueeze(0)
    for d in range(4):
        if bias.size(d) > 1 and bias.stride(d) == 0:
            bias = bias.narrow(d, 0, 1)
    return bias if bias.stride(-1) == 1 or bias.size(-1) == 1 else bias.contiguous()


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 or t.size(-1) == 1 else t.contiguous()


def attention(q: Tensor, k: Tensor, v: Tensor, *, bias: Optional[Tensor] = None, causal: bool = False,
              alignment: str = "top_left", window: Optional[Tuple[Optional[int], Optional[int]]] = None,
              dropout_p: float = 0.0, scale: Optional[float] = None, seqstart_q: Optional[Tensor] = None,
              seqstart_k: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
              max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None, deterministic: bool = False,
              return_lse: bool = False):
    """Attention on BMHK tensors: q [B, Mq, Hq, D], k [B, Mk, Hk, D], v [B, Mk, Hk, Dv] -> [B, Mq, Hq, Dv].

    GQA/MQA follow from the head counts (Hq % Hk == 0). bias is additive (or boolean, True =
    attend), broadcastable to [B, Hq, Mq, Mk], and receives a gradient when it requires one.
    causal / window=(left, right) (None = unbounded) mask keys outside [d - left, d + right] of
    each row's diagonal d, which is i ("top_left") or i + Mk - Mq ("bottom_right"). Dropout draws
    its seed from torch's default generator, so torch.manual_seed reproduces a run. Variable
    lengths: packed q/k/v (B = 1) with int32 seqstart_q/seqstart_k [n + 1] and optional seqused_k
    [n] on the tensors' device; max_seqlen_* are accepted for API compatibility and not needed.
    return_lse also returns the natural-log logsumexp [B, Hq, Mq] (float32, not differentiable).
    """
    out, lse = _attention(q, k, v, bias, causal, alignment, window, dropout_p, scale, seqstart_q, seqstart_k,
                          seqused_k, deterministic, bhmd=False)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Tensor:
    """Drop-in for torch.nn.functional.scaled_dot_product_attention: [B, H, M, D] tensors, the same
    argument names and semantics (is_causal is top-left aligned; a boolean attn_mask marks the keys
    that take part). GQA works whenever the head counts divide (enable_gqa is accepted)."""
    return _attention(query, key, value, attn_mask, is_causal, "top_left", None, dropout_p, scale, None, None, None,
                      False, bhmd=True)[0]


def _attention(q, k, v, bias, causal, alignment, window, dropout_p, scale, seqstart_q, seqstart_k, seqused_k,
               deterministic, bhmd):
    """(out, lse) of BMHK tensors, or of [B, H, M, D] ones with bhmd (read as the BMHK tensors they
    are transposes of, without view nodes in the autograd graph)."""
    if alignment not in ("top_left", "bottom_right"):
        raise ValueError(f"memattn: alignment must be 'top_left' or 'bottom_right', got {alignment!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"memattn: {name} must be a 4-d tensor [B, {'H, M' if bhmd else 'M, H'}, D]")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"memattn: dropout_p must be in [0, 1), got {dropout_p}")
    for name, t in (("seqstart_q", seqstart_q), ("seqstart_k", seqstart_k), ("seqused_k", seqused_k)):
        # The library reads raw int32 arrays: another dtype would be misread, not refused.
        if t is not None and (not isinstance(t, Tensor) or t.dtype != torch.int32 or t.dim() != 1):
            raise ValueError(f"memattn: {name} must be a 1-d int32 tensor")
    left, right = _window(causal, window)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    rng = None
    if dropout_p > 0.0:  # seed from torch's generator (offset 0: a fresh seed per call)
        rng = torch.cat([torch.randint(0, 2**62, (1,), dtype=torch.int64), torch.zeros(1, dtype=torch.int64)])
    return _ops.attend(
        _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v), _bias(bias, q), left, right,
        alignment == "bottom_right", float(dropout_p), rng, float(scale), seqstart_q, seqstart_k, seqused_k,
        bool(deterministic), bhmd=bhmd)


def dropout_mask(seed: int, offset: int, batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, p: float) -> Tensor:
    """The keep mask [batch, heads_q, seqlen_q, seqlen_k] (bool) that dropout with (seed, offset)
    applies, identical on every backend (Philox4x32-10; see the README for the mapping)."""
    raw = _C.dropout_keep(seed, offset, batch, heads_q, seqlen_q, seqlen_k, p)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(batch, heads_q, seqlen_q, seqlen_k).bool()
