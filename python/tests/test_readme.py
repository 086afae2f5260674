"""The README's Python example runs and prints what the README says."""
import contextlib
import io
import os
import re

from conftest import ROOT


def test_readme_python_example_prints_what_it_shows():
    text = open(os.path.join(ROOT, "README.md")).read()
    m = re.search(r"```python\n(import numpy as np\nimport tfm\n.*?)```\n\nprints\n\n```\n(.*?)```", text, re.S)
    assert m, "README: the Python example and its 'prints' block"
    code, expected = m.group(1), m.group(2)
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    assert out.getvalue() == expected
