"""What the TF layer keeps about one graph, on one object (``GraphState``).

A graph is a ``tf.Graph`` or one trace of a ``tf.function``.  Everything the layer
builds into a graph and must find again while building it -- the store call of each
table's merged ids, the training lookups an apply consumes, the fused call of a
batch, the iterators the graph modifier may rewrite, the collective chains, the
lookup counts and the tables' proxy variables -- lives on that graph's ``GraphState``.

Lifetime: the state is an attribute of its graph, so it lives exactly as long as the
graph.  A new graph gets a fresh state on first use; ``tf.compat.v1.reset_default_graph``
(or dropping a trace) frees the old graph and its state with it.  A module-level
``WeakKeyDictionary`` keyed by the graph would keep every graph alive instead: its
values hold the graph's tensors, which hold the graph.  Eager code uses the default
graph's state (eager tensors have no graph).
"""
from __future__ import annotations

import tensorflow as tf

STATE_ATTRIBUTE = "mxrec_ref_state"      # the graph attribute holding its GraphState


class LookupHandle:
    """What a training lookup hands forward to the apply of its gradient: the table, its
    unique keys (the gradient's indices), the step it used and its result token (TF-18), all
    outputs of the lookup's store call, which the apply op takes as inputs."""

    def __init__(self, table, unique_keys, step, token):
        self.table, self.unique_keys, self.step, self.token = table, unique_keys, step, token


class GraphState:
    """The TF layer's state of one graph (see the module docstring)."""

    def __init__(self):
        # lookup.py: (merged ids ref, is_train) -> the StoreCall every lookup of those ids shares
        self.store_calls: dict = {}
        # lookup.py -> optimizers/base.py: the training lookups built in the graph, in build order
        self.training_lookups: list[LookupHandle] = []
        # fused_lookup.py: (the op making a batch's merged ids, is_train) -> the fused call later tables join
        self.fused_calls: dict = {}
        # graph_modifier.py: iterator op name -> (dataset, kind), for the rewrite (GRAPH-1)
        self.iterators: dict = {}
        # distributed.py: chain name -> its last op; (BEFORE, op name) -> the op it waits for (SHARD-12)
        self.chains: dict = {}
        # lookup_limit.py: (owner id, is_train) -> lookups built (TF-17)
        self.lookup_counts: dict = {}
        # table.py: table id -> the table's one-row proxy variable in this graph (TF-21)
        self.proxies: dict = {}

    def hand_forward(self, handle: LookupHandle) -> None:
        """Record a training lookup for the apply.  Eagerly each lookup has run already and the
        apply follows it: only a table's latest lookup is kept."""
        if tf.executing_eagerly():
            self.training_lookups = [h for h in self.training_lookups if h.table is not handle.table]
        self.training_lookups.append(handle)


def graph_of(tensor):
    """The graph a tensor belongs to; the default graph for an eager tensor."""
    return tf.compat.v1.get_default_graph() if tf.executing_eagerly() else tensor.graph


def graph_state(graph=None) -> GraphState:
    """The state of ``graph`` (default: the current default graph), made on first use."""
    graph = graph if graph is not None else tf.compat.v1.get_default_graph()
    state = getattr(graph, STATE_ATTRIBUTE, None)
    if state is None:
        state = GraphState()
        setattr(graph, STATE_ATTRIBUTE, state)
    return state


def existing_state(graph=None) -> GraphState | None:
    """The state of ``graph`` if the layer made one, else None (reading never makes one)."""
    graph = graph if graph is not None else tf.compat.v1.get_default_graph()
    return getattr(graph, STATE_ATTRIBUTE, None)
