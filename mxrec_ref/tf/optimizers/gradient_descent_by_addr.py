"""mxRec's ``gradient_descent_by_addr``: no device addresses on a CPU, so the
store-side SGD (with weight decay) under mxRec's name and defaults; no slots."""
from ...optimizers import SGD
from .base import HashOptimizer, note_ignored_options


def create_hash_optimizer_by_addr(learning_rate, weight_decay=0.0001, use_locking=False,
                                  name="GradientDescentByAddr"):
    note_ignored_options(name, use_locking=use_locking)
    return HashOptimizer(SGD(learning_rate=learning_rate, weight_decay=weight_decay), name, by_address=True)
