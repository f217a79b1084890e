"""Session 16: the suite's D = 64/128 non-causal backward through the PyTorch op in both layouts,
[B, M, H, D] (memattn.attention, as the CLI) and [B, H, M, D] (scaled_dot_product_attention, as
the suite), with the last-wave split as the environment sets it. Median of 20 synchronised
backward calls, ms."""
import os
import statistics
import torch
import memattn


def bwd_ms(fn, q, k, v):
    out = fn(q, k, v)
    g = torch.randn_like(out)
    times = []
    for _ in range(25):
        out = fn(q, k, v)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.autograd.grad(out, (q, k, v), g)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times[5:])


for d, h, b, s in ((64, 32, 2, 8192), (128, 16, 2, 8192), (64, 32, 1, 16384)):
    mk = lambda shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bmhd = [mk((b, s, h, d)) for _ in range(3)]
    bhmd = [mk((b, h, s, d)) for _ in range(3)]
    t1 = bwd_ms(memattn.attention, *bmhd)
    t2 = bwd_ms(memattn.scaled_dot_product_attention, *bhmd)
    print(f"split={os.environ.get('MEMATTN_TAIL_SPLIT', '1')} D={d} H={h} B={b} S={s}: "
          f"[B,M,H,D] {t1:.3f} ms, [B,H,M,D] {t2:.3f} ms")
