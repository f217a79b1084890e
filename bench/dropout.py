#!/usr/bin/env python3
"""Attention with dropout: memattn against PyTorch SDPA's backends, in one process on one GPU.

The suite's shapes (B*S = 16384 tokens, hidden 2048, bf16) with dropout_p on every call: memattn
through its PyTorch op, SDPA with EFFICIENT_ATTENTION (the seed kernels), FLASH_ATTENTION
(FlashAttention-2) and CUDNN_ATTENTION forced, on the same inputs; bench.py's timing (CUDA events,
warm-up, median of --iters), forward without autograd, backward on its own. A backend that refuses
prints "—". The rows' outputs are checked by the tests (tests/cuda: every dropout row against
the float64 reference and dropout_keep()'s mask), not here: other backends draw other masks.

Writes <out>/dropout.md and <out>/dropout.json.
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

import bench


def configs(dims):
    return [dict(dtype="bf16", D=d, S=s, causal=causal, bias=False, hidden=2048)
            for d in dims for causal in (False, True) for s in (2048, 8192)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--p", type=float, default=0.1, help="dropout probability")
    ap.add_argument("--passes", default="fwd,bwd")
    ap.add_argument("--dims", default="64,128,256", help="head dims to run")
    ap.add_argument("--commit", default=os.environ.get("MEMATTN_COMMIT", "unknown"))
    args = ap.parse_args()
    passes = tuple(args.passes.split(","))
    import memattn

    impls = [("memattn", lambda q, k, v, bias, causal: memattn.scaled_dot_product_attention(
        q, k, v, dropout_p=args.p, is_causal=causal))]
    for name, backend in bench.PEERS:
        def attend(q, k, v, bias, causal, backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, dropout_p=args.p, is_causal=causal)
        impls.append((name, attend))

    results = []
    for i, cfg in enumerate(configs([int(d) for d in args.dims.split(",")])):
        inputs = bench.make_inputs(cfg, seed=1000 + i)
        row = dict(cfg, p=args.p, times={})
        for name, attend in impls:
            row["times"][name] = bench.time_impl(attend, cfg, inputs, args.iters, passes)
        results.append(row)
        t = row["times"]
        print(cfg, {n: t[n] for n in t}, flush=True)

    peers = [n for n, _ in bench.PEERS]
    lines = [f"dropout p = {args.p}, bf16, B*S = {bench.TOKENS}, hidden 2048; TFLOP/s and memattn's speed ratio "
             "(peer time / memattn time); backward FLOPs 2.5x the forward's", "",
             "| D | S | causal | pass | memattn | " + " | ".join(f"{n} | x {n}" for n in peers) + " |",
             "|---|---|---|---|---|" + "---|---|" * len(peers)]
    for row in results:
        for k, pass_ in enumerate(("fwd", "bwd")):
            if pass_ not in passes:
                continue
            flops = bench.flops_forward(row) * (1 if pass_ == "fwd" else 2.5)
            ms = {n: (row["times"][n] or (None, None))[k] for n in row["times"]}
            tf = {n: None if ms[n] is None else flops / ms[n] / 1e9 for n in ms}
            mine = ms["memattn"]
            cells = []
            for n in peers:
                ratio = None if ms[n] is None or mine is None else ms[n] / mine
                cells += [bench.fmt(tf[n]), bench.fmt(ratio, 2)]
            lines.append(f"| {row['D']} | {row['S']} | {int(row['causal'])} | {pass_} | {bench.fmt(tf['memattn'])} | "
                         + " | ".join(cells) + " |")
    os.makedirs(args.out, exist_ok=True)
    meta = bench.run_meta(args.commit, args.iters)
    with open(os.path.join(args.out, "dropout.md"), "w") as f:
        f.write(f"# Dropout ({meta['gpu']}, driver {meta['driver']}, {meta['date']}, commit {meta['commit']}, "
                f"torch {meta['torch']}, cuDNN {meta['cudnn']})\n\n")
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "dropout.json"), "w") as f:
        json.dump(dict(meta=meta, rows=results), f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
