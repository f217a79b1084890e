"""Property tests of the PyTorch op: hypothesis draws problems on CPU
tensors and every result is compared with float64 math attention written out below: out, LSE
and the gradients of q, k, v and the bias. The draws reach the hostile edges: empty
sizes (B, Mq, Mk, H = 0), GQA/MQA, causal masks and windows in both alignments including sides up
to int64's maximum, bias broadcasts of every rank (dense, size-1 dimensions, expanded stride-0
leaves, boolean masks), variable lengths with rows and keys outside every sequence, seqused_k and
strided seqstart views, scales of either sign, deterministic gradients, the SDPA layout, and each
path of memattn.attention (C++ Function, Python Function, custom ops). Dropout is off.

Examples come from conftest.py's run seed (MEMATTN_TEST_SEED draws others); a failure prints the
example and the blob that replays it (@reproduce_failure)."""
import contextlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")
import memattn  # noqa: E402
from conftest import seed_for  # noqa: E402
from hypothesis import HealthCheck, event, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PATHS = ["python", "op"] + (["cpp"] if memattn._ops._autograd is not None else [])
HUGE = [2**31, 2**62, 2**63 - 1]  # window sides far beyond any length (the library's arithmetic is int64)
# Relative tolerance per dtype: float32 runs the CPU backend (float32 arithmetic), float64 the
# float64 reference backend (whose LSE is still float32).
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10}
LSE_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-6}


@contextlib.contextmanager
def through(path):
    """memattn.attention through one of its paths (what the autouse fixture of test_torch_op does)."""
    ops = memattn._ops
    saved = ops._autograd, ops._tracing
    if path in ("python", "op"):
        ops._autograd = None
    if path == "op":
        ops._tracing = lambda q: True
    try:
        yield
    finally:
        ops._autograd, ops._tracing = saved


def lengths(draw, n, most):
    return [draw(st.integers(0, most)) for _ in range(n)]


@st.composite
def problems(draw):
    p = dict(dtype=draw(st.sampled_from([torch.float32, torch.float64])), path=draw(st.sampled_from(PATHS)),
             data_seed=draw(st.integers(0, 2**32 - 1)), deterministic=draw(st.booleans()))
    # One dimension may be 0 (about a quarter of the draws): an empty problem.
    empty = draw(st.sampled_from([None] * 13 + ["b", "mq", "mk", "hq", "heads"]))
    p["hk"] = 0 if empty == "heads" else draw(st.integers(1, 3))
    p["hq"] = 0 if empty in ("hq", "heads") else p["hk"] * draw(st.integers(1, 3))
    p["d"], p["dv"] = (draw(st.one_of(st.integers(1, 9), st.sampled_from([16, 33, 64, 100]))) for _ in range(2))
    small_or_tiled = st.one_of(st.integers(1, 12), st.integers(13, 70))
    p["varlen"] = draw(st.booleans())
    if p["varlen"]:
        # Packed rows: `lead` rows before the first sequence and `tail` after the last belong to
        # none; keys past seqused_k neither. No sequence, or sequences of no rows, are empty.
        n = draw(st.integers(0, 3))
        p["lens_q"], p["lens_k"] = lengths(draw, n, 9), lengths(draw, n, 9)
        p["used_k"] = [draw(st.integers(0, m)) for m in p["lens_k"]] if draw(st.booleans()) else None
        p["lead_q"], p["tail_q"], p["lead_k"], p["tail_k"] = (draw(st.integers(0, 3)) for _ in range(4))
        p["strided"] = draw(st.booleans())
        p["b"], p["mq"], p["mk"] = 1, p["lead_q"] + sum(p["lens_q"]) + p["tail_q"], \
            p["lead_k"] + sum(p["lens_k"]) + p["tail_k"]
    else:
        p["b"], p["mq"], p["mk"] = draw(st.integers(1, 3)), draw(small_or_tiled), draw(small_or_tiled)
        if empty in ("b", "mq", "mk"):
            p[empty] = 0
    p["causal"] = draw(st.booleans())
    p["bottom_right"] = draw(st.booleans())
    side = st.one_of(st.none(), st.integers(0, 12), st.sampled_from(HUGE))
    p["window"] = None if draw(st.booleans()) else (draw(side), None if p["causal"] else draw(side))
    p["scale"] = draw(st.one_of(st.none(), st.floats(-1.5, 1.5, allow_nan=False)))
    p["bias"], p["bias_grad"] = draw(st.sampled_from([(None, False), ("dense", False), ("dense", True),
                                                      ("expanded", False), ("expanded", True), ("bool", False)]))
    if p["bias"] is not None:
        # Each dimension full or 1, then leading size-1 dimensions dropped (broadcast from the left).
        # With variable lengths B is the number of sequences and Mq, Mk at least the longest.
        if p["varlen"]:
            full = [len(p["lens_q"]), p["hq"], max(p["lens_q"], default=0) + draw(st.integers(0, 2)),
                    max(p["used_k"] or p["lens_k"], default=0) + draw(st.integers(0, 2))]
        else:
            full = [p["b"], p["hq"], p["mq"], p["mk"]]
        p["bias_full"] = full
        # A bias constant along the keys shifts each row's scores by a constant, which the softmax
        # cancels (its gradient is 0): the key dimension is mostly full and not expanded.
        mostly, rarely = st.sampled_from([True, True, True, False]), st.sampled_from([False, False, False, True])
        p["bias_shape"] = [n if draw(mostly if d == 3 else st.booleans()) else 1 for d, n in enumerate(full)]
        p["bias_expand"] = [draw(rarely if d == 3 else st.booleans()) for d in range(4)]
        leading_ones = next((d for d, n in enumerate(p["bias_shape"]) if n != 1), 4)
        p["bias_rank"] = 4 - draw(st.integers(0, leading_ones))
    p["sdpa"] = not p["varlen"] and p["window"] is None and not p["bottom_right"] and draw(st.booleans())
    return p


def make_bias(p, gen):
    if p["bias"] is None:
        return None
    shape = p["bias_shape"]
    if p["bias"] == "bool":
        bias = torch.rand(shape, generator=gen) < 0.7
    elif p["bias"] == "expanded":  # drawn with size 1 where it is expanded: stride 0 there
        base = [1 if expand else n for n, expand in zip(shape, p["bias_expand"])]
        bias = torch.randn(base, generator=gen, dtype=p["dtype"]).expand(shape)
    else:
        bias = torch.randn(shape, generator=gen, dtype=p["dtype"])
    bias = bias[(0,) * (4 - p["bias_rank"])]  # leading size-1 dimensions dropped: broadcast from the left
    return bias.requires_grad_() if p["bias_grad"] else bias


def sequences(p):
    """(bias row, batch, q rows, k rows) of every sequence, in packed coordinates."""
    if not p["varlen"]:
        return [(b, b, 0, p["mq"], 0, p["mk"]) for b in range(p["b"])]
    out, q0, k0 = [], p["lead_q"], p["lead_k"]
    used = p["used_k"] or p["lens_k"]
    for s, (lq, lk, uk) in enumerate(zip(p["lens_q"], p["lens_k"], used)):
        out.append((s, 0, q0, q0 + lq, k0, k0 + uk))
        q0, k0 = q0 + lq, k0 + lk
    return out


def index_array(values, strided):
    t = torch.tensor(values, dtype=torch.int32)
    # every other element of a longer tensor: a view of stride 2
    return torch.stack([t, torch.full_like(t, -7)], dim=1).flatten()[::2] if strided else t


def math_attention(p, q, k, v, bias, left, right):
    """float64 attention of every sequence, written out; rows outside every sequence and rows that
    see no key give out 0 and LSE -inf. q, k, v are BMHK."""
    b, mq, hq, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    scale = p["scale"] if p["scale"] is not None else q.shape[3] ** -0.5
    out = torch.zeros(b, mq, hq, dv, dtype=torch.float64)
    lse = torch.full((b, hq, mq), float("-inf"), dtype=torch.float64)
    if bias is not None:
        if bias.dtype == torch.bool:  # True = attend
            bias = torch.zeros(bias.shape, dtype=torch.float64).masked_fill(~bias, float("-inf"))
        bias = bias.double().expand(p["bias_full"])
    group = hq // k.shape[2] if k.shape[2] else 1
    for s, batch, q0, q1, k0, k1 in sequences(p):
        lq, lk = q1 - q0, k1 - k0
        if lq == 0 or hq == 0:
            continue
        ks = k[batch, k0:k1].repeat_interleave(group, dim=1)
        vs = v[batch, k0:k1].repeat_interleave(group, dim=1)
        scores = torch.einsum("ihd,jhd->hij", q[batch, q0:q1], ks) * scale
        if bias is not None:
            scores = scores + bias[s, :, :lq, :lk]
        # A side of lq + lk or more bounds nothing (every |j - diagonal| < lq + lk): clamped, the
        # int64 arithmetic below cannot overflow.
        i = torch.arange(lq)[:, None] + (lk - lq if p["bottom_right"] else 0)
        j = torch.arange(lk)[None, :]
        visible = torch.ones(lq, lk, dtype=torch.bool)
        if left is not None:
            visible &= j >= i - min(left, lq + lk)
        if right is not None:
            visible &= j <= i + min(right, lq + lk)
        scores = scores.masked_fill(~visible, float("-inf"))
        top = scores.amax(-1, keepdim=True).detach() if lk else torch.zeros(hq, lq, 1, dtype=torch.float64)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        e = torch.exp(scores - top)
        total = e.sum(-1, keepdim=True)
        prob = e / torch.where(total > 0, total, torch.ones_like(total))
        out[batch, q0:q1] = torch.einsum("hij,jhd->ihd", prob, vs)
        lse[batch, :, q0:q1] = (torch.log(total) + top).squeeze(-1).detach()
    return out, lse


def assert_close(name, got, ref, tol):
    """Elementwise |got - ref| <= tol * (|ref| + max |ref|, at least 1): relative to each value, with
    the noise of the largest (a sum's rounding) allowed everywhere."""
    assert got.shape == ref.shape, (name, got.shape, ref.shape)
    if ref.numel() == 0:
        return
    got = got.double()
    floor = max(1.0, ref.abs().max().item())
    excess = (got - ref).abs() - tol * (ref.abs() + floor)
    worst = excess.argmax()
    assert bool((excess <= 0).all()), (name, got.flatten()[worst].item(), ref.flatten()[worst].item())


@settings(max_examples=400, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@seed(seed_for("test_properties.py::test_matches_float64_math_attention"))
@given(problems())
def test_matches_float64_math_attention(p):
    # What the draws reached (pytest --hypothesis-show-statistics lists them).
    event(f"path {p['path']}, {p['dtype']}{', sdpa layout' if p['sdpa'] else ''}")
    event("varlen" if p["varlen"] else "dense batch")
    event("empty" if 0 in (p["b"], p["mq"], p["mk"], p["hq"]) or (p["varlen"] and not p["lens_q"]) else "non-empty")
    event("gqa" if p["hk"] and p["hq"] > p["hk"] else "no gqa")
    event(f"bias {p['bias']}{' with grad' if p['bias_grad'] else ''}")
    window = p["window"] or (None, None)
    event("huge window side" if any(w in HUGE for w in window) else "window " + ("none" if p["window"] is None else
                                                                                "small"))
    if p["varlen"]:
        event("rows outside sequences" if p["lead_q"] + p["tail_q"] else "no query row outside")
    gen = torch.Generator().manual_seed(p["data_seed"])
    dtype = p["dtype"]

    def tensor(*shape):
        return torch.randn(shape, generator=gen, dtype=dtype).requires_grad_()

    q, k, v = tensor(p["b"], p["mq"], p["hq"], p["d"]), tensor(p["b"], p["mk"], p["hk"], p["d"]), \
        tensor(p["b"], p["mk"], p["hk"], p["dv"])
    bias = make_bias(p, gen)
    if p["bias_grad"] and any(n > 1 and s == 0 for n, s in zip(bias.shape, bias.stride())):
        event("bias leaf with stride 0 (expanded), with grad")
    left, right = (None, None) if p["window"] is None else p["window"]
    right = 0 if p["causal"] else right
    varlen = {}
    if p["varlen"]:
        starts_q = [p["lead_q"] + sum(p["lens_q"][:i]) for i in range(len(p["lens_q"]) + 1)]
        starts_k = [p["lead_k"] + sum(p["lens_k"][:i]) for i in range(len(p["lens_k"]) + 1)]
        varlen = dict(seqstart_q=index_array(starts_q, p["strided"]), seqstart_k=index_array(starts_k, p["strided"]))
        if p["used_k"] is not None:
            varlen["seqused_k"] = index_array(p["used_k"], p["strided"])
    with through(p["path"]):
        if p["sdpa"]:
            out = memattn.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), attn_mask=bias,
                                                       is_causal=p["causal"], scale=p["scale"]).transpose(1, 2)
            lse = None
        else:
            out, lse = memattn.attention(
                q, k, v, bias=bias, causal=p["causal"], alignment="bottom_right" if p["bottom_right"] else "top_left",
                window=p["window"], scale=p["scale"], deterministic=p["deterministic"], return_lse=True, **varlen)
        inputs = [q, k, v] + ([bias] if p["bias_grad"] else [])
        dout = torch.randn(out.shape, generator=gen, dtype=dtype)
        grads = torch.autograd.grad(out, inputs, dout)

    ref_inputs = [t.detach().double().requires_grad_() for t in inputs]
    ref_bias = ref_inputs[3] if p["bias_grad"] else bias
    ref_out, ref_lse = math_attention(p, *ref_inputs[:3], ref_bias, left, right)
    if ref_out.requires_grad:
        ref_grads = torch.autograd.grad(ref_out, ref_inputs, dout.double(), allow_unused=True, materialize_grads=True)
    else:  # no sequence has a query row and a head: nothing depends on the inputs
        ref_grads = [torch.zeros_like(t) for t in ref_inputs]

    tol = TOLERANCE[dtype]
    assert_close("out", out, ref_out.detach(), tol)
    unseen = ref_lse == float("-inf")  # rows outside every sequence or with every key masked
    if lse is not None:
        assert lse.dtype == torch.float32 and lse.shape == ref_lse.shape
        assert torch.equal(lse == float("-inf"), unseen), "LSE -inf exactly where no key is visible"
        assert_close("lse", lse[~unseen], ref_lse[~unseen], LSE_TOLERANCE[dtype])
    # Rows that see nothing are defined exactly: out 0 and dq 0 (not merely small).
    rows = unseen.transpose(1, 2)  # [B, Mq, Hq]
    assert not bool(out.detach()[rows].any()) and not bool(grads[0][rows].any())
    for name, g, r in zip(("dq", "dk", "dv", "dbias"), grads, ref_grads):
        assert_close(name, g, r, tol)
    if p["varlen"]:  # keys outside every sequence receive exactly 0
        seen = torch.zeros(p["mk"], dtype=torch.bool)
        for _, _, _, _, k0, k1 in sequences(p):
            seen[k0:k1] = True
        assert not bool(grads[1][:, ~seen].any()) and not bool(grads[2][:, ~seen].any())
