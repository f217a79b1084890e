#!/usr/bin/env bash
# Session 14, call 3: the op backward's host time (s14_host.py), bias and plain, split into the
# autograd engine's part, the Python glue and the library call; SDPA's FLASH backward's
# event-timed call and host time on the same row for comparison.
set -uo pipefail
for side in bias2 bias2; do
  PYTHONPATH=build-run/$side/python python3 bench/ab/s14_host.py
  PYTHONPATH=build-run/$side/python python3 bench/ab/s14_host.py plain
done
python3 - <<'PY'
import os, sys, time, statistics, torch
sys.path.insert(0, "bench")
import bench
from torch.nn.attention import SDPBackend
cfg = dict(dtype="bf16", D=128, S=2048, causal=False, bias=False, hidden=2048)
attend = bench.sdpa(SDPBackend.FLASH_ATTENTION)
q, k, v, dout, bias = bench.make_inputs(cfg, 0)
q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
out = attend(q, k, v, bias, False)
rows = []
for i in range(33):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); start.record(); t0 = time.perf_counter()
    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    host = (time.perf_counter() - t0) * 1e6
    stop.record(); stop.synchronize()
    if i >= 3: rows.append((start.elapsed_time(stop) * 1e3, host))
med = [statistics.median(c) for c in zip(*rows)]
print(f"flash plain: event-timed {med[0]:.0f} us, host grad() {med[1]:.0f} us")
PY
