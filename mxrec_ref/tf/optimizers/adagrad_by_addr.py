"""mxRec's ``adagrad_by_addr``: no device addresses on a CPU, so the store-side
Adagrad under mxRec's name, defaults and slot (``Adagrad_accumulator``)."""
from ...optimizers import Adagrad
from .base import HashOptimizer


def create_hash_optimizer_by_address(learning_rate=0.001, initial_accumulator_value=0.9, name="Adagrad"):
    return HashOptimizer(Adagrad(learning_rate=learning_rate, initial_accumulator_value=initial_accumulator_value),
                         name, by_address=True)
