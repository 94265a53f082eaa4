"""Sparse optimizer configurations shared by both backends (spec/optimizers.md).

Only hyper-parameters, slot layout and per-step scalars live here; the update
arithmetic is implemented twice, once in the reference model
(``mxrec_ref.ref.optimizers``) and once in the fast path (``cext``), and
the differential tests hold them to bit-identical float32 results.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .config import reject_unknown_parameters
from .errors import ConfigError


def _check(optimizer: str, parameter: str, value, ok, rule: str):
    """Raise unless ``value`` is a finite number for which ``ok(value)`` holds."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"optimizer {optimizer!r}: {parameter}: must be a number {rule}, got {value!r}")
    if not (math.isfinite(float(value)) and ok(float(value))):
        raise ConfigError(f"optimizer {optimizer!r}: {parameter}: must be {rule}, got {value!r}")


@dataclass(frozen=True)
class SparseOptimizer:
    """Base of the four optimizers; ``kind`` names the checkpoint slot prefix."""

    learning_rate: float = 0.001

    kind: ClassVar[str] = "base"
    slot_names: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        lr = self.learning_rate
        _check(self.kind, "learning_rate", lr, lambda v: 0 <= v <= 10, "in [0, 10]")

    def slot_initial_values(self) -> dict[str, float]:
        return {}

    def checkpoint_slot_name(self, slot: str) -> str:
        """mxRec's checkpoint folder name of a slot, e.g. ``LazyAdam_momentum``."""
        return f"{self.kind}_{slot}"

    def describe(self) -> dict:
        fields = {k: float(v) if v is not None else None for k, v in self.__dict__.items()}
        return {"kind": self.kind, **fields}

    def f32(self, value: float) -> np.float32:
        return np.float32(value)


@dataclass(frozen=True)
class SGD(SparseOptimizer):
    """w -= lr * (g + weight_decay * w)   (mxRec gradient_descent)."""

    weight_decay: float | None = None
    kind = "gradient_descent"

    def __post_init__(self):
        super().__post_init__()
        wd = self.weight_decay
        if wd is not None:
            _check(self.kind, "weight_decay", wd, lambda v: 1e-5 <= v <= 1e-2, "None or in [1e-5, 1e-2]")


@dataclass(frozen=True)
class Adagrad(SparseOptimizer):
    """acc += g²; w -= lr * g / sqrt(acc)."""

    initial_accumulator_value: float = 0.9
    kind = "Adagrad"
    slot_names = ("accumulator",)

    def __post_init__(self):
        super().__post_init__()
        v = self.initial_accumulator_value
        _check(self.kind, "initial_accumulator_value", v, lambda v: 0 < v <= 1e6, "in (0, 1e6]")

    def slot_initial_values(self):
        return {"accumulator": float(self.initial_accumulator_value)}


@dataclass(frozen=True)
class LazyAdam(SparseOptimizer):
    """Adam on the touched rows only, bias-corrected by the global step."""

    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    kind = "LazyAdam"
    slot_names = ("momentum", "velocity")

    def __post_init__(self):
        super().__post_init__()
        _check(self.kind, "beta1", self.beta1, lambda v: 0 < v < 1, "in (0, 1)")
        _check(self.kind, "beta2", self.beta2, lambda v: 0 <= v <= 1, "in [0, 1]")
        _check(self.kind, "epsilon", self.epsilon, lambda v: 0 < v <= 1, "in (0, 1]")
        if float(self.beta2) == 1.0:
            raise ConfigError(f"optimizer {self.kind!r}: beta2: 1 makes the bias correction divide by zero")

    def slot_initial_values(self):
        return {"momentum": 0.0, "velocity": 0.0}

    def step_learning_rate(self, step: int) -> np.float32:
        """lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t) with t = step + 1 (OPT-5),
        computed in float64 once per apply and rounded to float32."""
        t = step + 1
        return np.float32(self.learning_rate * math.sqrt(1.0 - self.beta2**t) / (1.0 - self.beta1**t))


@dataclass(frozen=True)
class Ftrl(SparseOptimizer):
    """FTRL-Proximal as TensorFlow's ApplyFtrlV2."""

    learning_rate_power: float = -0.5
    initial_accumulator_value: float = 0.1
    l1_regularization_strength: float = 0.0
    l2_regularization_strength: float = 0.0
    l2_shrinkage_regularization_strength: float = 0.0
    kind = "ftrl"
    slot_names = ("accum", "linear")

    def __post_init__(self):
        super().__post_init__()
        if float(self.learning_rate) == 0:  # checked finite above
            raise ConfigError(f"optimizer {self.kind!r}: learning_rate: FTRL divides by it; must be > 0")
        _check(self.kind, "learning_rate_power", self.learning_rate_power,
               lambda v: -10 <= v <= 0, "in [-10, 0]")
        _check(self.kind, "initial_accumulator_value", self.initial_accumulator_value,
               lambda v: 0 < v <= 1e6, "in (0, 1e6]")
        for name in ("l1_regularization_strength", "l2_regularization_strength",
                     "l2_shrinkage_regularization_strength"):
            _check(self.kind, name, getattr(self, name), lambda v: 0 <= v <= 1e6, "in [0, 1e6]")

    def slot_initial_values(self):
        return {"accum": float(self.initial_accumulator_value), "linear": 0.0}

    @property
    def uses_sqrt(self) -> bool:
        """lr_power = -0.5 (the default) is computed with sqrt, exactly; other
        powers are numpy's float32 ``np.power`` in both backends (the fast
        kernels take them from numpy: numpy's SIMD power and libm's powf differ
        in the last bit), so backends agree on one machine (OPT-7)."""
        return float(self.learning_rate_power) == -0.5


OPTIMIZER_KINDS = {cls.kind: cls for cls in (SGD, Adagrad, LazyAdam, Ftrl)}


def optimizer_from_description(description: dict) -> SparseOptimizer:
    """Inverse of ``describe()``; used by checkpoints."""
    description = dict(description)
    kind = description.pop("kind", None)
    if kind not in OPTIMIZER_KINDS:
        raise ConfigError(f"optimizer: kind: unknown optimizer {kind!r} (known: {sorted(OPTIMIZER_KINDS)})")
    return OPTIMIZER_KINDS[kind](**description)


for _optimizer in (SGD, Adagrad, LazyAdam, Ftrl):
    reject_unknown_parameters(_optimizer, lambda args, kwargs, kind=_optimizer.kind: f"optimizer {kind!r}")
