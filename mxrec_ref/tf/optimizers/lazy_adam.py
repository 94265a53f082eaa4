"""mxRec's ``lazy_adam``: ``CustomizedLazyAdam``, a ``tf.compat.v1.train.AdamOptimizer`` (TF-31)
whose update is the store's LazyAdam (OPT-5)."""
import tensorflow as tf

from ...optimizers import LazyAdam
from ..config_initializer import ConfigInitializer
from .base import HashOptimizer, note_ignored_options, store_learning_rate


class CustomizedLazyAdam(HashOptimizer, tf.compat.v1.train.AdamOptimizer):
    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking=False, name="LazyAdam",
                 by_address=False):
        store = LazyAdam(learning_rate=store_learning_rate(name, learning_rate), beta1=beta1, beta2=beta2,
                         epsilon=epsilon)

        def tf_init(unique_name):
            tf.compat.v1.train.AdamOptimizer.__init__(self, learning_rate=learning_rate, beta1=beta1, beta2=beta2,
                                                      epsilon=epsilon, use_locking=use_locking, name=unique_name)
        super().__init__(store, name, by_address, learning_rate=learning_rate, tf_init=tf_init)


def create_hash_optimizer(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, name="LazyAdam",
                          use_fusion_optim=False):
    note_ignored_options(name, use_fusion_optim=use_fusion_optim)
    return CustomizedLazyAdam(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon, name=name)


# mxRec's by-address optimizer (module lazy_adam_by_addr; older mxRec imported it from here too)
class CustomizedLazyAdamByAddress(CustomizedLazyAdam):
    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking=False,
                 name="LazyAdamByAddress"):
        super().__init__(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                         use_locking=use_locking, name=name, by_address=True)


def create_hash_optimizer_by_address(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                                     name="LazyAdamByAddress"):
    if not ConfigInitializer.get_instance().use_dynamic_expansion:
        raise ValueError(f"optimizer {name!r}: create_hash_optimizer_by_address: LazyAdamByAddress is for "
                         f"dynamic-expansion tables only; call init(use_dynamic_expansion=True) or use "
                         f"lazy_adam.create_hash_optimizer")
    return CustomizedLazyAdamByAddress(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                                       name=name)
