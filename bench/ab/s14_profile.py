"""Where the op's backward time goes: torch.profiler over a few backward calls of a suite row
through the memattn op on PYTHONPATH (bias row by default, `plain` for the D = 128 S = 2048 row
without bias): every CUDA kernel with its time per call, and the call's wall time.
PYTHONPATH=build-run/X/python python3 bench/ab/s14_profile.py [plain]"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench  # noqa: E402

plain = sys.argv[1:] == ["plain"]
cfg = dict(dtype="bf16", D=128, S=2048, causal=False, bias=not plain, hidden=2048)
attend = bench.memattn_attend()
q, k, v, dout, bias = bench.make_inputs(cfg, 0)
q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
out = attend(q, k, v, bias, False)
calls = 5
for _ in range(3):
    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(calls):
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        torch.cuda.synchronize()
events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
events.sort(key=lambda e: e.time_range.start)
print(f"{'kernel':60s} {'us/call':>9s}")
tot = {}
for e in events:
    tot.setdefault(e.name[:60], 0.0)
    tot[e.name[:60]] += (e.time_range.end - e.time_range.start) / calls
for name, us in tot.items():
    print(f"{name:60s} {us:9.1f}")
print(f"GPU busy per call {sum(tot.values()):.1f} us")
# Per call: first kernel start to last kernel end, and the gaps between kernels.
per = len(events) // calls
for c in range(calls):
    ev = events[c * per:(c + 1) * per]
    span = ev[-1].time_range.end - ev[0].time_range.start
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(ev, ev[1:])]
    print(f"call {c}: {len(ev)} kernels, span {span:.1f} us, gaps " + " ".join(f"{g:.0f}" for g in gaps))
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
