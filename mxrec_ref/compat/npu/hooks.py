"""``npu_hooks_append`` and the NPU adapter's session hooks (TF-29)."""
from __future__ import annotations

import tensorflow as tf

from .notes import npu_only


def npu_hooks_append(hooks_list=None):
    """Appends the NPU's session hooks (variable broadcast over the ranks) to ``hooks_list`` and
    returns it: one process has nothing to broadcast, so nothing is appended."""
    hooks = [] if hooks_list is None else hooks_list
    if not isinstance(hooks, list):
        raise TypeError(f"npu_hooks_append: hooks_list: must be a list, got {type(hooks_list).__name__}")
    npu_only("npu_hooks_append", "one process: no variables to broadcast over ranks")
    return hooks


class NPUBroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts rank 0's variables after session creation; one process is rank 0 of 1."""

    def __init__(self, root_rank=None, index=None):
        npu_only("NPUBroadcastGlobalVariablesHook", "one process: rank 0 of 1, nothing to broadcast")
        self.root_rank, self.index = root_rank, index
