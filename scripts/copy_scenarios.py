"""Scenarios of one tensor a copy, for the sweeps that time device copies on
one GPU: `python3 scripts/copy_scenarios.py SET DIR` writes SET's scenarios
(l2: scripts/gpu-l2-sweep.sh; wait: scripts/gpu-wait-sweep.sh; lanes:
scripts/gpu-lane-sweep.sh) into DIR."""

import sys

KiB, MiB = 1 << 10, 1 << 20


def gen(directory, name, n, size, pairs):
    """Write DIRECTORY/NAME.toml: n tensors of size bytes (uint8), tensor k
    whole on rank pairs[k % len(pairs)][0] and wanted whole on rank
    pairs[k % len(pairs)][1] (the same rank: a local copy), on an
    hgx-h200 of two domains, the flat route."""
    out = [f'name = "{name}"', f'description = "{n} copies of {size} bytes"', 'routes = ["flat"]',
           '[topology]', 'preset = "hgx-h200"', 'domains = 2']
    for k in range(n):
        a, b = pairs[k % len(pairs)]
        out += ['[[tensors]]', f'name = "t{k}"', f'shape = [{size}]', 'dtype = "uint8"',
                f'src = {{ shape = [1], ranks = "{a}", placements = ["R"] }}',
                f'dst = {{ shape = [1], ranks = "{b}", placements = ["R"] }}']
    with open(f"{directory}/{name}.toml", "w") as f:
        f.write("\n".join(out) + "\n")


def l2(d):
    """Chains of copies whose iteration fits the L2 or not, on one lane and
    eight (x: rank 0 to 1; s: local copies on rank 0)."""
    one, local = [(0, 1)], [(0, 0)]
    eight = [(2 * i, 2 * i + 1) for i in range(8)]
    for name, n, size, pairs in [
        ("x64k-n256", 256, 64 * KiB, one), ("x64k-n2048", 2048, 64 * KiB, one),
        ("x1m-n16", 16, MiB, one), ("x1m-n1024", 1024, MiB, one),
        ("x4m-n4", 4, 4 * MiB, one), ("x4m-n256", 256, 4 * MiB, one),
        ("x4k-n2048-L8", 2048, 4 * KiB, eight), ("x4k-n16384-L8", 16384, 4 * KiB, eight),
        ("x64k-n2048-L8", 2048, 64 * KiB, eight),
        ("s64k-n256", 256, 64 * KiB, local), ("s64k-n2048", 2048, 64 * KiB, local),
        ("s1m-n16", 16, MiB, local), ("s1m-n1024", 1024, MiB, local),
    ]:
        gen(d, name, n, size, pairs)


def wait(d):
    """256 copies on one lane against alternating between two (local copies,
    and device copies between ranks)."""
    for size, tag in ((64 * KiB, "64k"), (MiB, "1m")):
        gen(d, f"chain-{tag}", 256, size, [(0, 0)])
        gen(d, f"alt-{tag}", 256, size, [(0, 0), (1, 1)])
        gen(d, f"xchain-{tag}", 256, size, [(0, 1)])
        gen(d, f"xalt-{tag}", 256, size, [(0, 1), (2, 3)])


def lanes(d):
    """The same bytes (896 MiB copied) in copies of one size over 8 pairs of
    ranks, for 1, 2, 4 and 8 lanes (a pair a lane, round robin); and 4
    lanes of which two carry twice the copies of the others (u: the two
    left running alone at the end)."""
    eight = [(2 * i, 2 * i + 1) for i in range(8)]
    for tag, n, size in (("1m", 896, MiB), ("3.5m", 256, 7 * MiB // 2), ("16m", 56, 16 * MiB), ("56m", 16, 56 * MiB)):
        gen(d, f"c{tag}-n{n}", n, size, eight)
    gen(d, "u3.5m-n192", 192, 7 * MiB // 2, [(0, 1), (2, 3), (4, 5), (6, 7), (4, 5), (6, 7)])


if __name__ == "__main__":
    sets = {"l2": l2, "wait": wait, "lanes": lanes}
    if len(sys.argv) != 3 or sys.argv[1] not in sets:
        sys.exit(f"usage: copy_scenarios.py {{{'|'.join(sets)}}} DIR")
    sets[sys.argv[1]](sys.argv[2])
