"""Shared by the importer's tests: run `deepool import`, read the zoo's graph, compare graphs.

CTest sets DEEPOOL_BIN (the deepool executable) and runs the tests from this folder with
PYTHONPATH holding importer/ (tests/CMakeLists.txt)."""
import contextlib
import io
import json
import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
DEEPOOL = os.environ.get("DEEPOOL_BIN", os.path.join(HERE, "..", "..", "build", "bin", "deepool"))


def run_import(*args, cwd=None):
    """`deepool import ARGS`: the CompletedProcess, with text stdout and stderr."""
    return subprocess.run([DEEPOOL, "import", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def run_import_here(*args):
    """The importer in this process (no torch start-up per run): (exit code, stdout, stderr)."""
    from deepool_import.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's --help
            code = e.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def zoo_graph(name, *flags):
    """The zoo's graph as `deepool model show NAME --json` prints it, less the added totals."""
    doc = json.loads(subprocess.check_output([DEEPOOL, "model", "show", name, "--json", *flags]))
    doc.pop("total_params")
    doc.pop("total_forward_flops")
    return doc


def first_difference(expected, actual):
    """A readable note of where two graphs first differ; None when they are equal."""
    for key in sorted(set(expected) | set(actual)):
        if key != "layers" and expected.get(key) != actual.get(key):
            return f"{key}: expected {expected.get(key)}, got {actual.get(key)}"
    for i, (e, a) in enumerate(zip(expected["layers"], actual["layers"])):
        if e != a:
            return f"layers[{i}]: expected {e}, got {a}"
    if len(expected["layers"]) != len(actual["layers"]):
        return f"{len(expected['layers'])} layers expected, got {len(actual['layers'])}"
    return None


class ImportTestCase(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="deepool-import-test-")
        self.tmp = self._dir.name

    def tearDown(self):
        self._dir.cleanup()

    def path(self, name):
        return os.path.join(self.tmp, name)

    def import_ok(self, *args):
        result = run_import(*args)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def import_fails(self, code, *args, here=False):
        """Runs an import expected to exit with `code` (through the deepool command, or in this
        process when `here`); returns its one error line."""
        result = run_import_here(*args) if here else run_import(*args)
        self.assertEqual(result.returncode, code, result.stdout + result.stderr)
        errors = [line for line in result.stderr.splitlines()
                  if line.startswith("deepool import: error: ")]
        self.assertEqual(len(errors), 1, result.stderr)
        return errors[0]

    def assertGraphEqualsZoo(self, graph_file, zoo_name, *zoo_flags):
        with open(graph_file, encoding="utf-8") as f:
            imported = json.load(f)
        difference = first_difference(zoo_graph(zoo_name, *zoo_flags), imported)
        self.assertIsNone(difference, f"{graph_file} differs from the zoo's {zoo_name}")
