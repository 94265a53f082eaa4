"""mxRec's ``lazy_adam_by_addr``: LazyAdam for dynamic-expansion tables.

On a NPU the by-address optimizers update rows in place at the device
addresses the lookup returned; a CPU has no such addresses, so this is the
store-side LazyAdam under mxRec's name, defaults, slots (``LazyAdam_momentum``,
``LazyAdam_velocity``) and validation: like mxRec it is for dynamic-expansion
tables only (``init(use_dynamic_expansion=True)``).
"""
from ...optimizers import LazyAdam
from ..config_initializer import ConfigInitializer
from .base import HashOptimizer


def create_hash_optimizer_by_address(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                                     name="LazyAdamByAddress"):
    if not ConfigInitializer.get_instance().use_dynamic_expansion:
        raise ValueError(f"optimizer {name!r}: create_hash_optimizer_by_address: LazyAdamByAddress is for "
                         f"dynamic-expansion tables only; call init(use_dynamic_expansion=True) or use "
                         f"lazy_adam.create_hash_optimizer")
    return HashOptimizer(LazyAdam(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon), name,
                         by_address=True)
