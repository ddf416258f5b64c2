#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/gpu/loss_summary.py: the per-recipe statistics and the verdict on the 0.25% criterion."""
import importlib.util
import io
import json
import os
import tempfile
import unittest

_SCRIPTS = os.environ.get("FP8D_SCRIPTS", os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu"))
_spec = importlib.util.spec_from_file_location("loss_summary", os.path.join(_SCRIPTS, "loss_summary.py"))
ls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ls)


def run(final):
    return {"val_losses": [[1500, final + 0.2], [3000, final]], "val_loss_final": final, "tokens_per_s": 1000.0}


def summarize(finals):
    out = io.StringIO()
    return ls.summarize({name: run(f) for name, f in finals.items()}, out), out.getvalue()


class LossSummaryTest(unittest.TestCase):
    def test_two_seeds_of_device_call_14_are_undecided(self):
        result, text = summarize({"bf16": 0.73474, "fp8-blockwise": 0.72988, "bf16@2": 0.73032, "fp8-blockwise@2": 0.73215})
        mean, se, diff, se_diff, verdict, penalty = result["fp8-blockwise"]
        self.assertAlmostEqual(mean, (0.72988 + 0.73215) / 2)
        self.assertAlmostEqual(diff, mean / ((0.73474 + 0.73032) / 2) - 1)
        self.assertGreater(2 * se_diff, 0.0025 - abs(diff))
        self.assertEqual(verdict, "undecided (more seeds)")
        self.assertEqual(penalty, "undecided (more seeds)")
        self.assertIn("-0.661% vs bf16 of the same seed", text)
        self.assertIn("+0.251% vs bf16 of the same seed", text)

    def test_tight_seeds_inside_the_criterion_pass(self):
        bf16 = [0.7300, 0.7302, 0.7298, 0.7301]
        fp8 = [0.7303, 0.7305, 0.7301, 0.7304]
        finals = {"bf16@%d" % (i + 1): x for i, x in enumerate(bf16)}
        finals.update({"fp8-blockwise@%d" % (i + 1): x for i, x in enumerate(fp8)})
        result, text = summarize(finals)
        self.assertEqual(result["fp8-blockwise"][4], "within 0.25%")
        self.assertEqual(result["fp8-blockwise"][5], "no worse than +0.25%")
        self.assertIn("+0.041% vs bf16 of the same seed", text)  # seed 1 pairs with bf16@1

    def test_a_clear_gap_is_outside(self):
        finals = {"bf16@1": 0.7300, "bf16@2": 0.7301, "bf16@3": 0.7299,
                  "fp8-tensorwise@1": 0.7400, "fp8-tensorwise@2": 0.7401, "fp8-tensorwise@3": 0.7399}
        result, _ = summarize(finals)
        self.assertEqual(result["fp8-tensorwise"][4], "outside 0.25%")
        self.assertEqual(result["fp8-tensorwise"][5], "worse than +0.25%")

    def test_a_clearly_lower_fp8_loss_is_outside_but_no_penalty(self):
        finals = {"bf16@1": 0.7300, "bf16@2": 0.7301, "bf16@3": 0.7299,
                  "fp8-blockwise@1": 0.7200, "fp8-blockwise@2": 0.7201, "fp8-blockwise@3": 0.7199}
        result, text = summarize(finals)
        self.assertEqual(result["fp8-blockwise"][4:], ("outside 0.25%", "no worse than +0.25%"))
        self.assertIn("2 SE: -1.", text)

    def test_interval_below_zero_but_reaching_past_minus_criterion(self):
        # Twelve seeds shaped like sessions 5-6: the mean is inside, the interval's lower end is not.
        bf16 = [0.7347, 0.7303, 0.7345, 0.7285, 0.7284, 0.7230, 0.7334, 0.7272, 0.7305, 0.7322, 0.7275, 0.7284]
        fp8 = [0.7299, 0.7322, 0.7306, 0.7278, 0.7315, 0.7296, 0.7296, 0.7314, 0.7287, 0.7264, 0.7258, 0.7258]
        finals = {"bf16@%d" % (i + 1): x for i, x in enumerate(bf16)}
        finals.update({"fp8-blockwise@%d" % (i + 1): x for i, x in enumerate(fp8)})
        result, _ = summarize(finals)
        mean, se, diff, se_diff, verdict, penalty = result["fp8-blockwise"]
        self.assertLess(diff - 2 * se_diff, -0.0025)
        self.assertLess(diff + 2 * se_diff, 0.0025)
        self.assertEqual((verdict, penalty), ("undecided (more seeds)", "no worse than +0.25%"))

    def test_one_seed_decides_nothing(self):
        result, _ = summarize({"bf16": 0.7300, "fp8-blockwise": 0.7301})
        self.assertEqual(result["fp8-blockwise"][4], "undecided (one seed)")

    def test_reads_json_lines_of_several_calls(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for k, runs in enumerate([{"bf16@1": 0.73, "fp8-blockwise@1": 0.731}, {"bf16@2": 0.732, "fp8-blockwise@2": 0.733}]):
                paths.append(os.path.join(d, "call%d.jsonl" % k))
                with open(paths[-1], "w") as f:
                    for name, final in runs.items():
                        f.write(json.dumps({"run": name, "result": run(final)}) + "\n")
            self.assertEqual(sorted(ls.load(paths)), ["bf16@1", "bf16@2", "fp8-blockwise@1", "fp8-blockwise@2"])


if __name__ == "__main__":
    unittest.main()
