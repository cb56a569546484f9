#!/usr/bin/env python3
"""Top user-space costs a request, from two callgrind profiles of benches/instructions.sh
(KEEP_PROFILES=DIR): a loaded run and the idle run of the same binary.

    benches/profile_table.py DIR/new.plain.cg DIR/new.idle.cg REQUESTS [TOP]
    benches/profile_table.py --diff DIR/new.local.cg N DIR/new.plain.cg M DIR/new.idle.cg [TOP]

Each function's self cost (instructions executed in it, not in what it calls) in the loaded
run, less the idle run's, over REQUESTS (the row's request count, in instructions.sh's log):
the per-request cost of that function. Prints two markdown tables: the TOP (10) functions,
and every function grouped by the crate (or library) its symbol names, each with its share
of the request's instructions. Reads callgrind_annotate's output (valgrind's own tool).

With --diff: where one row's instructions over another's go (the local row over plain:
what the limit step costs), each function's per-request self cost in the first profile
less that in the second, the TOP (30) largest differences either way.
"""
import re
import subprocess
import sys
from collections import defaultdict

LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?)\s*$")


def self_costs(path):
    """Function -> self instructions, for every function of the profile."""
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=no", path],
        check=True, capture_output=True, text=True,
    ).stdout
    costs, started = {}, False
    for line in out.splitlines():
        if "file:function" in line:
            started = True
            continue
        m = LINE.match(line) if started else None
        if m:
            name = m.group(2)
            # `file:function [object]`: the function, without the file and the object.
            name = re.sub(r"\s+\[[^\]]*\]$", "", name)
            name = name.split(":", 1)[1] if ":" in name.split("(")[0].split("<")[0] else name
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def group_of(name):
    """The crate a symbol belongs to: its first path segment, or the C library's."""
    if name.startswith(("__memcpy", "__memmove", "__memset", "__memcmp", "__strlen")):
        return "libc: memory copies and compares"
    if name.startswith(("mi_", "_mi_", "malloc", "free", "_int_", "realloc", "cfree")):
        return "allocator (mimalloc)"
    m = re.match(r"^<?(?:&|\*const |\*mut )?([a-z_][a-z0-9_]*)::", name)
    if m:
        return m.group(1)
    return "other (libc, vdso, unresolved)"


def diff(args):
    """`--diff A N B M IDLE [TOP]`: per-request self costs of A less B's."""
    a, n, b, m, idle = args[0], int(args[1]), args[2], int(args[3]), self_costs(args[4])
    top = int(args[5]) if len(args) > 5 else 30
    per = lambda path, k: {f: (c - idle.get(f, 0)) / k for f, c in self_costs(path).items()}
    pa, pb = per(a, n), per(b, m)
    d = {f: pa.get(f, 0) - pb.get(f, 0) for f in set(pa) | set(pb)}
    print(f"{sum(d.values()):,.0f} instructions a request more in the first profile\n")
    print("| # | function (self cost) | first | second | difference |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for i, (f, c) in enumerate(sorted(d.items(), key=lambda x: -abs(x[1]))[:top], 1):
        short = f if len(f) <= 110 else f[:107] + "..."
        print(f"| {i} | `{short}` | {pa.get(f, 0):,.0f} | {pb.get(f, 0):,.0f} | {c:+,.0f} |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--diff":
        if len(sys.argv) < 7:
            sys.exit(__doc__)
        return diff(sys.argv[2:])
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    loaded, idle = self_costs(sys.argv[1]), self_costs(sys.argv[2])
    requests = int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    per = {f: (c - idle.get(f, 0)) / requests for f, c in loaded.items()}
    per = {f: c for f, c in per.items() if c > 0}
    total = sum(per.values())
    print(f"{total:,.0f} instructions a request ({requests} requests)\n")
    print("| # | function (self cost) | instructions / request | share |")
    print("| ---: | --- | ---: | ---: |")
    for i, (f, c) in enumerate(sorted(per.items(), key=lambda x: -x[1])[:top], 1):
        short = f if len(f) <= 110 else f[:107] + "..."
        print(f"| {i} | `{short}` | {c:,.0f} | {100 * c / total:.1f} % |")
    groups = defaultdict(float)
    for f, c in per.items():
        groups[group_of(f)] += c
    print("\n| crate or library | instructions / request | share |")
    print("| --- | ---: | ---: |")
    for g, c in sorted(groups.items(), key=lambda x: -x[1])[:top + 5]:
        print(f"| {g} | {c:,.0f} | {100 * c / total:.1f} % |")


if __name__ == "__main__":
    main()
