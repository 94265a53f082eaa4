"""The TensorFlow layer: mxRec's API on top of the store (reference section 1).

Graph mode first (``tf.compat.v1`` with ``Session`` or
``MonitoredTrainingSession``); the same calls work inside ``tf.function``.
"""
import tensorflow as tf

from . import constants, optimizers
from .convert import convert_embedding_variables
from .distributed import BroadcastGlobalVariablesHook, DistributedOptimizer, broadcast_global_variables
from .export import export_saved_model
from .config_initializer import ConfigInitializer, is_initialized
from .feature_spec import FeatureSpec, get_asc_insert_func, start_asc_pipeline
from .graph_modifier import GraphModifierHook, modify_graph_and_start_emb_cache
from .hooks import EvictHook, StatsSummaryHook
from .initialize import init, terminate_config_initializer
from .lookup import sparse_lookup
from .resolve_ahead import resolve_keys_ahead
from .table import SparseTable, create_table, set_threshold
from .warm_start import WarmStartHook, WarmStartSettings, scaffold_init_fn, warm_start


def get_dense_and_sparse_variable():
    """(trainable dense variables, the tables' proxy variables) (reference 1.9)."""
    return (tf.compat.v1.trainable_variables(),
            tf.compat.v1.get_collection(constants.ASCEND_GLOBAL_HASHTABLE_COLLECTION))


__all__ = ["ConfigInitializer", "init", "is_initialized", "terminate_config_initializer", "FeatureSpec",
           "get_asc_insert_func", "start_asc_pipeline", "EvictHook", "StatsSummaryHook", "sparse_lookup", "SparseTable",
           "create_table", "get_dense_and_sparse_variable", "constants", "optimizers", "WarmStartHook",
           "WarmStartSettings", "scaffold_init_fn", "warm_start", "set_threshold", "GraphModifierHook",
           "modify_graph_and_start_emb_cache", "convert_embedding_variables", "export_saved_model",
           "DistributedOptimizer", "BroadcastGlobalVariablesHook", "broadcast_global_variables", "resolve_keys_ahead"]
