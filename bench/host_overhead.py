"""Host time per call of memattn's PyTorch entry points against SDPA's, on the GPU.

The suite (bench.py) synchronises after every timed call, so host time spent before a call's
first kernel launch counts as run time. This prints, per path:
  host us   wall time per call of a tiny problem issued back to back (the host cost of the path)
  sync ms   the median of bench.py's timing (events around one call, then a synchronisation)
  queued ms events around each of N calls issued back to back (host cost hidden behind the GPU)
for memattn's eager path (memattn.scaled_dot_product_attention: the C++ autograd Function of
memattn._autograd where built, and the Python torch.autograd.Function it falls back to), its
custom ops (torch.ops.memattn.*, what torch.compile traces), the C++ binding alone, and SDPA's
FLASH backend. With --trace it prints instead, per path, the CUDA runtime calls and the host ops
of one tiny forward and backward (torch.profiler; counts per call, mean us each): where a path's
host time goes.
  PYTHONPATH=build-gpu/python python3 bench/host_overhead.py [--trace]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import memattn
from bench import time_ms as sync_ms  # bench.py's timing: events around one call, then a synchronisation
from memattn import _C, _ops


def host_us(fn, n=500):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host


def queued_ms(fn, iters=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, stop in events:
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(stop) for start, stop in events)


def paths(b, h, s, d, causal):
    """forward and backward callables per path on [B, H, S, D] bf16 inputs."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    scale = 1.0 / d ** 0.5
    bmhk = [t.transpose(1, 2) for t in (q, k, v)]
    # attention_forward's arguments after bias (the last: deterministic, precision); -1, -1: no varlen bounds
    args = (-1, 0 if causal else -1, False, 0.0, None, scale, None, None, None, -1, -1, False, 0)

    def sdpa():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def eager():
        return memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def eager_python():  # the backward of its output runs the Python Function too
        cpp, _ops._autograd = _ops._autograd, None
        try:
            return memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)
        finally:
            _ops._autograd = cpp

    def custom_op():
        return torch.ops.memattn.attention_forward(*bmhk, None, *args)[0]

    def binding():
        return _ops._forward(*bmhk, None, *args[:-2], args[-1])[0]  # deterministic is the backward's

    out = {}
    eager_name = "memattn eager (C++)" if _ops._autograd is not None else "memattn eager (Python)"
    for name, fwd in (("sdpa-flash", sdpa), (eager_name, eager), ("memattn eager (Python)", eager_python),
                      ("memattn custom op", custom_op),
                      ("memattn binding (forward only)", binding)):
        o = fwd()
        grad_out = dout if o.shape == dout.shape else dout.transpose(1, 2)
        bwd = None
        if o.requires_grad:
            bwd = lambda o=o, g=grad_out: torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
        out[name] = (fwd, bwd)
    return out


def breakdown(b=1, h=1, s=128, d=128):
    """Host us per call of each layer of the eager path (tiny problem): the autograd call, the op's
    Python (_ops._forward / _backward_op: output allocation, descriptors, options) and the C++
    binding alone on prebuilt descriptors (validation, planning, launches), with and without
    the workspace callback."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dout = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    scale = 1.0 / d ** 0.5
    # window_left, window_right, bottom_right, dropout_p, rng, scale, seqstart_q, seqstart_k, seqused_k,
    # max_seqlen_q, max_seqlen_k (-1: not given), precision (0: auto)
    fargs = (-1, -1, False, 0.0, None, scale, None, None, None, -1, -1, 0)
    out, lse = _ops._forward(q, k, v, None, *fargs)
    opts = _ops._options(q, *fargs)
    bare = dict(opts, workspace=None)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    desc = _ops._desc
    fdesc = (desc(q), desc(k), desc(v), None, desc(out), desc(lse))
    bdesc = (desc(q), desc(k), desc(v), None, desc(out), desc(lse), desc(dout), desc(dq), desc(dk), desc(dv), None, False)
    eager_out = memattn.attention(q, k, v)
    rows = [
        ("forward: eager memattn.attention", lambda: memattn.attention(q, k, v)),
        ("forward: _ops._forward", lambda: _ops._forward(q, k, v, None, *fargs)),
        ("forward: _C.forward (workspace callback)", lambda: _C.forward(*fdesc, opts)),
        ("forward: _C.forward (library workspace)", lambda: _C.forward(*fdesc, bare)),
        ("backward: eager autograd.grad", lambda: torch.autograd.grad(eager_out, (q, k, v), dout, retain_graph=True)),
        ("backward: _ops._backward_op",
         lambda: _ops._backward_op(dout, q, k, v, None, out, lse, *fargs[:-1], False, fargs[-1], False)),
        ("backward: _C.backward (workspace callback)", lambda: _C.backward(*bdesc, opts)),
        ("backward: _C.backward (library workspace)", lambda: _C.backward(*bdesc, bare)),
    ]
    print(f"\nhost us per call by layer (B={b} H={h} S={s} D={d})")
    for name, fn in rows:
        print(f"  {name:44s} {host_us(fn):8.1f}")


def trace(calls=200, rows=14):
    """Per path (tiny problem): the CUDA runtime calls and torch's host ops of one forward and one
    backward, as counts per call and mean microseconds each (profiled, so slower than host_us)."""
    from torch.profiler import ProfilerActivity, profile
    print(f"\nhost work per call, B=1 H=1 S=128 D=128 ({calls} calls profiled; name, count per call, mean us)")
    for name, (fwd, bwd) in paths(1, 1, 128, 128, False).items():
        for kind, fn in (("forward", fwd), ("backward", bwd)):
            if fn is None:
                continue
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    fn()
                torch.cuda.synchronize()
            events = sorted((e for e in prof.key_averages() if e.key != "cudaDeviceSynchronize"),
                            key=lambda e: -e.self_cpu_time_total)
            print(f"  {name} {kind}: host us per call {host_us(fn):.1f}")
            for e in events[:rows]:
                print(f"    {e.key[:60]:60s} {e.count / calls:5.2f} x {e.self_cpu_time_total / e.count:7.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="store_true", help="where each path's host time goes (torch.profiler)")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    if parser.parse_args().trace:
        trace()
        return
    breakdown()
    print("\ntiny problem (B=1 H=1 S=128 D=128): host time per call, us")
    for name, (fwd, bwd) in paths(1, 1, 128, 128, False).items():
        print(f"  {name:32s} forward {host_us(fwd):8.1f}" + (f"  backward {host_us(bwd):8.1f}" if bwd else ""))
    for b, h, s, d, causal in ((8, 16, 2048, 128, False), (8, 32, 2048, 64, True)):
        print(f"\nB={b} H={h} S={s} D={d} causal={int(causal)}: ms (sync = bench.py's method, queued = back to back)")
        for name, (fwd, bwd) in paths(b, h, s, d, causal).items():
            line = f"  {name:32s} forward sync {sync_ms(fwd, 30):7.3f} queued {queued_ms(fwd):7.3f}"
            if bwd:
                line += f"  backward sync {sync_ms(bwd, 30):7.3f} queued {queued_ms(bwd):7.3f}"
            print(line)


if __name__ == "__main__":
    main()
