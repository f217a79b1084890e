#!/usr/bin/env python3
"""Prints the README's benchmark table from a bench.json: memattn's TFLOP/s per pass and its speed
ratio to each peer (the peer's time over memattn's; "—" where either has no number)."""
import json
import sys

PEERS = ["seed", "FA2", "cuDNN"]


def tflops(x):
    return "—" if x is None else f"{x:.0f}"


def ratio(mine, peer):
    return "—" if mine is None or peer is None else f"{peer / mine:.2f}"


def main(path):
    data = json.load(open(path))
    head = ["dtype", "D", "S", "causal", "bias"]
    for p in ("fwd", "bwd"):
        head += [f"{p} TFLOP/s"] + [f"x {n}" for n in PEERS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in data["results"]:
        cells = [r["dtype"], str(r["D"]), str(r["S"]), str(int(r["causal"])), str(int(r["bias"]))]
        for p in ("fwd", "bwd"):
            mine = r["memattn"].get(f"{p}_ms")
            cells += [tflops(r["memattn"].get(f"{p}_tflops"))]
            cells += [ratio(mine, r[n].get(f"{p}_ms")) for n in PEERS]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
