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
