"""Scenarios of one tensor a copy, for the sweeps that time device copies on
one GPU (scripts/gpu-l2-sweep.sh, scripts/gpu-wait-sweep.sh)."""


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
