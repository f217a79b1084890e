#!/usr/bin/env python3
"""Backward error against logit scale: memattn beside SDPA's backends.

For fp32, fp16 and bf16 and logits of size 1 to 1e5 (unit-normal q, k, v, dout with
scale = L / sqrt(D), so that the scores have standard deviation about L), and q, k of magnitude
1e4 with the default scale (scores ~1e8, the issue's bf16 case), and rows with one dominant key
("one-hot": q_i a copy of key (7 i) mod N, scale 1e4 / D, so that the exact P is 1 on that key and
0 elsewhere and dv is a sum of rows of dout: a backward whose recomputed P is exactly the
forward's gets it to the rounding of that sum), runs forward and backward of
memattn's op (fp32 twice: "memattn" with precision ieee, FMAs throughout, and "memattn tf32x3", its
3xTF32 forward alone, which serves calls that autograd does not record) and of SDPA's FLASH (FlashAttention-2), CUDNN, EFFICIENT and MATH backends (on the
CPU: FLASH, PyTorch's CPU kernel, and MATH) on the same inputs, and compares each result with
float64 math attention on those inputs (upcast after rounding to the dtype). A backend that
refuses a problem (FA2 and cuDNN take fp16/bf16 only) prints "n/a". Each case's inputs depend on
--seed and the case alone (shape, dtype, scaling), whatever else runs.

Columns: out and dv are relative errors ||x - ref|| / ||ref||. dq and dk are the error over the
size they have where the softmax does not cancel them (rms: scale * |dO| |V| sqrt(Dv) |K| for dq,
likewise with Q for dk; tools/workload/verify.cpp's measure), because with large logits most rows
have one dominant key, their exact dS is 0 and a relative error of dq would divide rounding noise
by nothing. |LSE| is the largest logsumexp; |LSE| 2^-24 the relative error a float32 LSE's own
rounding puts on P = exp(S - LSE) in the backends that store it (all but MATH) on rows whose
softmax sum is not 1.

    PYTHONPATH=<build>/python python3 bench/large_logits.py --out DIR      # on the GPU
    PYTHONPATH=<build>/python python3 bench/large_logits.py --device cpu   # memattn's CPU backend

Writes DIR/large_logits.md (the table) and DIR/large_logits.json (every number, with the setup).
"""
import argparse
import datetime
import json
import math
import os
import sys
import zlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
LOGITS = (1.0, 10.0, 1e2, 1e3, 1e4, 1e5)
INPUT_MAGNITUDE = 1e4  # the bf16 case: q and k of this size
ONE_HOT_LOGIT = 1e4  # the dominant scores of the one-hot case (within fp16's range)
# SDPA's backends by what they run on CUDA (on the CPU, FLASH_ATTENTION is PyTorch's own CPU kernel,
# which also recomputes P from a float32 LSE, and only MATH runs besides).
SDPA = {"cuda": [("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION),
                 ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)],
        "cpu": [("flash (CPU)", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)]}
FLOAT32_UNIT = 2.0 ** -24
# B,H,M,D. On the GPU, M = 1024 at D = 64 and 128 takes memattn's one-pass backward rows (a key
# sees at least 512 queries), M = 256 its two-kernel rows, D = 256 the one-pass rows of that bucket
# (wgmma on an H100); fp32 takes the SIMT rows throughout.
CUDA_SHAPES = "2,4,1024,64;2,4,1024,128;4,4,256,64;2,4,1024,256"
CPU_SHAPES = "1,2,256,64"


def cases(dtypes):
    """(dtype, kind, size): kind "logits" scales the scores through `scale`, "inputs" scales q and k,
    "onehot" copies keys into q."""
    out = [(dt, "logits", L) for dt in dtypes for L in LOGITS]
    out += [(dt, "inputs", INPUT_MAGNITUDE) for dt in dtypes if dt != "fp16"]  # 1e8 overflows fp16 scores
    out += [(dt, "onehot", ONE_HOT_LOGIT) for dt in dtypes]
    return out


def make_inputs(shape, dtype, kind, size, device, seed):
    """q, k, v, dout [B, H, M, D] in the dtype, and the scale."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v, dout = (torch.randn(shape, generator=gen, dtype=torch.float32) for _ in range(4))
    d = shape[-1]
    if kind == "inputs":
        q, k, scale = q * size, k * size, 1.0 / math.sqrt(d)
    elif kind == "onehot":
        # |k|^2 ~ D against k.k' ~ sqrt(D): the dominant key leads every other by far more than
        # float32's exp resolves.
        q = k[:, :, (torch.arange(shape[2]) * 7) % shape[2], :].clone()
        scale = size / d
    else:
        scale = size / math.sqrt(d)
    return [t.to(device=device, dtype=DTYPES[dtype]) for t in (q, k, v, dout)], scale


def forward_backward(attend, q, k, v, dout):
    """(out, dq, dk, dv) of attend(q, k, v) in float64, or None where the backend refuses."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    try:
        out = attend(q, k, v)
        out.backward(dout)
        if q.is_cuda:
            torch.cuda.synchronize()
    except (RuntimeError, NotImplementedError, ValueError):
        return None
    return [t.detach().double() for t in (out, q.grad, k.grad, v.grad)]


def forward_only(attend, q, k, v, dout):
    """(out, None, None, None) of attend(q, k, v) without autograd: memattn's 3xTF32 forward serves
    only calls that autograd does not record (its backward recomputes the scores with FMAs)."""
    with torch.no_grad():
        out = attend(q, k, v)
    return [out.double(), None, None, None]


def reference(q, k, v, dout, scale):
    """Float64 math attention on the rounded inputs, and the largest |LSE|."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    out = torch.softmax(s, dim=-1) @ v
    out.backward(dout.double())
    lse = torch.logsumexp(s.detach(), dim=-1)
    return [t.detach() for t in (out, q.grad, k.grad, v.grad)], lse.abs().max().item()


def rms(t):
    return t.double().pow(2).mean().sqrt().item()


def errors(got, ref, inputs, scale):
    """out and dv relative errors; dq and dk over their typical size (module docstring)."""
    q, k, v, dout = inputs
    dp = rms(dout) * rms(v) * math.sqrt(v.shape[-1])
    typical = {"dq": scale * dp * rms(k), "dk": scale * dp * rms(q)}
    res = {}
    for name, x, r in zip(("out", "dq", "dk", "dv"), got, ref):
        if x is None:
            res[name] = None
            continue
        diff = (x - r).norm().item()
        if name in typical:
            res[name] = diff / (typical[name] * math.sqrt(r.numel())) if typical[name] > 0 else float("nan")
        else:
            norm = r.norm().item()
            res[name] = diff / norm if norm > 0 else float("nan")
    return res


def memattn_attend(precision):
    """memattn's op on [B, H, M, D] tensors at a `precision` (how fp32 is multiplied), or None when
    the package is not importable (PYTHONPATH=<build>/python)."""
    try:
        import memattn
    except ImportError as e:
        print(f"memattn not importable ({e}); its rows print n/a", file=sys.stderr)
        return None
    t = lambda x: x.transpose(1, 2)
    return lambda q, k, v, scale: t(memattn.attention(t(q), t(k), t(v), scale=scale, precision=precision))


def sdpa(backend):
    def attend(q, k, v, scale):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, scale=scale)
    return attend


def fmt(x):
    if x is None:
        return "n/a"
    return f"{x:.1e}" if math.isfinite(x) else str(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".", help="folder for large_logits.md and large_logits.json")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--shapes", default="", help=f"B,H,M,D;... (default: {CUDA_SHAPES} on cuda, {CPU_SHAPES} on cpu)")
    ap.add_argument("--dtypes", default="fp32,fp16,bf16")
    ap.add_argument("--seed", type=int, default=20261124)
    ap.add_argument("--commit", default=os.environ.get("MEMATTN_COMMIT", "unknown"))
    args = ap.parse_args()

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --device cpu")
    # fp32 products in fp32, not TF32, for the MATH backend and the reference.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shapes_text = args.shapes or (CUDA_SHAPES if device == "cuda" else CPU_SHAPES)
    shapes = [tuple(int(x) for x in s.split(",")) for s in shapes_text.split(";") if s]
    dtypes = [d for d in args.dtypes.split(",") if d]

    # fp32 both ways (precision: FMAs, or 3xTF32 in the forward); 16-bit dtypes ignore it.
    impls = [("memattn", memattn_attend("ieee")), ("memattn tf32x3", memattn_attend("tf32x3"))]
    impls += [(name, sdpa(b)) for name, b in SDPA[device]]
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                device=torch.cuda.get_device_name(0) if device == "cuda" else "cpu", torch=torch.__version__,
                cudnn=torch.backends.cudnn.version() if device == "cuda" else None, commit=args.commit,
                seed=args.seed, shapes=shapes)
    header = ("| shape B,H,M,D | dtype | logits | max abs LSE | LSE 2^-24 | backend | out | dv | dq / typical "
              "| dk / typical |")
    lines = [f"# Backward error against logit scale ({meta['device']}, torch {meta['torch']}"
             + (f", cuDNN {meta['cudnn']}" if meta["cudnn"] else "") + f", memattn {meta['commit']}, {meta['date']})",
             "", "Against float64 math attention on the same (rounded) inputs; bench/large_logits.py explains the "
             "columns. Logits 1..1e5: scale = L / sqrt(D); inputs 1e4: q and k times 1e4, scale 1/sqrt(D); "
             "one-hot 1e4: q rows copies of key rows, scale 1e4 / D.", "",
             header, "|" + "---|" * (header.count("|") - 1)]
    print("\n".join(lines), flush=True)
    rows = []
    for shape in shapes:
        for dtype, kind, size in cases(dtypes):
            case_seed = args.seed ^ zlib.crc32(f"{shape} {dtype} {kind} {size:g}".encode())
            inputs, scale = make_inputs(shape, dtype, kind, size, device, case_seed)
            ref, max_lse = reference(*inputs, scale)
            label = {"logits": f"{size:g}", "inputs": f"inputs {size:g}", "onehot": f"one-hot {size:g}"}[kind]
            for name, attend in impls:
                if name == "memattn tf32x3" and dtype != "fp32":
                    continue
                run = forward_only if name == "memattn tf32x3" else forward_backward
                got = None if attend is None else run(lambda q, k, v: attend(q, k, v, scale), *inputs)
                err = None if got is None else errors(got, ref, inputs, scale)
                rows.append(dict(shape=shape, dtype=dtype, kind=kind, size=size, scale=scale, max_lse=max_lse,
                                 backend=name, errors=err))
                cells = [",".join(map(str, shape)), dtype, label, f"{max_lse:.3g}", fmt(max_lse * FLOAT32_UNIT), name]
                cells += [fmt(err[c]) if err else "n/a" for c in ("out", "dv", "dq", "dk")]
                line = "| " + " | ".join(cells) + " |"
                lines.append(line)
                print(line, flush=True)
            del inputs, ref
            if device == "cuda":
                torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "large_logits.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "large_logits.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
