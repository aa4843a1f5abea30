#!/usr/bin/env python3
"""Where a step's time goes, from `pdit bench --op-times --json`: the operations' seconds summed by kind
(products, attention, convolutions, and everything else: the elementwise kernels, norms, conversions
and copies) with each kind's share, then the longest operations with their rates. The table's times
are each operation waited for, so the kinds' shares are what to read, not their sum as a step.

  pdit bench -m flux-width -H 1024 -W 1024 --dtype bf16 --op-times --json > ops.json
  python3 bench/op_shares.py ops.json [ROWS]
"""
import json
import sys


def kind(name):
    for prefix, k in (("linear", "products"), ("attention", "attention"), ("conv", "convolutions")):
        if name.startswith(prefix):
            return k
    return "elementwise, norms, copies"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip())
    rows = int(sys.argv[2]) if len(sys.argv) == 3 else 15
    try:
        with open(sys.argv[1]) as f:
            ops = json.load(f)["ops"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit("%s: no operations' table (%s): was it written by pdit bench --op-times --json?" % (sys.argv[1], e))
    total = sum(o["seconds"] for o in ops) or 1.0
    kinds = {}
    for o in ops:
        kinds[kind(o["name"])] = kinds.get(kind(o["name"]), 0.0) + o["seconds"]
    print("a step's operations, each waited for: %.4f s; %s" % (total, ", ".join(
        "%s %.4f s (%.0f%%)" % (k, s, 100 * s / total) for k, s in sorted(kinds.items(), key=lambda x: -x[1]))))
    for o in sorted(ops, key=lambda o: -o["seconds"])[:rows]:
        rate = o["gflop"] / o["seconds"] / 1e3 if o["gflop"] > 0 and o["seconds"] > 0 else 0
        print("  %-46s %6.0f calls %9.4f s %5.1f%%%s" % (o["name"], o["calls"], o["seconds"],
                                                        100 * o["seconds"] / total,
                                                        " %7.2f TFLOP/s" % rate if rate else ""))


if __name__ == "__main__":
    main()
