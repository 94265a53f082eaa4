"""Hash optimizers are TF optimizers (issue 29): TF-31 (each factory returns a subclass of the
matching ``tf.compat.v1.train.Optimizer`` with ``_lr`` / ``_learning_rate``) and TF-34 (a Tensor,
Variable or callable learning rate -- a schedule, a loss-scale wrapper's -- reaches the store's
update exactly, at every step; a bad value fails the step before the store changes)."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import ConfigError, open_store
from mxrec_ref.tf.optimizers import (adagrad, adagrad_by_addr, ftrl, gradient_descent, gradient_descent_by_addr,
                                     lazy_adam, lazy_adam_by_addr)

V1 = tf.compat.v1.train
# (factory, kwargs, the TF class, has _learning_rate as TF's class does, mxRec's class name, init kwargs)
FACTORIES = [
    (lazy_adam.create_hash_optimizer, {}, V1.AdamOptimizer, False, "CustomizedLazyAdam", {}),
    (lazy_adam_by_addr.create_hash_optimizer_by_address, {}, V1.AdamOptimizer, False, "CustomizedLazyAdamByAddress",
     {"use_dynamic_expansion": True}),
    (adagrad.create_hash_optimizer, {}, V1.AdagradOptimizer, True, "CustomizedAdagrad", {}),
    (adagrad_by_addr.create_hash_optimizer_by_address, {}, V1.AdagradOptimizer, True, "CustomizedAdagradByAddress",
     {}),
    (ftrl.create_hash_optimizer, {"l1_regularization_strength": 0.01}, V1.FtrlOptimizer, True, "CustomizedFtrl", {}),
    (gradient_descent.create_hash_optimizer, {}, V1.GradientDescentOptimizer, True, "CustomizedGradientDescent", {}),
    (gradient_descent.create_hash_optimizer, {"weight_decay": 1e-4}, V1.GradientDescentOptimizer, True,
     "CustomizedGradientDescentWithWeighDecay", {}),
    (gradient_descent_by_addr.create_hash_optimizer_by_addr, {}, V1.GradientDescentOptimizer, True,
     "CustomizedGradientDescentByAddr", {}),
]
IDS = [np.array([1, 2, 2, 5]), np.array([2, 3, 7]), np.array([1, 7, 9, 9]), np.array([5, 2])]


@pytest.fixture(autouse=True)
def _fresh(request):
    """A fresh graph per test, unless marked eager."""
    if mx.is_initialized():
        mx.terminate_config_initializer()
    if request.node.get_closest_marker("eager"):
        yield
    else:
        with tf.Graph().as_default():
            yield
    if mx.is_initialized():
        mx.terminate_config_initializer()


@pytest.mark.parametrize("factory, kwargs, tf_class, has_learning_rate, class_name, init_kwargs", FACTORIES,
                         ids=[f[4] for f in FACTORIES])
@pytest.mark.parametrize("kind", ["number", "tensor", "variable", "callable"])
def test_tf_31_factories_return_tf_optimizers(factory, kwargs, tf_class, has_learning_rate, class_name, init_kwargs,
                                             kind):
    mx.init(**init_kwargs)
    rate = {"number": 0.05, "tensor": tf.constant(0.05), "variable": tf.Variable(0.05),
            "callable": lambda: 0.05}[kind]
    optimizer = factory(learning_rate=rate, **kwargs)
    assert isinstance(optimizer, tf.compat.v1.train.Optimizer) and isinstance(optimizer, tf_class)
    assert type(optimizer).__name__ == class_name
    assert optimizer._lr is rate
    assert hasattr(optimizer, "_learning_rate") == has_learning_rate
    if has_learning_rate:
        optimizer._learning_rate = 0.02          # one learning rate, under either of TF's names
        assert optimizer._lr == 0.02
    assert optimizer.get_name() == optimizer.name               # TF's unique name: mxRec's "<name>_<n>"
    assert mx.ConfigInitializer.get_instance().optimizer_instance is optimizer


def test_tf_31_bad_learning_rates_name_the_optimizer():
    mx.init()
    with pytest.raises(TypeError, match=r"optimizer 'LazyAdam': learning_rate: must be a number, a Tensor"):
        lazy_adam.create_hash_optimizer(learning_rate="0.1")
    with pytest.raises(ConfigError, match="learning_rate"):
        adagrad.create_hash_optimizer(learning_rate=11.0)
    assert mx.ConfigInitializer.get_instance().optimizer_instance is None     # nothing registered


def _model(backend, factory, rate_of, tables=("t",)):
    """A global step, tables looked up with the ids of the step (fed), a hash optimizer whose
    learning rate ``rate_of(global_step)`` gives; returns the graph handles."""
    mx.init(backend=backend)
    made = {name: mx.create_table(tf.int64, 3, name, tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=3),
                                  device_vocabulary_size=50) for name in tables}
    step = tf.compat.v1.train.get_or_create_global_step()
    optimizer = factory(rate_of(step))
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    weights = tf.constant([[1.0], [-2.0], [0.5]])
    loss = sum(tf.reduce_sum(tf.square(tf.matmul(mx.sparse_lookup(t, ids, modify_graph=True), weights) - 1.0))
               for t in made.values())
    _, sparse = mx.get_dense_and_sparse_variable()
    return made, step, optimizer, ids, loss, sparse


def _by_hand(store, backend, ids_per_step, grads_per_step, rates):
    """The same steps on a fresh store, the learning rate of each step set as a Python number."""
    hand = open_store(store.config, store.optimizer, backend=backend)
    for step, (ids, grad, rate) in enumerate(zip(ids_per_step, grads_per_step, rates)):
        hand.lookup(ids, step=step)
        hand.optimizer = dataclasses.replace(hand.optimizer, learning_rate=float(rate))
        hand.apply_gradients(grad.indices, grad.values, step=step)
    return hand


OPTIMIZERS = {"lazy_adam": lambda rate: lazy_adam.create_hash_optimizer(learning_rate=rate),
              "adagrad": lambda rate: adagrad.create_hash_optimizer(learning_rate=rate),
              "sgd": lambda rate: gradient_descent.create_hash_optimizer(rate, weight_decay=1e-3),
              "ftrl": lambda rate: ftrl.create_hash_optimizer(rate, l2_regularization_strength=0.01)}


def _train_on_ids(train, step, optimizer, grads, ids):
    """Run ``train`` on every batch of IDS; each step's learning rate (``optimizer._lr``) and table gradient."""
    rates, fetched = [], []
    with tf.compat.v1.Session() as session:
        session.run(step.initializer)
        for batch in IDS:
            _, rate, grad = session.run([train, optimizer._lr, grads[0]], {ids: batch})
            rates.append(rate)
            fetched.append(grad)
    return rates, fetched


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_tf_34_a_decaying_tensor_learning_rate_is_the_steps(backend, name):
    """exponential_decay on the global step: the table rows are those of applying each step's
    learning rate, as a Python number, by hand."""
    schedule = lambda step: tf.compat.v1.train.exponential_decay(0.3, step, decay_steps=1, decay_rate=0.5)  # noqa
    tables, step, optimizer, ids, loss, sparse = _model(backend, OPTIMIZERS[name], schedule)
    grads = tf.gradients(loss, sparse)
    train = optimizer.apply_gradients(zip(grads, sparse), global_step=step)
    rates, fetched = _train_on_ids(train, step, optimizer, grads, ids)
    assert [float(r) for r in rates] == [float(np.float32(0.3 * 0.5 ** s)) for s in range(len(IDS))]
    store = tables["t"].store
    assert store.export().differences(_by_hand(store, backend, IDS, fetched, rates).export()) == []


class SparseLossScaleOptimizer:
    """A loss-scale wrapper as mxRec's model-zoo scripts write it (delay_loss_scale.py): only a TF
    optimizer is accepted; it divides the learning rate by the scale (``_learning_rate`` for SGD
    and Adagrad, ``_lr`` for Adam) and multiplies the loss by it."""

    def __init__(self, opt, loss_scale):
        if not isinstance(opt, tf.compat.v1.train.Optimizer):
            raise ValueError(f"`opt` must be an instance of Optimizer, but got: {type(opt)}")
        self._optimizer, self._loss_scale = opt, tf.convert_to_tensor(loss_scale, tf.float32)
        if hasattr(opt, "_learning_rate"):
            opt._learning_rate = opt._learning_rate / tf.convert_to_tensor(loss_scale, tf.float32)
        elif hasattr(opt, "_lr"):
            opt._lr = opt._lr / tf.convert_to_tensor(loss_scale, tf.float32)
        else:
            raise ValueError("`opt` should have a `_learning_rate` or `_lr` named field")

    def compute_gradients(self, loss, var_list=None):
        return tf.gradients(loss * self._loss_scale, var_list)

    def apply_gradients(self, grads_and_vars, global_step=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step)


@pytest.mark.parametrize("name", ["lazy_adam", "adagrad"])
def test_tf_34_a_loss_scale_wrapper_scales_the_stores_learning_rate(backend, name):
    tables, step, optimizer, ids, loss, sparse = _model(backend, OPTIMIZERS[name], lambda step: 0.2)
    wrapped = SparseLossScaleOptimizer(optimizer, 128.0)
    assert isinstance(optimizer._lr, tf.Tensor)                       # 0.2 / 128, as a Tensor
    grads = wrapped.compute_gradients(loss, sparse)
    train = wrapped.apply_gradients(zip(grads, sparse), global_step=step)
    rates, fetched = _train_on_ids(train, step, optimizer, grads, ids)
    assert set(map(float, rates)) == {float(np.float32(0.2) / np.float32(128.0))}
    store = tables["t"].store
    assert store.export().differences(_by_hand(store, backend, IDS, fetched, rates).export()) == []


def test_tf_34_a_bad_step_learning_rate_fails_before_any_table_changes(backend):
    tables, step, optimizer, ids, loss, sparse = _model(
        backend, OPTIMIZERS["adagrad"], lambda step: tf.Variable(0.1, name="rate"), tables=("a", "b"))
    rate = optimizer._lr
    train = optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse), global_step=step)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(train, {ids: IDS[0]})
        before = {n: (t.store.export(), t.store.stats()["grad_applies"]) for n, t in tables.items()}
        for bad in (20.0, float("nan"), -1.0):
            session.run(rate.assign(bad))
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=r"optimizer 'Adagrad_\d+': learning_rate: .* for this step is invalid"):
                session.run(train, {ids: IDS[0]})               # the same keys: the lookup changes no row
            for name, table in tables.items():
                state, applies = before[name]
                assert table.store.export().values.tolist() == state.values.tolist()
                assert table.store.stats()["grad_applies"] == applies
        session.run(rate.assign(0.05))
        session.run(train, {ids: IDS[0]})                         # a good value trains again
        assert tables["a"].store.stats()["grad_applies"] == before["a"][1] + 1


def test_tf_34_a_bad_number_set_by_a_wrapper_fails_when_the_graph_is_built():
    tables, step, optimizer, ids, loss, sparse = _model("ref", OPTIMIZERS["lazy_adam"], lambda step: 0.1)
    optimizer._lr = 50.0
    with pytest.raises(ConfigError, match=r"optimizer 'LazyAdam_\d+': learning_rate"):
        optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
    optimizer._lr = tf.ones([2])
    with pytest.raises(ValueError, match="learning_rate: must be a scalar"):
        optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))


@pytest.mark.eager
def test_tf_34_eager_variable_learning_rate_is_read_at_each_apply(backend):
    assert tf.executing_eagerly()
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
    rate = tf.Variable(0.5)
    optimizer = gradient_descent.create_hash_optimizer(rate)
    for value in (0.5, 0.25):
        rate.assign(value)
        with tf.GradientTape() as tape:
            tape.watch(table.variable.handle)
            loss = tf.reduce_sum(mx.sparse_lookup(table, tf.constant([4], tf.int64), modify_graph=True))
        optimizer.apply_gradients([(tape.gradient(loss, table.variable.handle), table.variable)])
    assert table.store.export().values.tolist() == [[1.0 - 0.5 - 0.25] * 2]


def test_tf_31_compute_gradients_and_minimize_are_tfs(backend):
    """TF's own compute_gradients / minimize on the table variables end in the store's apply."""
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 2, "t", tf.compat.v1.ones_initializer(), device_vocabulary_size=10)
    optimizer = gradient_descent.create_hash_optimizer(tf.constant(0.5))
    loss = tf.reduce_sum(mx.sparse_lookup(table, tf.constant([1, 2, 2], tf.int64), modify_graph=True))
    _, sparse = mx.get_dense_and_sparse_variable()
    (grad, var), = optimizer.compute_gradients(loss, var_list=sparse)
    assert isinstance(grad, tf.IndexedSlices) and var is table.variable
    train = optimizer.minimize(loss, var_list=sparse)
    with tf.compat.v1.Session() as session:
        session.run(train)
    assert table.store.export().values.tolist() == [[0.5, 0.5], [0.0, 0.0]]     # key 2 twice: gradient 2
