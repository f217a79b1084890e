"""The PyTorch op: outputs and gradients against torch math attention in float64 for every feature
and dtype, gradcheck in float64, opcheck, torch.compile without graph breaks, dropout
reproducibility, the SDPA layout, double backward, and errors; then the hostile edges (empty
problems, expanded bias leaves, varlen arrays, hostile arguments, memory refusals), each a
regression test named after what it pins. CPU tensors always; CUDA tensors where a GPU is present
(a pass the CUDA backend does not have yet is skipped with the library's reason). Every test runs
through each path of memattn.attention: the C++ autograd Function (memattn._autograd, where the
package was built with torch), the Python Function it falls back to, and the torch custom ops
that anything tracing takes ("op", called eagerly here). Random inputs come from conftest.py's
per-test seed (MEMATTN_TEST_SEED)."""
import math

import pytest

torch = pytest.importorskip("torch")
import memattn  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TOLERANCE = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float64: 1e-12}
PATHS = ["python", "op"] + (["cpp"] if memattn._ops._autograd is not None else [])


@pytest.fixture(autouse=True, params=PATHS)
def path(request, monkeypatch):
    if request.param in ("python", "op"):
        monkeypatch.setattr(memattn._ops, "_autograd", None)
    if request.param == "op":
        monkeypatch.setattr(memattn._ops, "_tracing", lambda q: True)
    return request.param


def math_attention(q, k, v, bias=None, left=None, right=None, bottom_right=False, scale=None, keep=None, p=0.0):
    """float64 attention on BMHK tensors, written out (the float64 reference of these tests)."""
    q, k, v = q.double(), k.double(), v.double()
    mq, hq, mk, hk = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hk, dim=2)
    v = v.repeat_interleave(hq // hk, dim=2)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("bmhd,bnhd->bhmn", q, k) * scale
    if bias is not None:
        s = s + bias.double()
    i = torch.arange(mq, device=q.device)[:, None]
    j = torch.arange(mk, device=q.device)[None, :]
    d = i + (mk - mq if bottom_right else 0)
    visible = torch.ones(mq, mk, dtype=torch.bool, device=q.device)
    if left is not None:
        visible &= j >= d - left
    if right is not None:
        visible &= j <= d + right
    s = s.masked_fill(~visible, float("-inf"))
    prob = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)  # fully masked rows: 0
    if keep is not None:
        prob = prob * keep.to(prob.device) / (1 - p)
    return torch.einsum("bhmn,bnhd->bmhd", prob, v)


def rel_error(x, ref):
    """||x - ref|| / ||ref||, or the absolute ||x - ref|| when the reference is exactly zero (a single
    visible key gives dS = 0, so dQ = dK = 0, and rounding noise must not count as infinite error);
    the rule of the C++ checks."""
    diff = (x.double() - ref).norm().item()
    den = ref.norm().item()
    return diff / den if den > 0 else diff


def leaf(shape, dtype, device, scale=1.0):
    return (torch.randn(shape, dtype=torch.float64) * scale).to(dtype=dtype, device=device).requires_grad_()


def run_case(device, dtype, b=2, mq=37, mk=53, hq=4, hk=2, d=32, dv=24, causal=False, alignment="top_left",
             window=None, bias_shape=None, scale=None):
    q, k, v = leaf((b, mq, hq, d), dtype, device), leaf((b, mk, hk, d), dtype, device), leaf((b, mk, hk, dv), dtype, device)
    bias = leaf(bias_shape, dtype, device) if bias_shape else None
    out = memattn.attention(q, k, v, bias=bias, causal=causal, alignment=alignment, window=window, scale=scale)
    left, right = (None, None) if window is None else window
    right = 0 if causal else right
    ref_inputs = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_bias = bias.detach().double().requires_grad_() if bias is not None else None
    ref = math_attention(*ref_inputs, bias=ref_bias, left=left, right=right, bottom_right=alignment == "bottom_right",
                         scale=scale)
    tol = TOLERANCE[dtype]
    assert rel_error(out, ref.detach()) <= tol
    grad = torch.randn_like(ref)
    try:
        grads = torch.autograd.grad(out, [q, k, v] + ([bias] if bias is not None else []), grad.to(dtype))
    except NotImplementedError as e:
        pytest.skip(f"backward on {device}: {e}")
    ref_grads = torch.autograd.grad(ref, ref_inputs + ([ref_bias] if bias is not None else []), grad)
    for name, g, r in zip(("dq", "dk", "dv", "dbias"), grads, ref_grads):
        assert rel_error(g, r) <= 2 * tol, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("case", [
    dict(),
    dict(causal=True),
    dict(causal=True, alignment="bottom_right", mq=60, mk=40),  # fully masked rows
    dict(window=(8, 3)),
    dict(window=(5, None), alignment="bottom_right"),
    dict(bias_shape=(2, 4, 37, 53)),
    dict(bias_shape=(1, 4, 37, 53), causal=True),
    dict(bias_shape=(2, 1, 1, 53)),
    dict(hq=6, hk=1, d=40, dv=40, scale=0.3),
    dict(d=7, dv=13, mq=1, mk=1),
    dict(d=300, dv=96, mq=20, mk=30),
], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_matches_math_attention(device, dtype, case):
    if device == "cuda" and dtype == torch.float64:
        pytest.skip("float64 runs on the CPU reference only")
    run_case(device, dtype, **case)


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_matches_each_sequence(device):
    lens_q, lens_k = [5, 0, 17], [9, 4, 12]
    starts_q = torch.tensor([0, 5, 5, 22], dtype=torch.int32, device=device)
    starts_k = torch.tensor([0, 9, 13, 25], dtype=torch.int32, device=device)
    q, k, v = leaf((1, 22, 2, 16), torch.float32, device), leaf((1, 25, 2, 16), torch.float32, device), \
        leaf((1, 25, 2, 16), torch.float32, device)
    out = memattn.attention(q, k, v, causal=True, alignment="bottom_right", seqstart_q=starts_q, seqstart_k=starts_k)
    for s in range(3):
        qs = q[:, starts_q[s]:starts_q[s + 1]]
        if qs.shape[1] == 0:
            continue
        ref = math_attention(qs, k[:, starts_k[s]:starts_k[s + 1]], v[:, starts_k[s]:starts_k[s + 1]], right=0,
                             bottom_right=True)
        assert rel_error(out[:, starts_q[s]:starts_q[s + 1]], ref) <= 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_merge_attention_states_joins_key_sets(device, dtype):
    # Causal attention over keys [0, n1) (top-left) and [n1, M) (bottom-right: key n1 + j is seen
    # from row n1 + j on) is the two halves of causal attention over all keys; rows before n1 see
    # nothing of the second set (LSE -inf).
    if device == "cuda" and dtype == torch.float64:
        pytest.skip("float64 runs on the CPU reference only")
    q, k, v = (leaf((2, 40, 4, 16), dtype, device) for _ in range(3))
    n1 = 15
    out_a, lse_a = memattn.attention(q, k[:, :n1], v[:, :n1], causal=True, return_lse=True)
    out_b, lse_b = memattn.attention(q, k[:, n1:], v[:, n1:], causal=True, alignment="bottom_right", return_lse=True)
    assert torch.isinf(lse_b[:, :, :n1]).all()
    out, lse = memattn.merge_attention_states(out_a, lse_a, out_b, lse_b)
    want, want_lse = memattn.attention(q, k, v, causal=True, return_lse=True)
    assert out.dtype == dtype
    assert rel_error(out, want) <= (1e-6 if dtype == torch.float64 else 1e-5)
    assert (lse.float() - want_lse).abs().max().item() <= 1e-5
    # Gradients reach both partial outputs (the LSEs are constants).
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    # Rows empty on both sides stay empty.
    empty = torch.full_like(lse_a, float("-inf"))
    out, lse = memattn.merge_attention_states(torch.zeros_like(out_a), empty, torch.zeros_like(out_b), empty)
    assert (out == 0).all() and torch.isinf(lse).all()
    with pytest.raises(ValueError, match="lse_b must be"):
        memattn.merge_attention_states(out_a, lse_a, out_b, lse_b[:, :, 1:])


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_uses_the_documented_mask_and_reproduces(device):
    b, mq, mk, h, d, p = 2, 24, 30, 3, 16, 0.3
    q, k, v = leaf((b, mq, h, d), torch.float32, device), leaf((b, mk, h, d), torch.float32, device), \
        leaf((b, mk, h, d), torch.float32, device)
    torch.manual_seed(123)
    out1 = memattn.attention(q, k, v, dropout_p=p)
    torch.manual_seed(123)
    out2 = memattn.attention(q, k, v, dropout_p=p)
    assert torch.equal(out1, out2), "torch.manual_seed must reproduce the dropout mask"
    assert not torch.equal(out1, memattn.attention(q, k, v, dropout_p=p)), "a new call draws a new mask"
    torch.manual_seed(123)
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64))  # what attention() drew
    keep = memattn.dropout_mask(seed, 0, b, h, mq, mk, p)
    ref = math_attention(q.detach(), k.detach(), v.detach(), keep=keep, p=p)
    assert rel_error(out1, ref) <= 1e-5


def test_gradcheck_float64_cpu():
    q, k, v = leaf((1, 5, 2, 3), torch.float64, "cpu"), leaf((1, 6, 1, 3), torch.float64, "cpu"), \
        leaf((1, 6, 1, 2), torch.float64, "cpu")
    bias = leaf((1, 2, 5, 6), torch.float64, "cpu")
    rng = torch.tensor([99, 0], dtype=torch.int64)  # fixed dropout mask across gradcheck's calls

    def f(q, k, v, bias):
        out, _ = torch.ops.memattn.attention_forward(q, k, v, bias, 3, 1, True, 0.25, rng, 0.5, None, None, None, -1, -1,
                                                     False, 0)
        return out

    assert torch.autograd.gradcheck(f, (q, k, v, bias), eps=1e-6, atol=1e-8)


def test_opcheck():
    q, k, v = torch.randn(2, 9, 2, 8), torch.randn(2, 11, 1, 8), torch.randn(2, 11, 1, 8)
    bias = torch.randn(2, 1, 9, 11, requires_grad=True)
    for args in [(q, k, v, None, -1, 0, False, 0.0, None, 0.35, None, None, None, -1, -1, False, 0),
                 (q.requires_grad_(), k, v, bias, 4, 2, True, 0.0, None, 0.35, None, None, None, -1, -1, False, 2)]:
        torch.library.opcheck(torch.ops.memattn.attention_forward.default, args)


def test_compiled_transformer_block_has_no_graph_breaks():
    class Block(torch.nn.Module):
        def __init__(self, dim=32, heads=4):
            super().__init__()
            self.heads, self.qkv, self.proj = heads, torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

        def forward(self, x, attend):
            b, n, c = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            y = attend(q, k, v, is_causal=True)  # [B, H, N, D]
            return x + self.proj(y.transpose(1, 2).reshape(b, n, c))

    block, x = Block(), torch.randn(2, 16, 32, requires_grad=True)
    ref = block(x, torch.nn.functional.scaled_dot_product_attention)
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)  # fullgraph: a graph break is an error
    out = compiled(x, memattn.scaled_dot_product_attention)
    assert rel_error(out, ref.detach().double()) <= 1e-5
    (gx,) = torch.autograd.grad(out.sum(), (x,))
    (rx,) = torch.autograd.grad(ref.sum(), (x,))
    assert rel_error(gx, rx.double()) <= 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal, bias", [(False, False), (True, True)])
def test_sdpa_layout_matches_attention_on_the_transposes(device, causal, bias):
    q, k, v = leaf((2, 4, 19, 16), torch.float32, device), leaf((2, 2, 23, 16), torch.float32, device), \
        leaf((2, 2, 23, 8), torch.float32, device)
    mask = leaf((2, 4, 19, 23), torch.float32, device) if bias else None
    out = memattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    assert out.shape == (2, 4, 19, 8)
    ref = memattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), bias=mask, causal=causal)
    assert torch.equal(out, ref.transpose(1, 2))
    inputs = [q, k, v] + ([mask] if bias else [])
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, inputs, dout)
    ref_grads = torch.autograd.grad(ref, inputs, dout.transpose(1, 2))
    for name, g, r in zip(("dq", "dk", "dv", "dbias"), grads, ref_grads):
        assert g.shape == r.shape and torch.equal(g, r), name


@pytest.mark.parametrize("dout_requires_grad", [False, True])
@pytest.mark.parametrize("call", [memattn.attention, memattn.scaled_dot_product_attention])
def test_double_backward_raises_the_library_error(dout_requires_grad, call):
    """Issue 30 #4: the backward is once-differentiable. A loss that uses the gradient dq must not
    treat it as a constant (dq was off by 2.3): a second backward raises, whether or not dout
    requires grad (out.sum() gives a dout that does not); in either layout (SDPA's reaches the
    library without transposes)."""
    q, k, v = (torch.randn(1, 5, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = call(q, k, v)
    dout = torch.randn_like(out, requires_grad=dout_requires_grad)
    dq, dk = torch.autograd.grad(out, (q, k), dout, create_graph=True)
    # create_graph leaves the first-order gradients as they are
    ref_q, ref_k = (torch.autograd.grad(call(q, k, v), (q, k), dout.detach()))
    assert torch.equal(dq, ref_q) and torch.equal(dk, ref_k)
    # and they are the gradients (the written-out attention, read in the call's layout)
    layout = (lambda t: t.transpose(1, 2)) if call is memattn.scaled_dot_product_attention else (lambda t: t)
    math_q, math_k = torch.autograd.grad(layout(math_attention(*map(layout, (q, k, v)))), (q, k), dout.detach())
    assert rel_error(dq, math_q) <= 1e-10 and rel_error(dk, math_k) <= 1e-10
    for target in (q, k, v):
        with pytest.raises(RuntimeError, match="memattn: the attention backward is not differentiable"):
            torch.autograd.grad((out.sum() + dq.square().sum() + dk.sum()), (target,), retain_graph=True)


def test_double_backward_of_a_compiled_call_raises(path):
    """Issue 30 #4 under torch.compile: aot_autograd wraps the compiled region's backward, and a
    second backward through it raises (torch's message; the op's own is never reached)."""
    if path != "op":
        pytest.skip("torch.compile traces the custom ops whatever the eager path")
    q, k, v = (torch.randn(1, 5, 2, 8, requires_grad=True) for _ in range(3))
    compiled = torch.compile(lambda q, k, v: memattn.attention(q, k, v), backend="aot_eager", fullgraph=True)
    out = compiled(q, k, v)
    (dq,) = torch.autograd.grad(out.sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.sum() + dq.square().sum(), (q,))


def test_expanded_bias_of_a_parameter_sums_into_the_parameter():
    q, k, v = (torch.randn(2, 7, 3, 8) for _ in range(3))
    base = torch.randn(1, 3, 7, 7, dtype=torch.float32, requires_grad=True)
    bias = base.expand(2, 3, 7, 7)  # stride 0 on the batch
    out = memattn.attention(q, k, v, bias=bias)
    (g,) = torch.autograd.grad(out.sum(), (base,))
    base_ref = base.detach().double().requires_grad_()
    ref = math_attention(q, k, v, bias=base_ref.expand(2, 3, 7, 7))
    (r,) = torch.autograd.grad(ref.sum(), (base_ref,))
    assert rel_error(g, r) <= 2e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("given, expand", [
    ((1, 1, 5, 7), True),   # the case: every element of [B, H, Mq, Mk] shares one of [Mq, Mk]
    ((2, 1, 5, 1), True),   # stride 0 on the heads and on the keys (the last dimension)
    ((1, 3, 1, 7), False),  # a leaf with dimensions of size 1: its gradient is the sum over them
], ids=["expanded-batch-heads", "expanded-heads-keys", "size-1-dims"])
def test_bias_leaf_gets_the_gradient_of_each_of_its_elements(device, given, expand):
    """Issue 30 #5: bias.grad has the shape and per-element values of the tensor as given; only
    dimensions of size 1 are summed. An expanded leaf got the summed gradient at [0, 0] and zeros
    elsewhere; SDPA gives each element its own."""
    b, h, mq, mk = 2, 3, 5, 7
    q, k, v = leaf((b, mq, h, 8), torch.float32, device), leaf((b, mk, h, 8), torch.float32, device), \
        leaf((b, mk, h, 8), torch.float32, device)
    bias = torch.randn(given, device=device)
    bias = (bias.expand(b, h, mq, mk) if expand else bias).requires_grad_()
    dout = torch.randn(b, mq, h, 8, device=device)
    memattn.attention(q, k, v, bias=bias).backward(dout)
    ref_bias = bias.detach().double().requires_grad_()  # .double() of a stride-0 view is dense
    math_attention(q.detach(), k.detach(), v.detach(), bias=ref_bias).backward(dout.double())
    assert bias.grad.shape == bias.shape
    assert rel_error(bias.grad, ref_bias.grad) <= 2e-5
    if expand:  # SDPA, on the [B, H, M, D] transposes with the same leaf as attn_mask
        sdpa_bias = bias.detach().clone().requires_grad_()
        torch.nn.functional.scaled_dot_product_attention(
            *(t.detach().transpose(1, 2).double() for t in (q, k, v)), attn_mask=sdpa_bias.double()
        ).backward(dout.transpose(1, 2).double())
        assert rel_error(bias.grad, sdpa_bias.grad.double()) <= 2e-5
        with torch.no_grad():  # no gradient wanted: the expanded bias is read as it is, no copy
            assert rel_error(memattn.attention(q, k, v, bias=bias), math_attention(q, k, v, bias=ref_bias)) <= 1e-5


@pytest.mark.parametrize("bad, message", [
    (dict(q=torch.randn(1, 4, 3, 8)), "multiple of kv heads"),
    (dict(k=torch.randn(1, 4, 2, 9)), "k: expected"),
    (dict(q=torch.randn(1, 4, 2, 8, dtype=torch.float16)), "dtype"),
    (dict(window=(-2, 0)), "window left"),
    (dict(dropout_p=1.0), "dropout_p"),
    (dict(alignment="middle"), "alignment"),
    (dict(bias=torch.randn(1, 2, 5, 4)), "bias: dimension 2"),
    (dict(q=torch.randn(4, 2, 8)), "4-d"),
    # D = 0 is refused by the library (it was a ZeroDivisionError computing 1/sqrt(D))
    (dict(q=torch.randn(1, 4, 2, 0), k=torch.randn(1, 4, 2, 0)), r"q: head dim D = 0 is outside \[1, 65536\]"),
    (dict(v=torch.randn(1, 4, 2, 0)), r"v: head dim Dv = 0 is outside \[1, 65536\]"),
    # a window beyond int64 was a pybind signature dump
    (dict(window=(2**64, 0)), r"window left .*must be an int in \[0, 2\^63 - 1\], got 18446744073709551616"),
    (dict(window=(None, -(2**70))), r"window right .*must be an int in \[0, 2\^63 - 1\]"),
    (dict(window=5), r"window must be \(left, right\)"),
    (dict(window=(3, 2), causal=True), "causal=True means window right = 0"),
    # the library's message for a float64 bias with float32 q
    (dict(bias=torch.randn(1, 2, 4, 4, dtype=torch.float64)), "bias: dtype f64 must be f32"),
    # silently accepted before (the string parsed as a float, the bools read as 1 and 0)
    (dict(scale="0.5"), r"scale must be a real number \(int or float\), got '0.5'"),
    (dict(window=(True, False)), r"window left .*got True"),
    (dict(window=(1.5, None)), r"window left .*got 1.5"),
    (dict(scale=True), "scale must be a real number"),
    (dict(scale=float("inf")), "scale: must be finite"),
    (dict(dropout_p="0.1"), "dropout_p must be a real number"),
    (dict(causal="no"), "causal must be True or False, got 'no'"),
    (dict(deterministic=1), "deterministic must be True or False, got 1"),
    (dict(bias=[[0.0]]), "bias must be a tensor or None, got list"),
    (dict(precision="tf32"), "precision must be one of 'auto', 'ieee', 'tf32x3', got 'tf32'"),
    (dict(precision=2), "precision must be one of"),
])
def test_errors_are_python_exceptions_with_the_message(bad, message):
    args = dict(q=torch.randn(1, 4, 2, 8), k=torch.randn(1, 4, 2, 8), v=torch.randn(1, 4, 2, 8))
    args.update(bad)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(ValueError, match=message):
        memattn.attention(q, k, v, **args)


@pytest.mark.parametrize("device", DEVICES)
def test_precision_picks_the_float32_products(device):
    """float32 on CUDA: tf32x3 (3xTF32 tensor cores) and ieee (FMAs) both meet the float32 tolerance;
    "auto" is tf32x3, but ieee on a recorded call whose backward has no 3xTF32 row (a bias, or
    deterministic); tf32x3 on a recorded call runs the 3xTF32 forward, and its gradients meet the
    float32 gradient tolerance. The forward kernels are deterministic, so the choice shows bit for
    bit. The CPU computes with FMAs whatever the setting."""
    q, k, v = (torch.randn(2, 150, 4, 64, dtype=torch.float64) for _ in range(3))
    ref = math_attention(q, k, v)
    q, k, v = (t.float().to(device) for t in (q, k, v))
    out = {p: memattn.attention(q, k, v, precision=p) for p in ("ieee", "tf32x3")}
    for p, o in out.items():
        assert rel_error(o.cpu(), ref) <= TOLERANCE[torch.float32], p
    assert torch.equal(memattn.attention(q, k, v), out["tf32x3"])
    recorded = memattn.attention(q.clone().requires_grad_(), k, v)
    assert torch.equal(recorded.detach(), out["tf32x3"])
    recorded = memattn.attention(q.clone().requires_grad_(), k, v, deterministic=True)
    assert torch.equal(recorded.detach(), out["ieee"])
    bias = torch.randn(2, 4, 150, 150, device=device)
    recorded = memattn.attention(q.clone().requires_grad_(), k, v, bias=bias)
    assert torch.equal(recorded.detach(), memattn.attention(q, k, v, bias=bias, precision="ieee"))
    with torch.no_grad():
        assert torch.equal(memattn.attention(q.clone().requires_grad_(), k, v), out["tf32x3"])
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    trained = memattn.attention(*inputs, precision="tf32x3")
    assert torch.equal(trained.detach(), out["tf32x3"])
    dout = torch.randn_like(trained)
    grads = torch.autograd.grad(trained, inputs, dout)
    ref_inputs = [t.detach().double().cpu().requires_grad_() for t in (q, k, v)]
    ref_grads = torch.autograd.grad(math_attention(*ref_inputs), ref_inputs, dout.double().cpu())
    for g, r in zip(grads, ref_grads):
        assert rel_error(g.cpu(), r) <= 2 * TOLERANCE[torch.float32]
    half = memattn.attention(q.half(), k.half(), v.half())
    assert rel_error(half.cpu(), ref) <= TOLERANCE[torch.float16]
    assert torch.equal(memattn.attention(q.half(), k.half(), v.half().requires_grad_(), precision="tf32x3").detach(),
                       half)  # 16-bit: ignored
    if device == "cpu":
        assert torch.equal(out["ieee"], out["tf32x3"])


@pytest.mark.parametrize("device", DEVICES)
def test_an_unsupported_dtype_is_a_value_error(device):
    q = torch.ones(1, 4, 2, 8, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="dtype"):
        memattn.attention(q, q, q)
    with pytest.raises(ValueError, match="4-d"):
        memattn.scaled_dot_product_attention(q[0], q[0], q[0])


def test_sdpa_flags_are_named_as_sdpa_names_them():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="is_causal must be True or False, got 'yes'"):
        memattn.scaled_dot_product_attention(q, q, q, is_causal="yes")
    with pytest.raises(ValueError, match="enable_gqa must be True or False, got None"):
        memattn.scaled_dot_product_attention(q, q, q, enable_gqa=None)
    with pytest.raises(ValueError, match="scale must be a real number"):
        memattn.scaled_dot_product_attention(q, q, q, scale="1")


def test_varlen_offsets_must_be_int32():
    q = torch.randn(1, 10, 2, 8)
    starts = torch.tensor([0, 4, 10], dtype=torch.int64)
    with pytest.raises(ValueError, match="seqstart_q must be a 1-d int32 tensor"):
        memattn.attention(q, q, q, seqstart_q=starts, seqstart_k=starts.int())


def test_float64_on_cuda_is_refused():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64, device="cuda")
    with pytest.raises(ValueError, match="reference backend only"):
        memattn.attention(q, q, q)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b, mq, mk, hq, hk", [
    (0, 4, 5, 2, 1), (2, 0, 5, 2, 1), (2, 4, 0, 2, 1), (2, 4, 5, 0, 0), (2, 4, 5, 0, 1),
], ids=["B=0", "Mq=0", "Mk=0", "Hq=Hk=0", "Hq=0"])
def test_empty_problems_give_the_defined_results(device, b, mq, mk, hq, hk):
    """Issue 30 #9: B, Mq, Mk or H = 0 ("q: data pointer is null" before) give out 0, LSE -inf and
    zero gradients wherever those have elements, with the shapes of the inputs."""
    q, k, v = leaf((b, mq, hq, 8), torch.float32, device), leaf((b, mk, hk, 8), torch.float32, device), \
        leaf((b, mk, hk, 6), torch.float32, device)
    bias = leaf((1, hq, mq, mk), torch.float32, device)
    out, lse = memattn.attention(q, k, v, bias=bias, causal=True, return_lse=True)
    assert out.shape == (b, mq, hq, 6) and lse.shape == (b, hq, mq)
    assert torch.equal(out, torch.zeros_like(out)) and bool((lse == float("-inf")).all())
    grads = torch.autograd.grad(out, (q, k, v, bias), torch.randn_like(out))
    for name, g, t in zip(("dq", "dk", "dv", "dbias"), grads, (q, k, v, bias)):
        assert g.shape == t.shape and torch.equal(g, torch.zeros_like(t)), name
    sdpa = memattn.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
    assert sdpa.shape == (b, hq, mq, 6) and torch.equal(sdpa, torch.zeros_like(sdpa))


@pytest.mark.parametrize("device", DEVICES)
def test_huge_windows_are_unbounded(device):
    """Issue 30 #6, the op's part: window sides up to int64's maximum pass to the library, which
    treats those of Mq + Mk or more as unbounded (they overflowed its arithmetic before)."""
    q, k, v = leaf((1, 9, 2, 8), torch.float32, device), leaf((1, 12, 2, 8), torch.float32, device), \
        leaf((1, 12, 2, 8), torch.float32, device)
    huge = 2**63 - 1
    for window, same in [((huge, huge), {}), ((huge, 0), dict(causal=True)), ((0, huge), dict(window=(0, None))),
                         ((21, 21), {})]:
        for alignment in ("top_left", "bottom_right"):
            got = memattn.attention(q, k, v, window=window, alignment=alignment)
            assert torch.equal(got, memattn.attention(q, k, v, alignment=alignment, **same)), (window, alignment)


def test_fake_implementation_refuses_what_the_library_refuses():
    """Issue 30 #12: the fake (meta) implementation accepted Hq = 3 with Hk = 2, so a traced
    program got shapes for a call that fails when run. Meta tensors take the custom ops'
    fake implementations, as torch.compile does; compiling refuses at trace time."""
    def meta(*shape, dtype=torch.float32):
        return torch.empty(shape, dtype=dtype, device="meta")

    out, lse = memattn.attention(meta(2, 5, 4, 8), meta(2, 7, 2, 8), meta(2, 7, 2, 3), bias=meta(1, 4, 5, 7),
                                 return_lse=True)
    assert out.shape == (2, 5, 4, 3) and out.device.type == "meta" and lse.shape == (2, 4, 5)
    for args, kwargs, message in [
        ((meta(1, 4, 3, 8), meta(1, 4, 2, 8), meta(1, 4, 2, 8)), {}, "Hq = 3 must be a multiple of kv heads Hk = 2"),
        ((meta(1, 4, 2, 8), meta(1, 4, 2, 7), meta(1, 4, 2, 8)), {}, r"k: expected \[1, 4, 2, 8\], got \[1, 4, 2, 7\]"),
        ((meta(1, 4, 2, 8), meta(1, 5, 2, 8), meta(1, 4, 2, 8)), {}, r"v: expected \[1, 5, 2, 8\]"),
        ((meta(2, 4, 2, 8), meta(1, 4, 2, 8), meta(1, 4, 2, 8)), {}, r"k: expected \[2, 4, 2, 8\]"),
        ((meta(1, 4, 2, 8), meta(1, 4, 0, 8), meta(1, 4, 0, 8)), {}, "Hk = 0"),
        ((meta(1, 4, 2, 8), meta(1, 4, 2, 8), meta(1, 4, 2, 0)), {}, "Dv = 0"),
        ((meta(1, 4, 2, 8), meta(1, 4, 2, 8, dtype=torch.float16), meta(1, 4, 2, 8)), {}, "k: dtype"),
        ((meta(1, 4, 2, 8),) * 3, dict(bias=meta(1, 2, 3, 4)), "bias: dimension 2 has size 3"),
        ((meta(1, 4, 2, 8),) * 3, dict(bias=meta(1, 2, 4, 4, dtype=torch.float64)), "bias: dtype"),
    ]:
        with pytest.raises(ValueError, match=message):
            memattn.attention(*args, **kwargs)
    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 2, 8)
    compiled = torch.compile(lambda q, k, v: memattn.attention(q, k, v), backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match="Hq = 3 must be a multiple of kv heads Hk = 2"):
        compiled(q, k, k)


@pytest.mark.parametrize("args, error, message", [
    # the size product overflowed to 0 and the fill wrote past the buffer (SIGSEGV)
    ((1, 0, 2**32, 2**32, 1, 1, 0.5), ValueError, r"batch \* heads_q = 4294967296 \* 4294967296 exceeds 2\^32"),
    ((1, 0, 2**16, 2**16, 2**32, 2**34, 0.5), MemoryError, r"needs 2\^?\d+|needs \d+ bytes on cpu; \d+ are available"),
    ((1, 0, 2**16, 2**16, 2**10, 1, 0.5), MemoryError, r"\[65536, 65536, 1024, 1\] \(torch.bool\) needs 4398046511104 "
                                                       r"bytes on cpu; \d+ are available"),
    # p = -0.5 was accepted
    ((1, 0, 1, 1, 2, 2, -0.5), ValueError, r"p must be in \[0, 1\), got -0.5"),
    ((1, 0, 1, 1, 2, 2, True), ValueError, "p must be a real number"),
    ((1, 2**32, 1, 1, 2, 2, 0.5), ValueError, r"offset .*must be an int in \[0, 2\^32 - 1\], got 4294967296"),
    ((2**64, 0, 1, 1, 2, 2, 0.5), ValueError, r"seed must be an int in \[0, 2\^64 - 1\]"),
    ((1, 0, -1, 1, 2, 2, 0.5), ValueError, r"batch must be an int in \[0, 2\^32\], got -1"),
    ((1, 0, 1, 1, 2**32 + 1, 2, 0.5), ValueError, "seqlen_q must be an int"),
    ((1, 0, 1, 1, 2, 2**34 + 1, 0.5), ValueError, "seqlen_k must be an int"),
    ((1, 0, 1.0, 1, 2, 2, 0.5), ValueError, "batch must be an int .*got 1.0"),
])
def test_dropout_mask_refuses_what_it_cannot_make(args, error, message):
    with pytest.raises(error, match=message):
        memattn.dropout_mask(*args)


def test_dropout_mask_of_zero_size_and_of_the_limits():
    assert memattn.dropout_mask(1, 0, 0, 2, 3, 4, 0.5).shape == (0, 2, 3, 4)
    # The last offset and the last seed are the Philox counter's and key's; p = 0 keeps everything.
    keep = memattn.dropout_mask(2**64 - 1, 2**32 - 1, 1, 2, 3, 5, 0.0)
    assert keep.dtype == torch.bool and bool(keep.all())
    keep = memattn.dropout_mask(7, 3, 2, 2, 16, 16, 0.25)
    assert 0.6 < keep.float().mean().item() < 0.9


def test_outputs_that_cannot_be_allocated_are_a_memory_error():
    """Issue 30 deliverable 3: out [1, 2^20, 1, 2^20] (4 TiB) of inputs that are views of a few
    bytes is refused with the bytes needed and available, in every path; so is the copy of an
    input whose last dimension has stride 0 (the library reads it with stride 1)."""
    q = torch.randn(1, 1, 1, 1).expand(1, 2**20, 1, 1)
    v = torch.randn(1, 1, 1, 1).expand(1, 1, 1, 2**20)
    with pytest.raises(MemoryError, match=r"out \[1, 1048576, 1, 1048576\].* needs 4398046511104 bytes on cpu; "
                                          r"\d+ are available"):
        memattn.attention(q, torch.randn(1, 1, 1, 1), v)
    q = torch.randn(1, 1, 1, 1).expand(1, 2**20, 1, 2**16)
    with pytest.raises(MemoryError, match=r"q \(a copy with a contiguous last dimension\) \[1, 1048576, 1, 65536\]"):
        memattn.attention(q, q[:, :1], q[:, :1])


def test_gradients_that_cannot_be_allocated_are_a_memory_error():
    """Issue 30 deliverable 3, in the backward (through the autograd engine): dq of an expanded q
    [1, M, 1, 2^16] needs twice the memory available. Mk = 0 keeps the forward empty (and cheap)."""
    available = memattn._ops.host_memory_available()
    if available is None:
        pytest.skip("the system does not say how much memory is available")
    m = -(-2 * available // (4 * 2**16))
    q = torch.randn(1, 1, 1, 2**16).expand(1, m, 1, 2**16).requires_grad_()
    k = torch.randn(1, 0, 1, 2**16, requires_grad=True)
    out = memattn.attention(q, k, torch.randn(1, 0, 1, 1))
    with pytest.raises(MemoryError, match=rf"dq \[1, {m}, 1, 65536\].* needs {m * 4 * 2**16} bytes on cpu; "
                                          r"\d+ are available"):
        out.sum().backward()


def test_library_out_of_memory_is_a_memory_error(path):
    """Issue 30 deliverable 3: the library's out_of_memory Status (here the reference backward's
    float64 dbias scratch, [B, Hq, Mq, Mk], for a bias broadcast over ~4x available memory worth of
    heads) reaches Python as MemoryError with the library's numbers. The inputs are stride-0 views;
    the op refuses before it allocates or computes anything large."""
    if path != "op":
        pytest.skip("calls the backward op directly (the eager Functions call the library as it does)")
    available = memattn._ops.host_memory_available()
    if available is None:
        pytest.skip("the system does not say how much memory is available")
    mq = mk = 1024
    hq = -(-4 * available // (8 * mq * mk))
    f64 = torch.float64
    q = out = torch.zeros(1, 1, 1, 1, dtype=f64).expand(1, mq, hq, 1)
    k = v = torch.zeros(1, mk, 1, 1, dtype=f64)
    lse = torch.zeros(1, 1, mq).expand(1, hq, mq)
    with pytest.raises(MemoryError, match=r"host memory: the reference backend's backward needs about \d+ bytes"):
        torch.ops.memattn.attention_backward(out, q, k, v, torch.zeros(1, 1, mq, mk, dtype=f64), out, lse, -1, -1,
                                             False, 0.0, None, None, None, None, None, -1, -1, False, 0, True)


def packed(device, rows=10, keys=11):
    return leaf((1, rows, 2, 8), torch.float32, device), leaf((1, keys, 2, 8), torch.float32, device), \
        leaf((1, keys, 2, 8), torch.float32, device)


def int32(values, device="cpu"):
    return torch.tensor(values, dtype=torch.int32, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_rows_outside_every_sequence_are_defined(device):
    """Issue 30 #1 through the op: 10 packed rows with seqstart_q = [0, 3, 7], 11 keys with
    seqstart_k = [0, 4, 9] and seqused_k = [4, 3]. Rows 7-9 and keys 7-8 and 9-10 belong to no
    sequence: out 0, LSE -inf, zero gradients (they were never written)."""
    q, k, v = packed(device)
    sq, sk, used = int32([0, 3, 7], device), int32([0, 4, 9], device), int32([4, 3], device)
    out, lse = memattn.attention(q, k, v, seqstart_q=sq, seqstart_k=sk, seqused_k=used, return_lse=True)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert torch.equal(out[:, 7:], torch.zeros_like(out[:, 7:])) and bool((lse[..., 7:] == float("-inf")).all())
    assert torch.equal(dq[:, 7:], torch.zeros_like(dq[:, 7:]))
    for g in (dk, dv):
        assert torch.equal(g[:, 7:9], torch.zeros_like(g[:, 7:9])) and torch.equal(g[:, 9:], torch.zeros_like(g[:, 9:]))
    for s, (q0, q1, k0, k1) in enumerate([(0, 3, 0, 4), (3, 7, 4, 7)]):
        ref = math_attention(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1])
        assert rel_error(out[:, q0:q1], ref) <= 1e-5, s
        assert dq[:, q0:q1].abs().sum() > 0 and dk[:, k0:k1].abs().sum() > 0, s


@pytest.mark.parametrize("device", DEVICES)
def test_strided_seqstarts_are_read_as_given(device):
    """Issue 30 #2: a strided seqstart view (every other element of a longer tensor) was read as
    raw memory. The CPU library reads it through its stride; CUDA's kernels read these arrays
    contiguous, so the op makes a contiguous copy there."""
    q, k, v = packed(device, rows=12, keys=13)
    starts = int32([0, 3, 5, 9, 12], device), int32([0, 4, 4, 10, 13], device)
    strided = [torch.stack([s, torch.full_like(s, 99)], dim=1).flatten()[::2] for s in starts]
    assert strided[0].stride(0) == 2 and torch.equal(strided[0], starts[0])
    used = torch.stack([int32([4, 0, 5, 3], device)] * 3, dim=1).flatten()[::3]
    dout = torch.randn(1, 12, 2, 8, device=device)
    results = []
    for sq, sk, su in ((*starts, used.contiguous()), (*strided, used)):
        out = memattn.attention(q, k, v, causal=True, seqstart_q=sq, seqstart_k=sk, seqused_k=su)
        results.append((out, *torch.autograd.grad(out, (q, k, v), dout)))
    for name, a, b in zip(("out", "dq", "dk", "dv"), *results):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("varlen, message", [
    # half a description was accepted as full attention across the sequences
    (dict(seqstart_k=[0, 4, 11]), "varlen.seqstart_q: is missing, but varlen.seqstart_k is given"),
    (dict(seqused_k=[4, 3]), "varlen.seqstart_q: is missing, but varlen.seqused_k is given"),
    (dict(seqstart_q=[0, 3, 10]), "varlen.seqstart_k: is missing"),
    (dict(seqstart_q=[], seqstart_k=[0, 4, 11]), "varlen.seqstart_q: has 0 elements"),
    (dict(seqstart_q=[0, 3, 10], seqstart_k=[]), "varlen.seqstart_k: has 0 elements; it must have 3"),
    # arrays shorter than B + 1 / B were read past their end
    (dict(seqstart_q=[0, 3, 10], seqstart_k=[0, 4]), "varlen.seqstart_k: has 2 elements; it must have 3"),
    (dict(seqstart_q=[0, 3, 10], seqstart_k=[0, 4, 11], seqused_k=[4]), "varlen.seqused_k: has 1 elements; it must have 2"),
    (dict(seqstart_q=[0, 3, 10], seqstart_k=[0, 4, 11], seqused_k=[]), "varlen.seqused_k: has 0 elements; it must have 2"),
    (dict(seqstart_q=[0, 3, 10], seqstart_k=[0, 4, 11], seqused_k=[4, 8]), r"varlen.seqused_k\[1\] = 8 is outside \[0, 7\]"),
    (dict(seqstart_q=[0, 3, 11], seqstart_k=[0, 4, 11]), r"varlen.seqstart_q\[2\] = 11 exceeds the 10 packed rows"),
    (dict(seqstart_q=[0, 3, 10], seqstart_k=[0, 4, 11], device="meta"), "seqstart_q is on meta but q is on cpu"),
    (dict(seqstart_q=[[0, 3, 10]], seqstart_k=[0, 4, 11]), "seqstart_q must be a 1-d int32 tensor, got a 2-d"),
])
def test_incomplete_or_inconsistent_varlen_arrays_are_refused(varlen, message):
    q, k, v = packed("cpu")
    device = varlen.get("device", "cpu")
    arrays = {name: int32(values, device if name == "seqstart_q" else "cpu") for name, values in varlen.items()
              if name != "device"}
    with pytest.raises(ValueError, match=message):
        memattn.attention(q, k, v, **arrays)


@pytest.mark.parametrize("device", DEVICES)
def test_length_bounds_change_nothing_but_the_wait(device):
    """max_seqlen_q/max_seqlen_k: the same results as without them (rows outside every sequence
    included), bit for bit; on CUDA the call then reads no length on the host, so it can be
    captured in a CUDA graph (a copy to the host cannot be captured)."""
    q, k, v = packed(device)
    sq, sk, used = int32([0, 3, 7], device), int32([0, 4, 9], device), int32([4, 3], device)
    dout = torch.randn(1, 10, 2, 8, device=device)
    results = []
    for bounds in ({}, dict(max_seqlen_q=4, max_seqlen_k=4), dict(max_seqlen_q=9, max_seqlen_k=11)):
        out, lse = memattn.attention(q, k, v, causal=True, seqstart_q=sq, seqstart_k=sk, seqused_k=used,
                                     deterministic=True, return_lse=True, **bounds)
        results.append((out, lse, *torch.autograd.grad(out, (q, k, v), dout)))
    for other in results[1:]:
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), results[0], other):
            assert torch.equal(a, b), name
    out = results[0][0]
    for q0, q1, k0, k1 in ((0, 3, 0, 4), (3, 7, 4, 7)):  # the sequences, keys cut by seqused_k
        assert rel_error(out[:, q0:q1], math_attention(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], right=0)) <= 1e-5
    if device != "cuda":
        return
    q, k, v = (t.detach() for t in (q, k, v))
    # ieee: the calls above ran the FMA rows (deterministic, recorded); without autograd `auto` is 3xTF32
    bounded = dict(seqstart_q=sq, seqstart_k=sk, seqused_k=used, max_seqlen_q=4, max_seqlen_k=4, causal=True,
                   precision="ieee")
    memattn.attention(q, k, v, **bounded)  # outside the capture: whatever is set up once
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = memattn.attention(q, k, v, **bounded)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, results[0][0].detach())


def test_length_bounds_are_checked_on_the_cpu():
    q, k, v = packed("cpu")
    sq, sk = int32([0, 3, 7]), int32([0, 4, 9])
    with pytest.raises(ValueError, match="varlen.max_seqlen_q = 3 is less than the 4 query rows of sequence 1"):
        memattn.attention(q, k, v, seqstart_q=sq, seqstart_k=sk, max_seqlen_q=3, max_seqlen_k=5)
    with pytest.raises(ValueError, match="varlen.max_seqlen_k = 4 is less than the 5 used keys of sequence 1"):
        memattn.attention(q, k, v, seqstart_q=sq, seqstart_k=sk, max_seqlen_q=4, max_seqlen_k=4)
    with pytest.raises(ValueError, match=r"max_seqlen_k must be an int in \[0, 2\^63 - 1\], got -1"):
        memattn.attention(q, k, v, seqstart_q=sq, seqstart_k=sk, max_seqlen_k=-1)


def test_one_element_seqstarts_describe_no_sequence():
    """A varlen description of no sequence (seqstarts [s]) is an empty problem: every packed row
    is outside, out 0, LSE -inf, zero gradients."""
    q, k, v = packed("cpu")
    out, lse = memattn.attention(q, k, v, seqstart_q=int32([0]), seqstart_k=int32([0]), seqused_k=int32([]),
                                 return_lse=True)
    assert torch.equal(out, torch.zeros_like(out)) and bool((lse == float("-inf")).all())
    for g, t in zip(torch.autograd.grad(out, (q, k, v), torch.randn_like(out)), (q, k, v)):
        assert torch.equal(g, torch.zeros_like(t))
