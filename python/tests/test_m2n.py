"""Tests of the m2n Python package over libm2n.so, without a GPU (make test)."""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import m2n  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "..", "..", "scenarios")


def paper_2gpu_tensor():
    return m2n.Tensor("experts.gate_proj", [16, 2048, 7168], "torch.bfloat16",
                      src=m2n.Layout([2], [0, 1], ["S(0)"]), dst=m2n.Layout([2], [0, 1], ["R"]))


class Shard:  # a DTensor placement, duck-typed
    def __init__(self, dim):
        self.dim = dim


class Replicate:
    pass


class Device:
    def __init__(self, index):
        self.type, self.index = "cuda", index


class FakeTensor:  # what m2n reads of a torch tensor, with no GPU
    def __init__(self, ptr, shape, dtype="torch.bfloat16", device=0, contiguous=True):
        self.ptr, self.shape, self.dtype, self.device, self.contiguous = ptr, shape, dtype, Device(device), contiguous

    def data_ptr(self):
        return self.ptr

    def is_contiguous(self):
        return self.contiguous


class CAI:  # an array with the CUDA Array Interface
    def __init__(self, ptr, shape, typestr="<f2", strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": tuple(shape), "typestr": typestr, "strides": strides, "version": 3}


class ExecuteTest(unittest.TestCase):
    """Plan.execute's checks of a caller's arrays, which run before any GPU
    library is loaded when the rank is given."""

    def setUp(self):
        self.plan = m2n.Plan.from_tensors([m2n.Tensor("w", [4, 256, 1024], "bf16", src=m2n.Layout([2], [0, 1], ["S(0)"]),
                                                      dst=m2n.Layout([2], [0, 1], ["R"]))],
                                          {"preset": "hgx-h200", "gpus_per_domain": 1}, route="flat")

    def tearDown(self):
        self.plan.close()

    def good(self):
        return {"w": {"src": FakeTensor(1 << 30, (2, 256, 1024), device=1), "dst": FakeTensor(2 << 30, (4, 256, 1024), device=1)}}

    def check(self, arrays, want, rank=1, comm=1234):
        with self.assertRaises(m2n.M2NError) as cm:
            self.plan.execute(arrays, comm, stream=0, rank=rank)
        self.assertIn(want, str(cm.exception))

    def test_wrong_arrays_name_tensor_and_field(self):
        a = self.good()
        a["w"]["src"].shape = (4, 256, 1024)
        self.check(a, "tensor w: src: shape [4 256 1024], want [2 256 1024]")
        a = self.good()
        a["w"]["dst"].dtype = "torch.float16"
        self.check(a, "tensor w: dst: dtype fp16, want bf16")
        a = self.good()
        a["w"]["dst"].contiguous = False
        self.check(a, "tensor w: dst: not contiguous")
        a = self.good()
        del a["w"]["dst"]
        self.check(a, "tensor w: no dst array given for rank 1")
        a = self.good()
        a["v"] = {"src": a["w"]["src"]}
        self.check(a, "tensor v: not in the schedule")
        self.check(self.good(), "rank 2: the schedule has ranks 0..1", rank=2)
        with self.assertRaises(ValueError) as cm:
            self.plan.execute({"w": {"src": object()}}, 1234, stream=0, rank=1)
        self.assertIn("tensor w: src: object is neither a torch tensor nor has __cuda_array_interface__", str(cm.exception))

    def test_nccl_id_keeps_every_byte(self):
        # new_comm passes rank 0's id by value: every byte, zeros too.
        b = bytes([0, 7, 0, 255] * 32)
        self.assertEqual(bytes(m2n._nccl_id(b)), b)
        with self.assertRaises(m2n.M2NError):
            m2n._nccl_id(b[:100])

    def test_cuda_array_interface(self):
        self.assertEqual(m2n.array_of(CAI(4096, (8, 16), "<f4")), {"ptr": 4096, "shape": [8, 16], "dtype": "fp32", "device": -1, "contiguous": True})
        self.assertFalse(m2n.array_of(CAI(4096, (8, 16), "<f4", strides=(4, 32)))["contiguous"])
        self.assertTrue(m2n.array_of(CAI(4096, (8, 16), "<f4", strides=(64, 4)))["contiguous"])

    def test_good_arrays_reach_the_communicator(self):
        # Past the arrays' checks: a null communicator is refused, and a
        # given one needs the process's own libnccl (none is loaded here).
        self.check(self.good(), "communicator: a null ncclComm_t", comm=0)
        self.check(self.good(), "no libnccl.so.2 is loaded in this process")


class AdapterTest(unittest.TestCase):
    """The framework-shaped adapters plan as Plan.from_tensors does and hand
    the shards to execute."""

    def test_xferdtensor_plans_once_and_executes(self):
        from m2n import adapters
        mesh = ([2], [0, 1])
        shard = FakeTensor(1 << 30, (2, 256, 1024), device=1)
        whole = FakeTensor(2 << 30, (4, 256, 1024), device=1)
        self.assertEqual(adapters.global_shape(shard.shape, m2n.Layout(*mesh, ["S(0)"])), [4, 256, 1024])
        with self.assertRaises(m2n.M2NError) as cm:  # planned; stops at the (null) communicator
            adapters.xferdtensor(shard, mesh, [Shard(0)], whole, mesh, [Replicate()], name="w", comm=0, rank=1)
        self.assertIn("communicator: a null ncclComm_t", str(cm.exception))
        self.assertEqual(len(adapters._plans), 1)
        with self.assertRaises(m2n.M2NError):
            adapters.xferdtensor(shard, mesh, [Shard(0)], whole, mesh, [Replicate()], name="w", comm=0, rank=1)
        self.assertEqual(len(adapters._plans), 1, "the same tensor and layouts planned twice")
        plan = next(iter(adapters._plans.values()))
        with m2n.Plan.from_tensors([m2n.Tensor("w", [4, 256, 1024], "bf16", src=m2n.Layout(*mesh, ["S(0)"]), dst=m2n.Layout(*mesh, ["R"]))],
                                   {"preset": "hgx-h200", "gpus_per_domain": 1}, route="flat") as direct:
            self.assertEqual(plan.ir, direct.ir)
        with self.assertRaises(m2n.M2NError) as cm:  # a wrong shard is named
            adapters.xferdtensor(FakeTensor(1 << 30, (2, 256, 1024), dtype="torch.float16", device=1), mesh, [Shard(0)], whole, mesh,
                                 [Replicate()], name="w", shape=[4, 256, 1024], comm=0, rank=1)
        self.assertIn("tensor w", str(cm.exception))

    def test_weight_transfer_shape(self):
        from m2n import adapters
        wt = adapters.WeightTransfer([paper_2gpu_tensor()], {"preset": "hgx-h200", "gpus_per_domain": 1})
        with self.assertRaises(m2n.M2NError):
            wt.update({})
        wt.start(0, stream=0, rank=0)
        with self.assertRaises(m2n.M2NError) as cm:
            wt.update({"experts.gate_proj": {"src": FakeTensor(1 << 30, (8, 2048, 7168)), "dst": FakeTensor(2 << 30, (16, 2048, 7168))}})
        self.assertIn("communicator: a null ncclComm_t", str(cm.exception))
        wt.finish()


class ExampleTest(unittest.TestCase):
    def test_refit_example_cpu_half(self):
        # The refit example's half that needs no GPU and no torch: plan,
        # simulate, and the same shapes smaller through the host executor.
        out = subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "refit.py"), "--plan-only"],
                             capture_output=True, text=True, check=True).stdout
        self.assertIn("refit plan: 31 tensors", out)
        self.assertIn(", 0 wrong", out)


class PlanTest(unittest.TestCase):
    def test_tensors_plan_simulate_check(self):
        with m2n.Plan.from_tensors([paper_2gpu_tensor()], {"preset": "hgx-h200", "gpus_per_domain": 1}, route="flat") as plan:
            ir = plan.ir
            self.assertEqual(ir["route"], "flat")
            self.assertEqual(len(ir["world"]), 2)
            rec = plan.simulate()
            self.assertEqual(rec["route"], "flat")
            self.assertGreater(rec["modeled_s"], 0)
            self.assertGreaterEqual(rec["modeled_s"], rec["sol_s"])
            self.assertEqual(rec["unique_bytes"], 16 * 2048 * 7168 * 2)
            self.assertTrue(rec["memory"]["fits"])
            res = plan.check_on_host(seed=3)
            self.assertEqual(res["wrong_bytes"], 0)
            self.assertEqual(res["checked_bytes"], 2 * 16 * 2048 * 7168 * 2)  # both ranks hold it whole

    def test_scenario_file_same_as_sim(self):
        # The record Python gets is the one m2n sim --json prints: the
        # simulation is deterministic, so equal for the same schedule.
        with m2n.Plan.from_scenario(path=os.path.join(SCENARIOS, "paper-ffn-moe.toml"), route="hierarchical", point="rho=2") as plan:
            rec = plan.simulate()
            self.assertEqual(rec["point"], {"rho": 2})
            self.assertAlmostEqual(rec["measured_s"], 0.010251)
            binary = os.environ.get("M2N_BIN")
            if binary:  # make python-test sets it: the very record m2n sim prints
                out = subprocess.run([binary, "sim", "--json", "--route", "hierarchical", "--point", "rho=2", "paper-ffn-moe"],
                                     capture_output=True, text=True, check=True).stdout
                self.assertEqual(rec, json.loads(out)["records"][0])

    def test_quantized_tensor(self):
        # A destination in fp8 with a scale a row: the plan has the scale
        # tensor, named as vLLM names it, and every fp8 byte and scale is
        # right on the host.
        t = m2n.Tensor("layers.0.o_proj.weight", [256, 512], "bf16",
                       src=m2n.Layout([2], [0, 1], ["S(1)"]), dst=m2n.Layout([2], [0, 1], ["R"]),
                       dst_dtype="torch.float8_e4m3fn", scales="channel")
        with m2n.Plan.from_tensors([t], {"preset": "hgx-h200", "gpus_per_domain": 1}, route="flat") as plan:
            names = [x["name"] for x in plan.ir["tensors"]]
            self.assertEqual(names, ["layers.0.o_proj.weight", "layers.0.o_proj.weight_scale"])
            res = plan.check_on_host(seed=5)
            self.assertEqual(res["wrong_bytes"], 0)
            self.assertGreater(res["checked_bytes"], 0)
        for kw, want in [({"scales": "row"}, "scales 'row'"), ({"block": [128]}, r"block \[128\]"), ({"dst_dtype": "fp4"}, "dst_dtype 'fp4'")]:
            bad = m2n.Tensor("w", [256, 512], "bf16", src=m2n.Layout([1], [0], ["R"]), dst=m2n.Layout([1], [1], ["R"]), **kw)
            with self.assertRaisesRegex(ValueError, "tensor w: " + want):
                m2n.Plan.from_tensors([bad], {"preset": "hgx-h200"})
        # A row-parallel shard of per-channel fp8, as vLLM holds it: each
        # rank keeps its columns of rows quantized whole, and the scales
        # replicated; every byte right on the host.
        cut = m2n.Tensor("w.weight", [256, 512], "bf16", src=m2n.Layout([1], [0], ["R"]), dst=m2n.Layout([2], [0, 1], ["S(1)"]),
                         dst_dtype="fp8_e4m3", scales="channel")
        with m2n.Plan.from_tensors([cut], {"preset": "hgx-h200"}, route="flat") as plan:
            scale = plan.ir["tensors"][1]
            self.assertEqual(scale["name"], "w.weight_scale")
            self.assertEqual(scale["dst"]["placements"], ["R"])
            self.assertEqual(plan.check_on_host(seed=6)["wrong_bytes"], 0)
        # The same shard in shard scales (vLLM's online fp8): each rank's
        # shard its block, a scale a rank, the scale tensor split as the
        # weight; every byte right on the host.
        own = m2n.Tensor("w.weight", [256, 512], "bf16", src=m2n.Layout([1], [0], ["R"]), dst=m2n.Layout([2], [0, 1], ["S(1)"]),
                         dst_dtype="fp8_e4m3", scales="shard")
        with m2n.Plan.from_tensors([own], {"preset": "hgx-h200"}, route="flat") as plan:
            w, scale = plan.ir["tensors"][0], plan.ir["tensors"][1]
            self.assertEqual(w["quant"], {"scheme": "shard", "block": [256, 256]})
            self.assertEqual((scale["name"], scale["shape"], scale["dst"]["placements"]), ("w.weight_scale", [1, 2], ["S(1)"]))
            self.assertEqual(plan.check_on_host(seed=7)["wrong_bytes"], 0)
        # m2n's own refusal comes back naming the tensor: a TP that cuts
        # 128 x 128 blocks.
        bad = m2n.Tensor("w.weight", [256, 320], "bf16", src=m2n.Layout([1], [0], ["R"]), dst=m2n.Layout([2], [0, 1], ["S(1)"]),
                         dst_dtype="fp8_e4m3")
        with self.assertRaisesRegex(m2n.M2NError, "vLLM refuses such a split too"):
            m2n.Plan.from_tensors([bad], {"preset": "hgx-h200"})

    def test_dtensor_placements(self):
        self.assertEqual(m2n.placements_of([Shard(1), Replicate(), "S(0)"]), ["S(1)", "R", "S(0)"])
        with self.assertRaisesRegex(ValueError, r"placements\[0\]"):
            m2n.placements_of([object()])

    def test_bad_calls_name_the_field(self):
        t = paper_2gpu_tensor()
        t.dtype = "fp7"
        with self.assertRaisesRegex(ValueError, "tensor experts.gate_proj: dtype 'fp7'"):
            m2n.Plan.from_tensors([t], {"preset": "hgx-h200"})
        t = paper_2gpu_tensor()
        t.src = m2n.Layout([2], [0, 1, 2], ["S(0)"])
        with self.assertRaisesRegex(ValueError, "tensor experts.gate_proj: src.ranks: 3 ranks for a mesh of 2"):
            m2n.Plan.from_tensors([t], {"preset": "hgx-h200"})
        with self.assertRaisesRegex(m2n.M2NError, "unknown route"):
            m2n.Plan.from_tensors([paper_2gpu_tensor()], {"preset": "hgx-h200"}, route="teleport")
        with self.assertRaisesRegex(m2n.M2NError, r"experts.gate_proj\).src: placements\[0\] = S\(5\)"):
            t = paper_2gpu_tensor()
            t.src = m2n.Layout([2], [0, 1], ["S(5)"])  # no dim 5
            m2n.Plan.from_tensors([t], {"preset": "hgx-h200"})
        with self.assertRaisesRegex(m2n.M2NError, "not a point"):
            m2n.Plan.from_scenario(path=os.path.join(SCENARIOS, "paper-ffn-moe.toml"), point="rho=3")
        plan = m2n.Plan.from_tensors([paper_2gpu_tensor()], {"preset": "hgx-h200"})
        plan.close()
        with self.assertRaisesRegex(m2n.M2NError, "closed"):
            plan.simulate()


if __name__ == "__main__":
    unittest.main()
