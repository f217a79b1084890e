"""Session 15: where the eager backward's host time goes before the library call.

Host us per torch.autograd.grad call (tiny problem, back to back) for: SDPA FLASH; builtin ops;
trivial torch.autograd.Functions shaped like memattn's (14 inputs, 2 outputs) whose backward only
allocates the gradients, with and without once_differentiable / the transposed views / fewer
inputs; and memattn's eager path with time stamps at the entry of its backward and around the
library call.
  PYTHONPATH=build-run/v2/python:bench python3 bench/ab/s15_autograd.py
"""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import memattn
from host_overhead import host_us  # wall time per call of calls issued back to back
from memattn import _ops


class Trivial14(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, a, b, c, d, rng, scale, s1, s2, s3, det):
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], device=q.device)
        ctx.save_for_backward(q, k, v, bias, out, lse, rng, s1, s2, s3)
        ctx.settings = (a, b, c, d, scale, det)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dlse):
        q, k, v, bias, out, lse, rng, s1, s2, s3 = ctx.saved_tensors
        return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)) + (None,) * 11


class Trivial14Plain(Trivial14):
    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, bias, out, lse, rng, s1, s2, s3 = ctx.saved_tensors
        return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)) + (None,) * 11


class Trivial3(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return torch.empty_like(q)

    @staticmethod
    def backward(ctx, dout):
        q, k, v = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


STAMPS = {}


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    b, h, s, d = 1, 1, 128, 128
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    args = (None, -1, -1, False, 0.0, None, 0.1, None, None, None, False)

    def grad(o, g):
        return lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True)

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        o_flash = F.scaled_dot_product_attention(q, k, v)
    o_builtin = (q * 2 + k + v)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    o_t14 = Trivial14.apply(qt, kt, vt, *args)[0].transpose(1, 2)
    o_t14p = Trivial14Plain.apply(qt, kt, vt, *args)[0].transpose(1, 2)
    o_t14_direct = Trivial14.apply(q, k, v, *args)[0]
    o_t3 = Trivial3.apply(q, k, v)
    o_mem = memattn.scaled_dot_product_attention(q, k, v)
    rows = [("sdpa flash", grad(o_flash, dout)),
            ("builtin q*2+k+v", grad(o_builtin, dout)),
            ("Trivial14 (once_differentiable, views)", grad(o_t14, dout)),
            ("Trivial14 plain backward (views)", grad(o_t14p, dout)),
            ("Trivial14 no views", grad(o_t14_direct, dout)),
            ("Trivial3 no views", grad(o_t3, dout)),
            ("memattn eager", grad(o_mem, dout))]
    print("\nhost us per torch.autograd.grad call (B=1 H=1 S=128 D=128 bf16)")
    for name, fn in rows:
        print(f"  {name:42s} {host_us(fn):8.1f}")

    # Time stamps inside memattn's eager backward.
    real_backward_op, real_inputs = _ops._backward_op, _ops._backward_inputs

    def inputs(ctx, dout):
        STAMPS["enter"] = time.perf_counter()
        return real_inputs(ctx, dout)

    def backward_op(*a):
        STAMPS["op"] = time.perf_counter()
        r = real_backward_op(*a)
        STAMPS["op_done"] = time.perf_counter()
        return r

    _ops._backward_inputs, _ops._backward_op = inputs, backward_op
    fn = grad(o_mem, dout)
    totals = {"to backward": [], "inputs": [], "op": [], "after op": []}
    for i in range(420):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        if i >= 20:
            totals["to backward"].append(STAMPS["enter"] - t0)
            totals["inputs"].append(STAMPS["op"] - STAMPS["enter"])
            totals["op"].append(STAMPS["op_done"] - STAMPS["op"])
            totals["after op"].append(t1 - STAMPS["op_done"])
    print("\nmemattn eager backward, median us per stage (synchronised before each call)")
    for name, xs in totals.items():
        xs.sort()
        print(f"  {name:20s} {xs[len(xs) // 2] * 1e6:8.1f}")

    _ops._backward_inputs, _ops._backward_op = real_inputs, real_backward_op
    for name, f in (("memattn eager", fn), ("sdpa flash", rows[0][1])):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(50):
                f()
        print(f"\nprofiler, {name}: 50 calls")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
