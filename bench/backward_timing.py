"""The backward timed per call (the suite's way) and back to back, memattn against SDPA's cuDNN.

bench.py times one synchronised call at a time, so each call's host time before its first kernel
counts; calls issued back to back between two events do not pay it (the GPU stays busy). Per
problem ([B, H, S, D] bf16 tensors, torch.autograd.grad of a retained graph) this prints both
timings for each library and, with --kernels, the GPU time of each kernel of one memattn
backward (torch.profiler): the delta kernel, the backward kernel, the dQ conversion.
  PYTHONPATH=build-gpu/python python3 bench/backward_timing.py [--kernels] [--problem B,H,S,D[,causal]]...
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import memattn
from bench import time_ms as per_call_ms  # events around one call, then a synchronisation

PROBLEMS = ["8,32,2048,64", "8,32,2048,64,causal", "2,32,8192,64,causal", "8,16,2048,128,causal",
            "2,16,8192,128"]


def back_to_back_ms(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def cudnn_attention(q, k, v, causal):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", action="append", help="B,H,S,D[,causal] (repeatable; default: five of the suite's)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--kernels", action="store_true", help="the GPU time of each kernel of one memattn backward")
    args = ap.parse_args()
    for text in args.problem or PROBLEMS:
        fields = text.split(",")
        b, h, s, d = (int(x) for x in fields[:4])
        causal = len(fields) > 4 and fields[4] == "causal"
        flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
        q, k, v, dout = (torch.randn((b, h, s, d), device="cuda", dtype=torch.bfloat16) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        for name, attention in (("memattn", lambda: memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)),
                                ("cuDNN", lambda: cudnn_attention(q, k, v, causal))):
            out = attention()
            backward = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            one, queued = per_call_ms(backward, args.iters), back_to_back_ms(backward, args.iters)
            print(f"B {b} H {h} S {s} D {d}{' causal' if causal else ''}  {name:8s} per call {one:.3f} ms "
                  f"({flops / one / 1e9:.0f} TFLOP/s), back to back {queued:.3f} ms ({flops / queued / 1e9:.0f})",
                  flush=True)
        if args.kernels:
            out = memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                torch.cuda.synchronize()
            for e in prof.key_averages():
                if e.device_time_total > 0 and e.cpu_time_total == 0:  # the GPU's own: kernels, memsets
                    print(f"    {e.device_time_total / 1000:7.3f} ms  {e.key[:100]}")


if __name__ == "__main__":
    main()
