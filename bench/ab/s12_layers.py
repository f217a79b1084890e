"""Session 12: the backward's host cost by layer at the suite's D = 128 S = 2048 shape: per layer,
host us per call (GPU busy, calls back to back), bench.py's synchronised ms and queued ms; the
difference sync - queued is the host time the GPU waits for.
  PYTHONPATH=build-run/base/python:bench python3 bench/ab/s12_layers.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import memattn
from host_overhead import host_us, queued_ms, sync_ms
from memattn import _C, _ops


def layers(b=8, h=16, s=2048, d=128):
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dout = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    scale = 1.0 / d ** 0.5
    fargs = (-1, -1, False, 0.0, None, scale, None, None, None)
    out, lse = _ops._forward(q, k, v, None, *fargs)
    opts = _ops._options(q, *fargs[:4], None, scale, None, None, None)
    bare = dict(opts, workspace=None)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    desc = _ops._desc
    bdesc = (desc(q), desc(k), desc(v), None, desc(out), desc(lse), desc(dout), desc(dq), desc(dk), desc(dv), None, False)
    eager_out = memattn.attention(q, k, v)
    qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        flash_out = F.scaled_dot_product_attention(qt, kt, vt)
    dout_t = dout.transpose(1, 2)
    rows = [
        ("sdpa flash autograd.grad", lambda: torch.autograd.grad(flash_out, (qt, kt, vt), dout_t, retain_graph=True)),
        ("eager autograd.grad", lambda: torch.autograd.grad(eager_out, (q, k, v), dout, retain_graph=True)),
        ("_ops._backward_op", lambda: _ops._backward_op(dout, q, k, v, None, out, lse, *fargs, False, False)),
        ("_C.backward (workspace callback)", lambda: _C.backward(*bdesc, opts)),
        ("_C.backward (library workspace)", lambda: _C.backward(*bdesc, bare)),
    ]
    print(f"B={b} H={h} S={s} D={d}: host us / sync ms / queued ms")
    for name, fn in rows:
        print(f"  {name:36s} {host_us(fn, 20):8.1f} {sync_ms(fn, 20):8.3f} {queued_ms(fn, 20):8.3f}", flush=True)


if __name__ == "__main__":
    layers()
    layers(8, 32, 2048, 64)
