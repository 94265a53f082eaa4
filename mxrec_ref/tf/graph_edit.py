"""The graph edits TensorFlow has no public API for, in one place.

TF1 graphs are append-only in the public API; the TF layer rewires existing ops
(graph modification, GRAPH-1; variable conversion, GRAPH-5; a batch's fused lookup
growing, TF-20) and orders existing ops (the collective chain, SHARD-12).  TF's own
graph-rewriting utilities use these ``Operation`` methods; each call here is one of them.
"""
from __future__ import annotations


def replace_input(op, index: int, tensor) -> None:
    """``op`` reads ``tensor`` as its input ``index`` from now on."""
    op._update_input(index, tensor)          # noqa: SLF001 -- TF has no public way to rewire an existing op


def rewire_consumers(old, new) -> None:
    """Every op reading tensor ``old`` reads ``new`` instead."""
    for consumer in list(old.consumers()):
        for index, tensor in enumerate(consumer.inputs):
            if tensor is old:
                replace_input(consumer, index, new)


def add_control_inputs(op, ops) -> None:
    """``op`` runs after every op of ``ops``."""
    op._add_control_inputs(list(ops))        # noqa: SLF001 -- TF has no public way to order existing ops


def replace_control_input(op, old, new) -> None:
    """``op`` waits for ``new`` instead of ``old`` (its other control inputs kept, in order)."""
    kept = [c for c in op.control_inputs if c is not old]
    op._remove_all_control_inputs()          # noqa: SLF001 -- TF has no public way to drop a control input
    add_control_inputs(op, kept + [new])
