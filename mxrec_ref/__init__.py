"""mxrec-ref: mxRec's sparse embedding features for TensorFlow on any machine.

The store layer (one table, no TensorFlow needed)::

    from mxrec_ref import TableConfig, Initializer, Adagrad, open_store
    store = open_store(TableConfig("user", dim=16, dynamic_expansion=True), Adagrad(0.05))
    result = store.lookup(keys, step=0)
    store.apply_gradients(result, grads, step=0)
"""
from .config import Initializer, TableConfig
from .errors import (CapacityError, CheckpointError, ConfigError, DiskCorruptionError, DiskFullError, GradientError,
                     KeyInputError, MxrecError, UsageError)
from .optimizers import SGD, Adagrad, Ftrl, LazyAdam, SparseOptimizer
from .backends import available_backends, open_store
from .contract import Store
from .state import STAT_NAMES, LookupResult, TableState

__version__ = "0.1.0"

__all__ = [
    "Initializer", "TableConfig", "SGD", "Adagrad", "Ftrl", "LazyAdam", "SparseOptimizer",
    "open_store", "available_backends", "Store", "LookupResult", "TableState", "STAT_NAMES",
    "MxrecError", "ConfigError", "KeyInputError", "GradientError", "CapacityError", "CheckpointError",
    "UsageError", "DiskFullError", "DiskCorruptionError",
]
