#!/usr/bin/env python3
"""Decoding kernels alone: each call captured in a CUDA graph and replayed after an L2 flush (median
of 30, us), so that host time (a Python call's launches, which bench/decode.py's timing includes)
drops out. memattn on K/V tensors, attention_with_kvcache on a contiguous cache (one appended key,
max_seqlen_k) with the dispatcher's split count and with 8..256 parts forced, and SDPA's FLASH and
CUDNN backends, over a fixed list of decoding problems (bf16, one query row per sequence). The last
column reads as many bytes as K and V hold with one torch reduction (one kernel, over a tensor of
its own) under the same flush and graph: what one kernel that only reads the bytes takes.

With --lead each graph starts with one small kernel, as a decoding step's graph of many layers
runs attention behind the layer's previous op, and the table gives the time beyond that kernel's
own (measured alone the same way): a graph's first kernel can start behind the L2 flush in ways
no later one does. With --warm-code each graph starts with the same call on the first 256 keys
(the same kernels, a 32nd of the bytes or less), and the table gives the time beyond that call's
own: the call with its kernels' code in the caches (the flush evicts code as well as data).

  python3 bench/decode_graphs.py [--lead | --warm-code]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import memattn

PROBLEMS = [(1, 2048, 32, 8, 128), (1, 8192, 32, 8, 128), (1, 32768, 32, 8, 128), (16, 2048, 32, 8, 128),
            (1, 8192, 32, 32, 128), (1, 8192, 32, 8, 64), (16, 8192, 32, 8, 128)]  # B, Mk, Hq, Hk, D
SPLITS = [None, 8, 16, 32, 64, 128, 256]  # None: the dispatcher's choice
PEERS = [("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)]


def graph_us(fn, flush, iters=30, lead=None):
    """Median time of fn's work replayed from a CUDA graph, L2 flushed before each replay; lead: a
    call captured before fn's."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (allocations, first-call work)
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        if lead is not None:
            lead()
        fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def cell(fn, flush, lead=None, lead_us=0.0, small=None):
    """fn's time less lead's; small (--warm-code): fn on fewer keys, run first, its own time taken off."""
    try:
        if small is not None:
            return f"{graph_us(fn, flush, lead=small) - graph_us(small, flush):.1f}"
        return f"{graph_us(fn, flush, lead=lead) - lead_us:.1f}"
    except Exception as e:  # a backend that refuses the problem or the capture
        return f"({type(e).__name__})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lead", action="store_true", help="each graph behind one small kernel (see above)")
    parser.add_argument("--warm-code", action="store_true", help="each call behind itself on 256 keys (see above)")
    args = parser.parse_args()
    dev = "cuda"
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    lead, lead_us = None, 0.0
    if args.lead:
        previous = torch.zeros(1 << 16, device=dev)  # a layer's previous op, one small elementwise kernel
        lead = lambda: previous.add_(1.0)
        lead_us = graph_us(lambda: None, flush, lead=lead)
        print(f"the small kernel alone: {lead_us:.1f} us (taken off every cell)")
    print("| B | Mk | Hq/Hk | D | tensors | " + " | ".join(f"cache ({s or 'auto'})" for s in SPLITS) + " | "
          + " | ".join(name for name, _ in PEERS) + " | read K+V |")
    print("|---" * (6 + len(SPLITS) + len(PEERS)) + "|")
    for b, mk, hq, hk, d in PROBLEMS:
        gen = torch.Generator(device=dev).manual_seed(1)
        rand = lambda *shape: torch.randn(*shape, generator=gen, device=dev, dtype=torch.bfloat16)
        q, k, v, k_new, v_new = rand(b, 1, hq, d), rand(b, mk, hk, d), rand(b, mk, hk, d), rand(b, 1, hk, d), rand(b, 1, hk, d)
        kv = torch.zeros(2, b, mk, hk, d, device=dev, dtype=torch.bfloat16)  # read K+V's bytes
        held = torch.full((b,), mk - 1, dtype=torch.int32, device=dev)
        few = 256  # --warm-code: the keys of the call that runs first
        ks, vs = k[:, :few].contiguous(), v[:, :few].contiguous()
        kvs = kv[:, :, :few].contiguous()
        held_few = torch.full((b,), few - 1, dtype=torch.int32, device=dev)
        warm = lambda small: small if args.warm_code else None
        cells = [cell(lambda: memattn.attention(q, k, v), flush, lead, lead_us,
                      warm(lambda: memattn.attention(q, ks, vs)))]
        for splits in SPLITS:
            cells.append(cell(lambda: memattn.attention_with_kvcache(q, k, v, k_new, v_new, cache_seqlens=held,
                                                                     num_splits=splits, max_seqlen_k=mk),
                              flush, lead, lead_us,
                              warm(lambda: memattn.attention_with_kvcache(q, ks, vs, k_new, v_new,
                                                                          cache_seqlens=held_few, num_splits=splits,
                                                                          max_seqlen_k=few))))
        for _, backend in PEERS:
            def sdpa(k=k, v=v):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          enable_gqa=hq != hk)
            cells.append(cell(sdpa, flush, lead, lead_us, warm(lambda: sdpa(ks, vs))))
        cells.append(cell(lambda: kv.sum(dtype=torch.float32), flush, lead, lead_us,
                          warm(lambda: kvs.sum(dtype=torch.float32))))
        print(f"| {b} | {mk} | {hq}/{hk} | {d} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
