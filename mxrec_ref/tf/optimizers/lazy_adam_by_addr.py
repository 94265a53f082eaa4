"""mxRec's ``lazy_adam_by_addr``: LazyAdam for dynamic-expansion tables.

On a NPU the by-address optimizers update rows in place at the device
addresses the lookup returned; a CPU has no such addresses, so this is the
store-side LazyAdam under mxRec's name, defaults, slots (``LazyAdam_momentum``,
``LazyAdam_velocity``) and validation: like mxRec it is for dynamic-expansion
tables only (``init(use_dynamic_expansion=True)``).
"""
from .lazy_adam import CustomizedLazyAdamByAddress, create_hash_optimizer_by_address  # noqa: F401
