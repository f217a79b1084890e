#!/usr/bin/env python3
"""The suite's end-to-end row: one training step (forward and backward) of a Llama-style decoder
stack in plain torch, its attention by each implementation in turn.

8 layers, hidden 2048, 16 query / 4 kv heads (D = 128), SwiGLU MLP 5632, RMSNorm, rotary, causal,
4 sequences x 4096 tokens, bf16, random weights (no downloads). The same weights and tokens for
every implementation: memattn (its SDPA drop-in), SDPA's default choice, and each SDPA backend
forced ("—" where a backend refuses). CUDA events around one step followed by a synchronisation,
warm-up first, median of --iters. Each stack's output is compared with the default's (relative
error of the whole [B, S, hidden] output): the stacks differ only in their attention.

  python3 bench/train_step.py [--iters 10] [--out DIR]   (writes DIR/train_step.json)
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

LAYERS, HIDDEN, HEADS, KV_HEADS, MLP, BATCH, SEQ = 8, 2048, 16, 4, 5632, 4, 4096
HEAD_DIM = HIDDEN // HEADS


def rotary_tables(seq, dim, device):
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)  # [S, D/2]
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def rotate(x, cos, sin):
    """x [B, S, H, D]: each pair (x[i], x[i + D/2]) turned by its position's angle."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = nn.RMSNorm(HIDDEN)
        self.qkv = nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False)
        self.out = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.mlp_norm = nn.RMSNorm(HIDDEN)
        self.gate_up = nn.Linear(HIDDEN, 2 * MLP, bias=False)
        self.down = nn.Linear(MLP, HIDDEN, bias=False)

    def forward(self, x, cos, sin, attend):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
        q = rotate(q.view(b, s, HEADS, HEAD_DIM), cos, sin)
        k = rotate(k.view(b, s, KV_HEADS, HEAD_DIM), cos, sin)
        v = v.view(b, s, KV_HEADS, HEAD_DIM)
        a = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # [B, H, S, D]
        x = x + self.out(a.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(HIDDEN)

    def forward(self, x, cos, sin, attend):
        for block in self.blocks:
            x = block(x, cos, sin, attend)
        return self.norm(x)


def sdpa(backend=None):
    def attend(q, k, v):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return attend


def memattn_attend():
    try:
        import memattn
    except ImportError:
        return None
    return lambda q, k, v: memattn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def implementations():
    return [("memattn", memattn_attend()), ("SDPA default", sdpa()), ("seed", sdpa(SDPBackend.EFFICIENT_ATTENTION)),
            ("FA2", sdpa(SDPBackend.FLASH_ATTENTION)), ("cuDNN", sdpa(SDPBackend.CUDNN_ATTENTION))]


def run(iters=10, seed=0):
    """[{name, ms, out_error}] per implementation (None where it refuses or is missing)."""
    torch.manual_seed(seed)
    model = Stack().to(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(BATCH, SEQ, HIDDEN, device="cuda", dtype=torch.bfloat16)
    cos, sin = rotary_tables(SEQ, HEAD_DIM, "cuda")

    def step(attend):
        model.zero_grad(set_to_none=True)
        loss = model(x, cos, sin, attend).float().square().mean()
        loss.backward()
        return loss.detach()

    with torch.no_grad():
        ref = model(x, cos, sin, sdpa()).float()
    rows = []
    for name, attend in implementations():
        row = dict(name=name, ms=None, out_error=None)
        if attend is not None:
            try:
                with torch.no_grad():
                    row["out_error"] = ((model(x, cos, sin, attend).float() - ref).norm() / ref.norm()).item()
                for _ in range(3):
                    step(attend)
                torch.cuda.synchronize()
                times = []
                for _ in range(iters):
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    step(attend)
                    stop.record()
                    stop.synchronize()
                    times.append(start.elapsed_time(stop))
                row["ms"] = statistics.median(times)
            except RuntimeError as e:
                row["error"] = str(e).splitlines()[0]
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def markdown(rows):
    """The end-to-end table: ms per step, memattn's speed ratio to each (their time over memattn's),
    and each output's relative error against SDPA's default."""
    mine = next((r["ms"] for r in rows if r["name"] == "memattn"), None)
    lines = [f"One training step: {LAYERS} layers, hidden {HIDDEN}, {HEADS}/{KV_HEADS} heads (D {HEAD_DIM}), SwiGLU "
             f"{MLP}, {BATCH} x {SEQ} tokens, bf16, causal.", "",
             "| attention | ms per step | memattn speed-up | output vs SDPA default |", "|---|---|---|---|"]
    for r in rows:
        ms = "—" if r["ms"] is None else f"{r['ms']:.1f}"
        speedup = "—" if r["ms"] is None or mine is None else f"{r['ms'] / mine:.3f}"
        diff = "—" if r["out_error"] is None else f"{r['out_error']:.1e}"
        lines.append(f"| {r['name']} | {ms} | {speedup} | {diff} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", default=None, help="folder for train_step.json")
    args = ap.parse_args()
    rows = run(args.iters)
    print(markdown(rows))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "train_step.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
