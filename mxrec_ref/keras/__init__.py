"""Keras 3 integration (spec/keras.md): an ``Embedding`` layer over a dynamic
table, training through ``model.fit`` that cannot skip a table, tables in TF
and Keras checkpoints, callbacks, and a SavedModel export that serves without
mxrec-ref."""
from .ahead import resolve_keys_ahead
from .callbacks import EvictCallback, StatsLogger
from .export import export_saved_model
from .ids import string_keys
from .layer import Embedding
from .tape import TableGradientTape
from .training import Model, Sequential, TableTraining

__all__ = ["Embedding", "Model", "Sequential", "TableGradientTape", "TableTraining", "string_keys",
           "export_saved_model", "EvictCallback", "StatsLogger", "resolve_keys_ahead"]
