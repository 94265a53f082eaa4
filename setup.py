"""Builds the Cython fast path (cext/*.pyx) into the mxrec_ref package.

Metadata, dependencies and packages are in pyproject.toml; this file exists only
because the extension list needs code (numpy's include directory, cythonize).
"""
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

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


def _layout_is_newer() -> bool:
    """Cython's change scan looks for a module's declarations beside its .pyx under the .pyx's
    name (cext/_fast.pxd), but the compiler reads the layout of the module mxrec_ref._fast from
    cext/mxrec_ref._fast.pxd: regenerate the C when that file changed since."""
    for pxd in (HERE / "cext").glob("mxrec_ref.*.pxd"):
        generated = HERE / "cext" / (pxd.name.split(".")[1] + ".c")
        if not generated.exists() or pxd.stat().st_mtime > generated.stat().st_mtime:
            return True
    return False


setup(
    ext_modules=cythonize(
        extensions,
        force=_layout_is_newer(),
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )
)
