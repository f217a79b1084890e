#!/usr/bin/env python3
"""Prints the README's benchmark table (TFLOP/s, forward and backward) from a bench.json."""
import json
import sys


def cell(x):
    return "—" if x is None else f"{x:.0f}"


def main(path):
    data = json.load(open(path))
    names = ["memattn", "seed", "FA2", "cuDNN"]
    head = ["dtype", "D", "S", "causal", "bias"] + [f"fwd {n}" for n in names] + [f"bwd {n}" for n in names]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in data["results"]:
        cells = [r["dtype"], str(r["D"]), str(r["S"]), str(int(r["causal"])), str(int(r["bias"]))]
        cells += [cell(r[n]["fwd_tflops"]) for n in names] + [cell(r[n]["bwd_tflops"]) for n in names]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
