"""The backend registry: the top of the house (DESIGN.md section 8).

``open_store`` picks a backend by name, puts it behind the storage tiers when
the table has a host tier (spec/tiers.md), and returns a ``Store``
(``mxrec_ref.contract``).  Every backend module sits below this one; none
imports it.
"""
from __future__ import annotations

import functools
from typing import Callable

from . import hot
from .config import TableConfig
from .contract import InMemoryStore, Store
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


def register_backend(name: str, factory: Callable[..., Store]) -> None:
    _BACKENDS[name] = factory


TIER_OPTIONS = ("ssd_folder_limit_bytes", "ssd_fault_hook")


def open_store(config: TableConfig, optimizer: SparseOptimizer | None = None, *, backend: str = "ref",
               hot_rows: int | None = None, **tier_options) -> Store:
    """A new, empty store for ``config`` on the named backend ("ref" or "fast").

    ``hot_rows`` overrides the size of the hot block (spec/hot.md; 0 turns
    it off); only passed on when given, so a third-party factory need not
    know it.

    A table with ``host_vocabulary_size > 0`` is a DDR or SSD table: the
    backend's store behind the storage tiers (spec/tiers.md).  ``tier_options``
    go to it: ``ssd_folder_limit_bytes`` (bytes of SSD files per
    ``ssd_data_path`` folder) and ``ssd_fault_hook`` (called before every
    disk write; raising OSError simulates a full disk)."""
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
            and issubclass(_BACKENDS[backend], InMemoryStore):
        # The environment is read here, once per store, and passed down (HOT-1); a third-party
        # factory that is no InMemoryStore reads what it needs itself.
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
