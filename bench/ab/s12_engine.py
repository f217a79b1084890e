"""Session 12: where the eager backward's latency goes with an idle GPU (bench.py's situation):
the time from torch.autograd.grad's call to our Function's backward starting, inside it, and
from its return to autograd.grad returning (medians, us), for variants of the Function.
  PYTHONPATH=build-run/base/python:bench python3 bench/ab/s12_engine.py
"""
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import memattn
from host_overhead import queued_ms, sync_ms
from memattn import _ops

stamps = {}
original = _ops._EagerAttention.backward


def stamped(ctx, dout, dlse):
    stamps["enter"] = time.perf_counter()
    r = original(ctx, dout, dlse)
    stamps["exit"] = time.perf_counter()
    return r


def measure(name, fn, n=30):
    parts = []
    for i in range(n + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        if i >= 3:
            parts.append((stamps.get("enter", t0) - t0, stamps.get("exit", t1) - stamps.get("enter", t0), t1 - stamps.get("exit", t1)))
    med = [statistics.median(p[j] for p in parts) * 1e6 for j in range(3)]
    print(f"  {name:40s} to backward {med[0]:7.1f}  in it {med[1]:7.1f}  after {med[2]:7.1f}  "
          f"sync {sync_ms(fn, 20):.3f} queued {queued_ms(fn, 20):.3f}", flush=True)


def run(b, h, s, d):
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dout = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    print(f"B={b} H={h} S={s} D={d}")
    _ops._EagerAttention.backward = staticmethod(torch.autograd.function.once_differentiable(stamped))
    out = memattn.attention(q, k, v)
    measure("eager (as shipped)", lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    stamps.clear()
    qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        fo = F.scaled_dot_product_attention(qt, kt, vt)
    measure("sdpa flash", lambda: torch.autograd.grad(fo, (qt, kt, vt), dout.transpose(1, 2), retain_graph=True))
    # The op without autograd, on the calling thread
    fargs = (-1, -1, False, 0.0, None, 1.0 / d ** 0.5, None, None, None)
    o2, lse = _ops._forward(q, k, v, None, *fargs)
    measure("_ops._backward_op (no autograd)", lambda: _ops._backward_op(dout, q, k, v, None, o2, lse, *fargs, False, False))


if __name__ == "__main__":
    print("switch interval", __import__("sys").getswitchinterval())
    run(8, 16, 2048, 128)
    run(8, 32, 2048, 64)
