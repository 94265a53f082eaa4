"""The backend registry: the top of the house (DESIGN.md section 8).

``open_store`` picks a backend by name, puts it behind the storage tiers when
the table has a host tier (spec/tiers.md), and returns a ``Store``
(``mxrec_ref.contract``).  Every backend module sits below this one; none
imports it.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

from . import hot
from .config import TableConfig
from .contract import InMemoryStore, Store
from .distributed.comm import Communicator
from .distributed.replicated import ReplicatedStore
from .distributed.sharded import ShardedStore
from .errors import UsageError
from .optimizers import SparseOptimizer
from .ref import RefStore
from .tiers import TieredStore

try:
    from .fast import FastStore
    _FAST_IMPORT_ERROR: ImportError | None = None
except ImportError as _error:  # extension not built: only the reference is available (CON-1 says why)
    FastStore, _FAST_IMPORT_ERROR = None, _error

_BACKENDS: dict[str, Callable[..., Store]] = {}
# The stores over the in-memory bookkeeping (mxrec_ref.engine.InMemoryBookkeeping), which take hot_update_step.
_IN_MEMORY_STORES = tuple(kind for kind in (InMemoryStore, RefStore, FastStore) if kind is not None)


def register_backend(name: str, factory: Callable[..., Store]) -> None:
    _BACKENDS[name] = factory


TIER_OPTIONS = ("ssd_folder_limit_bytes", "ssd_fault_hook")


def open_store(config: TableConfig, optimizer: SparseOptimizer | None = None, *, backend: str = "ref",
               comm: Communicator | None = None, replicated: bool = False, divide_gradients: bool = False,
               hot_rows: int | None = None, **tier_options) -> Store:
    """A new, empty store for ``config`` on the named backend ("ref" or "fast").

    ``comm``: the ranks' communicator (``mxrec_ref.distributed.comm.world()``
    under ``mpirun``).  With more than one rank the store is this rank's
    shard (keys ``key mod N``) behind a ``ShardedStore`` (SHARD-2), or with
    ``replicated=True`` this rank's full replica behind a ``ReplicatedStore``
    (SHARD-16); an SSD table's files then go to a ``rank<r>`` subfolder of
    each ``ssd_data_path`` folder, so ranks sharing a host never write the
    same file (TIER-9 refuses files that exist).  ``divide_gradients``: the
    summed gradient of a key is divided by the rank count (mxRec's
    ``sum_gradients_and_div_by_ranksize``).  With no ``comm`` or one rank,
    the local store itself.

    ``hot_rows`` overrides the size of the hot block (spec/hot.md; 0 turns
    it off); only passed on when given, so a third-party factory need not
    know it.

    A table with ``host_vocabulary_size > 0`` is a DDR or SSD table: the
    backend's store behind the storage tiers (spec/tiers.md).  ``tier_options``
    go to it: ``ssd_folder_limit_bytes`` (bytes of SSD files per
    ``ssd_data_path`` folder) and ``ssd_fault_hook`` (called before every
    disk write; raising OSError simulates a full disk)."""
    if comm is not None and not isinstance(comm, Communicator):
        raise UsageError(f"table {getattr(config, 'name', '?')!r}: comm: must be an mxrec_ref.distributed "
                         f"Communicator (e.g. mxrec_ref.distributed.comm.world()), got {type(comm).__name__}")
    several = comm is not None and comm.size > 1
    local = _open_local(rank_config(config, comm) if several else config, optimizer, backend, hot_rows,
                        tier_options)
    if not several:
        return local
    kind = ReplicatedStore if replicated else ShardedStore
    return kind(local, comm, divide_gradients=divide_gradients)


def rank_config(config: TableConfig, comm: Communicator) -> TableConfig:
    """A table's config for this rank's store: on several ranks an SSD table's files go to a
    ``rank<r>`` subfolder of each ``ssd_data_path`` folder; otherwise the config itself."""
    if comm.size == 1 or not getattr(config, "ssd_vocabulary_size", 0):
        return config
    return dataclasses.replace(config, ssd_data_path=tuple(os.path.join(folder, f"rank{comm.rank}")
                                                           for folder in config.ssd_data_path))


def _open_local(config, optimizer, backend: str, hot_rows: int | None, tier_options: dict) -> Store:
    """This process's store: the backend's, behind the storage tiers for a table with a host tier."""
    if backend not in _BACKENDS:
        _load_builtin_backends()
    if backend not in _BACKENDS:
        raise ValueError(f"table {getattr(config, 'name', '?')!r}: backend: {unknown_backend_reason(backend)}")
    factory = _BACKENDS[backend]
    if hot_rows is not None:
        factory = functools.partial(factory, hot_rows=hot_rows)
    unknown = sorted(set(tier_options) - set(TIER_OPTIONS))
    if unknown:
        raise UsageError(f"table {getattr(config, 'name', '?')!r}: {unknown[0]}: not an option of open_store "
                         f"(options: hot_rows, {', '.join(TIER_OPTIONS)})")
    if isinstance(config, TableConfig) and isinstance(_BACKENDS[backend], type) \
            and issubclass(_BACKENDS[backend], _IN_MEMORY_STORES):
        # The environment is read here, once per store, and passed down (HOT-1); a third-party
        # factory that is none of these reads what it needs itself.
        factory = functools.partial(factory, hot_update_step=hot.update_step(config.name))
    if isinstance(config, TableConfig) and config.host_vocabulary_size > 0:
        return TieredStore(config, optimizer, factory, backend=backend, **tier_options)   # CON-10
    if tier_options:
        raise UsageError(f"table {getattr(config, 'name', '?')!r}: {sorted(tier_options)[0]}: storage tier "
                         f"options need a host tier (host_vocabulary_size > 0)")
    return factory(config, optimizer)


def available_backends() -> list[str]:
    _load_builtin_backends()
    return sorted(_BACKENDS)


def unknown_backend_reason(backend: str) -> str:
    """Why ``backend`` cannot be opened, in one line (a missing fast path says why it is missing)."""
    if backend == "fast" and _FAST_IMPORT_ERROR is not None:
        return (f"the fast backend is unavailable: the C extension was not built: {_FAST_IMPORT_ERROR} "
                f"(build it with `python setup.py build_ext --inplace`, or install from the sdist or a wheel)")
    return f"unknown backend {backend!r} (available: {sorted(_BACKENDS)})"


def _load_builtin_backends() -> None:
    """Register the built-in backends again (a caller may have replaced one by name)."""
    register_backend("ref", RefStore)
    if FastStore is not None:
        register_backend("fast", FastStore)
