"""Context-parallel attention: memattn's ring and all-to-all strategies, and PyTorch's
context_parallel where it runs, on every rank of a torchrun world.

  torchrun --nproc-per-node N bench/context_parallel.py [--tokens-per-gpu 32768] [--total 131072] --out DIR
  python3 bench/context_parallel.py --scaling DIR      # every world against one GPU

Weak scaling keeps --tokens-per-gpu on each GPU (the sequence grows with the world); strong
scaling splits --total tokens. For each (scaling, causal, strategy) it prints the forward and
backward time (median of --iters, every rank synchronised around each call, the slowest rank's),
the TFLOP/s per GPU (the whole problem's FLOPs / world / time), and for the ring the fraction of
its communication hidden under compute, forward and backward:
  hidden = (compute alone + transfers alone - ring) / transfers alone
from the same steps run without transfers and the transfers run without compute. A world of one
also times memattn.attention itself: --scaling divides every world's TFLOP/s per GPU by it, at
the same tokens per GPU (weak) or the same problem (strong). PyTorch's context_parallel gets
the whole sequence and shards it itself. With CUDA the ranks use NCCL and CUDA events; without,
gloo and the CPU backend (a smoke run: small sizes). --out DIR writes the table as Markdown and
JSON (rank 0)."""
import argparse
import contextlib
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import memattn
from memattn import distributed as cp

BASELINE = "attention (one GPU)"


def timer(device):
    if device.type == "cuda":
        def run(fn):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier()
            torch.cuda.synchronize()
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            return start.elapsed_time(stop)
    else:
        def run(fn):
            dist.barrier()
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
    return run


def median_ms(run, fn, iters, device):
    run(fn)  # warm-up
    times = [run(fn) for _ in range(iters)]
    # Every rank reports the slowest rank's time: the step is as slow as its slowest rank.
    t = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def flops(batch, heads, seqlen, head_dim, causal):
    pairs = seqlen * (seqlen + 1) / 2 if causal else seqlen * seqlen
    return 4 * batch * heads * pairs * head_dim


def ring_parts(q, k, v, dout, causal, layout):
    """The ring's steps without transfers (each step on this rank's own K/V) and its transfers
    without compute, forward and backward: {"fwd": (compute, transfers), "bwd": (...)}."""
    rank, world = dist.get_rank(), dist.get_world_size()
    chunk = q.shape[1] // (2 if layout == "zigzag" else 1)
    left, right = (cp._UNBOUNDED, 0) if causal else (cp._UNBOUNDED, cp._UNBOUNDED)
    last = cp._last_step(layout, world, chunk, left, right)
    scale = q.shape[-1] ** -0.5
    steps = [cp._pairs(layout, rank, (rank - step) % world, world, chunk, left, right) for step in range(last + 1)]
    ring = cp._Ring(None, rank, world)
    out, lse = cp.ring_attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    acc = torch.float32

    def shift(tensors, steps=1):
        for req in ring.shift(tensors, steps)[1]:
            req.wait()

    def forward():
        o = torch.zeros(out.shape, dtype=acc, device=q.device)
        m = torch.full(lse.shape, float("-inf"), dtype=acc, device=q.device)
        for step, pairs in enumerate(steps):
            cp._forward_step(q, [k, v], o, m, pairs, scale, first=step == 0)

    def backward():
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        for pairs in steps:
            cp._backward_step(dout, q, [k, v], out, lse, dq, pairs, scale)

    sums = [torch.zeros(t.shape, dtype=acc, device=q.device) for t in (k, v)]

    def forward_transfers():
        for _ in range(last):
            shift([k, v])

    def backward_transfers():  # K/V for every step but the last, each block's sums one step behind
        for step in range(last + 1):
            shift(([k, v] if step < last else []) + (sums if step else []))
        if last:
            shift(sums, world - last)

    return {"fwd": (forward, forward_transfers), "bwd": (backward, backward_transfers)}


def torch_context_parallel(stack, shape, dtype, device, causal, seed):
    """PyTorch's context_parallel on the same problem, entered on `stack` (an ExitStack): the whole
    sequence on every rank (the same values), which it shards itself with its head-tail balancing
    for causal attention (it refuses that for non-causal, so that runs unbalanced). Returns
    (forward, backward) callables on its shards, or None and the reason it does not run."""
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental._attention import _cp_options
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        return None, f"not in this torch ({e})"
    batch, seqlen, heads, head_dim = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    full = [torch.randn((batch, heads, seqlen, head_dim), generator=gen, device=device, dtype=dtype) for _ in range(4)]
    balance = _cp_options.enable_load_balance
    stack.callback(setattr, _cp_options, "enable_load_balance", balance)
    _cp_options.enable_load_balance = causal
    try:
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        stack.enter_context(context_parallel(mesh, buffers=full, buffer_seq_dims=[2] * 4, no_restore_buffers=set(full)))
        stack.enter_context(sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]))
        q, k, v = (t.detach().requires_grad_() for t in full[:3])
        forward = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out = forward()
        backward = lambda: torch.autograd.grad(out, (q, k, v), full[3], retain_graph=True)
        backward()
    except Exception as e:  # an API that moves between releases: report, do not fail the run
        return None, f"failed: {type(e).__name__}: {e}"[:200]
    return (forward, backward), None


def scaling_table(directory):
    """TFLOP/s per GPU of every world size against one GPU running memattn.attention on its
    tokens per GPU (weak scaling) or on the whole problem (strong), from the JSON tables."""
    tables = sorted((json.load(open(os.path.join(directory, f)))
                     for f in os.listdir(directory) if f.startswith("context_parallel_w") and f.endswith(".json")),
                    key=lambda t: t["rows"][0]["world"])
    if not tables or tables[0]["rows"][0]["world"] != 1:
        return "no world of one to compare with"
    base = {(r["scaling"], r["causal"]): r for r in tables[0]["rows"] if r["strategy"] == BASELINE}
    lines = ["| scaling | world | tokens | causal | strategy | fwd / one GPU | bwd / one GPU | comm hidden fwd | "
             "comm hidden bwd |", "|---|---|---|---|---|---|---|---|---|"]
    pct = lambda x: "—" if x is None else f"{x:.0%}"
    for table in tables:
        for r in table["rows"]:
            b = base[(r["scaling"], r["causal"])]
            if r["strategy"] == BASELINE or r.get("fwd_tflops") is None:
                continue
            bwd = r["bwd_tflops"] / b["bwd_tflops"] if r.get("bwd_tflops") else None
            lines.append(f"| {r['scaling']} | {r['world']} | {r['seqlen']} | {int(r['causal'])} | {r['strategy']} | "
                         f"{pct(r['fwd_tflops'] / b['fwd_tflops'])} | {pct(bwd)} | {pct(r.get('fwd_hidden'))} | "
                         f"{pct(r.get('bwd_hidden'))} |")
    return "\n".join(lines)


def measure(run, fns, iters, device, flop):
    """Forward and backward times and TFLOP/s per GPU of `fns` = (forward, backward) callables."""
    world = dist.get_world_size()
    fwd_ms, bwd_ms = (median_ms(run, fn, iters, device) for fn in fns)
    return dict(fwd_ms=fwd_ms, bwd_ms=bwd_ms, fwd_tflops=flop / world / fwd_ms / 1e9,
                bwd_tflops=2.5 * flop / world / bwd_ms / 1e9)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens-per-gpu", type=int, default=32768)
    ap.add_argument("--total", type=int, default=131072)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--heads-k", type=int, default=None)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag")
    ap.add_argument("--out")
    ap.add_argument("--scaling", metavar="DIR", help="only print the scaling table of the runs whose tables "
                    "--out wrote to DIR (no torchrun)")
    args = ap.parse_args()
    if args.scaling:
        print(scaling_table(args.scaling))
        return

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    run = timer(device)
    heads_k = args.heads_k or args.heads
    rows = []
    for scaling, seqlen in (("weak", args.tokens_per_gpu * world), ("strong", args.total)):
        local = seqlen // world
        for causal in (False, True):
            gen = torch.Generator(device=device).manual_seed(rank)
            q, k, v, dout = (torch.randn((1, local, h, args.head_dim), generator=gen, device=device, dtype=dtype)
                             for h in (args.heads, heads_k, heads_k, args.heads))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            flop = flops(1, args.heads, seqlen, args.head_dim, causal)
            strategies = {"ring": cp.ring_attention}
            if args.heads % world == 0 and heads_k % world == 0:
                strategies["all-to-all"] = cp.all_to_all_attention
            if world == 1:  # what the scaling is measured against
                strategies[BASELINE] = lambda q, k, v, causal, layout: memattn.attention(q, k, v, causal=causal)
            for name, fn in strategies.items():
                call = lambda: fn(q, k, v, causal=causal, layout=args.layout)
                out = call()
                row = dict(scaling=scaling, world=world, seqlen=seqlen, causal=causal, strategy=name)
                row.update(measure(run, (call, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)),
                                   args.iters, device, flop))
                if name == "ring" and world > 1:
                    parts = ring_parts(q.detach(), k.detach(), v.detach(), dout, causal, args.layout)
                    for key, pass_ms in (("fwd", row["fwd_ms"]), ("bwd", row["bwd_ms"])):
                        alone, comm = (median_ms(run, fn, args.iters, device) for fn in parts[key])
                        row[key + "_hidden"] = max(0.0, min(1.0, (alone + comm - pass_ms) / comm)) if comm > 0 else None
                rows.append(row)
                del out
            row = dict(scaling=scaling, world=world, seqlen=seqlen, causal=causal, strategy="torch context_parallel")
            with contextlib.ExitStack() as stack:
                fns, why = (torch_context_parallel(stack, (1, seqlen, args.heads, args.head_dim), dtype, device, causal,
                                                   seed=1) if cuda else (None, "CUDA only"))
                if fns is None:
                    row["note"] = why
                else:
                    row.update(measure(run, fns, args.iters, device, flop))
            rows.append(row)

    if rank == 0:
        device_name = torch.cuda.get_device_name(device) if cuda else "CPU (gloo)"
        head = (f"{device_name} x {world}, torch {torch.__version__}, {args.dtype}, heads {args.heads}/{heads_k}, "
                f"D = {args.head_dim}, layout {args.layout}")
        lines = [head, "", "| scaling | tokens | causal | strategy | fwd ms | fwd TFLOP/s/GPU | bwd ms | "
                 "bwd TFLOP/s/GPU | ring comm hidden (fwd, bwd) |", "|---|---|---|---|---|---|---|---|---|"]
        fmt = lambda r, key, spec: format(r[key], spec) if r.get(key) is not None else "—"
        for r in rows:
            strategy = r["strategy"] + (f" ({r['note']})" if "note" in r else "")
            lines.append(f"| {r['scaling']} | {r['seqlen']} | {int(r['causal'])} | {strategy} | "
                         f"{fmt(r, 'fwd_ms', '.3f')} | {fmt(r, 'fwd_tflops', '.1f')} | {fmt(r, 'bwd_ms', '.3f')} | "
                         f"{fmt(r, 'bwd_tflops', '.1f')} | {fmt(r, 'fwd_hidden', '.0%')}, {fmt(r, 'bwd_hidden', '.0%')} |")
        print("\n".join(lines))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            stem = os.path.join(args.out, f"context_parallel_w{world}")
            open(stem + ".md", "w").write("\n".join(lines) + "\n")
            json.dump(dict(setup=head, rows=rows), open(stem + ".json", "w"), indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
