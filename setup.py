"""Builds the Cython + OpenMP extensions of needle_kernels.

Every ``.pyx`` file under ``needle_kernels/`` becomes an extension module of
the same dotted name. Flags:

* ``-O3 -fopenmp`` for compile and link (OpenMP is what makes ``prange`` run
  in parallel; without it the loops silently run on one thread).
* ``-fno-math-errno``: no kernel reads errno, and with it a ``sqrtf`` in a loop
  is one vector instruction instead of a library call that stops the loop from
  vectorizing (bench_backend's adam_update row: 22 GB/s before, 124 after; a
  function attribute meant to do the same had no effect).
* ``-g0``: Python's own CFLAGS ask for debug information, which nothing here reads;
  writing it lengthens the build and quintuples the modules' size (benchmarks/README.md).
  Debug information changes no generated code.
* Portable by default: no ``-march`` flag, so the module runs on any x86-64.
  The hot loops still use AVX2+FMA or AVX-512 where the CPU has them: the C
  headers next to ``ndarray_backend_cpu.pyx`` compile them once per
  instruction set (``target`` attributes) and pick one at run time
  (``__builtin_cpu_supports``). Set ``NK_NATIVE=1`` to add ``-march=native``
  (only the remaining, baseline code changes) when the package is built and
  used on the same machine.
"""
import glob
import os
import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

compile_args = ["-O3", "-fopenmp", "-fno-math-errno", "-g0"]
link_args = ["-fopenmp"]
if os.environ.get("NK_NATIVE", "0") not in ("", "0"):
    compile_args.append("-march=native")
if sys.platform == "darwin":  # Apple clang needs libomp and the preprocessor form of the flag
    compile_args = ["-O3", "-Xpreprocessor", "-fopenmp", "-fno-math-errno", "-g0"]
    link_args = ["-lomp"]

extensions = []
for pyx in sorted(glob.glob("needle_kernels/**/*.pyx", recursive=True)):
    name = pyx[: -len(".pyx")].replace(os.sep, ".")
    extensions.append(
        Extension(
            name,
            [pyx],
            # C helper headers and Cython includes next to the .pyx (and in its subfolders): a
            # change to one rebuilds the module
            depends=sorted(glob.glob(os.path.join(os.path.dirname(pyx), "*.h"))
                           + glob.glob(os.path.join(os.path.dirname(pyx), "**", "*.pxi"), recursive=True)),
            include_dirs=[np.get_include(), os.path.dirname(pyx)],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        )
    )

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )
)
