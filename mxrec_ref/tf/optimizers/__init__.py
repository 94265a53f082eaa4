"""mxRec's sparse optimizer modules; the package re-exports LazyAdam's factory,
as mx_rec.optimizers does (reference 1.8)."""
from . import adagrad, ftrl, gradient_descent, lazy_adam
from .lazy_adam import create_hash_optimizer

__all__ = ["adagrad", "ftrl", "gradient_descent", "lazy_adam", "create_hash_optimizer"]
