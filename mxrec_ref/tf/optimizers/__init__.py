"""mxRec's sparse optimizer modules; the package re-exports LazyAdam's factory,
as mx_rec.optimizers does (reference 1.8)."""
from . import (adagrad, adagrad_by_addr, ftrl, gradient_descent, gradient_descent_by_addr, lazy_adam,
               lazy_adam_by_addr)
from .lazy_adam import create_hash_optimizer

__all__ = ["adagrad", "adagrad_by_addr", "ftrl", "gradient_descent", "gradient_descent_by_addr", "lazy_adam",
           "lazy_adam_by_addr", "create_hash_optimizer"]
