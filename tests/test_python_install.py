"""pyproject.toml as Python users install: `pip install --no-build-isolation .` and `python3 -m build --wheel
--no-isolation` (offline, Debian's pip / setuptools / build), each into a fresh virtual environment
(--system-site-packages for numpy), give an importable `tfm` that runs a model. The build reuses TFM_BUILD_DIR.
Run by ctest (python_install) from the source folder."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = (
    "import os, numpy as np, tfm\n"
    "assert os.path.dirname(tfm.__file__).startswith(os.environ['VENV']), tfm.__file__\n"
    "enc = tfm.Encoder(os.path.join(os.environ['ROOT'], 'tests/fixtures/bert'), threads=1)\n"
    "ids = np.array([[2, 7, 9, 3]])\n"
    "h = enc.forward(ids, attention_mask=np.ones_like(ids))\n"
    "assert h.shape == (1, 4, 32), h.shape\n"
    "print('ok', tfm.__version__)\n"
)


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=kw.pop("cwd", ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-6000:]}")
    return r.stdout


def venv(where):
    run([sys.executable, "-m", "venv", "--system-site-packages", where])
    return os.path.join(where, "bin", "python")


def check(py, where):
    # From a folder outside the checkout, so that python/ or build/python cannot be what is imported.
    env = dict(os.environ, VENV=where, ROOT=ROOT)
    env.pop("PYTHONPATH", None)
    out = run([py, "-c", CHECK], cwd=where, env=env)
    assert out.strip().startswith("ok "), out


def main():
    tmp = tempfile.mkdtemp(prefix="tfm_pyinstall_")
    try:
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        env.pop("PYTHONPATH", None)
        a = os.path.join(tmp, "pip")
        py = venv(a)
        run([py, "-m", "pip", "install", "--no-build-isolation", "."], env=env)
        check(py, a)

        wheels = os.path.join(tmp, "dist")
        run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", wheels], env=env)
        [whl] = glob.glob(os.path.join(wheels, "tfm-*.whl"))
        assert "-cp3" in os.path.basename(whl) and "linux" in os.path.basename(whl), whl  # a platform wheel
        b = os.path.join(tmp, "wheel")
        py = venv(b)
        run([py, "-m", "pip", "install", whl], env=env)
        check(py, b)
        print("python_install: pip install . and python3 -m build --wheel both import and run tfm")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
