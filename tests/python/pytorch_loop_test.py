"""bench/runtime/pytorch_loop.py, the plain PyTorch loop set beside deepool-train (issue 41 point
10, issue 43 point 6), on CPU with the tiny models and 3 iterations: its one JSON line carries
the fields scripts/gpu-node-test.sh reads, consistent with each other, and a model it does not
know is an error that names it."""
import json
import os
import statistics
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "runtime",
                      "pytorch_loop.py")
GPT_TINY_PARAMETERS = 136_960  # the zoo's gpt_tiny
VIT_TINY_PARAMETERS = 56_904  # the zoo's vit_tiny, 1,000 classes


def run_loop(*args):
    return subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--iterations", "3",
                           "--warmup", "1", *args], capture_output=True, text=True, timeout=300)


class PytorchLoopTest(unittest.TestCase):
    def result(self, *args):
        run = run_loop(*args)
        self.assertEqual(run.returncode, 0, run.stderr)
        lines = run.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1, run.stdout)
        return json.loads(lines[0])

    def check_common(self, result, batch):
        self.assertEqual(len(result["iteration_ms"]), 3)
        self.assertAlmostEqual(result["median_iteration_ms"],
                               statistics.median(result["iteration_ms"][1:]))
        self.assertAlmostEqual(result["samples_per_s"],
                               batch * 1000 / result["median_iteration_ms"])
        self.assertGreater(result["peak_memory_bytes"], 0)  # VmHWM on CPU
        self.assertEqual(result["device"], "cpu")

    def test_gpt_tiny_reports_tokens_flops_and_mfu(self):
        result = self.result("--model", "gpt_tiny", "--batch", "2", "--seq-len", "16",
                             "--peak-tflops", "0.5")
        self.check_common(result, 2)
        self.assertEqual(result["precision"], "fp32")  # deepool-train's default on CPU
        self.assertEqual(result["parameters"], GPT_TINY_PARAMETERS)
        self.assertEqual(result["seq_len"], 16)
        self.assertAlmostEqual(result["tokens_per_s"], result["samples_per_s"] * 16)
        self.assertEqual(result["flops_per_iteration"], 6 * GPT_TINY_PARAMETERS * 2 * 16)
        self.assertAlmostEqual(result["mfu"], result["flops_per_iteration"] / (
            result["median_iteration_ms"] / 1000 * 0.5e12))

    def test_vit_tiny_at_bf16_with_adamw(self):
        result = self.result("--model", "vit_tiny", "--batch", "2", "--precision", "bf16",
                             "--optimizer", "adamw")
        self.check_common(result, 2)
        self.assertEqual((result["precision"], result["optimizer"]), ("bf16", "adamw"))
        self.assertEqual(result["parameters"], VIT_TINY_PARAMETERS)
        for absent in ("tokens_per_s", "flops_per_iteration", "mfu"):
            self.assertNotIn(absent, result)

    def test_an_unknown_model_is_an_error(self):
        run = run_loop("--model", "resnet_51")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("unknown model 'resnet_51'", run.stderr)
        self.assertIn("gpt2", run.stderr)  # the models it knows
        self.assertEqual(run.stdout, "")

    def test_a_sequence_beyond_the_context_is_an_error(self):
        run = run_loop("--model", "gpt_tiny", "--seq-len", "65")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("longer than gpt_tiny's context 64", run.stderr)


if __name__ == "__main__":
    unittest.main()
