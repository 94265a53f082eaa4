"""TensorBoard scalars of a TF1-graph training loop written between ``session.run`` calls
(``mxrec-ref train --logdir``, OBS-5).

``tf.compat.v1.summary.FileWriter`` with ``Summary`` protocol buffers: no summary op enters the training
graph (which ``MonitoredTrainingSession`` finalizes) and nothing needs the ``tensorboard`` package (the
'tensorboard' extra is for viewing).  Values are float32, as TensorBoard scalars are.
"""
from __future__ import annotations

import tensorflow as tf
from tensorflow.core.framework import summary_pb2


class ScalarLog:
    """One event file in ``log_dir``; ``write(step, [(tag, value), ...])`` adds scalars at ``step``."""

    def __init__(self, log_dir: str):
        self._writer = tf.compat.v1.summary.FileWriter(str(log_dir), graph=None)

    def write(self, step: int, scalars) -> None:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
                                             for tag, value in scalars])
        self._writer.add_summary(summary, global_step=int(step))

    def close(self) -> None:
        self._writer.close()
