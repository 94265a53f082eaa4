from ...optimizers import Adagrad
from .base import HashOptimizer, note_ignored_options


def create_hash_optimizer(learning_rate=0.001, initial_accumulator_value=0.9, use_locking=False, name="Adagrad"):
    note_ignored_options(name, use_locking=use_locking)
    return HashOptimizer(Adagrad(learning_rate=learning_rate, initial_accumulator_value=initial_accumulator_value),
                         name)


from .adagrad_by_addr import create_hash_optimizer_by_address  # noqa: E402,F401  (older import path)
