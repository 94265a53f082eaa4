"""One store call for the FeatureSpec lookups of a batch (TF-20).

Every table looked up on one batch (the merged ids the insert function put in one
``iterator.get_next()``) in one mode shares one ``tf.numpy_function``, which runs the
tables' store lookups side by side on one rank and in table-name order on several
(``distributed.each_table``).  Lookups are built one at a time, so the call
grows: each new table builds a call for the tables so far, and the earlier tables' output
tensors -- ``Identity`` ops, which is what the rest of the graph consumes -- are rewired to
it.  The call it replaces is left without consumers and never runs.

A table joins the batch's call only when that makes no cycle (its ids, step or timestamp, or
a control dependency around its lookup, do not come from the call) and, on several ranks, when
the call is still the last op of its collective chain (SHARD-12); otherwise it starts a new
call, which later tables join.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np
import tensorflow as tf

from .distributed import each_table, ordered, take_over
from .table import NO_RESULT

OUTPUTS = (tf.int64, tf.float32, tf.int64, tf.bool, tf.int64, tf.int64)   # keys, rows, inverse, admitted, step, token

# graph (weakly) -> {(the op making the batch's merged ids, is_train): the _FusedCall that later tables join}
_CALLS: "weakref.WeakKeyDictionary[tf.Graph, dict]" = weakref.WeakKeyDictionary()


class _Member:
    """One table's part of a fused call: its inputs and the Identity ops the graph reads."""

    def __init__(self, table, merged, step, stamp, has_timestamp, pad_to):
        self.table, self.merged, self.step, self.stamp = table, merged, step, stamp
        self.has_timestamp, self.pad_to = has_timestamp, pad_to
        self.outputs: list = []


class _FusedCall:
    def __init__(self, is_train: bool):
        self.is_train = is_train
        self.members: list[_Member] = []
        self.op = None
        self.ran = False      # a session ran the op: its consumers can no longer be rewired


def available() -> bool:
    """Whether a FeatureSpec lookup built now joins its batch's fused call: in a graph, not
    eagerly (each eager lookup runs at once) and not in a tf.function (it runs every stateful
    op it holds, a replaced call too)."""
    return not tf.executing_eagerly() and not tf.compat.v1.get_default_graph().building_function


def join(table, merged, step, stamp, has_timestamp: bool, pad_to, is_train: bool) -> list:
    """The six output tensors (unique keys, rows, inverse, admitted, step used, result token) of
    ``table``'s lookup of ``merged``, computed by its batch's fused store call (TF-20)."""
    graph = tf.compat.v1.get_default_graph()
    calls = _CALLS.setdefault(graph, {})
    key = (merged.op, is_train)
    member = _Member(table, merged, step, stamp, has_timestamp, pad_to)
    call = calls.get(key)
    if call is not None:
        grown = _build(call, call.members + [member], is_train)
        if _can_replace(call, grown, member, is_train):
            for old in call.members:          # the earlier tables now read the grown call
                for identity, index in zip(old.outputs, _indexes(call.members + [member], old)):
                    identity.op._update_input(0, grown.op.outputs[index])     # noqa: SLF001 -- TF's own rewiring
            call.members.append(member)
            call.op = grown.op
            member.outputs = [tf.identity(grown.op.outputs[i]) for i in _indexes(call.members, member)]
            return member.outputs
    call = calls[key] = _FusedCall(is_train)
    call.members.append(member)
    call.op = _build(call, call.members, is_train).op
    ordered(call.op, "train" if is_train else "eval")     # SHARD-12: one collective order on every rank
    member.outputs = [tf.identity(call.op.outputs[i]) for i in _indexes(call.members, member)]
    return member.outputs


def _in_call_order(members: list[_Member]) -> list[_Member]:
    """Table-name order: the same on every rank, so sharded tables exchange in one order (SHARD-12)."""
    return sorted(members, key=lambda m: m.table.table_name)


def _indexes(members: list[_Member], member: _Member) -> range:
    position = _in_call_order(members).index(member)
    return range(len(OUTPUTS) * position, len(OUTPUTS) * (position + 1))


def _build(call: _FusedCall, members: list[_Member], is_train: bool):
    """A store call for ``members`` (a numpy_function; its first output)."""
    members = _in_call_order(members)
    inputs = [tensor for m in members for tensor in (m.merged, m.step, m.stamp)]

    def lookup(m: _Member, ids, step_value, stamp_value) -> list:
        result, step_used = m.table.lookup_batch(ids, is_train=is_train, step=step_value,
                                                 timestamp=stamp_value if m.has_timestamp else None, pad_to=m.pad_to)
        token = m.table.keep_result(result) if is_train else NO_RESULT
        return [result.unique_keys, result.rows, result.inverse.reshape(-1), result.admitted, np.int64(step_used),
                np.int64(token)]

    def run(*values):
        call.ran = True
        parts = each_table([functools.partial(lookup, m, *values[3 * i:3 * i + 3]) for i, m in enumerate(members)])
        return [tensor for part in parts for tensor in part]

    return tf.numpy_function(run, inputs, list(OUTPUTS) * len(members), stateful=True, name="store_lookup")[0]


def _can_replace(call: _FusedCall, grown, member: _Member, is_train: bool) -> bool:
    """``grown`` may take ``call.op``'s place: no session has run the old call yet, it inherits the
    old call's control inputs, its new inputs do not depend on the old call (a cycle once the old
    tables read the grown call), and no collective was chained after the old call.  Otherwise
    ``grown`` stays unused (it never runs)."""
    old = call.op
    if call.ran:     # TF would keep running the old op for the session that ran it
        return False
    if _depends_on([member.merged, member.step, member.stamp] + list(grown.op.control_inputs), old):
        return False
    if not take_over(old, grown.op, "train" if is_train else "eval"):
        return False
    missing = [op for op in old.control_inputs if op not in grown.op.control_inputs]
    if missing:
        grown.op._add_control_inputs(missing)    # noqa: SLF001 -- what the old call waited for, the grown one waits for
    return True


def _depends_on(sources: list, target) -> bool:
    """Whether ``target`` (an op) is an ancestor of any of ``sources`` (tensors or ops)."""
    seen, frontier = set(), [getattr(s, "op", s) for s in sources]
    while frontier:
        op = frontier.pop()
        if op is target:
            return True
        if op.name in seen:
            continue
        seen.add(op.name)
        frontier.extend(t.op for t in op.inputs)
        frontier.extend(op.control_inputs)
    return False
