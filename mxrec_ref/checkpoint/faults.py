"""The fault points of the save protocol (CKPT-8).

``fault_hook`` is called with the name of each step of a save as it completes; the fault-injection tests
kill the process there (tests/test_checkpoint_faults.py).  Set it as ``mxrec_ref.checkpoint.fault_hook``:
the package forwards the assignment here.
"""
from __future__ import annotations

fault_hook = None


def fault_point(step: str) -> None:
    if fault_hook is not None:
        fault_hook(step)
