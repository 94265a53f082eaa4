from ...optimizers import SGD
from .base import HashOptimizer, note_ignored_options


def create_hash_optimizer(learning_rate, use_locking=False, name="GradientDescent", use_fusion_optim=False,
                          weight_decay=None):
    note_ignored_options(name, use_locking=use_locking, use_fusion_optim=use_fusion_optim)
    return HashOptimizer(SGD(learning_rate=learning_rate, weight_decay=weight_decay), name)


from .gradient_descent_by_addr import create_hash_optimizer_by_addr  # noqa: E402,F401  (older import path)
