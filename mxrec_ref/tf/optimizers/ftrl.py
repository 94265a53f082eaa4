from ...optimizers import Ftrl
from .base import HashOptimizer, note_ignored_options


def create_hash_optimizer(learning_rate, use_locking=False, name="Ftrl", **kwargs):
    known = {"learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
             "l2_regularization_strength", "l2_shrinkage_regularization_strength", "accum_name", "linear_name"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"optimizer {name!r}: unknown arguments {unknown}")
    note_ignored_options(name, use_locking=use_locking)
    params = {k: v for k, v in kwargs.items() if k not in ("accum_name", "linear_name")}
    return HashOptimizer(Ftrl(learning_rate=learning_rate, **params), name)
