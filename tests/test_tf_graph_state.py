"""The TF layer's per-graph state (issue 31): one ``GraphState`` per graph, made on first use, living exactly
as long as its graph -- a new graph starts with a fresh one, and a dropped graph (``reset_default_graph``)
is freed with its state.  The state held in module-level weak dictionaries keyed by the graph kept every
graph alive, since their values hold the graph's tensors."""
import gc
import weakref

import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf.graph_state import existing_state, graph_state
from mxrec_ref.tf.lookup_limit import lookups_in_graph

import tf_model


def _train_one_step(backend):
    """A table, one modify-mode lookup and its apply in the default graph, run once; returns the table."""
    table = mx.create_table(tf.int64, 2, "user", tf.compat.v1.ones_initializer(), device_vocabulary_size=16)
    optimizer = mx.optimizers.adagrad.create_hash_optimizer(learning_rate=0.1)
    embeddings = mx.sparse_lookup(table, tf.constant([1, 2, 2], tf.int64), modify_graph=True)
    variables = mx.get_dense_and_sparse_variable()[1]
    train = optimizer.apply_gradients(zip(tf.gradients(tf.reduce_sum(embeddings), variables), variables))
    with tf.compat.v1.Session() as session:
        session.run(train)
    return table


def test_each_graph_has_its_own_state_made_on_first_use(backend):
    tf_model.fresh_graph()
    mx.init(backend=backend)
    first, second = tf.Graph(), tf.Graph()
    with first.as_default():
        table = _train_one_step(backend)
        state = graph_state()
        assert graph_state(first) is state
        assert len(state.store_calls) == 1 and [h.table for h in state.training_lookups] == [table]
        assert state.proxies[table] is table.variable and lookups_in_graph(table) == {True: 1, False: 0}
    assert existing_state(second) is None                    # reading makes none
    with second.as_default():
        assert lookups_in_graph(table) == {True: 0, False: 0} and table.variable.graph is first
        fresh = graph_state()
    assert fresh is not state and not fresh.store_calls and not fresh.training_lookups and not fresh.proxies
    tf_model.fresh_graph()


def test_reset_default_graph_drops_the_graph_and_its_state(backend):
    """The state (here a table's proxy and an iterator the graph modifier may rewrite) goes with its graph.
    (A graph holding a lookup stays alive anyway: TF's registry of ``tf.custom_gradient`` functions keeps
    every graph built with one.)"""
    tf_model.fresh_graph()
    tf.compat.v1.reset_default_graph()
    mx.init(backend=backend)
    graph = tf.compat.v1.get_default_graph()
    with graph.as_default():
        table = mx.create_table(tf.int64, 2, "user", tf.compat.v1.ones_initializer(), device_vocabulary_size=16)
        tf.compat.v1.data.make_one_shot_iterator(tf.data.Dataset.from_tensor_slices([1, 2, 3]))
        state = graph_state()
        assert len(state.iterators) == 1 and state.proxies[table] is table.variable
    old, state = weakref.ref(graph), weakref.ref(state)
    del graph, table
    mx.terminate_config_initializer()          # the configuration's tables hold their proxies in the graph
    tf.compat.v1.reset_default_graph()
    gc.collect()
    assert old() is None and state() is None
    assert existing_state() is None            # the new default graph starts without one
