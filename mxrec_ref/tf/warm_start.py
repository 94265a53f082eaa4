"""Custom Warm Start (spec/warmstart.md): dense variables and sparse tables
from several checkpoints, in order; a later path overrides an earlier one.

``WarmStartSettings`` has TF's fields; each is one value (used for every
path) or a list with one entry per path.  Dense variables go through
``tf.compat.v1.train.warm_start`` (graph mode: it replaces their
initializers) or are assigned directly (eager); tables through the store's
``plan_warm_start`` (each checkpoint table read once) and, when every table of
every path is planned, ``apply_warm_start``.  Everything is resolved and
validated before anything changes (WS-7).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import tensorflow as tf

from .config_initializer import ConfigInitializer
from .saver import sparse_dir


class WarmStartSettings:
    def __init__(self, ckpt_to_initialize_from, vars_to_warm_start=".*", var_name_to_vocab_info=None,
                 var_name_to_prev_var_name=None):
        paths = ckpt_to_initialize_from
        paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        if not paths or not all(isinstance(p, (str, os.PathLike)) for p in paths):
            raise ValueError("WarmStartSettings: ckpt_to_initialize_from: must be a path or a non-empty list of paths")
        self.ckpt_to_initialize_from = [os.fspath(p) for p in paths]
        n = len(paths)
        self.vars_to_warm_start = _per_path("vars_to_warm_start", vars_to_warm_start, n, single=(str, type(None)))
        self.var_name_to_vocab_info = _per_path("var_name_to_vocab_info", var_name_to_vocab_info, n,
                                                single=(dict, type(None)))
        self.var_name_to_prev_var_name = _per_path("var_name_to_prev_var_name", var_name_to_prev_var_name, n,
                                                   single=(dict, type(None)))


def _per_path(field: str, value, n: int, *, single: tuple):
    """One entry per path.  With one path the value is that entry (a list of
    names is a selection); with several, a non-list value applies to all and
    a list must have one entry per path."""
    if n == 1:
        return [value]
    if isinstance(value, single) or not isinstance(value, (list, tuple)):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"WarmStartSettings: {field}: has {len(value)} entries but ckpt_to_initialize_from has "
                         f"{n} paths; give one entry per path or a single value")
    return list(value)


@dataclass
class _PathPlan:
    checkpoint: str                       # the checkpoint prefix
    tables: dict                          # table name -> name in the checkpoint
    dense: list                           # [(variable, name in the checkpoint)]
    vocab_info: dict | None


def warm_start(settings: WarmStartSettings, now: int | None = None) -> dict:
    """Apply ``settings``; returns {path: {"tables": {...}, "dense": [...]}}.
    In graph mode call it before the variables are initialised (or use
    WarmStartHook); eagerly it assigns at once."""
    if not isinstance(settings, WarmStartSettings):
        raise TypeError(f"warm_start: settings: expected mxrec_ref WarmStartSettings, got {type(settings).__name__}")
    plans = [_plan(path, selection, prev, vocab) for path, selection, prev, vocab in zip(
        settings.ckpt_to_initialize_from, settings.vars_to_warm_start, settings.var_name_to_prev_var_name,
        settings.var_name_to_vocab_info)]
    table_plans = _plan_tables(plans, now)               # WS-7: every table of every path read and checked first
    report = {}
    for plan, planned in zip(plans, table_plans):        # in order: later paths override earlier ones (WS-5)
        for store, store_plan in planned:
            store.apply_warm_start(store_plan)
        _warm_start_dense(plan)
        report[plan.checkpoint] = {"tables": dict(plan.tables), "dense": [_name(v) for v, _ in plan.dense]}
    return report


def _plan_tables(plans: list, now: int | None) -> list:
    """Per path, [(store, its warm-start plan)]: each checkpoint table is read once, here, and
    checked against its table (a path that follows another into the same table is planned after
    it, so a table that cannot grow is checked for the keys of both); nothing changes."""
    tables = ConfigInitializer.get_instance().tables
    latest = {}
    per_path = []
    for plan in plans:
        planned = []
        for name, source in plan.tables.items():
            store = tables[name].store
            latest[name] = store.plan_warm_start(sparse_dir(plan.checkpoint), source_table=source, now=now,
                                                 after=latest.get(name))
            planned.append((store, latest[name]))
        per_path.append(planned)
    return per_path


def _resolve_checkpoint(path: str) -> str:
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"warm start: ckpt_to_initialize_from: no checkpoint in folder {path!r}")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"warm start: ckpt_to_initialize_from: no checkpoint {path!r}")
    return path


def _plan(path, selection, prev_names, vocab_info) -> _PathPlan:
    checkpoint = _resolve_checkpoint(path)
    prev_names = dict(prev_names or {})
    tables = ConfigInitializer.get_instance().tables
    proxies = {t.variable.ref(): name for name, t in tables.items()}
    chosen_tables, dense_selection = [], []
    if selection is None:
        selection = ".*"
    if isinstance(selection, str):
        # TF's rule (and mxRec's): re.match, a prefix match, so "user" also selects "user_2"
        chosen_tables = [name for name in tables if re.match(selection, name)]
        dense_selection = selection
    else:
        for item in selection:
            if isinstance(item, tf.Variable) and item.ref() in proxies:
                chosen_tables.append(proxies[item.ref()])
            elif isinstance(item, str) and item in tables:
                chosen_tables.append(item)
            elif isinstance(item, (str, tf.Variable)):
                dense_selection.append(item)
            else:
                raise TypeError(f"warm start: vars_to_warm_start: entries must be names or tf.Variables, got {item!r}")
    table_plan = {name: prev_names.get(name, name) for name in chosen_tables}
    sparse_folder = sparse_dir(checkpoint)
    if table_plan and not os.path.isdir(sparse_folder):
        raise FileNotFoundError(f"warm start: ckpt_to_initialize_from: checkpoint {checkpoint!r} has no sparse "
                                f"tables (no folder {sparse_folder!r})")
    dense = _dense_plan(checkpoint, dense_selection, prev_names)
    return _PathPlan(checkpoint, table_plan, dense, vocab_info)


def _dense_plan(checkpoint: str, selection, prev_names: dict) -> list:
    """[(variable, checkpoint name)] for the dense selection, checked against the checkpoint."""
    saved = dict(tf.train.list_variables(checkpoint))
    if tf.executing_eagerly():
        candidates = [v for v in selection if isinstance(v, tf.Variable)] if not isinstance(selection, str) else []
    else:
        candidates = tf.compat.v1.trainable_variables()
        if isinstance(selection, str):
            candidates = [v for v in candidates if re.match(selection, _name(v))]
        else:
            wanted = {_name(v) if isinstance(v, tf.Variable) else v for v in selection}
            missing = wanted - {_name(v) for v in candidates}
            if missing:
                raise ValueError(f"warm start: vars_to_warm_start: no trainable variables named {sorted(missing)}")
            candidates = [v for v in candidates if _name(v) in wanted]
    plan = []
    for variable in candidates:
        source = prev_names.get(_name(variable), _name(variable))
        if source not in saved:
            if isinstance(selection, str):
                continue      # a regex selects what the checkpoint has, as TF's warm_start does
            raise ValueError(f"warm start: vars_to_warm_start: variable {source!r} is not in checkpoint {checkpoint!r}")
        if list(saved[source]) != variable.shape.as_list():
            raise ValueError(f"warm start: variable {_name(variable)!r}: shape {variable.shape.as_list()} differs from "
                             f"the checkpoint's {saved[source]}")
        plan.append((variable, source))
    return plan


def _warm_start_dense(plan: _PathPlan) -> None:
    if not plan.dense:
        return
    if tf.executing_eagerly():
        reader = tf.train.load_checkpoint(plan.checkpoint)
        for variable, source in plan.dense:
            variable.assign(reader.get_tensor(source))
        return
    tf.compat.v1.train.warm_start(
        plan.checkpoint, vars_to_warm_start=[v for v, _ in plan.dense],
        var_name_to_vocab_info=plan.vocab_info or None,
        var_name_to_prev_var_name={_name(v): s for v, s in plan.dense if s != _name(v)} or None)


def _name(variable) -> str:
    return variable.name.split(":")[0]


class WarmStartHook(tf.compat.v1.train.SessionRunHook):
    """Warm start for MonitoredTrainingSession: runs in ``begin``, before the
    graph is finalised, so dense initializers are replaced in time.  A
    checkpoint already in ``checkpoint_dir`` is restored afterwards and wins."""

    def __init__(self, settings: WarmStartSettings, now: int | None = None):
        self.settings, self.now, self.report = settings, now, None

    def begin(self):
        self.report = warm_start(self.settings, self.now)


def scaffold_init_fn(settings: WarmStartSettings, now: int | None = None):
    """A ``tf.compat.v1.train.Scaffold(init_fn=...)`` function; the dense part must
    already be planned in graph construction, so call ``warm_start`` there and use
    this only for the sparse tables (it reloads them after variable init)."""
    def init_fn(scaffold, session):
        plans = [_plan(path, selection, prev, None) for path, selection, prev in zip(
            settings.ckpt_to_initialize_from, settings.vars_to_warm_start, settings.var_name_to_prev_var_name)]
        for planned in _plan_tables(plans, now):
            for store, store_plan in planned:
                store.apply_warm_start(store_plan)
    return init_fn
