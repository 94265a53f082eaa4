from ...optimizers import SGD
from .base import HashOptimizer


def create_hash_optimizer(learning_rate, use_locking=False, name="GradientDescent", use_fusion_optim=False,
                          weight_decay=None):
    return HashOptimizer(SGD(learning_rate=learning_rate, weight_decay=weight_decay), name)


from .gradient_descent_by_addr import create_hash_optimizer_by_addr  # noqa: E402,F401  (older import path)
