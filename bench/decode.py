#!/usr/bin/env python3
"""Decoding: one new query row per sequence against its keys (a KV cache laid out contiguously),
memattn against PyTorch SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backends in one process.

For every (B, Mk, heads, D): the median time of --iters calls on the same fresh random-normal
inputs, L2 flushed before each call (a 256 MB write) and the call timed alone by CUDA events, and
the K+V bytes read per second at that time. GQA goes to SDPA with enable_gqa=True (a backend that
refuses prints "—"). Each memattn output is compared with FLASH's (or the math backend's), and the
largest difference is printed beside it. memattn splits each query tile's keys over CTAs where the
query rows alone would leave SMs idle (`memattn kernels` with the same problem names the split).

  python3 bench/decode.py [--batch 1,16,64] [--keys 2048,8192,32768,131072] [--heads 32/8,32/32]
                          [--head-dim 128] [--iters 30] [--out DIR]

Writes DIR/decode.md and DIR/decode.json.
"""
import argparse
import json
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import memattn

PEERS = [("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)]


def median_us(fn, iters, flush):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def sdpa(q, k, v, backend):
    """SDPA on BMHK tensors (it takes [B, H, M, D] views) with one backend forced."""
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda text: [int(x) for x in text.split(",")]
    ap.add_argument("--batch", type=ints, default=[1, 16, 64])
    ap.add_argument("--keys", type=ints, default=[2048, 8192, 32768, 131072])
    ap.add_argument("--heads", default="32/8,32/32")
    ap.add_argument("--head-dim", type=ints, default=[128])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--max-bytes", type=float, default=8e9, help="skip problems whose K+V exceed this")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    rows = []
    for d in args.head_dim:
        for heads in args.heads.split(","):
            hq, hk = (int(x) for x in heads.split("/"))
            for b in args.batch:
                for mk in args.keys:
                    kv_bytes = 2 * b * mk * hk * d * 2
                    if kv_bytes > args.max_bytes:
                        continue
                    gen = torch.Generator(device=dev).manual_seed(0)
                    q = torch.randn((b, 1, hq, d), generator=gen, device=dev, dtype=torch.bfloat16)
                    k, v = (torch.randn((b, mk, hk, d), generator=gen, device=dev, dtype=torch.bfloat16) for _ in range(2))
                    row = dict(B=b, Mk=mk, Hq=hq, Hk=hk, D=d, kv_mb=kv_bytes / 1e6)
                    with torch.no_grad():
                        ours = memattn.attention(q, k, v)
                        row["memattn_us"] = median_us(lambda: memattn.attention(q, k, v), args.iters, flush)
                        want = None
                        for name, backend in PEERS:
                            try:
                                got = sdpa(q, k, v, backend)
                                want = got if want is None else want
                                row[name + "_us"] = median_us(lambda: sdpa(q, k, v, backend), args.iters, flush)
                            except RuntimeError:
                                row[name + "_us"] = None
                        if want is None:
                            want = sdpa(q, k, v, SDPBackend.MATH)
                        row["max_diff"] = (ours.float() - want.float()).abs().max().item()
                    rows.append(row)
                    best = min((row[n + "_us"] for n, _ in PEERS if row[n + "_us"]), default=None)
                    print(f"B {b:3} Mk {mk:6} {hq}/{hk} D {d}: memattn {row['memattn_us']:8.1f} us "
                          f"({kv_bytes / row['memattn_us'] / 1e3:6.0f} GB/s), best SDPA "
                          f"{best if best is None else round(best, 1)} us, max diff {row['max_diff']:.2e}", flush=True)
    lines = [f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, bf16, one query row per sequence, "
             "K/V contiguous, L2 flushed before each call; us (K+V GB/s)", "",
             "| B | Mk | Hq/Hk | D | K+V MB | memattn | FA2 | cuDNN | x best SDPA |", "|---|---|---|---|---|---|---|---|---|"]
    cell = lambda r, n: "—" if r.get(n + "_us") is None else f"{r[n + '_us']:.1f} ({r['kv_mb'] / r[n + '_us'] * 1e3:.0f})"
    for r in rows:
        best = min((r[n + "_us"] for n, _ in PEERS if r[n + "_us"]), default=None)
        ratio = "—" if best is None else f"{best / r['memattn_us']:.2f}"
        lines.append(f"| {r['B']} | {r['Mk']} | {r['Hq']}/{r['Hk']} | {r['D']} | {r['kv_mb']:.0f} | "
                     f"{cell(r, 'memattn')} | {cell(r, 'FA2')} | {cell(r, 'cuDNN')} | {ratio} |")
    print("\n".join(lines))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        open(os.path.join(args.out, "decode.md"), "w").write("\n".join(lines) + "\n")
        json.dump(rows, open(os.path.join(args.out, "decode.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
