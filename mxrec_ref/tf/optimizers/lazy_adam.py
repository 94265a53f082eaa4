from ...optimizers import LazyAdam
from .base import HashOptimizer, note_ignored_options


def create_hash_optimizer(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, name="LazyAdam",
                          use_fusion_optim=False):
    note_ignored_options(name, use_fusion_optim=use_fusion_optim)
    return HashOptimizer(LazyAdam(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon), name)


from .lazy_adam_by_addr import create_hash_optimizer_by_address  # noqa: E402,F401  (older import path)
