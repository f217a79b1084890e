"""Session 19: the two rows short of their targets, timed three ways per library in one process.
  sync    bench.py's method (events around one call, then a synchronisation: host time counts)
  queued  events around each of 30 calls issued back to back (host time hidden behind the GPU)
  kernels the sum of the call's GPU kernels (torch.profiler, one call after warm-up)
for memattn's eager op and SDPA's EFFICIENT (the seed), FLASH and CUDNN backends; then each
library's kernels by name for the backward at D = 256, S = 512.
  PYTHONPATH=build-run/s18py/python:bench python3 bench/ab/s19_short.py"""
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import memattn
from bench import time_ms as sync_ms
from host_overhead import breakdown, queued_ms

BACKENDS = {"seed": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}


def calls(lib, b, h, s, d, causal):
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def fwd():
        if lib == "memattn":
            return memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)
        with sdpa_kernel([BACKENDS[lib]]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    out = fwd()
    return fwd, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def kernels(fn):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time for e in evs) / 1e3, [(e.name[:80], e.device_time) for e in evs]


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    breakdown()
    for b, h, s, d, causal, passes in ((32, 8, 512, 256, False, ("bwd",)), (32, 8, 512, 256, True, ("bwd",)),
                                       (8, 8, 2048, 256, False, ("bwd",))):
        print(f"\nB={b} H={h} S={s} D={d} causal={int(causal)}: ms")
        for lib in ("memattn", "seed", "flash", "cudnn"):
            try:
                fwd, bwd = calls(lib, b, h, s, d, causal)
            except RuntimeError as e:
                print(f"  {lib:8s} refused ({str(e)[:60]})")
                continue
            for name in passes:
                fn = fwd if name == "fwd" else bwd
                ktot, ks = kernels(fn)
                print(f"  {lib:8s} {name} sync {sync_ms(fn, 30):7.3f} queued {queued_ms(fn):7.3f} kernels {ktot:7.3f}")
                if s == 512 and not causal:
                    for kname, us in ks:
                        print(f"      {us:8.1f} us  {kname}")
            del fwd, bwd
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
