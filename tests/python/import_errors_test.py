"""Every failure is one line naming what failed, with a documented exit code, and writes
nothing: no output, no temporary file, an existing output untouched. Most cases run the importer
in this process (here=True) to save torch's start-up; the attention case and the existing-output
case go through the deepool command."""
import os
import unittest

import torch
from torch import nn

from deepool_import import convert, ops
from deepool_import.errors import ImportFailure
from importer_harness import MODELS, ImportTestCase

SMALL_NET = os.path.join(MODELS, "small_net.py")
UNMAPPABLE = os.path.join(MODELS, "unmappable.py")
RAISES = os.path.join(MODELS, "raises.py")

EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED, EXIT_NOT_FOUND = 1, 2, 3, 5


class ErrorTest(ImportTestCase):
    def outputs(self):
        return ["-o", self.path("out.graph.json"), "--weights", self.path("out.pt")]

    def assertNothingWritten(self):
        self.assertEqual(os.listdir(self.tmp), [])

    def test_a_model_file_that_raises(self):
        line = self.import_fails(EXIT_FAILED, "--file", RAISES, "--factory", "build",
                                 "--input-shape", "3,8,8", *self.outputs(), here=True)
        self.assertIn("raises.py:4: RuntimeError: this model file is broken on purpose", line)
        self.assertNothingWritten()

    def test_a_missing_factory(self):
        line = self.import_fails(EXIT_NOT_FOUND, "--file", SMALL_NET, "--factory", "build_modle",
                                 "--input-shape", "3,8,8", *self.outputs(), here=True)
        self.assertIn("no factory build_modle (it defines SmallNet, build_model", line)
        self.assertNothingWritten()

    def test_a_missing_file_and_module(self):
        self.import_fails(EXIT_NOT_FOUND, "--file", self.path("none.py"), "--factory", "f",
                          "--input-shape", "3,8,8", "-o", self.path("out.json"), here=True)
        line = self.import_fails(EXIT_NOT_FOUND, "--module", "no_such_package.models:f",
                                 "--input-shape", "3,8,8", "-o", self.path("out.json"), here=True)
        self.assertIn("no module named no_such_package", line)
        self.assertNothingWritten()

    def test_a_wrong_input_shape(self):
        line = self.import_fails(EXIT_FAILED, "--file", SMALL_NET, "--factory", "build_model",
                                 "--input-shape", "1,16,16", *self.outputs(), here=True)
        self.assertIn('failed at node "stem_0" in module "stem.0" (call_module torch.nn.Conv2d) '
                      "at ", line)
        self.assertIn("small_net.py:21: RuntimeError: ", line)
        self.assertIn("expected input[2, 1, 16, 16] to have 3 channels", line)
        self.assertNothingWritten()

    def test_scaled_dot_product_attention_is_refused_by_name(self):
        line = self.import_fails(EXIT_REFUSED, "--file", UNMAPPABLE, "--factory", "sdpa",
                                 "--input-shape", "4,16", *self.outputs())
        self.assertIn('node "scaled_dot_product_attention" in module "blocks.0.attn" '
                      "(call_function torch.nn.functional.scaled_dot_product_attention) at ", line)
        self.assertIn("unmappable.py:15: F.scaled_dot_product_attention maps only in the GPT "
                      "form (docs/models.md, Transformers): the query is not one third of a split",
                      line)
        self.assertNothingWritten()

    def test_sequence_first_multihead_attention_is_refused_by_name(self):
        line = self.import_fails(EXIT_REFUSED, "--file", UNMAPPABLE, "--factory",
                                 "multihead_attention", "--input-shape", "4,16", *self.outputs(),
                                 here=True)
        self.assertIn('node "mha" in module "mha" (call_module torch.nn.MultiheadAttention)', line)
        self.assertIn("unmappable.py:43: batch_first=False: the IR's tensors have the batch first",
                      line)
        self.assertNothingWritten()

    def test_parameters_no_layer_owns(self):
        line = self.import_fails(EXIT_REFUSED, "--file", UNMAPPABLE, "--factory", "unused_layer",
                                 "--input-shape", "16", *self.outputs(), here=True)
        self.assertIn("2 state_dict entries belong to no layer", line)
        self.assertIn("spare", line)
        self.assertNothingWritten()

    def test_control_flow_on_values_cannot_be_traced(self):
        line = self.import_fails(EXIT_REFUSED, "--file", UNMAPPABLE, "--factory",
                                 "data_dependent", "--input-shape", "16", *self.outputs(),
                                 here=True)
        self.assertIn("torch.fx cannot trace the module at ", line)
        self.assertIn("unmappable.py:62: TraceError", line)

    def test_an_in_place_op_on_a_value_read_again(self):
        line = self.import_fails(EXIT_REFUSED, "--file", UNMAPPABLE, "--factory",
                                 "in_place_hazard", "--input-shape", "16", *self.outputs(),
                                 here=True)
        self.assertIn('node "act" in module "act" (call_module torch.nn.ReLU)', line)
        self.assertIn('works in place on "fc", which node "add" reads afterwards', line)

    def test_more_than_one_input(self):
        line = self.import_fails(EXIT_REFUSED, "--file", UNMAPPABLE, "--factory", "two_inputs",
                                 "--input-shape", "16", *self.outputs(), here=True)
        self.assertIn("forward takes 2 inputs (x, y); a deepool graph has one", line)

    def test_usage_errors(self):
        self.import_fails(EXIT_USAGE, "--file", SMALL_NET, "--factory", "build_model",
                          "--kwargs", "{num_classes: 10}", "--input-shape", "3,8,8",
                          *self.outputs(), here=True)
        self.import_fails(EXIT_USAGE, "--file", SMALL_NET, "--factory", "build_model",
                          "--input-shape", "3,x,8", *self.outputs(), here=True)
        self.import_fails(EXIT_USAGE, "--file", SMALL_NET, "--input-shape", "3,8,8",
                          *self.outputs(), here=True)
        self.import_fails(EXIT_USAGE, "--file", SMALL_NET, "--factory", "build_model",
                          "--input-shape", "3,8,8", "--loss-weights", "1,0.4", *self.outputs(),
                          here=True)
        self.assertNothingWritten()

    def test_an_existing_output_is_left_untouched(self):
        graph, weights = self.path("out.graph.json"), self.path("out.pt")
        for path in (graph, weights):
            with open(path, "w", encoding="utf-8") as f:
                f.write("precious\n")
        def args(shape):
            return ["--file", SMALL_NET, "--factory", "build_model", "--input-shape", shape,
                    "-o", graph, "--weights", weights]

        line = self.import_fails(EXIT_USAGE, *args("3,8,8"))
        self.assertIn("exists (--force replaces it)", line)
        # With --force, a failing import still leaves both as they were, and no temporary file.
        self.import_fails(EXIT_FAILED, *args("1,8,8"), "--force")
        for path in (graph, weights):
            with open(path, encoding="utf-8") as f:
                self.assertEqual(f.read(), "precious\n")
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out.graph.json", "out.pt"])
        # A passing one replaces both.
        self.import_ok(*args("3,8,8"), "--force")
        self.assertEqual(list(torch.load(weights, weights_only=True).keys()),
                         list(_small_net().state_dict().keys()))


def _small_net():
    import importlib.util

    spec = importlib.util.spec_from_file_location("small_net_for_errors", SMALL_NET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_model()


class ShapeCheckTest(unittest.TestCase):
    """A mapping that gives deepool another shape than the module's is refused (in-process: the
    table is patched to map MaxPool2d with the wrong stride)."""

    def test_a_shape_mismatch_is_refused(self):
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(4 * 3 * 3, 2))
        good = ops.MODULES[nn.MaxPool2d]

        def wrong_stride(call, module):
            layer = good(call, module)
            layer.attrs["stride"] = [1, 1]
            return layer

        ops.MODULES[nn.MaxPool2d] = wrong_stride
        try:
            with self.assertRaises(ImportFailure) as failure:
                convert.Converter(model, [3, 8, 8], torch.float32, "m", None).run()
        finally:
            ops.MODULES[nn.MaxPool2d] = good
        self.assertEqual(failure.exception.code, EXIT_REFUSED)
        self.assertIn('node "_1" in module "1" (call_module torch.nn.MaxPool2d)',
                      failure.exception.message)
        self.assertIn("shape mismatch: deepool's maxpool2d gives [4, 5, 5] per sample, the module "
                      "gave [4, 3, 3]", failure.exception.message)


if __name__ == "__main__":
    unittest.main()
