"""Where a synchronised backward call's time goes (session 12): for memattn's eager path and SDPA's
FLASH backend, bench.py's timing (events around one call, then a synchronisation) under
torch.profiler, and per call: host time before the first kernel starts, each kernel's duration, the
gaps between kernels, and the span from the first kernel's start to the last one's end.
  PYTHONPATH=build-run/python:bench python3 bench/ab/s12_timeline.py
"""
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

import memattn

ITERS = 6


def inputs(b, h, s, d):
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    return [t.requires_grad_() for t in (q, k, v)], dout


def timeline(name, attend, b, h, s, d, causal):
    (q, k, v), dout = inputs(b, h, s, d)
    out = attend(q, k, v, causal)
    bwd = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    for _ in range(3):
        bwd()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(ITERS):
            with record_function(f"call{i}"):
                bwd()
            torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    calls = sorted((e for e in events if e.get("name", "").startswith("call") and e.get("ph") == "X"
                    and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    kernels = sorted((e for e in events if e.get("cat") == "kernel" or e.get("cat") == "gpu_memset"),
                     key=lambda e: e["ts"])
    firsts, spans, sums = [], [], []
    for n, c in enumerate(calls):
        end = calls[n + 1]["ts"] if n + 1 < len(calls) else float("inf")
        ks = [k for k in kernels if c["ts"] <= k["ts"] < end]
        if not ks:
            continue
        first = ks[0]["ts"] - c["ts"]
        span = ks[-1]["ts"] + ks[-1]["dur"] - ks[0]["ts"]
        firsts.append(first)
        spans.append(span)
        sums.append(sum(k["dur"] for k in ks))
        if n == len(calls) - 1:
            print(f"{name} D={d} S={s} causal={int(causal)}: call {n}: host {c['dur']:.0f} us, first kernel at +{first:.0f} us")
            prev = None
            for k in ks:
                gap = "" if prev is None else f" (gap {k['ts'] - prev:.1f} us)"
                print(f"    {k['dur']:8.1f} us  {k['name'][:90]}{gap}")
                prev = k["ts"] + k["dur"]
    print(f"  {name}: median first kernel at +{statistics.median(firsts):.0f} us, kernels span "
          f"{statistics.median(spans):.0f} us, kernel time {statistics.median(sums):.0f} us")


def sdpa_flash(q, k, v, causal):
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def ours(q, k, v, causal):
    return memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)


if __name__ == "__main__":
    tokens, hidden = 16384, 2048
    for d, s, causal in ((128, 2048, False), (64, 2048, False), (128, 8192, False)):
        b, h = tokens // s, hidden // d
        for name, fn in (("memattn", ours), ("flash", sdpa_flash)):
            timeline(name, fn, b, h, s, d, causal)
        sys.stdout.flush()
