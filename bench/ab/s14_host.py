"""Host time of the op's backward (suite row: bf16 D = 128 S = 2048, bias unless `plain`): the
event-timed call as bench.py times it, the host time of torch.autograd.grad, the delay from the
start event to the library call (a CUDA event recorded on the idle GPU just before it), and the
library call itself (perf_counter around _C.backward). Medians of 30.
PYTHONPATH=build-run/X/python python3 bench/ab/s14_host.py [plain]"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench  # noqa: E402
import memattn._ops as ops  # noqa: E402

plain = sys.argv[1:] == ["plain"]
cfg = dict(dtype="bf16", D=128, S=2048, causal=False, bias=not plain, hidden=2048)
attend = bench.memattn_attend()
q, k, v, dout, bias = bench.make_inputs(cfg, 0)
q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
out = attend(q, k, v, bias, False)

marks = {}
real_backward = ops._C.backward


real_backward_mod = ops._C


def timed_backward(*args):
    marks["lib_t0"] = time.perf_counter()
    marks["pre"] = torch.cuda.Event(enable_timing=True)
    marks["pre"].record()
    t0 = time.perf_counter()
    r = real_backward(*args)
    marks["lib_us"] = (time.perf_counter() - t0) * 1e6
    return r


class Shim:
    def __getattr__(self, name):
        return timed_backward if name == "backward" else getattr(real_backward_mod, name)


ops._C = Shim()
real_fn_backward = ops._EagerAttention.backward
real_inputs = ops._backward_inputs


def entry_backward(ctx, dout, dlse):
    marks["entry"] = time.perf_counter()
    return real_fn_backward(ctx, dout, dlse)


def timed_inputs(ctx, dout):
    marks["unpacked0"] = time.perf_counter()
    r = real_inputs(ctx, dout)
    marks["unpacked"] = time.perf_counter()
    return r


ops._EagerAttention.backward = staticmethod(entry_backward)
ops._backward_inputs = timed_inputs
rows = []
for i in range(33):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    t0 = time.perf_counter()
    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    host = (time.perf_counter() - t0) * 1e6
    stop.record()
    stop.synchronize()
    if i >= 3:
        rows.append((start.elapsed_time(stop) * 1e3, host, start.elapsed_time(marks["pre"]) * 1e3, marks["lib_us"],
                     (marks["entry"] - t0) * 1e6, (marks["unpacked"] - marks["unpacked0"]) * 1e6,
                     (marks["lib_t0"] - marks["unpacked"]) * 1e6))
med = [statistics.median(c) for c in zip(*rows)]
print(f"{'plain' if plain else 'bias'}: event-timed {med[0]:.0f} us, host grad() {med[1]:.0f} us, "
      f"start -> library call {med[2]:.0f} us, library call {med[3]:.0f} us; grad() -> Function.backward "
      f"{med[4]:.0f} us, _backward_inputs {med[5]:.0f} us, then -> library call {med[6]:.0f} us")
