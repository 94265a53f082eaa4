"""`FeatureSpec`, the insert function and `start_asc_pipeline` (reference 1.5, 1.6).

The insert function is a ``dataset.map`` function: in the input pipeline it
casts each table's ids to int64, flattens them and concatenates the ids of all
feature specs of one table (sorted by spec name, as mxRec does) into one
tensor, so the training step makes one store call per table however many
lookups the model makes.
"""
from __future__ import annotations

import itertools
import weakref

import tensorflow as tf

from .config_initializer import ConfigInitializer, log_ignored_environment, log_once
from .constants import MAX_INT32
from .key_pipeline import in_input_pipeline
from .keys import int64_keys

MERGED_IDS_KEY = "__mxrec_ids__/{table}"
TIMESTAMP_KEY = "__mxrec_timestamp__"
_counter = itertools.count()


class FeatureSpec:
    def __init__(self, name, table_name=None, index_key=None, access_threshold=None, eviction_threshold=None,
                 is_timestamp=None, batch_size=None, faae_coefficient=1):
        if not isinstance(name, str) or not 1 <= len(name) <= 255:
            raise ValueError(f"FeatureSpec {name!r}: name: must be a string of 1..255 characters")
        self.name = name
        self.internal_name = f"{name}_{next(_counter)}"
        self.table_name = name if table_name is None else table_name
        if index_key is None:
            index_key = name
        if not (isinstance(index_key, str) or (isinstance(index_key, int) and 0 <= index_key <= 255)):
            raise ValueError(f"FeatureSpec {name!r}: index_key: must be a string or an integer in [0, 255]")
        self.index_key = index_key
        for parameter, value in (("access_threshold", access_threshold), ("eviction_threshold", eviction_threshold)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not -1 <= value <= MAX_INT32):
                raise ValueError(f"FeatureSpec {name!r}: {parameter}: must be an integer in [-1, {MAX_INT32}], "
                                 f"got {value!r}")
        if eviction_threshold is not None and access_threshold is None:
            raise ValueError(f"FeatureSpec {name!r}: eviction_threshold: eviction needs access_threshold as well")
        if isinstance(faae_coefficient, bool) or not isinstance(faae_coefficient, int) or not 1 <= faae_coefficient <= MAX_INT32:
            raise ValueError(f"FeatureSpec {name!r}: faae_coefficient: must be an integer >= 1")
        self.access_threshold = access_threshold
        self.eviction_threshold = eviction_threshold
        self.faae_coefficient = faae_coefficient
        self.is_timestamp = bool(is_timestamp)
        self.batch_size = batch_size
        ConfigInitializer.get_instance().feature_specs.append(self)

    def __repr__(self):
        return f"FeatureSpec({self.name!r}, table_name={self.table_name!r})"


def get_feature_spec(table_name: str, access_and_evict_config: dict | None) -> FeatureSpec:
    config = access_and_evict_config or {}
    return FeatureSpec(table_name, table_name=table_name, access_threshold=config.get("access_threshold"),
                       eviction_threshold=config.get("eviction_threshold"),
                       faae_coefficient=config.get("faae_coefficient", 1))


def _table_of(spec: FeatureSpec):
    tables = ConfigInitializer.get_instance().tables
    if spec.table_name not in tables:
        raise ValueError(f"FeatureSpec {spec.name!r}: table_name: no table {spec.table_name!r} "
                         f"(tables: {sorted(tables)})")
    return tables[spec.table_name]


def _thresholds(spec: FeatureSpec) -> tuple:
    return spec.access_threshold, spec.eviction_threshold, spec.faae_coefficient


def _bind_group(table, is_training: bool, group: list) -> None:
    for spec in group:
        register_thresholds(spec)
    table.merged_specs[is_training] = group


def bind_waiting_specs(table) -> None:
    """Give a table just created (or created again in a new graph) the feature specs of insert
    functions built before it in the current graph (TF-24); entries of other graphs are dropped."""
    pending = ConfigInitializer.get_instance().pending_tables
    graph = tf.compat.v1.get_default_graph()
    waiting = [(is_training, group) for g, is_training, group in pending.get(table.table_name, []) if g() is graph]
    for is_training, group in waiting:
        for spec in group:        # thresholds first: a conflict (TF-5) raises before any spec is bound
            if spec.access_threshold is not None:
                table.set_admission(*_thresholds(spec), f"FeatureSpec {spec.name!r}")
    pending.pop(table.table_name, None)
    for is_training, group in waiting:
        _bind_group(table, is_training, group)


def check_tables_resolved() -> None:
    """Raise for a FeatureSpec of an insert function built in the current graph whose table was never
    created (TF-25): the error the insert function raised before it resolved tables lazily."""
    pending = ConfigInitializer.get_instance().pending_tables
    graph = tf.compat.v1.get_default_graph()
    for name in list(pending):
        pending[name] = [entry for entry in pending[name] if entry[0]() is graph]   # other graphs: gone
        if not pending[name]:
            del pending[name]
    if pending:
        name, entries = next(iter(pending.items()))
        spec = entries[0][2][0]
        tables = ConfigInitializer.get_instance().tables
        raise ValueError(f"FeatureSpec {spec.name!r}: table_name: no table {name!r} (tables: {sorted(tables)})")


def register_thresholds(spec: FeatureSpec) -> None:
    if spec.access_threshold is not None:
        _table_of(spec).set_admission(spec.access_threshold, spec.eviction_threshold, spec.faae_coefficient,
                                      f"FeatureSpec {spec.name!r}")


def specs_by_table(specs) -> dict:
    """Non-timestamp specs grouped by table, each group sorted by name (reference 2.8)."""
    groups: dict = {}
    for spec in sorted((s for s in specs if not s.is_timestamp), key=lambda s: s.name):
        groups.setdefault(spec.table_name, []).append(spec)
    return groups


def get_asc_insert_func(tgt_key_specs=None, args_index_list=None, table_names=None, **kwargs):
    """A ``dataset.map`` function adding the merged ids of each table to a dict batch."""
    if (tgt_key_specs is None) == (args_index_list is None):
        raise ValueError("get_asc_insert_func: give exactly one of tgt_key_specs or args_index_list + table_names")
    if args_index_list is not None:
        if table_names is None or len(table_names) != len(args_index_list):
            raise ValueError("get_asc_insert_func: table_names must have one entry per args_index_list entry")
        tgt_key_specs = [FeatureSpec(f"{t}_{i}", table_name=t, index_key=i) for i, t in zip(args_index_list, table_names)]
    specs = list(tgt_key_specs) if isinstance(tgt_key_specs, (list, tuple)) else [tgt_key_specs]
    for spec in specs:
        if not isinstance(spec, FeatureSpec):
            raise TypeError(f"get_asc_insert_func: tgt_key_specs: expected FeatureSpec objects, got {spec!r}")
    timestamps = [s for s in specs if s.is_timestamp]
    if len(timestamps) > 1:
        raise ValueError("get_asc_insert_func: only one FeatureSpec may have is_timestamp=True")
    if kwargs.get("dump_graph"):
        log_once("insert:dump_graph", "get_asc_insert_func: dump_graph=True is accepted and ignored: the insert "
                 "function is a plain dataset.map, with no key-shipping graph to dump")
    groups = specs_by_table(specs)
    instance = ConfigInitializer.get_instance()
    is_training = bool(kwargs.get("is_training", True))
    graph = tf.compat.v1.get_default_graph()
    for name, group in groups.items():
        if name in instance.tables:
            _bind_group(instance.tables[name], is_training, group)
        else:    # an Estimator calls input_fn before model_fn creates the tables: bound by create_table (TF-24)
            instance.pending_tables.setdefault(name, []).append((weakref.ref(graph), is_training, group))

    def insert(batch):
        if not isinstance(batch, dict):
            raise TypeError("get_asc_insert_func: the dataset must yield dict batches in FeatureSpec mode")
        batch = dict(batch)
        for table, group in groups.items():
            missing = [s.index_key for s in group if s.index_key not in batch]
            if missing:
                raise KeyError(f"table {table!r}: index_key: batch has no feature {missing} "
                               f"(features: {sorted(map(str, batch))})")
            merged = tf.concat([tf.reshape(int64_keys(table, batch[s.index_key]), [-1]) for s in group], axis=0)  # LKP-7
            batch[MERGED_IDS_KEY.format(table=table)] = in_input_pipeline(table, merged) if is_training else merged
        if timestamps:
            stamp = batch[timestamps[0].index_key]
            if stamp.shape.rank not in (0, None):
                raise ValueError(f"FeatureSpec {timestamps[0].name!r}: is_timestamp: the timestamp must be a "
                                 f"scalar (rank 0), got shape {stamp.shape}; build it with "
                                 f"import_host_pipeline_ops().return_timestamp(...) or reduce it (e.g. tf.reduce_max)")
            batch[TIMESTAMP_KEY] = tf.cast(stamp, tf.int64)
        return batch

    insert.groups = groups
    return insert


def start_asc_pipeline() -> None:
    """Freeze the configuration and create every table's store."""
    instance = ConfigInitializer.get_instance()
    if not instance.tables:
        raise RuntimeError("start_asc_pipeline: no table has been created")
    check_tables_resolved()
    log_ignored_environment()
    for table in instance.tables.values():
        table.store  # noqa: B018 - creates the store with the final config and optimizer
    instance.frozen = True
