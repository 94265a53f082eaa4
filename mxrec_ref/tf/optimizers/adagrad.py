"""mxRec's ``adagrad``: ``CustomizedAdagrad``, a ``tf.compat.v1.train.AdagradOptimizer`` (TF-31)
whose update is the store's Adagrad (OPT-4)."""
import tensorflow as tf

from ...optimizers import Adagrad
from .base import HashOptimizer, LearningRateAttribute, note_ignored_options, store_learning_rate


class CustomizedAdagrad(HashOptimizer, LearningRateAttribute, tf.compat.v1.train.AdagradOptimizer):
    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.9, use_locking=False, name="Adagrad",
                 by_address=False):
        store = Adagrad(learning_rate=store_learning_rate(name, learning_rate),
                        initial_accumulator_value=initial_accumulator_value)

        def tf_init(unique_name):
            tf.compat.v1.train.AdagradOptimizer.__init__(self, learning_rate=learning_rate,
                                                         initial_accumulator_value=initial_accumulator_value,
                                                         use_locking=use_locking, name=unique_name)
        super().__init__(store, name, by_address, learning_rate=learning_rate, tf_init=tf_init)


def create_hash_optimizer(learning_rate=0.001, initial_accumulator_value=0.9, use_locking=False, name="Adagrad"):
    note_ignored_options(name, use_locking=use_locking)
    return CustomizedAdagrad(learning_rate=learning_rate, initial_accumulator_value=initial_accumulator_value,
                             name=name)


# mxRec's by-address optimizer (module adagrad_by_addr; older mxRec imported it from here too)
class CustomizedAdagradByAddress(CustomizedAdagrad):
    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.9, use_locking=False, name="Adagrad"):
        super().__init__(learning_rate=learning_rate, initial_accumulator_value=initial_accumulator_value,
                         use_locking=use_locking, name=name, by_address=True)


def create_hash_optimizer_by_address(learning_rate=0.001, initial_accumulator_value=0.9, name="Adagrad"):
    return CustomizedAdagradByAddress(learning_rate=learning_rate, initial_accumulator_value=initial_accumulator_value,
                                      name=name)
