"""Keras callbacks (spec/observability.md, OBS-4).

Kept apart from the TF1 hooks so that importing ``mxrec_ref.tf`` does not load
Keras, and so that the Keras layer (``mxrec_ref.keras``, a later issue) can
re-export ``StatsLogger`` as it is.
"""
from __future__ import annotations

import os

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from .stats_scalars import check_positive, check_stat_names, check_tables, stat_scalars


class StatsLogger(tf.keras.callbacks.Callback):
    """Writes each table's ``stats()`` as TensorBoard scalars ``mxrec/<table>/<statistic>``
    (the tags of ``StatsSummaryHook``) at the end of every epoch and, with
    ``every_n_batches``, every that many training batches.

    The step is the number of training batches this callback has seen (across
    ``fit`` calls), so points from batches and epochs share one axis and do not
    depend on timing.  ``tables``: stores or ``SparseTable``s (default: every
    table of ``create_table``); ``stats``: the statistics to write (default: all).
    """

    def __init__(self, log_dir, every_n_batches: int | None = None, tables=None, stats=None):
        super().__init__()
        if not isinstance(log_dir, (str, os.PathLike)) or not str(log_dir):
            raise ValueError(f"StatsLogger: log_dir: must be a folder path, got {log_dir!r}")
        self.log_dir = str(log_dir)
        self.every_n_batches = check_positive(every_n_batches, "every_n_batches", "StatsLogger", optional=True)
        self.stats = check_stat_names(stats, "StatsLogger")
        self._tables = check_tables(tables, "StatsLogger")
        self._writer = None
        self.step = 0
        self._last_written = None

    def on_train_begin(self, logs=None):
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.every_n_batches is not None and self.step % self.every_n_batches == 0:
            self.write(self.step)

    def on_epoch_end(self, epoch, logs=None):
        if self._last_written != self.step:
            self.write(self.step)

    def on_train_end(self, logs=None):
        self._writer.flush()

    def write(self, step: int) -> None:
        """Write the statistics now, at ``step``."""
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default(step=int(step)):
            for tag, value in stat_scalars(self._tables, self.stats):
                tf.summary.write(tag, tf.constant(value, tf.float32), metadata=_SCALAR)
        self._last_written = step


# What tf.summary.scalar writes, without needing the tensorboard package that implements it
# (the 'tensorboard' extra is for viewing): the scalars plugin, version 0 (empty content).
_SCALAR = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
                                      data_class=summary_pb2.DATA_CLASS_SCALAR)
