"""Context-parallel attention: memattn's ring and all-to-all strategies, and PyTorch's
context_parallel where it runs, on every rank of a torchrun world.

  torchrun --nproc-per-node N bench/context_parallel.py [--tokens-per-gpu 32768] [--total 131072]

Weak scaling keeps --tokens-per-gpu on each GPU (the sequence grows with the world); strong
scaling splits --total tokens. For each (scaling, causal, strategy) it prints the forward and
backward time (median of --iters, every rank synchronised around each call), the TFLOP/s per GPU
(the whole problem's FLOPs / world / time: compare with a world of 1 at the same tokens per GPU),
and for the ring the fraction of its communication hidden under compute:
  hidden = (compute alone + transfers alone - ring) / transfers alone
from the same steps run without transfers and the transfers run without compute. With CUDA the
ranks use NCCL and CUDA events; without, gloo and the CPU backend (a smoke run: small sizes).
--out DIR writes the table as Markdown and JSON (rank 0)."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import memattn
from memattn import distributed as cp


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


def ring_parts(q, k, v, causal, layout):
    """The ring's forward steps without transfers (each step on this rank's own K/V) and its
    transfers without compute, as two callables."""
    rank, world = dist.get_rank(), dist.get_world_size()
    chunk = q.shape[1] // (2 if layout == "zigzag" else 1)
    left, right = (cp._UNBOUNDED, 0) if causal else (cp._UNBOUNDED, cp._UNBOUNDED)
    last = cp._last_step(layout, world, chunk, left, right)
    scale = q.shape[-1] ** -0.5

    def compute():
        for step in range(last + 1):
            for rows, keys, wl, wr in cp._pairs(layout, rank, (rank - step) % world, world, chunk, left, right):
                memattn._ops._forward(q[:, rows], k[:, keys], v[:, keys], None, wl, wr, False, 0.0, None, scale,
                                      None, None, None, -1, -1)

    def transfers():
        ring, kv = cp._Ring(None, rank, world), [k, v]
        for _ in range(last):
            kv, reqs = ring.shift(kv)
            for req in reqs:
                req.wait()

    return compute, transfers


def torch_context_parallel(q, k, v, causal):
    """PyTorch's context_parallel on the same shards, or the reason it does not run."""
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        return None, f"not in this torch ({e})"
    mesh = init_device_mesh(q.device.type, (dist.get_world_size(),))
    full = [t.transpose(1, 2).contiguous() for t in (q, k, v)]  # [B, H, M, D]; it shards dim 2 itself

    def fwd():
        with context_parallel(mesh, buffers=full, buffer_seq_dims=[2, 2, 2]):
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(*full, is_causal=causal)
    try:
        fwd()
    except Exception as e:  # an API that moves between releases: report, do not fail the run
        return None, f"failed: {type(e).__name__}: {e}"[:200]
    return fwd, None


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
    args = ap.parse_args()

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
            f = flops(1, args.heads, seqlen, args.head_dim, causal)
            strategies = {"ring": cp.ring_attention}
            if args.heads % world == 0 and heads_k % world == 0:
                strategies["all-to-all"] = cp.all_to_all_attention
            for name, fn in strategies.items():
                call = lambda: fn(q, k, v, causal=causal, layout=args.layout)
                fwd_ms = median_ms(run, call, args.iters, device)
                out = call()
                bwd_ms = median_ms(run, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                                   args.iters, device)
                row = dict(scaling=scaling, world=world, seqlen=seqlen, causal=causal, strategy=name,
                           fwd_ms=fwd_ms, bwd_ms=bwd_ms, fwd_tflops=f / world / fwd_ms / 1e9,
                           bwd_tflops=2.5 * f / world / bwd_ms / 1e9)
                if name == "ring" and world > 1:
                    compute, transfers = ring_parts(q.detach(), k.detach(), v.detach(), causal, args.layout)
                    alone, comm = median_ms(run, compute, args.iters, device), median_ms(run, transfers, args.iters, device)
                    row["fwd_hidden"] = max(0.0, min(1.0, (alone + comm - fwd_ms) / comm)) if comm > 0 else None
                rows.append(row)
            fwd, why = torch_context_parallel(q.detach(), k.detach(), v.detach(), causal) if cuda else (None, "CUDA only")
            row = dict(scaling=scaling, world=world, seqlen=seqlen, causal=causal, strategy="torch context_parallel")
            if fwd is None:
                row["note"] = why
            else:
                row["fwd_ms"] = median_ms(run, fwd, args.iters, device)
                row["fwd_tflops"] = f / world / row["fwd_ms"] / 1e9
            rows.append(row)

    if rank == 0:
        device_name = torch.cuda.get_device_name(device) if cuda else "CPU (gloo)"
        head = (f"{device_name} x {world}, torch {torch.__version__}, {args.dtype}, heads {args.heads}/{heads_k}, "
                f"D = {args.head_dim}, layout {args.layout}")
        lines = [head, "", "| scaling | tokens | causal | strategy | fwd ms | fwd TFLOP/s/GPU | bwd ms | "
                 "bwd TFLOP/s/GPU | ring comm hidden (fwd) |", "|---|---|---|---|---|---|---|---|---|"]
        fmt = lambda r, key, spec: format(r[key], spec) if r.get(key) is not None else "—"
        for r in rows:
            strategy = r["strategy"] + (f" ({r['note']})" if "note" in r else "")
            lines.append(f"| {r['scaling']} | {r['seqlen']} | {int(r['causal'])} | {strategy} | "
                         f"{fmt(r, 'fwd_ms', '.3f')} | {fmt(r, 'fwd_tflops', '.1f')} | {fmt(r, 'bwd_ms', '.3f')} | "
                         f"{fmt(r, 'bwd_tflops', '.1f')} | {fmt(r, 'fwd_hidden', '.0%')} |")
        print("\n".join(lines))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            stem = os.path.join(args.out, f"context_parallel_w{world}")
            open(stem + ".md", "w").write("\n".join(lines) + "\n")
            json.dump(dict(setup=head, rows=rows), open(stem + ".json", "w"), indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
