#!/usr/bin/env python3
"""SASS fingerprints of the kernel table's compiled units (see sass_fingerprint.sh) and their comparison.

  sass_compare.py --fingerprint < dump      one line per function: unit arch instructions sha256
  sass_compare.py BEFORE AFTER [--rename OLD=NEW ...]
                                            units whose functions differ, units only on one side

Functions are compared by their SASS with the name left out, as a multiset per (unit, arch), so a
renamed kernel or namespace compares equal and the order of functions in the object file does not
matter. --rename maps a unit name of BEFORE to its name in AFTER (a regular expression substitution).
"""
import argparse
import collections
import hashlib
import re
import sys

INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*)$")
ENCODING = re.compile(r"^\s*/\* (0x[0-9a-f]+) \*/\s*$")


def fingerprint(lines):
    row, arch, body, count = None, None, [], 0

    def flush():
        if body:
            digest = hashlib.sha256("\n".join(body).encode()).hexdigest()
            print(row, arch, count, digest)

    for line in lines:
        if line.startswith("== "):
            flush()
            row, body, count = line[3:].strip(), [], 0
        elif "code for sm_" in line:
            flush()
            arch, body, count = line.split()[-1], [], 0
        elif "Function :" in line:
            flush()
            body, count = [], 0
        elif INSTRUCTION.match(line):
            # The instruction text and its encoding; branch targets are offsets, not names.
            body.append(INSTRUCTION.match(line).group(1).strip())
            count += 1
        elif ENCODING.match(line):
            body.append(ENCODING.match(line).group(1))
    flush()


def load(path, renames):
    rows = collections.defaultdict(collections.Counter)
    for line in open(path):
        row, arch, _, digest = line.split()
        for old, new in renames:
            row = re.sub(old, new, row)
        rows[(row, arch)][digest] += 1
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fingerprint", action="store_true")
    parser.add_argument("before", nargs="?")
    parser.add_argument("after", nargs="?")
    parser.add_argument("--rename", action="append", default=[])
    args = parser.parse_args()
    if args.fingerprint:
        fingerprint(sys.stdin)
        return 0
    renames = [tuple(r.split("=", 1)) for r in args.rename]
    before, after = load(args.before, renames), load(args.after, [])
    same = [k for k in before if k in after and before[k] == after[k]]
    differ = [k for k in before if k in after and before[k] != after[k]]
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    for k in sorted(differ):
        print("differs:", *k)
    for k in gone:
        print("only before:", *k)
    for k in new:
        print("only after:", *k)
    print(f"{len(same)} rows identical, {len(differ)} differ, {len(gone)} only before, {len(new)} only after")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
