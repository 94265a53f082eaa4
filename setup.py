"""Builds the Cython fast path (cext/*.pyx) into the mxrec_ref package.

Metadata and dependencies are in setup.cfg; this file exists only because the
extension list needs code (numpy's include directory, cythonize).
"""
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

HERE = Path(__file__).parent

extensions = [
    Extension(
        f"mxrec_ref.{pyx.stem}",      # cext/_fast.pyx -> mxrec_ref._fast
        [str(pyx.relative_to(HERE))],
        include_dirs=[numpy.get_include(), "cext"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
        # Strict IEEE float32 arithmetic: the fast path must agree bit for bit
        # with the numpy reference, so no fused multiply-add and no fast-math.
        extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
    )
    for pyx in sorted((HERE / "cext").glob("*.pyx"))
]

setup(
    # mxRec's import paths live in mxrec_ref/compat/mx_rec and are opt-in (``mxrec-ref run``,
    # ``import mxrec_ref.compat.enable_mx_rec``), so a real mxRec install is never shadowed.
    packages=find_packages(include=["mxrec_ref", "mxrec_ref.*"]),
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )
)
