"""How a framework's weight-sync interface would call m2n: two small
adapters in the shapes RL frameworks use, over m2n.Plan. Nothing here
imports a framework; torch is imported only when a communicator is
borrowed from a process group.

    xferdtensor(src, src_mesh, src_placements, dst, dst_mesh, dst_placements, group, stream)
        NeMo-RL's per-tensor shape: this rank's source and destination
        shards (None for a side it does not hold), both DTensor layouts;
        plans once per layout pair (cached) and runs on the shards.

    WeightTransfer(tensors, topology).start(comm, stream, rank) /
    .update(arrays) / .finish()
        vLLM's WeightTransferEngine shape (init / start / update / finish):
        one plan for the whole model, executed per refit.
"""

from . import M2NError, Layout, Plan, Tensor, torch_comm

_plans = {}
_comms = {}


def _mesh_layout(mesh, placements):
    if isinstance(mesh, Layout):
        return Layout(mesh.mesh_shape, mesh.ranks, placements)
    if hasattr(mesh, "mesh"):
        return Layout.from_device_mesh(mesh, placements)
    shape, ranks = mesh  # (mesh shape, ranks in row-major order)
    return Layout(shape, ranks, placements)


def global_shape(local_shape, layout):
    """The global shape of a tensor from one rank's shard of it, evenly
    sharded: each dim times the mesh dims that shard it."""
    shape = [int(d) for d in local_shape]
    for size, p in zip(layout.mesh_shape, layout.placements):
        if p.startswith("S("):
            d = int(p[2:-1])
            if d >= len(shape):
                raise ValueError(f"placement {p}: the shard has {len(shape)} dims")
            shape[d] *= size
    return shape


def _dtype(t):
    return str(t.dtype).replace("torch.", "")


def plan_for(name, shape, dtype, src_layout, dst_layout, topology, route="flat"):
    """The plan of one tensor between two layouts, made once per distinct
    arguments and kept (a refit moves the same tensors every step)."""
    key = (name, tuple(shape), dtype, repr(src_layout._doc()), repr(dst_layout._doc()), repr(sorted(topology.items())), route)
    p = _plans.get(key)
    if p is None:
        p = Plan.from_tensors([Tensor(name, shape, dtype, src=src_layout, dst=dst_layout)], topology, route=route)
        _plans[key] = p
    return p


def xferdtensor(src, src_mesh, src_placements, dst, dst_mesh, dst_placements, group=None, stream=None, *,
                name="tensor", shape=None, topology=None, route="flat", comm=None, rank=-1):
    """Moves one tensor from its source layout to its destination layout,
    on this rank's shards (src, dst: torch tensors or None). shape is the
    global shape (default: from the shard held, evenly sharded); topology
    a scenario's [topology] table (default: one host of H200s, each GPU
    its own NVLink domain); comm a ncclComm_t (default: borrowed from
    group)."""
    sl, dl = _mesh_layout(src_mesh, src_placements), _mesh_layout(dst_mesh, dst_placements)
    held = src if src is not None else dst
    if held is None:
        raise ValueError(f"tensor {name}: this rank holds neither side; call it only on ranks of either mesh")
    if shape is None:
        shape = global_shape(held.shape, sl if src is not None else dl)
    plan = plan_for(name, shape, _dtype(held), sl, dl, topology or {"preset": "hgx-h200", "gpus_per_domain": 1}, route)
    if comm is None:
        # Keyed by the group itself (kept alive here), not its id(), which a
        # later group could reuse.
        key = "WORLD" if group is None else group
        if key not in _comms:
            _comms[key] = torch_comm(group)
        comm = _comms[key]
    plan.execute({name: {"src": src, "dst": dst}}, comm, stream=stream, rank=rank)


class WeightTransfer:
    """A whole model's refit in the init / start / update / finish shape."""

    def __init__(self, tensors, topology, route="flat"):
        self.plan = Plan.from_tensors(tensors, topology, route=route)
        self.comm = self.stream = None
        self.rank = -1

    def start(self, comm, stream=None, rank=-1):
        """Binds the communicator (an ncclComm_t, or a torch ProcessGroup
        to borrow it from), the stream and this process's rank."""
        if comm is not None and not isinstance(comm, int) and hasattr(comm, "rank") and hasattr(comm, "size"):
            comm = torch_comm(comm)
        self.comm, self.stream, self.rank = comm, stream, rank

    def update(self, arrays):
        """Runs one refit on this rank's arrays ({name: {"src", "dst"}})."""
        if self.comm is None:
            raise M2NError("update before start: no communicator")
        self.plan.execute(arrays, self.comm, stream=self.stream, rank=self.rank)

    def finish(self):
        """Releases the plan (m2n waits for the last refit's work on the
        stream before it frees its staging)."""
        self.plan.close()
