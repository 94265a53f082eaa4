"""``hccl_ops`` and ``npu_ops`` as mxRec exposes them (no NPU here: CPU stand-ins)."""
from types import SimpleNamespace

import tensorflow as tf

from ..communication import hccl_ops  # noqa: F401
from ..log import logger


def _ignored(name):
    def op(*args, **kwargs):
        logger.info("%s is an NPU operation; ignored on this machine", name)
    return op


npu_ops = SimpleNamespace(initialize_system=_ignored("npu_ops.initialize_system"),
                          shutdown_system=_ignored("npu_ops.shutdown_system"))

# tf_adapter's NPUCheckpointSaverHook saves the NPU's variables too; on a CPU it is TF's own hook
# (the patched Saver also writes the tables, TF-6).
NPUCheckpointSaverHook = tf.compat.v1.train.CheckpointSaverHook
