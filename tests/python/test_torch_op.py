"""The PyTorch op: outputs and gradients against torch math attention in float64 for every feature
and dtype, gradcheck in float64, opcheck, torch.compile without graph breaks, dropout
reproducibility, the SDPA layout, double backward, and errors. CPU tensors always; CUDA tensors
where a GPU is present (a pass the CUDA backend does not have yet is skipped with the library's
reason). Every test runs through each eager path: the C++ autograd Function (memattn._autograd,
where the package was built with torch) and the Python Function it falls back to. Random inputs come
from conftest.py's per-test seed (MEMATTN_TEST_SEED)."""
import math

import pytest

torch = pytest.importorskip("torch")
import memattn  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TOLERANCE = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float64: 1e-12}
EAGER_PATHS = ["python"] + (["cpp"] if memattn._ops._autograd is not None else [])


@pytest.fixture(autouse=True, params=EAGER_PATHS)
def eager_path(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(memattn._ops, "_autograd", None)
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
        out, _ = torch.ops.memattn.attention_forward(q, k, v, bias, 3, 1, True, 0.25, rng, 0.5, None, None, None, False)
        return out

    assert torch.autograd.gradcheck(f, (q, k, v, bias), eps=1e-6, atol=1e-8)


def test_opcheck():
    q, k, v = torch.randn(2, 9, 2, 8), torch.randn(2, 11, 1, 8), torch.randn(2, 11, 1, 8)
    bias = torch.randn(2, 1, 9, 11, requires_grad=True)
    for args in [(q, k, v, None, -1, 0, False, 0.0, None, 0.35, None, None, None, False),
                 (q.requires_grad_(), k, v, bias, 4, 2, True, 0.0, None, 0.35, None, None, None, False)]:
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


def test_double_backward_raises():
    q, k, v = (torch.randn(1, 5, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = memattn.attention(q, k, v)
    dq, = torch.autograd.grad(out.square().sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError, match="differentiat"):
        torch.autograd.grad(dq.sum(), (q,))


def test_expanded_bias_gradient_sums_the_broadcast():
    q, k, v = (torch.randn(2, 7, 3, 8) for _ in range(3))
    base = torch.randn(1, 3, 7, 7, dtype=torch.float32, requires_grad=True)
    bias = base.expand(2, 3, 7, 7)  # stride 0 on the batch
    out = memattn.attention(q, k, v, bias=bias)
    (g,) = torch.autograd.grad(out.sum(), (base,))
    base_ref = base.detach().double().requires_grad_()
    ref = math_attention(q, k, v, bias=base_ref.expand(2, 3, 7, 7))
    (r,) = torch.autograd.grad(ref.sum(), (base_ref,))
    assert rel_error(g, r) <= 2e-5


@pytest.mark.parametrize("bad, message", [
    (dict(q=torch.randn(1, 4, 3, 8)), "multiple of kv heads"),
    (dict(k=torch.randn(1, 4, 2, 9)), "k: expected"),
    (dict(q=torch.randn(1, 4, 2, 8, dtype=torch.float16)), "dtype"),
    (dict(window=(-2, 0)), "window left"),
    (dict(dropout_p=1.0), "dropout_p"),
    (dict(alignment="middle"), "alignment"),
    (dict(bias=torch.randn(1, 2, 5, 4)), "bias: dimension 2"),
    (dict(q=torch.randn(4, 2, 8)), "4-d"),
])
def test_errors_are_python_exceptions_with_the_message(bad, message):
    args = dict(q=torch.randn(1, 4, 2, 8), k=torch.randn(1, 4, 2, 8), v=torch.randn(1, 4, 2, 8))
    args.update(bad)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(ValueError, match=message):
        memattn.attention(q, k, v, **args)


@pytest.mark.parametrize("device", DEVICES)
def test_an_unsupported_dtype_is_a_value_error(device):
    q = torch.ones(1, 4, 2, 8, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="dtype"):
        memattn.attention(q, q, q)
    with pytest.raises(ValueError, match="4-d"):
        memattn.scaled_dot_product_attention(q[0], q[0], q[0])


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
