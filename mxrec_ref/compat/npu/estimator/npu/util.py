"""``npu_bridge.estimator.npu.util``: the device loop's helpers (TF-29).  An NPU runs
``iterations_per_loop`` training steps per ``session.run``; a CPU runs one."""
from __future__ import annotations

import logging
import numbers

from ...notes import npu_only


def _checked(iterations_per_loop, where: str) -> int:
    if isinstance(iterations_per_loop, bool) or not isinstance(iterations_per_loop, numbers.Integral) \
            or iterations_per_loop < 1:
        raise ValueError(f"{where}: iterations_per_loop: must be an integer >= 1, got {iterations_per_loop!r}")
    return int(iterations_per_loop)


def _note_loop(iterations_per_loop: int, where: str) -> None:
    if iterations_per_loop > 1:
        npu_only(f"{where}(iterations_per_loop={iterations_per_loop})",
                 "one session.run is one training step on this machine, not a device loop of "
                 f"{iterations_per_loop}: run the train op {iterations_per_loop} times as often for the same steps",
                 logging.WARNING)


def set_iteration_per_loop(sess, train_op, iterations_per_loop=1):
    """Returns ``train_op``: one step per ``session.run`` here (a WARNING when the loop is longer)."""
    _note_loop(_checked(iterations_per_loop, "util.set_iteration_per_loop"), "util.set_iteration_per_loop")
    return train_op


def create_iteration_per_loop_var(train_op):
    return train_op


def load_iteration_per_loop_var(sess, train_op, iterations_per_loop=1):
    _note_loop(_checked(iterations_per_loop, "util.load_iteration_per_loop_var"), "util.load_iteration_per_loop_var")
