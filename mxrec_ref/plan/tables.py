"""The tables a plan sizes (PLAN-6): from a JSON config, from an mxRec script, or one default table.

A ``PlannedTable`` is a ``TableConfig`` (mxrec_ref/config.py, validated as usual), the sample
columns whose ids it looks up each step (every column of one table is one store lookup, as the TF
layer merges a table's FeatureSpecs, TF-20), and the optimizer whose slots its rows carry.
"""
from __future__ import annotations

import dataclasses
import json
import os
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import Initializer, TableConfig
from ..errors import UsageError
from ..optimizers import SGD, Adagrad, Ftrl, LazyAdam, SparseOptimizer

STORAGE_MODES = ("hbm", "ddr", "ssd")
OPTIMIZERS = {"adagrad": Adagrad, "lazy_adam": LazyAdam, "sgd": SGD, "ftrl": Ftrl}   # the train job's names


@dataclass(frozen=True)
class PlannedTable:
    config: TableConfig
    columns: tuple[str, ...]
    optimizer: SparseOptimizer | None = None

    @property
    def name(self) -> str:
        return self.config.name


def default_tables(columns, *, dim: int, access_threshold, eviction_threshold, optimizer) -> list[PlannedTable]:
    """One table, "features", over every column of the sample (as the demo's one table holds all fields)."""
    config = TableConfig(name="features", dim=dim, access_threshold=access_threshold,
                         eviction_threshold=eviction_threshold)
    return [PlannedTable(config, tuple(columns), optimizer)]


def from_config(path, optimizer) -> list[PlannedTable]:
    """A JSON file ``{"tables": [{TableConfig parameters..., "columns": [...]}]}``; ``initializer``
    is a dict of Initializer fields; ``columns`` defaults to the table's name."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"plan: --config: cannot read {str(path)!r}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"plan: --config: {str(path)!r} is not UTF-8 text (byte {error.start + 1})") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"plan: --config: {str(path)!r} is not JSON: {error}") from None
    entries = document.get("tables") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"plan: --config: {str(path)!r} needs a non-empty list \"tables\"")
    tables = []
    for entry in entries:
        entry = dict(entry)
        columns = entry.pop("columns", None) or [entry.get("name")]
        if isinstance(entry.get("initializer"), dict):
            entry["initializer"] = Initializer(**entry["initializer"])
        tables.append(PlannedTable(TableConfig(**entry), tuple(columns), optimizer))
    return tables


class _GraphBuilt(Exception):
    """Raised by the patched Session.run: the script's graph is complete, stop it here."""


def from_script(script, script_args=()) -> list[PlannedTable]:
    """The tables an mxRec script creates: the script runs as ``mxrec-ref run`` runs it (the
    ``mx_rec`` alias on) until its first ``Session.run`` -- graph construction only -- and each
    table's ``create_table`` arguments, FeatureSpec thresholds, ``send_count`` and the script's
    sparse optimizer are read from the TF layer's registry.  Each table reads the column of its name."""
    # late: TensorFlow and the TF layer load only for --script (the other sources need neither)
    import tensorflow as tf
    from tensorflow.python.client import session as tf_session

    from ..compat import alias  # late: with the TF layer it serves
    from ..tf.config_initializer import ConfigInitializer, is_initialized  # late: see above
    from ..tf.initialize import terminate_config_initializer  # late: see above

    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"plan: --script: no script {script!r}")

    def stop(*args, **kwargs):
        raise _GraphBuilt()

    alias.enable()
    saved = (sys.argv, list(sys.path), tf_session.BaseSession.run)
    sys.argv = [path, *script_args]
    sys.path.insert(0, os.path.dirname(path))
    tf_session.BaseSession.run = stop
    try:
        with tf.Graph().as_default():
            try:
                runpy.run_path(path, run_name="__main__")
            except _GraphBuilt:
                pass
            if not is_initialized():
                raise UsageError(f"plan: --script: {script!r} did not call mx_rec's init() before its first "
                                 f"Session.run")
            instance = ConfigInitializer.get_instance()
            optimizer = instance.optimizer_instance.store_optimizer if instance.optimizer_instance else None
            tables = [PlannedTable(table.frozen_config(), (name,), optimizer)
                      for name, table in instance.tables.items()]
    finally:
        sys.argv, sys.path[:], tf_session.BaseSession.run = saved
        if is_initialized():
            terminate_config_initializer()
    if not tables:
        raise UsageError(f"plan: --script: {script!r} creates no table before its first Session.run")
    return tables


def with_columns(tables: list[PlannedTable], mapping: dict[str, list[str]], available) -> list[PlannedTable]:
    """``--column TABLE=COLUMN[,COLUMN]`` overrides; every column must exist in the sample."""
    unknown = sorted(set(mapping) - {t.name for t in tables})
    if unknown:
        raise UsageError(f"plan: --column: no table {unknown[0]!r} (tables: {[t.name for t in tables]})")
    result = []
    for table in tables:
        columns = tuple(mapping.get(table.name, table.columns))
        missing = [c for c in columns if c not in available]
        if missing:
            raise UsageError(f"table {table.name!r}: column: the sample has no column {missing[0]!r} (columns: "
                             f"{sorted(available)}); map it with --column {table.name}=COLUMN")
        result.append(dataclasses.replace(table, columns=columns))
    return result


def in_storage(config: TableConfig, storage: str, *, device: int, host: int | None = None,
               ssd: int | None = None, ssd_path: str | None = None) -> TableConfig:
    """``config`` in storage mode ``storage`` (TIER-1) with these sizes; a size left None keeps the
    config's own when it has one in that mode, else ``device``."""
    if storage not in STORAGE_MODES:
        raise UsageError(f"plan: --storage: must be one of {STORAGE_MODES}, got {storage!r}")
    if storage == "hbm":
        return dataclasses.replace(config, device_vocabulary_size=device, host_vocabulary_size=0,
                                   ssd_vocabulary_size=0, dynamic_expansion=False)
    host = host or config.host_vocabulary_size or device
    if storage == "ddr":
        return dataclasses.replace(config, device_vocabulary_size=device, host_vocabulary_size=host,
                                   ssd_vocabulary_size=0, dynamic_expansion=False)
    paths = (ssd_path,) if ssd_path else config.ssd_data_path
    return dataclasses.replace(config, device_vocabulary_size=device, host_vocabulary_size=host,
                               ssd_vocabulary_size=ssd or config.ssd_vocabulary_size or device,
                               ssd_data_path=paths, dynamic_expansion=False)


def optimizer_named(kind: str) -> SparseOptimizer:
    """The store optimizer whose slots the rows carry (the bytes a row moves between tiers, TIER-10)."""
    if kind not in OPTIMIZERS:
        raise UsageError(f"plan: --optimizer: must be one of {sorted(OPTIMIZERS)}, got {kind!r}")
    return OPTIMIZERS[kind]()
