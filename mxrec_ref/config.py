"""Table configuration: mxRec's parameter names and validation ranges.

A ``TableConfig`` is immutable and fully validated on construction, so a store
never sees an invalid one (spec/config.md, CFG-1..CFG-9).
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .errors import ConfigError

INT32_MAX = 2**31 - 1
VOCAB_MAX = 10**9
DIM_MAX = 8192
NAME_MAX = 100
# A name is one safe path component (CFG-1): it names the table's checkpoint
# folder and SSD files, so no separator, no control character, and no leading
# '.' ('.', '..' and hidden names would alias the checkpoint folder itself or
# the save protocol's temporary folders).  fullmatch: '$' would accept "t\n".
_NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")
NAME_RULE = f"1..{NAME_MAX} characters of letters, digits, '_' and '.', not starting with '.'"

INITIALIZER_KINDS = ("constant", "uniform", "truncated_normal")


def check_table_name(name) -> str:
    """CFG-1, for every place a table name arrives (TableConfig, the SSD tier)."""
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX or not _NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"table {name!r}: name: must be {NAME_RULE}")
    return name


def _fail(table: str, parameter: str, message: str) -> ConfigError:
    return ConfigError(f"table {table!r}: {parameter}: {message}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_int(table, parameter, value, low, high, *, allow_none=False):
    if value is None and allow_none:
        return None
    if not _is_int(value):
        raise _fail(table, parameter, f"must be an integer in [{low}, {high}], got {value!r}")
    if not low <= int(value) <= high:
        raise _fail(table, parameter, f"must be in [{low}, {high}], got {int(value)}")
    return int(value)


def _check_float(table, parameter, value, low, high):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise _fail(table, parameter, f"must be a number in [{low}, {high}], got {value!r}")
    value = float(value)
    if not np.isfinite(value) or not low <= value <= high:
        raise _fail(table, parameter, f"must be a finite number in [{low}, {high}], got {value}")
    return value


@dataclass(frozen=True)
class Initializer:
    """How a new row's values are drawn (spec/initializers.md, INIT-1..INIT-4).

    kind: "constant" (``value``), "uniform" (``minval``, ``maxval``) or
    "truncated_normal" (``mean``, ``stddev``; redrawn beyond two stddevs, as
    TensorFlow's ``TruncatedNormal``).  ``seed`` selects the stream.
    """

    kind: str = "truncated_normal"
    value: float = 0.0
    minval: float = -0.05
    maxval: float = 0.05
    mean: float = 0.0
    stddev: float = 0.05
    seed: int = 0

    def validated(self, table: str) -> "Initializer":
        if self.kind not in INITIALIZER_KINDS:
            raise _fail(table, "initializer.kind", f"must be one of {INITIALIZER_KINDS}, got {self.kind!r}")
        _check_int(table, "initializer.seed", self.seed, 0, 2**63 - 1)
        for name in ("value", "minval", "maxval", "mean", "stddev"):
            _check_float(table, f"initializer.{name}", getattr(self, name), -1e30, 1e30)
        if self.kind == "uniform" and not self.minval < self.maxval:
            raise _fail(table, "initializer.minval", f"must be below maxval ({self.minval} >= {self.maxval})")
        if self.kind == "truncated_normal" and not self.stddev > 0:
            raise _fail(table, "initializer.stddev", f"must be positive, got {self.stddev}")
        return self


@dataclass(frozen=True)
class TableConfig:
    """One sparse table, with mxRec's names (reference section 1.3) and ranges.

    Admission and eviction follow spec/admission.md and spec/eviction.md:
    ``access_threshold`` None or <= 0 admits every key on its first training
    access; ``eviction_threshold`` None or -1 disables eviction.
    """

    name: str
    dim: int
    key_dtype: str = "int64"
    device_vocabulary_size: int = 1
    host_vocabulary_size: int = 0
    ssd_vocabulary_size: int = 0
    ssd_data_path: Sequence[str] = field(default_factory=lambda: (os.getcwd(),))
    access_threshold: int | None = None
    eviction_threshold: int | None = None
    faae_coefficient: int = 1
    initializer: Initializer = field(default_factory=Initializer)
    init_param: float = 1.0
    is_save: bool = True
    send_count: int | None = None
    dynamic_expansion: bool = False
    serving_default_value: float | Sequence[float] | None = None

    def __post_init__(self):
        name = self.name
        check_table_name(name)
        set_ = object.__setattr__  # frozen dataclass: normalise fields once, here
        set_(self, "dim", _check_int(name, "dim", self.dim, 1, DIM_MAX))
        key_dtype = _dtype_name(self.key_dtype)
        if key_dtype not in ("int64", "int32"):
            raise _fail(name, "key_dtype", f"must be int64 or int32, got {self.key_dtype!r}")
        set_(self, "key_dtype", key_dtype)
        set_(self, "device_vocabulary_size",
             _check_int(name, "device_vocabulary_size", self.device_vocabulary_size, 1, VOCAB_MAX))
        set_(self, "host_vocabulary_size",
             _check_int(name, "host_vocabulary_size", self.host_vocabulary_size, 0, VOCAB_MAX))
        set_(self, "ssd_vocabulary_size",
             _check_int(name, "ssd_vocabulary_size", self.ssd_vocabulary_size, 0, VOCAB_MAX))
        paths = self.ssd_data_path
        if isinstance(paths, str) or not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
            raise _fail(name, "ssd_data_path", f"must be a list or tuple of folder names, got {paths!r}")
        set_(self, "ssd_data_path", tuple(paths))
        if self.ssd_vocabulary_size > 0 and self.host_vocabulary_size == 0:
            raise _fail(name, "ssd_vocabulary_size", "an SSD tier needs a host tier: set host_vocabulary_size > 0")
        if not isinstance(self.dynamic_expansion, (bool, np.bool_)):
            raise _fail(name, "dynamic_expansion", f"must be True or False, got {self.dynamic_expansion!r}")
        if self.dynamic_expansion and self.host_vocabulary_size > 0:
            raise _fail(name, "host_vocabulary_size",
                        "dynamic expansion grows the device tier itself; it cannot be combined with a host tier")
        set_(self, "access_threshold",
             _check_int(name, "access_threshold", self.access_threshold, -1, INT32_MAX, allow_none=True))
        set_(self, "eviction_threshold",
             _check_int(name, "eviction_threshold", self.eviction_threshold, -1, 2**62, allow_none=True))
        if self.eviction_enabled and self.access_threshold is None:
            raise _fail(name, "eviction_threshold",
                        "eviction needs admission: set access_threshold too (0 or 1 admits every key)")
        set_(self, "faae_coefficient", _check_int(name, "faae_coefficient", self.faae_coefficient, 1, INT32_MAX))
        if not isinstance(self.initializer, Initializer):
            raise _fail(name, "initializer", f"must be an mxrec_ref.Initializer, got {self.initializer!r}")
        self.initializer.validated(name)
        set_(self, "init_param", _check_float(name, "init_param", self.init_param, -10.0, 10.0))
        if not isinstance(self.is_save, (bool, np.bool_)):
            raise _fail(name, "is_save", f"must be True or False, got {self.is_save!r}")
        set_(self, "send_count", _check_int(name, "send_count", self.send_count, 1, INT32_MAX, allow_none=True))
        set_(self, "serving_default_value", _default_vector(name, self.dim, self.serving_default_value))

    @property
    def admission_enabled(self) -> bool:
        return self.access_threshold is not None and self.access_threshold > 1

    @property
    def admit_threshold(self) -> int:
        """The count at which a key is admitted; 1 when admission is off (CFG-6)."""
        return self.access_threshold if self.admission_enabled else 1

    @property
    def eviction_enabled(self) -> bool:
        return self.eviction_threshold is not None and self.eviction_threshold >= 0

    @property
    def table_capacity(self) -> int:
        """Rows a fixed-size table holds: the device tier plus the host and SSD
        tiers (CFG-10).  A DDR or SSD table's host and disk tiers grow, so its
        ``capacity()`` is at least this (mxrec_ref/tiers/store.py, TIER-2)."""
        return self.device_vocabulary_size + self.host_vocabulary_size + self.ssd_vocabulary_size

    @property
    def capacity_parameter(self) -> str:
        """The size a user raises when the table is full."""
        return "device_vocabulary_size" if self.host_vocabulary_size == 0 else "host_vocabulary_size"

    @property
    def key_min(self) -> int:
        return _key_bounds(self.key_dtype)[0]

    @property
    def key_max(self) -> int:
        return _key_bounds(self.key_dtype)[1]

    def default_row(self) -> np.ndarray:
        """What a non-admitted or padding key returns (ADM-5)."""
        return np.asarray(self.serving_default_value, dtype=np.float32)


def _dtype_name(value) -> str | None:
    value = getattr(value, "as_numpy_dtype", value)  # tf.DType carries its numpy twin
    try:
        return np.dtype(value).name
    except TypeError:
        return None


def _default_vector(table: str, dim: int, value) -> tuple[float, ...]:
    if value is None:
        return (0.0,) * dim
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(table, "serving_default_value", f"must be a finite number or {dim} finite numbers, "
                                                    f"got {value!r}") from None
    if array.ndim == 0:
        array = np.full(dim, float(array))
    if array.shape != (dim,) or not np.all(np.isfinite(array)):
        raise _fail(table, "serving_default_value", f"must be a finite number or {dim} finite numbers")
    return tuple(float(x) for x in array.astype(np.float32))


def reject_unknown_parameters(cls, subject):
    """A misspelt parameter raises ConfigError naming it (CFG-11), not the
    bare TypeError of the generated ``__init__``; ``subject(args, kwargs)``
    is the message's prefix (which table or optimizer)."""
    generated = cls.__init__
    known = [f.name for f in cls.__dataclass_fields__.values() if f.init]

    @functools.wraps(generated)
    def __init__(self, *args, **kwargs):
        unknown = sorted(set(kwargs) - set(known))
        if unknown or len(args) > len(known):
            what = unknown[0] if unknown else f"{len(args)} positional arguments"
            raise ConfigError(f"{subject(args, kwargs)}: {what}: not a parameter of {cls.__name__} "
                              f"(parameters: {known})")
        generated(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


reject_unknown_parameters(TableConfig, lambda args, kwargs: f"table {kwargs.get('name', args[0] if args else '?')!r}")


@functools.lru_cache(maxsize=None)
def _key_bounds(key_dtype: str) -> tuple[int, int]:
    """(min, max) of a key dtype: read on every lookup's key check (CON-2), so np.iinfo runs once."""
    info = np.iinfo(key_dtype)
    return int(info.min), int(info.max)
