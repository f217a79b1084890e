#!/usr/bin/env python3
"""Decoding: one new query row per sequence against its keys (a KV cache laid out contiguously),
memattn against PyTorch SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backends in one process; and
memattn.attention_with_kvcache on the same keys held in a contiguous cache and in paged caches
(--page-sizes, pages in a shuffled order), appending the step's key first as a decode step does.

For every (B, Mk, heads, D): the median time of --iters calls on the same fresh random-normal
inputs, L2 flushed before each call (a 256 MB write) and the call timed alone by CUDA events, and
the K+V bytes read per second at that time. GQA goes to SDPA with enable_gqa=True (a backend that
refuses prints "—"). Each memattn output is compared with FLASH's (or the math backend's), and the
largest difference is printed beside it. memattn splits each query tile's keys over CTAs where the
query rows alone would leave SMs idle (`memattn kernels` with the same problem names the split).

  python3 bench/decode.py [--batch 1,16,64] [--keys 2048,8192,32768,131072] [--heads 32/8,32/32]
                          [--head-dim 128] [--queries 1] [--page-sizes 16,64] [--iters 30] [--host-checks]
                          [--out DIR]

--queries N > 1 is chunked prefill: N new rows against the cache, causal from the bottom right
(SDPA's backends align causal masks top-left, so those rows compare memattn with itself).

The device-to-device copy's rate (1 GiB, bytes read plus written) is measured first; each row's
"of copy" is memattn's K+V read rate as a fraction of it.

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


def copy_bandwidth(flush, iters):
    """Device-to-device copy of 1 GiB, bytes read plus bytes written per second (GB/s): the rate a
    kernel that only reads its inputs is compared with."""
    src = torch.randn(1 << 29, device=flush.device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src), iters, flush)
    return 2 * src.numel() * src.element_size() / us / 1e3


def paged_copy(k, v, page_size, gen):
    """k and v [B, Mk, H, D] as paged caches with pages in one shuffled order: (k pages, v pages, block_table)."""
    b, mk = k.shape[:2]
    per_seq = -(-mk // page_size)
    table = torch.randperm(b * per_seq, generator=gen, device=k.device).to(torch.int32).view(b, per_seq)

    def pages(t):
        out = t.new_zeros((b * per_seq, page_size, *t.shape[2:]))
        padded = torch.cat([t, t.new_zeros((b, per_seq * page_size - mk, *t.shape[2:]))], 1)
        out[table.flatten().long()] = padded.view(b * per_seq, page_size, *t.shape[2:])
        return out
    return pages(k), pages(v), table


def cache_step(q, k_cache, v_cache, k_new, v_new, held, table, bound):
    """One decode step on a cache: the step's key appended at `held`, then attended to. With `bound`
    (max_seqlen_k, as a decoding loop that knows its lengths passes it) the call reads nothing on the
    host; without it the library copies the lengths and block table to the host and checks them."""
    return memattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=held, block_table=table,
                                          max_seqlen_k=bound)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda text: [int(x) for x in text.split(",")]
    ap.add_argument("--batch", type=ints, default=[1, 16, 64])
    ap.add_argument("--keys", type=ints, default=[2048, 8192, 32768, 131072])
    ap.add_argument("--heads", default="32/8,32/32")
    ap.add_argument("--head-dim", type=ints, default=[128])
    ap.add_argument("--queries", type=int, default=1)
    ap.add_argument("--page-sizes", type=ints, default=[16, 64])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--host-checks", action="store_true",
                    help="cache calls without max_seqlen_k: the lengths and block table are read and checked on the host")
    ap.add_argument("--max-bytes", type=float, default=8e9, help="skip problems whose K+V exceed this")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    copy_gbs = copy_bandwidth(flush, args.iters)
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s (read + written)", flush=True)
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
                    mq = args.queries
                    q = torch.randn((b, mq, hq, d), generator=gen, device=dev, dtype=torch.bfloat16)
                    k, v = (torch.randn((b, mk, hk, d), generator=gen, device=dev, dtype=torch.bfloat16) for _ in range(2))
                    row = dict(B=b, Mq=mq, Mk=mk, Hq=hq, Hk=hk, D=d, kv_mb=kv_bytes / 1e6)
                    causal = dict(causal=True, alignment="bottom_right") if mq > 1 else {}
                    with torch.no_grad():
                        ours = memattn.attention(q, k, v, **causal)
                        row["memattn_us"] = median_us(lambda: memattn.attention(q, k, v, **causal), args.iters, flush)
                        # The cache holds the first Mk - Mq keys; the last Mq come as the step's new keys.
                        held = torch.full((b,), mk - mq, dtype=torch.int32, device=dev)
                        k_new, v_new = k[:, mk - mq:], v[:, mk - mq:]
                        for name, page in [("cache", None)] + [(f"paged{p}", p) for p in args.page_sizes]:
                            # One cache at a time: at the largest problems each holds all of K and V.
                            kc, vc, table = (k.clone(), v.clone(), None) if page is None else paged_copy(k, v, page, gen)
                            bound = None if args.host_checks else mk
                            got = cache_step(q, kc, vc, k_new, v_new, held, table, bound)
                            row[name + "_diff"] = (got.float() - ours.float()).abs().max().item()
                            row[name + "_us"] = median_us(lambda: cache_step(q, kc, vc, k_new, v_new, held, table, bound),
                                                          args.iters, flush)
                            del kc, vc, table, got
                        want = None
                        for name, backend in (PEERS if mq == 1 else []):
                            try:
                                got = sdpa(q, k, v, backend)
                                want = got if want is None else want
                                row[name + "_us"] = median_us(lambda: sdpa(q, k, v, backend), args.iters, flush)
                            except RuntimeError:
                                row[name + "_us"] = None
                        if want is None and mq == 1:
                            want = sdpa(q, k, v, SDPBackend.MATH)
                        if want is None:  # chunked prefill: memattn's own contiguous result
                            want = ours
                            for name, _ in PEERS:
                                row[name + "_us"] = None
                        row["max_diff"] = (ours.float() - want.float()).abs().max().item()
                    rows.append(row)
                    best = min((row[n + "_us"] for n, _ in PEERS if row[n + "_us"]), default=None)
                    caches = ", ".join(f"{n} {row[n + '_us']:.1f} us (diff {row[n + '_diff']:.1e})"
                                       for n in ["cache"] + [f"paged{p}" for p in args.page_sizes])
                    print(f"B {b:3} Mq {mq} Mk {mk:6} {hq}/{hk} D {d}: memattn {row['memattn_us']:8.1f} us "
                          f"({kv_bytes / row['memattn_us'] / 1e3:6.0f} GB/s), {caches}, best SDPA "
                          f"{best if best is None else round(best, 1)} us, max diff {row['max_diff']:.2e}", flush=True)
    cache_cols = ["cache"] + [f"paged{p}" for p in args.page_sizes]
    lines = [f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, bf16, {args.queries} query row(s) per "
             "sequence, L2 flushed before each call; us (K+V GB/s). memattn: K/V contiguous tensors; cache: "
             "attention_with_kvcache on a contiguous cache, pagedN on pages of N keys (shuffled), each appending the "
             "step's keys first, " + ("the lengths and block table read and checked on the host" if args.host_checks
                                      else "max_seqlen_k given (nothing read on the host)") +
             f"; device-to-device copy {copy_gbs:.0f} GB/s (read + written): of copy = memattn's K+V rate over it", "",
             "| B | Mk | Hq/Hk | D | K+V MB | memattn | " + " | ".join(cache_cols) +
             " | FA2 | cuDNN | x best SDPA | of copy |",
             "|---" * (10 + len(cache_cols)) + "|"]
    cell = lambda r, n: "—" if r.get(n + "_us") is None else f"{r[n + '_us']:.1f} ({r['kv_mb'] / r[n + '_us'] * 1e3:.0f})"
    for r in rows:
        best = min((r[n + "_us"] for n, _ in PEERS if r[n + "_us"]), default=None)
        ratio = "—" if best is None else f"{best / r['memattn_us']:.2f}"
        lines.append(f"| {r['B']} | {r['Mk']} | {r['Hq']}/{r['Hk']} | {r['D']} | {r['kv_mb']:.0f} | "
                     f"{cell(r, 'memattn')} | " + " | ".join(cell(r, c) for c in cache_cols) +
                     f" | {cell(r, 'FA2')} | {cell(r, 'cuDNN')} | {ratio} | "
                     f"{r['kv_mb'] / r['memattn_us'] * 1e3 / copy_gbs:.0%} |")
    print("\n".join(lines))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        open(os.path.join(args.out, "decode.md"), "w").write("\n".join(lines) + "\n")
        json.dump(rows, open(os.path.join(args.out, "decode.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
