#!/usr/bin/env python3
"""Compares two builds of one model made with KILN_TUNE_VERBOSE=1: the
candidates each layer set up (names, and which failed: a time of -1) must be
the same, whatever KILN_CUDA_PLAN_THREADS was; the tactics chosen (from
`kiln inspect` of each engine) may differ only where the timings tie.

  tune_log_compare.py A.log A.inspect B.log B.inspect [--tie 0.10]

Prints one line per difference and a summary; exits 1 when a layer's
candidates differ (the plan threads changed what can be set up), 0
otherwise (tactic differences are listed with both builds' times: within
--tie of each other they are timing ties, beyond it they are reported as
'NOT A TIE', which needs a look but is timing noise as often as not)."""
import re
import sys

CAND = re.compile(r" (\S+?)=(-?[0-9.]+)us\(setup ([0-9]+)ms\)")


def candidates(log):
    """{layer: [(tactic, us), ...]} from the per-layer candidate lines."""
    out = {}
    with open(log, errors="replace") as f:
        for line in f:
            if not line.startswith("kiln: tune ") or "us(setup " not in line:
                continue
            rest = line[len("kiln: tune "):].rstrip("\n")
            cut = rest.rfind(": ", 0, rest.find("us(setup "))
            if cut < 0:
                continue
            name, cands = rest[:cut], rest[cut + 1:]
            out[name] = [(m.group(1), float(m.group(2))) for m in CAND.finditer(cands)]
    return out


def tactics(inspect):
    """{layer name: (tactic, us)} from `kiln inspect` lines with a tactic."""
    out = {}
    pat = re.compile(r"^\s*\d+\s+\S+\s+(\S+)\s.*?tactic (\S+)(?: ([0-9.]+) us)?")
    with open(inspect, errors="replace") as f:
        for line in f:
            m = pat.match(line)
            if m:
                out[m.group(1)] = (m.group(2), float(m.group(3)) if m.group(3) else None)
    return out


def main():
    args = sys.argv[1:]
    tie = 0.10
    if "--tie" in args:
        i = args.index("--tie")
        tie = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    ca, cb = candidates(args[0]), candidates(args[2])
    ta, tb = tactics(args[1]), tactics(args[3])
    bad = 0
    for name in sorted(set(ca) | set(cb)):
        a, b = ca.get(name), cb.get(name)
        if a is None or b is None:
            print(f"layer {name}: timed in {'A' if a is not None else 'B'} only")
            bad += 1
            continue
        sa = [(t, us < 0) for t, us in a]
        sb = [(t, us < 0) for t, us in b]
        if sa != sb:
            print(f"layer {name}: candidates differ:\n  A {sa}\n  B {sb}")
            bad += 1
    ties = far = 0
    for name in sorted(set(ta) & set(tb)):
        (xa, ua), (xb, ub) = ta[name], tb[name]
        if xa == xb:
            continue
        # the two winners' times in build A's log (same layer, same candidates)
        times = dict(ca.get(name, []))
        t1, t2 = times.get(xa), times.get(xb)
        if t1 is None or t2 is None:
            kind = "not both in A's candidate line (an identical layer, or a choice made by a whole-engine trial)"
            far += 1
        elif t1 > 0 and t2 > 0 and abs(t1 - t2) / min(t1, t2) <= tie:
            kind = "tie"
            ties += 1
        else:
            kind = "NOT A TIE"
            far += 1
        print(f"layer {name}: tactic {xa} ({ua} us) vs {xb} ({ub} us); in A's timing {t1} vs {t2} us: {kind}")
    print(f"{len(ca)} layers timed in A, {len(cb)} in B; {bad} with different candidates; "
          f"{ties + far} tactics differ ({ties} ties within {tie:.0%}, {far} not)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
