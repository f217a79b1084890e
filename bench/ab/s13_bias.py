"""The suite's dense-bias row (bf16 D = 128 S = 2048, bias without a gradient) through the memattn
op on PYTHONPATH: backward ms (bench.py's timing, median of 30), or one call for ncu with `one`,
or with `check` the op's gradients on an awkward shape against SDPA's math backend in fp32.
PYTHONPATH=build-run/new/python python3 bench/ab/s13_bias.py [one|check]"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench  # noqa: E402

cfg = dict(dtype="bf16", D=128, S=2048, causal=False, bias=True, hidden=2048)
attend = bench.memattn_attend()
if sys.argv[1:] == ["check"]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    gen = torch.Generator(device="cuda").manual_seed(1)
    b, h, s, d = 2, 4, 1000, 128
    q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    bias = torch.randn((b, h, s, s), generator=gen, device="cuda", dtype=torch.bfloat16)
    grads = []
    for f32 in (False, True):
        x = [t.float() if f32 else t for t in (q, k, v)]
        x = [t.detach().requires_grad_() for t in x]
        if f32:
            with sdpa_kernel([SDPBackend.MATH]):
                out = torch.nn.functional.scaled_dot_product_attention(*x, attn_mask=bias.float())
            g = torch.autograd.grad(out, x, dout.float())
        else:
            out = attend(*x, bias, False)
            g = torch.autograd.grad(out, x, dout)
        grads.append([t.float() for t in g])
    for name, mine, ref in zip(("dq", "dk", "dv"), *grads):
        err = (mine - ref).abs().max().item() / ref.abs().max().item()
        print(f"{name}: max abs error / max abs {err:.2e}", "ok" if err < 2e-2 else "TOO LARGE")
    sys.exit(0)
inputs = bench.make_inputs(cfg, 0)
if sys.argv[1:] == ["one"]:
    q, k, v, dout, bias = inputs
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attend(q, k, v, bias, False)
    torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
else:
    for _ in range(2):
        fwd, bwd = bench.time_impl(attend, cfg, inputs, 30)
        print(f"bias row: forward {fwd:.3f} ms, backward {bwd:.3f} ms "
              f"({2.5 * bench.flops_forward(cfg) / bwd / 1e9:.1f} TFLOP/s)")
