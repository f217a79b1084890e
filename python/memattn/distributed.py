"""Context parallelism over torch.distributed: the sequence is sharded over the ranks of a process
group and attention runs on the shards, forward and backward, with the same results as
memattn.attention on the gathered sequence.

- ring_attention: K/V shards travel around the ring of ranks (batch_isend_irecv, the next step's
  transfer issued before the current step's attention); each step's partial output is merged
  with the running one through their log-sum-exp, which is exact. The backward sends K/V again
  with their dK/dV accumulators; dQ stays local. Causal attention with the zigzag layout (rank r
  holds chunks r and 2W-1-r of 2W equal chunks) gives every rank the same work.
- all_to_all_attention (Ulysses): an all-to-all gives each rank the whole sequence for H/W of
  the heads, memattn.attention runs there, and a second all-to-all brings the output back.

Masks are stated on the whole sequence (positions 0..M-1, top-left = bottom-right since every
rank's query and key shards are the same positions). Any backend works: NCCL with CUDA tensors,
gloo with CPU tensors. shard_sequence / unshard_sequence convert a full sequence to and from a
rank's shard in either layout."""
import functools
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from . import _ops
from . import _UNBOUNDED, _merge_weights, _window

_LAYOUTS = ("zigzag", "contiguous")


def _world(group) -> Tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("memattn.distributed: torch.distributed has no process group (call "
                           "torch.distributed.init_process_group first)")
    return dist.get_rank(group), dist.get_world_size(group)


def _chunks(layout: str, rank: int, world: int) -> List[int]:
    """Which chunks of the sequence a rank holds, in order: W chunks (contiguous) or 2W (zigzag)."""
    if layout == "contiguous":
        return [rank]
    if layout == "zigzag":
        return [rank, 2 * world - 1 - rank]
    raise ValueError(f"memattn.distributed: layout must be one of {_LAYOUTS}, got {layout!r}")


def shard_sequence(x: Tensor, rank: int, world: int, layout: str = "zigzag", dim: int = 1) -> Tensor:
    """This rank's shard of a full sequence x (the sequence along `dim`): its chunk, or with the
    zigzag layout its chunks r and 2W-1-r of 2W, concatenated."""
    pieces = 2 * world if layout == "zigzag" else world
    _chunks(layout, rank, world)  # checks the layout
    if x.shape[dim] % pieces:
        raise ValueError(f"memattn.distributed: a sequence of {x.shape[dim]} does not split into {pieces} equal "
                         f"chunks ({layout} layout, world size {world})")
    chunks = x.chunk(pieces, dim)
    return torch.cat([chunks[c] for c in _chunks(layout, rank, world)], dim)


def unshard_sequence(shards: List[Tensor], layout: str = "zigzag", dim: int = 1) -> Tensor:
    """The full sequence from every rank's shard (shards[r] is rank r's), inverse of shard_sequence."""
    world = len(shards)
    per_rank = len(_chunks(layout, 0, world))
    pieces = [None] * (per_rank * world)
    for rank, shard in enumerate(shards):
        for piece, c in zip(shard.chunk(per_rank, dim), _chunks(layout, rank, world)):
            pieces[c] = piece
    return torch.cat(pieces, dim)


def _block(q_start: int, q_len: int, k_start: int, k_len: int, left: int, right: int):
    """The query rows, key rows and top-left window that attention of queries [q_start, +q_len)
    to keys [k_start, +k_len) (global positions) needs under the global window (left, right):
    (q_from, k_from, left', right'), or None when no query sees a key. A query sees the keys
    [i + d - left, i + d + right] in local indices (d = q_start - k_start); windows are >= 0, so a
    band shifted right of the diagonal starts the keys later, and one shifted left the queries."""
    d = q_start - k_start
    lo = None if left == _UNBOUNDED else d - left    # row i sees keys [i + lo, i + hi] (None: unbounded)
    hi = None if right == _UNBOUNDED else d + right
    first_row = 0 if hi is None else max(0, -hi)                          # the first row that sees a key,
    last_row = q_len - 1 if lo is None else min(q_len - 1, k_len - 1 - lo)  # and the last
    if first_row > last_row:
        return None
    q_from = k_from = 0
    if lo is not None and lo > 0:  # keys before lo are seen by no row
        k_from, lo, hi = lo, 0, (None if hi is None else hi - lo)
    elif hi is not None and hi < 0:  # rows before -hi see no key
        q_from, lo, hi = -hi, (None if lo is None else lo - hi), 0
    return q_from, k_from, (_UNBOUNDED if lo is None else -lo), (_UNBOUNDED if hi is None else hi)


def _check_shards(q: Tensor, k: Tensor, v: Tensor, group, per_rank: int, what: str) -> int:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"memattn.distributed.{what}: {name} must be a 4-d shard [B, M_local, H, D]")
    if k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        raise ValueError(f"memattn.distributed.{what}: q, k and v must hold the same positions (M_local "
                         f"{q.shape[1]}, {k.shape[1]}, {v.shape[1]})")
    m = q.shape[1]
    if m % per_rank:
        raise ValueError(f"memattn.distributed.{what}: M_local = {m} does not split into the layout's {per_rank} "
                         "chunks per rank")
    # Every rank must hold as many positions: the smallest and largest M_local, in one reduction.
    sizes = torch.tensor([m, -m], dtype=torch.int64, device=q.device)
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX, group=group)
    if sizes[0].item() != m or -sizes[1].item() != m:
        raise ValueError(f"memattn.distributed.{what}: uneven shards: M_local is {-sizes[1].item()} to "
                         f"{sizes[0].item()} across the ranks (this rank: {m})")
    return m // per_rank


class _Ring:
    """Point-to-point transfers along the ring of a group's ranks."""

    def __init__(self, group, rank: int, world: int):
        self.group, self.rank, self.world = group, rank, world

    def _global(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def shift(self, tensors: List[Tensor], steps: int = 1):
        """Sends `tensors` to the rank `steps` ahead and receives as many from the rank `steps`
        behind; returns the receive buffers and the requests to wait for."""
        to = self._global((self.rank + steps) % self.world)
        frm = self._global((self.rank - steps) % self.world)
        bufs = [torch.empty_like(t) for t in tensors]
        ops = []
        # A tag per tensor: gloo matches a receive to a send by peer and tag, and the tensors of
        # one shift differ in size and dtype (K, V, and the fp32 dK/dV sums).
        for tag, (t, b) in enumerate(zip(tensors, bufs)):
            ops.append(dist.P2POp(dist.isend, t.contiguous(), to, self.group, tag))
            ops.append(dist.P2POp(dist.irecv, b, frm, self.group, tag))
        return bufs, dist.batch_isend_irecv(ops)


def _pairs(layout: str, rank: int, src: int, world: int, chunk: int, left: int, right: int):
    """The library calls of this rank's attention to the K/V shard of rank src, as (query rows,
    key rows, window) slices of the shards: one per pair of (query chunk, key chunk) that any
    query sees, then pairs that see every key merged where their rows or keys are adjacent."""
    chunks = len(_chunks(layout, rank, world))
    if src == rank and left == _UNBOUNDED and right in (0, _UNBOUNDED):
        # A shard's chunks are in increasing order, so full or causal attention of the shard to
        # itself is the same mask on the shard as one sequence: one call.
        return [(slice(0, chunks * chunk), slice(0, chunks * chunk), left, right)]
    calls = []
    for qi, qc in enumerate(_chunks(layout, rank, world)):
        for ki, kc in enumerate(_chunks(layout, src, world)):
            blk = _block(qc * chunk, chunk, kc * chunk, chunk, left, right)
            if blk is None:
                continue
            q_from, k_from, wl, wr = blk
            rows, keys = slice(qi * chunk + q_from, (qi + 1) * chunk), slice(ki * chunk + k_from, (ki + 1) * chunk)
            if _sees_all(rows.stop - rows.start, keys.stop - keys.start, wl, wr):
                wl = wr = _UNBOUNDED
            calls.append((rows, keys, wl, wr))
    for same, other in ((0, 1), (1, 0)):  # adjacent keys of the same rows, then adjacent rows
        merged = []
        for call in calls:
            last = merged[-1] if merged else None
            if (last is not None and last[2:] == call[2:] == (_UNBOUNDED, _UNBOUNDED) and last[same] == call[same]
                    and last[other].stop == call[other].start):
                span = slice(last[other].start, call[other].stop)
                merged[-1] = (span, call[1], *call[2:]) if other == 0 else (call[0], span, *call[2:])
            else:
                merged.append(call)
        calls = merged
    return calls


def _sees_all(q_len: int, k_len: int, left: int, right: int) -> bool:
    """Whether every row sees every key under a top-left window (row i sees [i - left, i + right])."""
    return ((left == _UNBOUNDED or left >= q_len - 1) and (right == _UNBOUNDED or right >= k_len - 1))


@functools.lru_cache(maxsize=64)  # the same schedule for every forward and backward of a shape
def _last_step(layout: str, world: int, chunk: int, left: int, right: int) -> int:
    """The last ring step at which any rank has work: with a sliding window the later steps carry
    K/V no query of their holder sees, and the ring stops before them."""
    last = 0
    for step in range(world):
        if any(_pairs(layout, r, (r - step) % world, world, chunk, left, right) for r in range(world)):
            last = step
    return last


def _merge(out: Tensor, lse: Tensor, rows: slice, o: Tensor, l: Tensor, fresh: bool = False) -> None:
    """Folds a partial result (o [B, n, H, Dv], l [B, H, n]) for the rows `rows` into the running
    (out, lse) accumulators in place, or copies it where `fresh` (nothing folded there yet).
    merge_attention_states' weights (_merge_weights), in two passes over out instead of its six:
    the ring merges a full shard's output at every step, and at 4 ranks the six passes cost ~8%
    of the forward (H100, 32k tokens per GPU)."""
    if fresh:
        out[:, rows].copy_(o)
        lse[:, :, rows].copy_(l)
        return
    weight_out, weight_o, merged = _merge_weights(lse[:, :, rows], l.to(lse.dtype))
    out[:, rows].mul_(weight_out).addcmul_(o, weight_o)
    lse[:, :, rows] = merged


def _accumulator_dtype(t: Tensor):
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _block_backward(dout, q, k, v, out, lse, left, right, scale):
    """The gradients of one block's share of the attention, from the whole row's output and LSE.
    The library's kernels take them as given; its float64 path (the reference) recomputes both
    from the block alone by design, so float64 blocks take the same formulas here in torch."""
    if q.dtype != torch.float64:
        return _ops._backward_op(dout, q, k, v, None, out, lse, left, right, False, 0.0, None, scale, None, None, None,
                                 -1, -1, False, _ops.PRECISIONS["ieee"], False)[:3]
    group = q.shape[2] // k.shape[2]
    qh, doh, oh = (t.transpose(1, 2) for t in (q, dout, out))  # [B, H, M, D]
    kh, vh = (t.repeat_interleave(group, dim=2).transpose(1, 2) for t in (k, v))
    i = torch.arange(q.shape[1], device=q.device).unsqueeze(1)
    j = torch.arange(k.shape[1], device=q.device).unsqueeze(0)
    visible = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device)
    if left != _UNBOUNDED:
        visible &= j >= i - left
    if right != _UNBOUNDED:
        visible &= j <= i + right
    lse = lse.to(torch.float64).unsqueeze(-1)
    p = torch.exp(scale * qh @ kh.transpose(-1, -2) - torch.where(lse == float("-inf"), 0.0, lse))
    p = torch.where(visible & (lse != float("-inf")), p, 0.0)
    dp = doh @ vh.transpose(-1, -2)
    ds = p * (dp - (doh * oh).sum(-1, keepdim=True))
    dq = scale * ds @ kh
    dk, dv = scale * ds.transpose(-1, -2) @ qh, p.transpose(-1, -2) @ doh
    fold = lambda g: g.unflatten(1, (k.shape[2], group)).sum(2).transpose(1, 2)  # sum each kv head's group
    return dq.transpose(1, 2), fold(dk), fold(dv)


def _forward_step(q: Tensor, kv: List[Tensor], out: Tensor, lse: Tensor, pairs, scale: float, first: bool) -> None:
    """One ring step's forward: this rank's queries against the K/V shard in hand, one library call
    per pair of `pairs` (_pairs), folded into the running (out, lse) (`first`: nothing is yet)."""
    # fp32 blocks by FMAs (precision ieee), as the backward's blocks are: the backward recomputes the
    # forward's scores, and takes its LSE as exact for them.
    for rows, keys, wl, wr in pairs:
        o, l = _ops._forward(q[:, rows], kv[0][:, keys], kv[1][:, keys], None, wl, wr, False, 0.0, None, scale,
                             None, None, None, -1, -1, _ops.PRECISIONS["ieee"])
        _merge(out, lse, rows, o, l, fresh=first and len(pairs) == 1)


def _backward_step(dout: Tensor, q: Tensor, kv: List[Tensor], out: Tensor, lse: Tensor, dq: Tensor, pairs,
                   scale: float) -> List[Tensor]:
    """One ring step's backward: adds this rank's dQ share into dq and returns its share of the
    K/V shard's gradients [dK, dV] (in dq's dtype)."""
    share = [torch.zeros(t.shape, dtype=dq.dtype, device=t.device) for t in kv]
    for rows, keys, wl, wr in pairs:
        gq, gk, gv = _block_backward(dout[:, rows], q[:, rows], kv[0][:, keys], kv[1][:, keys], out[:, rows],
                                     lse[:, :, rows].contiguous(), wl, wr, scale)
        dq[:, rows] += gq
        share[0][:, keys] += gk
        share[1][:, keys] += gv
    return share


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, left, right, scale, layout, chunk):
        rank, world = _world(group)
        ring = _Ring(group, rank, world)
        last = _last_step(layout, world, chunk, left, right)
        acc = _accumulator_dtype(q)
        out = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=acc, device=q.device)
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("-inf"), dtype=acc, device=q.device)
        kv = [k, v]
        for step in range(last + 1):
            pending = ring.shift(kv) if step < last else None  # the next step's K/V travel under this one's work
            _forward_step(q, kv, out, lse, _pairs(layout, rank, (rank - step) % world, world, chunk, left, right), scale,
                          first=step == 0)
            if pending is not None:
                for req in pending[1]:
                    req.wait()
                kv = pending[0]
        out = out.to(q.dtype)
        lse = lse.to(torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (group, left, right, scale, layout, chunk)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        group, left, right, scale, layout, chunk = ctx.settings
        rank, world = _world(group)
        ring = _Ring(group, rank, world)
        last = _last_step(layout, world, chunk, left, right)
        acc = _accumulator_dtype(q)
        dout = dout.contiguous()
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        kv = [k, v]
        # A block's dK/dV sum trails its K/V by one step: the sum over the ranks before this one
        # arrives during the step that holds the block and leaves during the next with this rank's
        # share added, so both transfers of a step run under its compute.
        carried = []  # the previous step's block: the sum that arrived, plus this rank's share
        for step in range(last + 1):
            more = step < last
            sent = (kv if more else []) + carried
            received, reqs = ring.shift(sent) if sent else ([], [])
            share = _backward_step(dout, q, kv, out, lse, dq,
                                   _pairs(layout, rank, (rank - step) % world, world, chunk, left, right), scale)
            for req in reqs:
                req.wait()
            arrived = received[2:] if more else received
            carried = [a + b for a, b in zip(arrived, share)] if arrived else share
            if more:
                kv = received[:2]
        # The sum held now is complete and belongs to rank - last: send it home, receive this rank's.
        dkv = carried
        if last:
            dkv, reqs = ring.shift(carried, steps=world - last)
            for req in reqs:
                req.wait()
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None, None, None, None


def _settings(q, causal, window, scale, bias, what):
    if bias is not None:
        raise NotImplementedError(f"memattn.distributed.{what}: a bias is not supported (its [Mq, Mk] blocks would "
                                  "have to travel with K/V); use memattn.attention on one device")
    left, right = _window(bool(causal), window)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    return left, right, scale


def ring_attention(q: Tensor, k: Tensor, v: Tensor, *, group=None, causal: bool = False,
                   window: Optional[Tuple[Optional[int], Optional[int]]] = None, scale: Optional[float] = None,
                   layout: str = "zigzag", return_lse: bool = False, bias: Optional[Tensor] = None):
    """Attention of this rank's query shard to the whole sequence, whose K/V shards pass around the
    ring of `group`'s ranks. q [B, M_local, Hq, D], k [B, M_local, Hk, D], v [B, M_local, Hk, Dv]:
    this rank's positions in `layout` (shard_sequence); the result is this rank's shard of
    memattn.attention on the gathered sequence ([B, M_local, Hq, Dv], and with return_lse the
    LSE [B, Hq, M_local], float32, not differentiable). causal and window=(left, right) are on
    global positions. Differentiable in q, k, v (every rank must call backward)."""
    _chunks(layout, 0, 1)
    left, right, scale = _settings(q, causal, window, scale, bias, "ring_attention")
    rank, world = _world(group)
    per_rank = len(_chunks(layout, rank, world))
    chunk = _check_shards(q, k, v, group, per_rank, "ring_attention")
    out, lse = _RingAttention.apply(q, k, v, group, left, right, scale, layout, chunk)
    return (out, lse) if return_lse else out


class _AllToAll(torch.autograd.Function):
    """Sequence shards with all heads <-> the whole sequence with 1/W of the heads, [B, M, H, D]."""

    @staticmethod
    def forward(ctx, x, group, layout, to_heads):
        ctx.settings = (group, layout, to_heads)
        return _all_to_all(x, group, layout, to_heads)

    @staticmethod
    def backward(ctx, grad):
        group, layout, to_heads = ctx.settings
        return _all_to_all(grad.contiguous(), group, layout, not to_heads), None, None, None


def _all_to_all(x: Tensor, group, layout: str, to_heads: bool, seq_dim: int = 1, head_dim: int = 2) -> Tensor:
    rank, world = _world(group)
    if to_heads:  # [B, M_local, H, D] -> [B, M, H/W, D]: head group g goes to rank g
        parts = x.unflatten(head_dim, (world, x.shape[head_dim] // world)).movedim(head_dim, 0).contiguous()
        recv = torch.empty_like(parts)
        dist.all_to_all_single(recv, parts, group=group)
        return unshard_sequence(list(recv.unbind(0)), layout, seq_dim)
    # [B, M, H/W, D] -> [B, M_local, H, D]: rank g's positions go to rank g
    parts = torch.stack([shard_sequence(x, r, world, layout, seq_dim) for r in range(world)]).contiguous()
    recv = torch.empty_like(parts)
    dist.all_to_all_single(recv, parts, group=group)
    return recv.movedim(0, head_dim).flatten(head_dim, head_dim + 1)


def all_to_all_attention(q: Tensor, k: Tensor, v: Tensor, *, group=None, causal: bool = False,
                         window: Optional[Tuple[Optional[int], Optional[int]]] = None, scale: Optional[float] = None,
                         layout: str = "zigzag", return_lse: bool = False, bias: Optional[Tensor] = None):
    """ring_attention's contract by the other strategy (Ulysses): an all-to-all gives each rank the
    whole sequence for Hq/W query heads and Hk/W kv heads, memattn.attention runs there, and an
    all-to-all returns the output. Both head counts must divide by the world size."""
    from . import attention

    _chunks(layout, 0, 1)
    left, right, scale = _settings(q, causal, window, scale, bias, "all_to_all_attention")
    rank, world = _world(group)
    for name, t in (("q", q), ("k", k)):
        if isinstance(t, Tensor) and t.dim() == 4 and t.shape[2] % world:
            raise ValueError(f"memattn.distributed.all_to_all_attention: {name} has {t.shape[2]} heads, not a "
                             f"multiple of the world size {world} (ring_attention takes any head count)")
    _check_shards(q, k, v, group, len(_chunks(layout, rank, world)), "all_to_all_attention")
    qh, kh, vh = (_AllToAll.apply(t, group, layout, True) for t in (q, k, v))
    window = (None if left == _UNBOUNDED else left, None if right == _UNBOUNDED else right)
    out, lse = attention(qh, kh, vh, window=window, scale=scale, return_lse=True)
    out = _AllToAll.apply(out, group, layout, False)
    if not return_lse:
        return out
    return out, _all_to_all(lse.detach().unsqueeze(-1), group, layout, False, seq_dim=2, head_dim=1).squeeze(-1)
