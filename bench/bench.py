#!/usr/bin/env python3
"""The memattn benchmark suite (shared/BENCHMARK.md), in one process on one GPU.

Times memattn and PyTorch's scaled_dot_product_attention with each backend forced
(EFFICIENT_ATTENTION = the seed kernels, FLASH_ATTENTION = FlashAttention-2,
CUDNN_ATTENTION = cuDNN) on the same fresh random-normal inputs: CUDA events, warm-up first,
median of --iters runs, forward and backward timed separately. A peer that refuses a
configuration prints "—". memattn is timed through its PyTorch op (memattn.scaled_dot_product_attention)
when the package is importable; a pass it cannot run yet prints "—".

FLOPs: forward 4*B*H*S*S*D (halved when causal), backward 2.5x forward.

Then the end-to-end row (train_step.py): one training step of a decoder stack with each
implementation's attention.

Writes <out>/bench.md (tables) and <out>/bench.json (every number).
"""
import argparse
import datetime
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS = 16384
PEERS = [("seed", SDPBackend.EFFICIENT_ATTENTION), ("FA2", SDPBackend.FLASH_ATTENTION),
         ("cuDNN", SDPBackend.CUDNN_ATTENTION)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def suite():
    rows = []
    for d in (64, 128, 256):
        for causal in (False, True):
            for s in (512, 2048, 8192, 16384):
                rows.append(dict(dtype="bf16", D=d, S=s, causal=causal, bias=False, hidden=2048))
    rows.append(dict(dtype="bf16", D=512, S=4096, causal=False, bias=False, hidden=4096))
    rows.append(dict(dtype="bf16", D=1024, S=4096, causal=False, bias=False, hidden=4096))
    rows.append(dict(dtype="bf16", D=128, S=2048, causal=False, bias=True, hidden=2048))
    for d in (128, 64, 256):
        rows.append(dict(dtype="fp32", D=d, S=4096, causal=False, bias=False, hidden=2048))
    rows.append(dict(dtype="fp16", D=128, S=8192, causal=False, bias=False, hidden=2048))
    return rows


def flops_forward(cfg):
    b, h = TOKENS // cfg["S"], cfg["hidden"] // cfg["D"]
    f = 4.0 * b * h * cfg["S"] * cfg["S"] * cfg["D"]
    return f / 2 if cfg["causal"] else f


def time_ms(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def make_inputs(cfg, seed):
    """q, k, v, dout in SDPA's [B, H, S, D] layout, and the optional dense bias [B, H, S, S]."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    b, h, s, d = TOKENS // cfg["S"], cfg["hidden"] // cfg["D"], cfg["S"], cfg["D"]
    dt = DTYPES[cfg["dtype"]]
    shape = (b, h, s, d)
    q, k, v, dout = (torch.randn(shape, generator=gen, device="cuda", dtype=dt) for _ in range(4))
    bias = torch.randn((b, h, s, s), generator=gen, device="cuda", dtype=dt) if cfg["bias"] else None
    return q, k, v, dout, bias


def time_impl(attend, cfg, inputs, iters, passes=("fwd", "bwd")):
    """(forward ms, backward ms) of attend(q, k, v, bias, causal), or None where it refuses."""
    q, k, v, dout, bias = inputs
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    try:
        out = attend(q, k, v, bias, cfg["causal"])
        torch.cuda.synchronize()
    except RuntimeError:
        return None
    # The forward as inference runs it (autograd records nothing): memattn's fp32 forward then takes
    # its 3xTF32 rows (precision "auto"); a recorded one too where its backward has 3xTF32 rows
    # (FMAs elsewhere).
    with torch.no_grad():
        fwd = time_ms(lambda: attend(q, k, v, bias, cfg["causal"]), iters) if "fwd" in passes else None
    if "bwd" not in passes:
        return fwd, None
    try:
        bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), iters)
    except RuntimeError:
        bwd = None
    return fwd, bwd


def sdpa(backend):
    def attend(q, k, v, bias, causal):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal)
    return attend


def memattn_attend():
    """memattn's drop-in for SDPA ([B, H, M, D] tensors); None when the package is not importable
    (pip install ., or PYTHONPATH=build/python after a CMake build with pybind11)."""
    try:
        import memattn
    except ImportError:
        return None
    return lambda q, k, v, bias, causal: memattn.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                                                           is_causal=causal)


def check_memattn(attend, cfg, inputs):
    """memattn's output against FLASH/CUDNN/EFFICIENT on the same inputs; the max abs difference."""
    q, k, v, _, bias = inputs
    out = attend(q, k, v, bias, cfg["causal"])
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=cfg["causal"])
    return (out.float() - ref.float()).abs().max().item()


def run_meta(commit, iters):
    """What a results file records about its run: date, GPU, driver, torch, cuDNN, commit."""
    props = torch.cuda.get_device_properties(0)
    driver = os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader").read().strip()
    return dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                gpu=props.name, sms=props.multi_processor_count, driver=driver, torch=torch.__version__,
                cudnn=torch.backends.cudnn.version(), commit=commit, iters=iters)


def fmt(x, digits=0):
    return "—" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".", help="folder for bench.md and bench.json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--commit", default=os.environ.get("MEMATTN_COMMIT", "unknown"))
    ap.add_argument("--only", default="", help="comma-separated row indices to run (debugging)")
    ap.add_argument("--shapes", default="",
                    help="bf16 rows outside the suite instead, comma-separated D/S/causal/hidden (e.g. 192/2048/1/3072)")
    ap.add_argument("--passes", default="fwd,bwd", help="which passes to time: fwd, bwd or both")
    ap.add_argument("--train-iters", type=int, default=10,
                    help="steps timed in the end-to-end row (train_step.py); 0 leaves it out")
    args = ap.parse_args()

    impls = [("memattn", memattn_attend())] + [(name, sdpa(backend)) for name, backend in PEERS]
    meta = run_meta(args.commit, args.iters)
    rows = suite()
    if args.only:
        rows = [rows[int(i)] for i in args.only.split(",")]
    if args.shapes:
        rows = [dict(dtype="bf16", D=d, S=s, causal=bool(c), bias=False, hidden=h)
                for d, s, c, h in (map(int, spec.split("/")) for spec in args.shapes.split(","))]
    results = []
    for n, cfg in enumerate(rows):
        inputs = make_inputs(cfg, seed=1000 + n)
        res = dict(cfg)
        res["fwd_flops"] = flops_forward(cfg)
        if impls[0][1] is not None:
            try:
                res["memattn_vs_sdpa_max_abs"] = check_memattn(impls[0][1], cfg, inputs)
            except RuntimeError as e:
                res["memattn_error"] = str(e)
        for name, attend in impls:
            timing = time_impl(attend, cfg, inputs, args.iters, args.passes.split(",")) if attend else None
            fwd, bwd = timing if timing else (None, None)
            res[name] = dict(fwd_ms=fwd, bwd_ms=bwd,
                             fwd_tflops=res["fwd_flops"] / fwd / 1e9 if fwd else None,
                             bwd_tflops=2.5 * res["fwd_flops"] / bwd / 1e9 if bwd else None)
        results.append(res)
        del inputs
        torch.cuda.empty_cache()
        line = " ".join(f"{name} {fmt(res[name]['fwd_tflops'])}/{fmt(res[name]['bwd_tflops'])}" for name, _ in impls)
        check = res.get("memattn_error") or f"max|memattn - sdpa| {res.get('memattn_vs_sdpa_max_abs', float('nan')):.2e}"
        print(f"[{n + 1}/{len(rows)}] {cfg['dtype']} D={cfg['D']} S={cfg['S']} causal={int(cfg['causal'])} "
              f"bias={int(cfg['bias'])}: {line}  ({check})", flush=True)

    names = [name for name, _ in impls]
    peers = names[1:]
    lines = [f"# memattn benchmark — {meta['date']}", "",
             f"GPU {meta['gpu']} ({meta['sms']} SMs), driver {meta['driver']}, torch {meta['torch']}, "
             f"cuDNN {meta['cudnn']}, commit {meta['commit']}; median of {meta['iters']} runs.", "",
             "TFLOP/s (forward 4·B·H·S²·D, halved when causal; backward 2.5x). memattn's ratio to each peer "
             "follows its own numbers. Forwards timed without autograd (fp32: memattn's 3xTF32 rows; its "
             "backward runs on them up to D = 128, on FMAs beyond).", ""]
    for pass_ in ("fwd", "bwd"):
        lines.append(f"## {'Forward' if pass_ == 'fwd' else 'Backward'}")
        lines.append("")
        head = ["dtype", "D", "S", "causal", "bias"] + names + [f"x {p}" for p in peers] + [f"ms {n}" for n in names]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for r in results:
            cells = [r["dtype"], str(r["D"]), str(r["S"]), str(int(r["causal"])), str(int(r["bias"]))]
            tf = {n: r[n][f"{pass_}_tflops"] for n in names}
            cells += [fmt(tf[n]) for n in names]
            cells += [fmt(tf["memattn"] / tf[p], 2) if tf["memattn"] and tf[p] else "—" for p in peers]
            cells += [fmt(r[n][f"{pass_}_ms"], 3) for n in names]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    train = None
    if args.train_iters > 0 and not args.only and not args.shapes:
        import train_step
        train = train_step.run(args.train_iters)
        lines += ["## End-to-end (one training step)", "", train_step.markdown(train), ""]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(dict(meta=meta, results=results, train_step=train), f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
