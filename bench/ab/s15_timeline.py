"""Session 15: where the synchronised backward's time goes at a suite shape, per call: torch.profiler
(CPU and CUDA) around bench.py-style calls (event, grad, event, synchronise), printing for each
call the host time to the first launch, the first launch to the first kernel's start, gaps
between kernels, and the kernels themselves.
  PYTHONPATH=build-s15/python:bench python3 bench/ab/s15_timeline.py [B,H,S,D,causal ...]
(session 16 added the shapes on the command line; the default is session 15's two)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

import memattn


def calls(name, fwd, q, k, v, dout, n=6):
    out = fwd()
    for _ in range(3):
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with record_function(f"call{i}"):
                start.record()
                torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                stop.record()
            stop.synchronize()
    events = prof.events()
    print(f"\n{name}")
    for i in range(n):
        call = next(e for e in events if e.name == f"call{i}")
        t0, t1 = call.time_range.start, call.time_range.end
        launches = sorted(e.time_range.start for e in events
                          if e.name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemsetAsync", "cuLaunchKernel",
                                        "cudaLaunchKernelEx") and t0 <= e.time_range.start <= t1)
        kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                         if e.device_type == torch.autograd.DeviceType.CUDA and t0 <= e.time_range.start <= t1 + 20000)
        if not kernels or not launches:
            print("  no kernels found")
            continue
        gaps = [b[0] - a[1] for a, b in zip(kernels, kernels[1:])]
        print(f"  call {i}: host to first launch {launches[0] - t0:7.1f} us, launch to kernel {kernels[0][0] - launches[0]:6.1f}, "
              f"host call {t1 - t0:7.1f}, kernels " + ", ".join(f"{k[2][:28]} {k[1] - k[0]:.0f}" for k in kernels) +
              f"; gaps {[round(g, 1) for g in gaps]}; first kernel start to last end {kernels[-1][1] - kernels[0][0]:.0f}")


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    shapes = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]] or [(8, 16, 2048, 128, 0), (8, 32, 2048, 64, 1)]
    for b, h, s, d, causal in shapes:
        causal = bool(causal)
        gen = torch.Generator(device="cuda").manual_seed(1)
        q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))

        def flash():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def mem():
            return memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)

        print(f"\n=== B={b} H={h} S={s} D={d} causal={int(causal)}")
        calls("sdpa flash", flash, q, k, v, dout)
        calls("memattn", mem, q, k, v, dout)


if __name__ == "__main__":
    main()
