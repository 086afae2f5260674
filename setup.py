"""The extension tfm._tfm is the CMake target tfm_python (cmake/tfm-python.cmake): build_ext configures the CMake
build folder when it has no cache yet, builds that one target and copies the module into the wheel. The metadata is
in pyproject.toml."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("TFM_BUILD_DIR", os.path.join(ROOT, "build")))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DPython_EXECUTABLE=" + sys.executable])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "tfm_python", "-j", jobs])
        built = glob.glob(os.path.join(build_dir, "python", "tfm", "_tfm*.so"))
        if len(built) != 1:
            raise RuntimeError(f"{build_dir}/python/tfm: expected one _tfm*.so after building tfm_python, found {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    ext_modules=[Extension("tfm._tfm", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own build folder would be build/, CMake's: keep them apart.
    options={"build": {"build_base": os.path.join("build", "setuptools")}, "egg_info": {"egg_base": "build"}},
)
