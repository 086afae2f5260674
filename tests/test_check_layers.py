#!/usr/bin/env python3
"""scripts/check_layers.py on small temporary trees: it passes a tree that follows the floor plan and fails, naming
the include, on each kind of violation (up, sideways, tools/serve beyond the public API, cycles, a stale or a used
allowlist entry, an include that resolves nowhere). Run by ctest (check_layers_selftest)."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "check_layers.py")

# A tree that follows the rules: each file includes its own folder or lower floors; tools over include/tfm.
GOOD = {
    "src/core/tensor.h": "#pragma once\n",
    "src/ops/gemm.h": '#include "core/tensor.h"\n',
    "src/ops/gemm.cpp": '#include "ops/gemm.h"\n#include <vector>\n',
    "src/models/bert.h": '#include "ops/gemm.h"\n',
    "src/api/encoder.cpp": '#include "tfm/encoder.h"\n#include "models/bert.h"\n',
    "include/tfm/encoder.h": '#include "tfm/array.h"\n',
    "include/tfm/array.h": "#pragma once\n",
    "src/serve/server.cpp": '#include "serve/server.h"\n#include "tfm/encoder.h"\n#include "core/tensor.h"\n',
    "src/serve/server.h": "#pragma once\n",
    "tools/tfm/main.cpp": '#include "commands.h"\n#include "serve/server.h"\n#include "tfm/encoder.h"\n',
    "tools/tfm/commands.h": "#pragma once\n",
    "python/src/module.cpp": '#include "tfm/encoder.h"\n',
}


def run(files, allowlist=None):
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        allow = os.path.join(root, "allow.txt")
        with open(allow, "w") as f:
            f.write(allowlist or "# nothing\n")
        p = subprocess.run([sys.executable, SCRIPT, "--root", root, "--allowlist", allow], capture_output=True,
                           text=True)
        return p.returncode, p.stdout + p.stderr


class CheckLayers(unittest.TestCase):
    def assertFails(self, files, *needles, allowlist=None):
        rc, out = run(files, allowlist)
        self.assertEqual(rc, 1, out)
        for n in needles:
            self.assertIn(n, out)

    def test_good_tree_passes(self):
        rc, out = run(GOOD)
        self.assertEqual(rc, 0, out)
        self.assertIn("follow the floor plan", out)

    def test_upward_include_fails(self):
        files = dict(GOOD)
        files["src/core/tensor.h"] = '#include "ops/gemm.h"\n'
        self.assertFails(files, "src/core/tensor.h:1: goes up", "src/ops/gemm.h")

    def test_sideways_include_fails(self):
        files = dict(GOOD)
        files["src/io/npy.h"] = '#include "ops/gemm.h"\n'
        self.assertFails(files, "src/io/npy.h:1: goes sideways")

    def test_tools_reaching_into_models_fails(self):
        files = dict(GOOD)
        files["tools/tfm/cmd_encode.cpp"] = '#include "commands.h"\n#include "models/bert.h"\n'
        self.assertFails(files, "tools/tfm/cmd_encode.cpp:2: tools/ may include only", "src/models/bert.h")

    def test_serve_reaching_into_models_fails(self):
        files = dict(GOOD)
        files["src/serve/backends.cpp"] = '#include "models/bert.h"\n'
        self.assertFails(files, "src/serve/backends.cpp:1: serve/ may include only")

    def test_public_header_including_internals_fails(self):
        files = dict(GOOD)
        files["include/tfm/array.h"] = '#include "core/tensor.h"\n'
        self.assertFails(files, "include/tfm/array.h:1: include/ may include only its own folder and nothing")

    def test_file_cycle_fails(self):
        files = dict(GOOD)
        files["src/ops/a.h"] = '#include "ops/b.h"\n'
        files["src/ops/b.h"] = '#include "a.h"\n'
        self.assertFails(files, "file cycle: src/ops/a.h <-> src/ops/b.h")

    def test_folder_cycle_fails(self):
        files = dict(GOOD)
        files["src/train/params.h"] = '#include "models/bert.h"\n'
        files["src/models/seq2seq.h"] = '#include "train/params.h"\n'
        self.assertFails(files, "folder cycle: models/ <-> train/", "src/models/seq2seq.h:1: goes up")

    def test_unresolved_include_fails(self):
        files = dict(GOOD)
        files["src/ops/gemm.cpp"] = '#include "ops/missing.h"\n'
        self.assertFails(files, 'src/ops/gemm.cpp:1: #include "ops/missing.h" resolves to no file')

    def test_allowlisted_violation_passes(self):
        files = dict(GOOD)
        files["src/models/seq2seq.h"] = '#include "train/params.h"\n'
        files["src/train/params.h"] = "#pragma once\n"
        rc, out = run(files, "# known\nsrc/models/seq2seq.h -> src/train/params.h  # moves to nn/\n")
        self.assertEqual(rc, 0, out)
        self.assertIn("1 allowlisted", out)

    def test_stale_allowlist_entry_fails(self):
        self.assertFails(GOOD, "'src/models/seq2seq.h -> src/train/params.h' is no longer a violation",
                         allowlist="src/models/seq2seq.h -> src/train/params.h\n")

    def test_prune_removes_only_stale_entries(self):
        files = dict(GOOD)
        files["src/models/seq2seq.h"] = '#include "train/params.h"\n'
        files["src/train/params.h"] = "#pragma once\n"
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            allow = os.path.join(root, "allow.txt")
            with open(allow, "w") as f:
                f.write("# why\nsrc/models/seq2seq.h -> src/train/params.h\nsrc/nn/gone.h -> src/models/bert.h\n")
            p = subprocess.run([sys.executable, SCRIPT, "--root", root, "--allowlist", allow, "--prune"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(allow) as f:
                self.assertEqual(f.read(), "# why\nsrc/models/seq2seq.h -> src/train/params.h\n")

    def test_malformed_allowlist_fails(self):
        rc, out = run(GOOD, "src/models/seq2seq.h train/params.h\n")
        self.assertNotEqual(rc, 0)
        self.assertIn("expected 'FILE -> INCLUDED_FILE'", out)


if __name__ == "__main__":
    unittest.main()
