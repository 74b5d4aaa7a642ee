"""m2n from Python: plan, inspect, simulate and check M-to-N reshard schedules.

Pure Python over ctypes and m2n's C ABI (libm2n.so, built by `make python`
into this package); no PyTorch needed. docs/python.md has the whole story.

    import m2n
    with m2n.Plan.from_tensors(
        [m2n.Tensor("w", [16, 2048, 7168], "bf16",
                    src=m2n.Layout([2], [0, 1], ["S(0)"]),
                    dst=m2n.Layout([2], [0, 1], ["R"]))],
        topology={"preset": "hgx-h200", "gpus_per_domain": 1},
        route="hierarchical") as plan:
        plan.ir            # the Schedule IR as a dict (docs/ir.md)
        plan.simulate()    # the record `m2n sim --json` prints
        plan.check_on_host()  # run it over real bytes, every byte checked
        # inside a job, on its GPU tensors, stream and NCCL communicator:
        plan.execute({"w": {"src": my_shard, "dst": my_replica}}, comm, rank=rank)
"""

import ctypes
import json
import os

__all__ = ["M2NError", "Layout", "Tensor", "Plan", "placements_of", "DTYPES", "SCALES", "array_of", "torch_comm", "new_comm"]

# The dtypes m2n moves, as scenario files name them.
DTYPES = ("bf16", "fp16", "fp32", "fp64", "fp8_e4m3", "fp8_e5m2", "int8", "uint8", "int32", "int64")


class M2NError(Exception):
    """An error m2n reported: its message names the field and the value."""


def _lib_path():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("M2N_LIB", os.path.join(here, "libm2n.so"))


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = _lib_path()
    if not os.path.exists(path):
        raise M2NError(f"{path}: no libm2n.so (build it with `make python`, or set M2N_LIB)")
    lib = ctypes.CDLL(path)
    cp = ctypes.c_void_p
    errp = ctypes.POINTER(ctypes.c_void_p)
    for name, args, res in [
        ("m2n_plan_scenario", [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, errp], ctypes.c_uint64),
        ("m2n_plan_json", [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, errp], ctypes.c_uint64),
        ("m2n_ir", [ctypes.c_uint64, errp], cp),
        ("m2n_simulate", [ctypes.c_uint64, errp], cp),
        ("m2n_run_host", [ctypes.c_uint64, ctypes.c_uint64, errp], cp),
        ("m2n_execute", [ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p, errp], ctypes.c_int),
        ("m2n_close", [ctypes.c_uint64, errp], ctypes.c_int),
        ("m2n_free", [cp], None),
    ]:
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    _lib = lib
    return lib


def _take(lib, p):
    """The Python string of a C string m2n returned, which it then frees."""
    try:
        return ctypes.string_at(p).decode()
    finally:
        lib.m2n_free(p)


def _call(fn, *args):
    """Calls an m2n function; an error it sets becomes M2NError."""
    lib = _load()
    err = ctypes.c_void_p()
    out = getattr(lib, fn)(*args, ctypes.byref(err))
    if err.value:
        raise M2NError(_take(lib, err.value))
    return lib, out


def placements_of(placements):
    """m2n's placements ("S(d)", "R") of DTensor-like ones: Shard(d) (any
    object with an integer .dim and a class named Shard) and Replicate();
    strings pass as they are."""
    out = []
    for i, p in enumerate(placements):
        if isinstance(p, str):
            out.append(p)
        elif type(p).__name__ in ("Shard", "_StridedShard") and isinstance(getattr(p, "dim", None), int):
            out.append(f"S({p.dim})")
        elif type(p).__name__ == "Replicate":
            out.append("R")
        else:
            raise ValueError(f"placements[{i}] = {p!r}: want Shard(d), Replicate() or a string such as 'S(0)' or 'R'")
    return out


# torch's dtype names, as m2n names them (Tensor's aliases, and m2n's own).
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32", "float64": "fp64",
                 "double": "fp64", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "int8": "int8", "uint8": "uint8",
                 "int32": "int32", "int64": "int64"}
# CUDA Array Interface typestrs.
_TYPESTRS = {"<f2": "fp16", "<f4": "fp32", "<f8": "fp64", "|i1": "int8", "|u1": "uint8", "<i4": "int32", "<i8": "int64"}


def array_of(x, where="array"):
    """What m2n checks of a device array: {"ptr", "shape", "dtype",
    "device", "contiguous"}, from a torch tensor (data_ptr(), shape, dtype,
    device, is_contiguous()) or any object with the CUDA Array Interface
    (its device unknown: -1)."""
    if hasattr(x, "data_ptr") and hasattr(x, "dtype") and hasattr(x, "is_contiguous"):
        dt = str(x.dtype).replace("torch.", "")
        if dt not in _TORCH_DTYPES:
            raise ValueError(f"{where}: dtype {x.dtype}: m2n moves {', '.join(sorted(_TORCH_DTYPES))}")
        dev = getattr(x, "device", None)
        if getattr(dev, "type", "cuda") != "cuda":
            raise ValueError(f"{where}: on {dev}, want a CUDA device")
        index = getattr(dev, "index", None)
        return {"ptr": int(x.data_ptr()), "shape": [int(d) for d in x.shape], "dtype": _TORCH_DTYPES[dt],
                "device": -1 if index is None else int(index), "contiguous": bool(x.is_contiguous())}
    cai = getattr(x, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        ts = cai.get("typestr")
        if ts not in _TYPESTRS:
            raise ValueError(f"{where}: typestr {ts!r}: m2n moves {', '.join(sorted(_TYPESTRS))}")
        shape = [int(d) for d in cai["shape"]]
        strides, dense = cai.get("strides"), True
        if strides is not None:  # dense when they are the row-major strides
            want, n = [], int(ts[2:])
            for d in reversed(shape):
                want.append(n)
                n *= d
            dense = list(strides) == want[::-1]
        return {"ptr": int(cai["data"][0]), "shape": shape, "dtype": _TYPESTRS[ts], "device": -1, "contiguous": dense}
    raise ValueError(f"{where}: {type(x).__name__} is neither a torch tensor nor has __cuda_array_interface__")


def _handle_of(x, what):
    """An integer handle (a pointer) from an int or an object with .ptr,
    .cuda_stream or .handle."""
    if x is None:
        return 0
    if isinstance(x, int):
        return x
    for attr in ("ptr", "cuda_stream", "handle"):
        v = getattr(x, attr, None)
        if isinstance(v, int):
            return v
    raise ValueError(f"{what}: {type(x).__name__}: want an int, or an object with .ptr or .cuda_stream")


def torch_comm(group=None):
    """Borrows the ncclComm_t of a torch ProcessGroup (the default group
    when None) on the current CUDA device, after one collective so that
    the communicator exists (PyTorch creates it lazily). It needs a PyTorch
    whose NCCL backend exposes _comm_ptr(); new_comm works with any. While
    m2n runs on it, nothing else may use the group."""
    import torch
    import torch.distributed as dist
    pg = group if group is not None else dist.group.WORLD
    backend = pg._get_backend(torch.device("cuda", torch.cuda.current_device()))
    if not hasattr(backend, "_comm_ptr"):
        raise M2NError(f"{type(backend).__name__} has no _comm_ptr() in this PyTorch: use m2n.new_comm(group)")
    t = torch.zeros(1, device="cuda")
    dist.all_reduce(t, group=pg)
    torch.cuda.synchronize()
    return int(backend._comm_ptr())


class _NCCLUniqueID(ctypes.Structure):
    """ncclUniqueId, which ncclCommInitRank takes by value."""
    _fields_ = [("internal", ctypes.c_char * 128)]


def _nccl_id(b):
    """An ncclUniqueId of its 128 bytes, copied byte for byte: a c_char
    array set from bytes stops at the first NUL, and ids hold zeros."""
    if len(b) != ctypes.sizeof(_NCCLUniqueID):
        raise M2NError(f"an NCCL unique id of {len(b)} bytes, want {ctypes.sizeof(_NCCLUniqueID)}")
    return _NCCLUniqueID.from_buffer_copy(b)


def new_comm(group=None):
    """Makes an NCCL communicator of m2n's own over a torch ProcessGroup's
    ranks, on the current CUDA device, with the libnccl.so.2 the process
    has loaded (PyTorch's): rank 0's unique id is broadcast over the group.
    Returns the ncclComm_t as an int (ncclCommDestroy is the caller's)."""
    import torch.distributed as dist
    nccl = ctypes.CDLL(os.environ.get("M2N_NCCL_LIB", "libnccl.so.2"))
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    box = [None]
    if rank == 0:
        uid = ctypes.create_string_buffer(128)
        r = nccl.ncclGetUniqueId(uid)
        box = [bytes(uid.raw) if r == 0 else f"ncclGetUniqueId on rank 0: NCCL error {r}"]
    # Every rank learns rank 0's id, or its failure: none waits forever.
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    if isinstance(box[0], str):
        raise M2NError(box[0])
    comm = ctypes.c_void_p()
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _NCCLUniqueID, ctypes.c_int]
    r = nccl.ncclCommInitRank(ctypes.byref(comm), world, _nccl_id(box[0]), rank)
    if r != 0:
        raise M2NError(f"ncclCommInitRank failed: NCCL error {r}")
    return int(comm.value)


class Layout:
    """A tensor's layout: a mesh (its shape and its global ranks, in
    row-major order) and one placement per mesh dim."""

    def __init__(self, mesh_shape, ranks, placements):
        self.mesh_shape = [int(d) for d in mesh_shape]
        self.ranks = [int(r) for r in ranks]
        self.placements = placements_of(placements)

    @classmethod
    def from_device_mesh(cls, mesh, placements):
        """A layout on a DeviceMesh-like object (.mesh: an array of ranks)."""
        m = mesh.mesh
        shape = list(m.shape)
        ranks = [int(r) for r in (m.flatten().tolist() if hasattr(m, "flatten") else m)]
        return cls(shape, ranks, placements)

    def _check(self, where):
        n = 1
        for d in self.mesh_shape:
            if d <= 0:
                raise ValueError(f"{where}.mesh_shape = {self.mesh_shape}: every dim must be positive")
            n *= d
        if n != len(self.ranks):
            raise ValueError(f"{where}.ranks: {len(self.ranks)} ranks for a mesh of {n} ({self.mesh_shape})")
        if len(self.placements) != len(self.mesh_shape):
            raise ValueError(f"{where}.placements: {len(self.placements)} for a mesh of {len(self.mesh_shape)} dims")

    def _doc(self):
        return {"shape": self.mesh_shape, "ranks": self.ranks, "placements": self.placements}


# The scale layouts of a quantized destination (docs/layouts.md).
SCALES = ("block", "channel", "tensor", "shard")


class Tensor:
    """A tensor to move: its name, global shape, dtype, and both layouts.

    dst_dtype="fp8_e4m3" quantizes it on the way (its scales a tensor of
    their own in the plan): scales "block" (the default, block=[rows, cols],
    [128, 128] by default), "channel" (a scale a row), "tensor" (a scale a
    matrix) or "shard" (a scale a destination shard, vLLM's online fp8)."""

    def __init__(self, name, shape, dtype, src, dst, dst_dtype=None, scales=None, block=None):
        self.name, self.shape, self.dtype, self.src, self.dst = name, list(shape), str(dtype).replace("torch.", ""), src, dst
        self.dtype = _TORCH_DTYPES.get(self.dtype, self.dtype)
        self.dst_dtype = None if dst_dtype is None else _TORCH_DTYPES.get(str(dst_dtype).replace("torch.", ""), str(dst_dtype).replace("torch.", ""))
        self.scales, self.block = scales, block

    def _doc(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"tensor name {self.name!r}: want a non-empty string")
        if self.dtype not in DTYPES:
            raise ValueError(f"tensor {self.name}: dtype {self.dtype!r}: want one of {', '.join(DTYPES)}")
        if not self.shape or not all(isinstance(d, int) and d > 0 for d in self.shape):
            raise ValueError(f"tensor {self.name}: shape {self.shape}: want positive integers")
        for side in ("src", "dst"):
            lay = getattr(self, side)
            if not isinstance(lay, Layout):
                raise ValueError(f"tensor {self.name}: {side}: want an m2n.Layout, got {type(lay).__name__}")
            lay._check(f"tensor {self.name}: {side}")
        doc = {"name": self.name, "shape": self.shape, "dtype": self.dtype, "src": self.src._doc(), "dst": self.dst._doc()}
        if self.dst_dtype is not None:
            if self.dst_dtype not in DTYPES:
                raise ValueError(f"tensor {self.name}: dst_dtype {self.dst_dtype!r}: want one of {', '.join(DTYPES)}")
            doc["dst_dtype"] = self.dst_dtype
        if self.scales is not None:
            if self.scales not in SCALES:
                raise ValueError(f"tensor {self.name}: scales {self.scales!r}: want one of {', '.join(SCALES)}")
            doc["scales"] = self.scales
        if self.block is not None:
            b = list(self.block)
            if len(b) != 2 or not all(isinstance(v, int) and v > 0 for v in b):
                raise ValueError(f"tensor {self.name}: block {self.block!r}: want [rows, cols], positive integers")
            doc["block"] = b
        return doc


class Plan:
    """A planned schedule, held by the C library until close()."""

    def __init__(self, handle):
        self._h = handle

    @classmethod
    def from_scenario(cls, text=None, path=None, route="hierarchical", point=""):
        """Plans route at point (a label as m2n prints it, "" for the first)
        of a scenario document (TOML text, or the file at path)."""
        if (text is None) == (path is None):
            raise ValueError("from_scenario: give text or path, one of them")
        if path is not None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        _, h = _call("m2n_plan_scenario", text.encode(), route.encode(), point.encode())
        return cls(h)

    @classmethod
    def from_tensors(cls, tensors, topology, route="hierarchical", name="python"):
        """Plans tensors (m2n.Tensor) on a topology given as a scenario's
        [topology] table (a dict: preset, domains, gpus_per_domain, ...)."""
        if not tensors:
            raise ValueError("from_tensors: no tensors to move")
        docs = [t._doc() for t in tensors]
        seen = set()
        for d in docs:
            if d["name"] in seen:
                raise ValueError(f"tensor {d['name']}: named twice")
            seen.add(d["name"])
        doc = {"name": name, "description": "planned from Python", "routes": [route], "topology": dict(topology), "tensors": docs}
        _, h = _call("m2n_plan_json", json.dumps(doc).encode(), route.encode(), b"")
        return cls(h)

    def _handle(self):
        if self._h is None:
            raise M2NError("the plan is closed")
        return self._h

    @property
    def ir(self):
        """The schedule as the IR's JSON document (docs/ir.md), a dict."""
        lib, p = _call("m2n_ir", self._handle())
        return json.loads(_take(lib, p))

    def simulate(self):
        """Simulates the schedule on its topology: the record m2n sim --json
        prints for it (modeled_s, sol_s, bottleneck, memory, ...)."""
        lib, p = _call("m2n_simulate", self._handle())
        return json.loads(_take(lib, p))["records"][0]

    def check_on_host(self, seed=1):
        """Runs the schedule on m2n's host reference executor over real
        bytes and checks every destination byte: {"ops", "checked_bytes",
        "wrong_bytes", "first_wrong"}."""
        lib, p = _call("m2n_run_host", self._handle(), int(seed))
        return json.loads(_take(lib, p))

    def execute(self, arrays, comm, stream=None, rank=-1):
        """Runs the schedule once on this process's rank of it, on the job's
        own GPU arrays: arrays maps each tensor name to {"src": shard,
        "dst": shard} (or a (src, dst) pair; leave out a side the rank does
        not hold), torch tensors or objects with the CUDA Array Interface;
        comm is the borrowed ncclComm_t (an int, or an object with .ptr:
        torch_comm(group) or new_comm(group)); stream the CUDA stream it is
        ordered on (an int or a torch.cuda.Stream; None: torch's current
        stream when torch is imported, else the default stream); rank this
        process's rank (-1: the communicator's; given, the arrays are
        checked before anything is loaded). It returns once the work is
        queued on the stream. A wrong array raises M2NError naming the
        tensor and the field. bind() does the Python half once."""
        self.bind(arrays, comm, stream, rank)()

    def bind(self, arrays, comm, stream=None, rank=-1):
        """execute's arguments read once (every array's pointer, shape and
        dtype): returns a function that runs the schedule with them, each
        call only crossing into m2n, for a refit loop over arrays that stay
        where they are."""
        if not isinstance(arrays, dict) or not arrays:
            raise ValueError("execute: arrays: want a dict of tensor name -> {'src': ..., 'dst': ...}")
        table = {}
        for name, sides in arrays.items():
            if isinstance(sides, (tuple, list)):
                if len(sides) != 2:
                    raise ValueError(f"tensor {name}: want (src, dst), got {len(sides)} items")
                sides = {"src": sides[0], "dst": sides[1]}
            if not isinstance(sides, dict):
                raise ValueError(f"tensor {name}: want {{'src': ..., 'dst': ...}} or a (src, dst) pair")
            table[name] = {side: array_of(a, f"tensor {name}: {side}") for side, a in sides.items() if a is not None}
        if stream is None:
            import sys
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available():
                stream = torch.cuda.current_stream().cuda_stream
        lib = _load()
        args = (self._handle(), int(rank), _handle_of(comm, "comm"), _handle_of(stream, "stream"), json.dumps(table).encode())

        def run():
            err = ctypes.c_void_p()
            lib.m2n_execute(*args, ctypes.byref(err))
            if err.value:
                raise M2NError(_take(lib, err.value))
        return run

    def close(self):
        if self._h is not None:
            _call("m2n_close", self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
