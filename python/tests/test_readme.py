"""The README's Python example runs and prints what the README says."""
import contextlib
import io
import os
import re
import sys

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


def test_readme_documents_what_new_users_asked_for():
    """The README answers what users ask: running mpirun as root, the /attention route and the page's ?q=, and where `make install` puts the
    Python package for the interpreter the module is built for (the version must be this interpreter's)."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "--allow-run-as-root" in readme
    assert "`/attention`" in readme and "/?q=" in readme and "&beam=" in readme
    where = f"$PREFIX/lib/python{sys.version_info.major}.{sys.version_info.minor}/dist-packages"
    assert where in readme, where
    assert "tfm train --resume" in readme or "--resume DIR" in readme
