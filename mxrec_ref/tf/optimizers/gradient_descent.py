"""mxRec's ``gradient_descent``: ``CustomizedGradientDescent`` (with ``weight_decay``:
``CustomizedGradientDescentWithWeighDecay``, mxRec's spelling), a
``tf.compat.v1.train.GradientDescentOptimizer`` (TF-31) whose update is the store's SGD (OPT-4)."""
import tensorflow as tf

from ...optimizers import SGD
from .base import HashOptimizer, LearningRateAttribute, note_ignored_options, store_learning_rate


class CustomizedGradientDescent(HashOptimizer, LearningRateAttribute, tf.compat.v1.train.GradientDescentOptimizer):
    def __init__(self, learning_rate, use_locking=False, name="GradientDescent", weight_decay=None,
                 by_address=False):
        store = SGD(learning_rate=store_learning_rate(name, learning_rate), weight_decay=weight_decay)

        def tf_init(unique_name):
            tf.compat.v1.train.GradientDescentOptimizer.__init__(self, learning_rate=learning_rate,
                                                                 use_locking=use_locking, name=unique_name)
        super().__init__(store, name, by_address, learning_rate=learning_rate, tf_init=tf_init)


class CustomizedGradientDescentWithWeighDecay(CustomizedGradientDescent):
    """SGD with weight decay: ``w -= lr * (g + weight_decay * w)``."""


def create_hash_optimizer(learning_rate, use_locking=False, name="GradientDescent", use_fusion_optim=False,
                          weight_decay=None):
    note_ignored_options(name, use_locking=use_locking, use_fusion_optim=use_fusion_optim)
    cls = CustomizedGradientDescent if weight_decay is None else CustomizedGradientDescentWithWeighDecay
    return cls(learning_rate=learning_rate, name=name, weight_decay=weight_decay)


# mxRec's by-address optimizer (module gradient_descent_by_addr; older mxRec imported it from here too)
class CustomizedGradientDescentByAddr(CustomizedGradientDescent):
    def __init__(self, learning_rate, weight_decay=0.0001, use_locking=False, name="GradientDescentByAddr"):
        super().__init__(learning_rate=learning_rate, use_locking=use_locking, name=name, weight_decay=weight_decay,
                         by_address=True)


def create_hash_optimizer_by_addr(learning_rate, weight_decay=0.0001, use_locking=False,
                                  name="GradientDescentByAddr"):
    note_ignored_options(name, use_locking=use_locking)
    return CustomizedGradientDescentByAddr(learning_rate=learning_rate, weight_decay=weight_decay, name=name)
