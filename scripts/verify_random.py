#!/usr/bin/env python3
"""Runs random valid problems through `memattn run --verify` and reports any that fail.

Each problem draws its sizes (1 to a few hundred rows, head dims 1..300, GQA), dtype, mask
(causal, windows, both alignments), bias kind, dropout, scale, variable lengths and
`--deterministic` from a generator seeded with --seed, so a failure is replayed by its printed
command. The acceptance run of the verification criterion is 1,000 problems on the CPU backend:

  scripts/verify_random.py --bin build/bin/memattn --count 1000 --seed 1 [--backend cpu|cuda]
"""
import argparse
import random
import shlex
import subprocess
import sys


def problem(rng):
    args = ["--dtype", rng.choice(["fp32", "fp16", "bf16"])]
    heads_k = rng.choice([1, 1, 2, 3])
    args += ["--heads-k", str(heads_k), "--heads-q", str(heads_k * rng.choice([1, 1, 2, 4]))]
    d = rng.choice([1, 7, 16, 32, 40, 64, 64, 96, 128, 130, 256, 300])
    args += ["--head-dim", str(d)]
    if rng.random() < 0.2:
        args += ["--head-dim-v", str(rng.choice([1, 8, 33, 64, 128]))]
    if rng.random() < 0.25:
        seqs = [rng.choice([0, 1, 17, 64, 100, 255]) for _ in range(rng.randint(1, 4))]
        if sum(seqs) == 0:
            seqs[0] = 5
        args += ["--varlen", ",".join(map(str, seqs))]
        if rng.random() < 0.5:
            args += ["--varlen-k", ",".join(str(rng.choice([0, 1, 33, 200])) for _ in seqs)]
    else:
        args += ["--batch", str(rng.randint(1, 3)), "--seqlen-q", str(rng.choice([1, 17, 64, 255, 300]))]
        args += ["--seqlen-k", str(rng.choice([1, 17, 64, 255, 400]))]
    mask = rng.random()
    if mask < 0.3:
        args += ["--causal"]
    elif mask < 0.55:
        args += ["--window-left", str(rng.choice([0, 1, 5, 64])), "--window-right", str(rng.choice([0, 1, 5, 64]))]
    if mask < 0.55 and rng.random() < 0.5:
        args += ["--alignment", "bottom-right"]
    if rng.random() < 0.35:
        args += ["--bias", rng.choice(["dense", "broadcast-batch", "broadcast-heads", "row"])]
    if rng.random() < 0.35:
        args += ["--dropout", rng.choice(["0.1", "0.3", "0.5"]), "--seed", str(rng.randint(0, 1000))]
    if rng.random() < 0.15:
        args += ["--scale", rng.choice(["0.05", "0.5", "2"])]
    if rng.random() < 0.2:
        args += ["--deterministic"]
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/memattn")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    failed = 0
    for i in range(args.count):
        cmd = [args.bin, "run", "--backend", args.backend, "--iters", "0", "--verify"] + problem(rng)
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            failed += 1
            print(f"FAIL ({run.returncode}) {shlex.join(cmd)}")
            print("\n".join((run.stdout + run.stderr).strip().splitlines()[-8:]))
    print(f"{args.count - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
