"""Keras callbacks for models with ``Embedding`` tables (KERAS-11).

``EvictCallback`` evicts between training batches; ``StatsLogger`` is the TF
layer's (OBS-4) with the model's tables as its default.
"""
from __future__ import annotations

import keras

from ..tf.callbacks import StatsLogger as _TFStatsLogger
from ..tf.stats_scalars import check_positive
from .export import embedding_layers


class EvictCallback(keras.callbacks.Callback):
    """After every ``every_n_batches``-th training batch (counted across ``fit``
    calls), evict every table of the model that has eviction configured
    (``eviction_threshold``), each by its own clock (EVI-*); the wall clock is
    never read.  ``evicted``: {table: keys evicted by this callback}."""

    def __init__(self, every_n_batches: int = 1):
        super().__init__()
        self.every_n_batches = check_positive(every_n_batches, "every_n_batches", "EvictCallback")
        self.batches = 0
        self.evicted: dict[str, int] = {}

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches % self.every_n_batches == 0:
            self.evict_now()

    def evict_now(self) -> dict[str, int]:
        for layer in embedding_layers(self.model):
            if layer.config.eviction_enabled:
                evicted = len(layer.store.evict())
                self.evicted[layer.table_name] = self.evicted.get(layer.table_name, 0) + evicted
        return self.evicted


class StatsLogger(_TFStatsLogger):
    """``mxrec_ref.tf.callbacks.StatsLogger`` (TensorBoard scalars ``mxrec/<table>/<statistic>``,
    OBS-4) whose ``tables`` default to the stores of the model's ``Embedding`` layers."""

    def on_train_begin(self, logs=None):
        if self._tables is None:
            self._tables = [layer.store for layer in embedding_layers(self.model)]
        super().on_train_begin(logs)
