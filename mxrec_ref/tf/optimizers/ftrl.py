"""mxRec's ``ftrl``: ``CustomizedFtrl``, a ``tf.compat.v1.train.FtrlOptimizer`` (TF-31) whose
update is the store's FTRL (OPT-6)."""
import tensorflow as tf

from ...optimizers import Ftrl
from .base import HashOptimizer, LearningRateAttribute, note_ignored_options, store_learning_rate

_STORE_PARAMETERS = ("learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
                     "l2_regularization_strength", "l2_shrinkage_regularization_strength")


class CustomizedFtrl(HashOptimizer, LearningRateAttribute, tf.compat.v1.train.FtrlOptimizer):
    def __init__(self, learning_rate, use_locking=False, name="Ftrl", **kwargs):
        known = set(_STORE_PARAMETERS) | {"accum_name", "linear_name"}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"optimizer {name!r}: unknown arguments {unknown}")
        params = {k: v for k, v in kwargs.items() if k in _STORE_PARAMETERS}
        store = Ftrl(learning_rate=store_learning_rate(name, learning_rate), **params)

        def tf_init(unique_name):
            tf.compat.v1.train.FtrlOptimizer.__init__(self, learning_rate=learning_rate, use_locking=use_locking,
                                                      name=unique_name, **kwargs)
        super().__init__(store, name, learning_rate=learning_rate, tf_init=tf_init)


def create_hash_optimizer(learning_rate, use_locking=False, name="Ftrl", **kwargs):
    note_ignored_options(name, use_locking=use_locking)
    return CustomizedFtrl(learning_rate=learning_rate, name=name, **kwargs)
