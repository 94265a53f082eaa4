"""Tables' ``stats()`` as named scalars for TensorBoard (spec/observability.md, OBS-3).

Shared by the TF1 hook (``hooks.StatsSummaryHook``) and the Keras callback
(``callbacks.StatsLogger``) so both write the same tags.  No TensorFlow here:
which tables, which statistics, in which order.
"""
from __future__ import annotations

from ..store import STAT_NAMES, Store
from .config_initializer import ConfigInitializer, is_initialized

TAG_PREFIX = "mxrec"


def check_stat_names(stats, owner: str) -> tuple[str, ...]:
    """``stats`` (None: every statistic) as a tuple in STAT-1 order; unknown names raise."""
    if stats is None:
        return STAT_NAMES
    if isinstance(stats, str):
        stats = [stats]
    stats = list(stats)
    if not stats:
        raise ValueError(f"{owner}: stats: must name at least one statistic (None: all of them)")
    unknown = sorted(set(map(str, stats)) - set(STAT_NAMES))
    if unknown:
        raise ValueError(f"{owner}: stats: unknown statistics {unknown}; the names are mxrec_ref.STAT_NAMES")
    return tuple(name for name in STAT_NAMES if name in stats)


def check_positive(value, parameter: str, owner: str, optional: bool = False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {parameter}: must be a positive integer{' or None' if optional else ''}, "
                         f"got {value!r}")
    return value


def check_tables(tables, owner: str) -> list | None:
    """``tables`` as a list (None stays None: the TF layer's tables at write time)."""
    if tables is None:
        return None
    tables, names = list(tables), set()
    for table in tables:
        name = _name_of(table)
        if name is None:
            raise ValueError(f"{owner}: tables: must be mxrec_ref stores or SparseTables, "
                             f"got {type(table).__name__}")
        if name in names:
            raise ValueError(f"{owner}: tables: table {name!r} is given twice")
        names.add(name)
    return tables


def _name_of(table) -> str | None:
    if isinstance(table, Store):
        return table.name
    name = getattr(table, "table_name", None)             # a SparseTable (duck-typed: no TF import here)
    return name if isinstance(name, str) and hasattr(table, "opened_store") else None


def table_stats(tables=None) -> dict[str, dict[str, int]]:
    """``{table name: stats()}``, sorted by name.

    ``tables``: stores (``mxrec_ref.Store``) or TF-layer tables (``SparseTable``);
    None means every table created with ``create_table`` since ``init``.  A
    TF-layer table whose store has not been opened yet (no lookup ran) has no
    statistics and is left out."""
    if tables is None:
        tables = list(ConfigInitializer.get_instance().tables.values()) if is_initialized() else []
    result = {}
    for table in tables:
        if isinstance(table, Store):
            result[table.name] = table.stats()
        elif table.opened_store is not None:               # a SparseTable: its store opens on its first lookup
            result[table.table_name] = table.opened_store.stats()
    return dict(sorted(result.items()))


def stat_scalars(tables=None, stats=STAT_NAMES) -> list[tuple[str, int]]:
    """``[(tag, value)]`` with tags ``mxrec/<table>/<statistic>``, tables by name, statistics in STAT-1 order."""
    return [(f"{TAG_PREFIX}/{name}/{stat}", values[stat])
            for name, values in table_stats(tables).items() for stat in stats]
