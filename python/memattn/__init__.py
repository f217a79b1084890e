"""memattn: exact, memory-efficient attention for PyTorch (forward and backward).

    out = memattn.attention(q, k, v, causal=True)           # BMHK: q [B, Mq, Hq, D], k/v [B, Mk, Hk, D/Dv]
    out = memattn.scaled_dot_product_attention(q, k, v)     # SDPA's [B, H, M, D] layout and arguments

CPU tensors run on memattn's CPU backend (float64 on its float64 reference), CUDA tensors on its
CUDA backend. Both are torch custom ops (memattn::attention_forward / attention_backward, and
memattn::attention_kvcache for attention_with_kvcache) with fake implementations, so torch.compile
traces them, and gradients flow to q, k, v and the bias; eager calls skip the custom-op dispatch
and, where the package was built with torch, run a C++ autograd Function (host time per call, see
_ops.py).
"""
import numbers
import operator
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C, _ops

__version__ = _C.version()
__all__ = ["attention", "attention_with_kvcache", "scaled_dot_product_attention", "merge_attention_states",
           "dropout_mask", "__version__"]

_UNBOUNDED = -1
_INT64_MAX = 2**63 - 1


def _int(name: str, value, low: int, high: int) -> int:
    """value as a Python int in [low, high]; bool is refused (True would read as 1), and so is
    anything without __index__ (a float, a string). Bounds are named as powers of two when they are."""
    if not isinstance(value, bool):
        try:
            value = operator.index(value)
        except TypeError:
            pass
        else:
            if low <= value <= high:
                return value
    bound = next((f"2^{e}{' - 1' if high & 1 else ''}" for e in range(32, 65) if high in (2**e, 2**e - 1)), high)
    raise ValueError(f"memattn: {name} must be an int in [{low}, {bound}], got {value!r}")


def _real(name: str, value) -> float:
    # The common types first: an abstract-class check costs more than the rest of the call's checks.
    if type(value) is float or type(value) is int or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return float(value)
    raise ValueError(f"memattn: {name} must be a real number (int or float), got {value!r}")


def _flag(name: str, value) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"memattn: {name} must be True or False, got {value!r}")


def _window(causal: bool, window: Optional[Tuple[Optional[int], Optional[int]]]) -> Tuple[int, int]:
    if window is None:
        left = right = None
    elif isinstance(window, (tuple, list)) and len(window) == 2:
        left, right = window
    else:
        raise ValueError(f"memattn: window must be (left, right), each an int >= 0 or None, got {window!r}")
    # A side of any size is legal (the library treats one of Mq + Mk or more as unbounded, so it
    # cannot overflow there); the bound is the library's int64.
    if left is not None:
        left = _int("window left (keys left of the diagonal; None = unbounded)", left, 0, _INT64_MAX)
    if right is not None:
        right = _int("window right (keys right of the diagonal; None = unbounded)", right, 0, _INT64_MAX)
    if causal:
        if right not in (None, 0):
            raise ValueError(f"memattn: causal=True means window right = 0, got window={window!r}; give one or the "
                             "other")
        right = 0
    return (_UNBOUNDED if left is None else left), (_UNBOUNDED if right is None else right)


def _bias(bias: Optional[Tensor], q: Tensor) -> Optional[Tensor]:
    """A boolean mask becomes additive (True = attend); fewer than 4 dims are broadcast from the left.
    The library reads a dimension of stride 0 (torch's expand) as broadcast and sums its gradient
    there, while autograd needs each element's own gradient for a tensor of that size (the one
    given may be a leaf, or carry hooks): a bias that will receive a gradient is made dense there.
    Dimensions of size 1 are left as they are, and their gradient is the sum."""
    if bias is None:
        return None
    if not isinstance(bias, Tensor):
        raise ValueError(f"memattn: bias must be a tensor or None, got {type(bias).__name__}")
    if bias.dtype == torch.bool:
        bias = torch.zeros(bias.shape, dtype=q.dtype, device=bias.device).masked_fill(~bias, float("-inf"))
    if bias.dim() > 4:
        raise ValueError(f"memattn: bias has {bias.dim()} dims; it must broadcast to [B, Hq, Mq, Mk]")
    while bias.dim() < 4:
        bias = bias.unsqueeze(0)
    if any(n > 1 and s == 0 for n, s in zip(bias.shape, bias.stride())):
        if bias.requires_grad and torch.is_grad_enabled():
            return _ops.allocate("bias (a dense copy for its gradient)", tuple(bias.shape), bias.dtype, bias.device,
                                 bias.contiguous)
        for d in range(4):  # no gradient: the same values, read broadcast (no copy, whatever the last stride)
            if bias.size(d) > 1 and bias.stride(d) == 0:
                bias = bias.narrow(d, 0, 1)
    return _last_dim_contiguous("bias", bias)


def _index(name: str, t: Optional[Tensor], q: Tensor) -> Optional[Tensor]:
    """A varlen array as the library takes it: 1-d int32 on q's device (the library reads raw int32
    memory there: another dtype would be misread, not refused), read through its stride on the
    CPU; contiguous on CUDA, whose kernels read the arrays with stride 1. Its length is the
    library's to check."""
    if t is None:
        return None
    if not isinstance(t, Tensor) or t.dtype != torch.int32 or t.dim() != 1:
        got = f"a {t.dim()}-d {t.dtype} tensor" if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"memattn: {name} must be a 1-d int32 tensor, got {got}")
    if t.device != q.device:
        raise ValueError(f"memattn: {name} is on {t.device} but q is on {q.device}; the varlen arrays must be on "
                         f"the tensors' device")
    if t.numel() == 0:
        # An array given without elements is passed at its storage's address (_ops._index): the
        # library reads a null pointer of size 0 as no array at all, so this one gets storage.
        return t.new_empty(1)[:0]
    if t.is_cuda and t.stride(0) != 1 and t.numel() > 1:
        return t.contiguous()
    return t


def _last_dim_contiguous(name: str, t: Tensor) -> Tensor:
    """t, or the copy the library can read (it needs stride 1 on the last dimension)."""
    if t.stride(-1) == 1 or t.size(-1) == 1:
        return t
    return _ops.allocate(f"{name} (a copy with a contiguous last dimension)", tuple(t.shape), t.dtype, t.device,
                         t.contiguous)


def attention(q: Tensor, k: Tensor, v: Tensor, *, bias: Optional[Tensor] = None, causal: bool = False,
              alignment: str = "top_left", window: Optional[Tuple[Optional[int], Optional[int]]] = None,
              dropout_p: float = 0.0, scale: Optional[float] = None, seqstart_q: Optional[Tensor] = None,
              seqstart_k: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
              max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None, deterministic: bool = False,
              precision: str = "auto", return_lse: bool = False):
    """Attention on BMHK tensors: q [B, Mq, Hq, D], k [B, Mk, Hk, D], v [B, Mk, Hk, Dv] -> [B, Mq, Hq, Dv].

    GQA/MQA follow from the head counts (Hq % Hk == 0). bias is additive (or boolean, True =
    attend), broadcastable to [B, Hq, Mq, Mk], and receives a gradient when it requires one.
    causal / window=(left, right) (None = unbounded) mask keys outside [d - left, d + right] of
    each row's diagonal d, which is i ("top_left") or i + Mk - Mq ("bottom_right"). Dropout draws
    its seed from torch's default generator, so torch.manual_seed reproduces a run. Variable
    lengths: packed q/k/v (B = 1) with int32 seqstart_q/seqstart_k [n + 1] and optional seqused_k
    [n] on the tensors' device; max_seqlen_q/max_seqlen_k bound the query rows and used keys of
    every sequence: with both, a CUDA call reads no length on the host (it does not wait for the
    GPU and can be captured in a CUDA graph; lengths beyond a bound give unspecified results), and
    without them the lengths are copied to the host and checked.
    precision ("auto", "ieee" or "tf32x3") is how CUDA calls multiply float32 inputs: FMAs on CUDA
    cores, or tensor cores with three TF32 products per product. The backward has 3xTF32 rows for
    problems without bias or dropout, head dims up to 256, not deterministic, whose scores are the
    forward's bit for bit; elsewhere it runs on FMAs, which take the forward's LSE as exact for
    scores they recompute differently (a gradient error of 5e-5 at logits of 100 after a tf32x3
    forward). "auto" is tf32x3, except on a call that autograd records whose backward has no 3xTF32
    row (or is deterministic): ieee there. Other dtypes and the CPU ignore it.
    return_lse also returns the natural-log logsumexp [B, Hq, Mq] (float32, not differentiable).
    """
    bounds = tuple(-1 if n is None else _int(name, n, 0, 2**63 - 1)
                   for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)))
    out, lse = _attention(q, k, v, bias, causal, alignment, window, dropout_p, scale, seqstart_q, seqstart_k,
                          seqused_k, deterministic, bhmd=False, bounds=bounds, precision=precision)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Tensor:
    """Drop-in for torch.nn.functional.scaled_dot_product_attention: [B, H, M, D] tensors, the same
    argument names and semantics (is_causal is top-left aligned; a boolean attn_mask marks the keys
    that take part). GQA works whenever the head counts divide (enable_gqa is accepted)."""
    _flag("enable_gqa", enable_gqa)
    return _attention(query, key, value, attn_mask, _flag("is_causal", is_causal), "top_left", None, dropout_p, scale,
                      None, None, None, False, bhmd=True)[0]


def _attention(q, k, v, bias, causal, alignment, window, dropout_p, scale, seqstart_q, seqstart_k, seqused_k,
               deterministic, bhmd, bounds=(-1, -1), precision="auto"):
    """(out, lse) of BMHK tensors, or of [B, H, M, D] ones with bhmd (read as the BMHK tensors they
    are transposes of, without view nodes in the autograd graph). bounds: (max_seqlen_q,
    max_seqlen_k), -1 where not given."""
    if alignment not in ("top_left", "bottom_right"):
        raise ValueError(f"memattn: alignment must be 'top_left' or 'bottom_right', got {alignment!r}")
    if not isinstance(precision, str) or precision not in _ops.PRECISIONS:
        raise ValueError(f"memattn: precision must be one of {', '.join(map(repr, _ops.PRECISIONS))}, got {precision!r}")
    recorded = torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in (q, k, v, bias))
    # A recorded call's "auto" is the library's (tf32x3 where the backward has rows for it), which
    # cannot know that the backward will be deterministic (FMA rows only).
    if precision == "auto" and (not recorded or deterministic):
        precision = "ieee" if recorded else "tf32x3"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"memattn: {name} must be a 4-d tensor [B, {'H, M' if bhmd else 'M, H'}, D]")
    dropout_p = _real("dropout_p", dropout_p)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"memattn: dropout_p must be in [0, 1), got {dropout_p}")
    # None lets the library default it (1/sqrt(D)), and refuse D = 0 with its own message.
    scale = None if scale is None else _real("scale", scale)
    left, right = _window(_flag("causal", causal), window)
    if seqstart_q is not None or seqstart_k is not None or seqused_k is not None:
        seqstart_q, seqstart_k, seqused_k = (_index("seqstart_q", seqstart_q, q), _index("seqstart_k", seqstart_k, q),
                                             _index("seqused_k", seqused_k, q))
    rng = None
    if dropout_p > 0.0:  # seed from torch's generator (offset 0: a fresh seed per call)
        rng = torch.cat([torch.randint(0, 2**62, (1,), dtype=torch.int64), torch.zeros(1, dtype=torch.int64)])
    return _ops.attend(
        _last_dim_contiguous("q", q), _last_dim_contiguous("k", k), _last_dim_contiguous("v", v), _bias(bias, q),
        left, right, alignment == "bottom_right", dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k, *bounds,
        _flag("deterministic", deterministic), _ops.PRECISIONS[precision], bhmd=bhmd)


def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Optional[Tensor] = None,
                           v_new: Optional[Tensor] = None, *, cache_seqlens, block_table: Optional[Tensor] = None,
                           cache_batch_idx: Optional[Tensor] = None, causal: bool = True,
                           window: Optional[Tuple[Optional[int], Optional[int]]] = None, scale: Optional[float] = None,
                           num_splits: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                           return_lse: bool = False):
    """Attention of q [B, Mq, Hq, D] over a KV cache (inference), after appending k_new/v_new.

    The cache is contiguous, k_cache [B_cache, Mk_max, Hk, D] and v_cache [B_cache, Mk_max, Hk, Dv]
    (sequence b in row cache_batch_idx[b], default b), or paged, [num_pages, page_size, Hk, D/Dv]
    with block_table [B, max_pages] int32 (position j of sequence b in page block_table[b, j //
    page_size], row j % page_size; any page size). cache_seqlens [B] int32 (or one int for all) is
    the keys each sequence holds; k_new [B, M_new, Hk, D] and v_new are written in place at
    positions cache_seqlens[b] onwards, and q attends to all cache_seqlens[b] + M_new keys, its Mq
    rows being the last positions: causal and window masks are aligned bottom-right. cache_seqlens
    is not updated. Every index is checked before the cache is written (pages in range, lengths
    within capacity, no slot written that another position uses). num_splits: over how many
    parts each sequence's keys are split on CUDA (None: the library's choice). max_seqlen_k bounds
    every sequence's keys after the append: with it a CUDA call reads no index on the host (it
    does not wait for the GPU and can be captured in a CUDA graph; indices beyond the bound or the
    cache give unspecified results, never an access outside it); without it the indices are copied
    to the host and checked. CPU calls always check them. No gradient: this
    is for inference. Returns out [B, Mq, Hq, Dv] (and the float32 LSE [B, Hq, Mq] with
    return_lse), as flash_attn_with_kvcache does."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"memattn: {name} must be a 4-d tensor")
    if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((q.shape[0],), _int("cache_seqlens", cache_seqlens, 0, 2**31 - 1),
                                   dtype=torch.int32, device=q.device)
    cache_seqlens = _index("cache_seqlens", cache_seqlens, q)
    cache_batch_idx = _index("cache_batch_idx", cache_batch_idx, q)
    if block_table is not None:
        if not isinstance(block_table, Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2:
            raise ValueError("memattn: block_table must be a 2-d int32 tensor [B, max_pages]")
        if block_table.device != q.device:
            raise ValueError(f"memattn: block_table is on {block_table.device} but q is on {q.device}")
        block_table = _last_dim_contiguous("block_table", block_table)
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        if t is not None and (not isinstance(t, Tensor) or t.dim() != 4):
            raise ValueError(f"memattn: {name} must be a 4-d tensor [B, M_new, Hk, D]")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1 and t.size(-1) != 1:
            raise ValueError(f"memattn: {name} must have a contiguous last dimension (it is written in place)")
    left, right = _window(_flag("causal", causal), window)
    scale = None if scale is None else _real("scale", scale)
    splits = 0 if num_splits is None else _int("num_splits", num_splits, 1, 2**31 - 1)
    bound = -1 if max_seqlen_k is None else _int("max_seqlen_k", max_seqlen_k, 0, 2**63 - 1)
    new = [None if t is None else _last_dim_contiguous(name, t) for name, t in (("k_new", k_new), ("v_new", v_new))]
    out, lse = _ops.kvcache(_last_dim_contiguous("q", q), k_cache, v_cache, *new, cache_seqlens,
                                      cache_batch_idx, block_table, left, right, scale, splits, bound)
    return (out, lse) if return_lse else out


def merge_attention_states(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor]:
    """Attention over the union of two disjoint key sets from the results over each: out [B, M, H, Dv]
    and lse [B, H, M] as memattn.attention(..., return_lse=True) returns them. Each output weighs
    exp(its LSE - the union's); rows that see no key on either side stay 0 with LSE -inf. The
    arithmetic runs in float32 (float64 for float64 outputs); out comes back in out_a's dtype, the
    LSE in float32 (float64 for float64 outputs). Differentiable in out_a and out_b, with the LSEs
    as constants (memattn's LSE carries no gradient). Shared-prefix attention and context
    parallelism (memattn.distributed) combine partial results this way."""
    for name, t, dims in (("out_a", out_a, 4), ("lse_a", lse_a, 3), ("out_b", out_b, 4), ("lse_b", lse_b, 3)):
        if not isinstance(t, Tensor) or t.dim() != dims:
            raise ValueError(f"memattn.merge_attention_states: {name} must be a {dims}-d tensor")
    if out_a.shape != out_b.shape:
        raise ValueError(f"memattn.merge_attention_states: out_a {list(out_a.shape)} and out_b {list(out_b.shape)} "
                         "differ")
    lse_shape = [out_a.shape[0], out_a.shape[2], out_a.shape[1]]
    for name, t in (("lse_a", lse_a), ("lse_b", lse_b)):
        if list(t.shape) != lse_shape:
            raise ValueError(f"memattn.merge_attention_states: {name} must be [B, H, M] = {lse_shape}, got "
                             f"{list(t.shape)}")
    acc = torch.float64 if out_a.dtype == torch.float64 else torch.float32
    weight_a, weight_b, lse = _merge_weights(lse_a.to(acc), lse_b.to(acc))
    out = out_a.to(acc) * weight_a + out_b.to(acc) * weight_b
    return out.to(out_a.dtype), lse


def _merge_weights(lse_a: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """The weights [B, M, H, 1] of two outputs over disjoint key sets in their union's output, and
    the union's LSE [B, H, M], from their LSEs [B, H, M] (one dtype): exp(LSE - the union's), 0
    on both where neither side has a key."""
    top = torch.maximum(lse_a, lse_b)
    top = torch.where(top == float("-inf"), torch.zeros_like(top), top)  # both empty: no inf - inf
    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)
    total = wa + wb
    norm = torch.where(total == 0, torch.ones_like(total), total)
    weight = lambda w: (w / norm).transpose(1, 2).unsqueeze(-1)  # [B, H, M] -> [B, M, H, 1]
    return weight(wa), weight(wb), top + torch.log(total)


def dropout_mask(seed: int, offset: int, batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, p: float) -> Tensor:
    """The keep mask [batch, heads_q, seqlen_q, seqlen_k] (bool) that dropout with (seed, offset)
    applies, identical on every backend (Philox4x32-10; docs/decisions.md#dropout gives the mapping). Sizes
    are those the mapping covers (batch * heads_q <= 2^32, seqlen_q <= 2^32, seqlen_k <= 2^34);
    MemoryError when the mask does not fit in host memory."""
    seed = _int("dropout_mask seed", seed, 0, 2**64 - 1)
    offset = _int("dropout_mask offset (one 32-bit word of the Philox counter)", offset, 0, 2**32 - 1)
    batch, heads_q = _int("dropout_mask batch", batch, 0, 2**32), _int("dropout_mask heads_q", heads_q, 0, 2**32)
    seqlen_q, seqlen_k = _int("dropout_mask seqlen_q", seqlen_q, 0, 2**32), _int("dropout_mask seqlen_k", seqlen_k, 0, 2**34)
    if batch * heads_q > 2**32:
        raise ValueError(f"memattn: dropout_mask batch * heads_q = {batch} * {heads_q} exceeds 2^32 (the Philox "
                         "counter's word for it)")
    p = _real("dropout_mask p", p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"memattn: dropout_mask p must be in [0, 1), got {p}")
    keep = _ops.allocate("dropout_mask", (batch, heads_q, seqlen_q, seqlen_k), torch.bool, "cpu")
    _C.dropout_keep(keep.data_ptr(), seed, offset, batch, heads_q, seqlen_q, seqlen_k, p)
    return keep

from . import distributed  # noqa: E402,F401  (memattn.distributed: context parallelism)
