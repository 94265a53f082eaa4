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

import tensorflow as tf

from .distributed import ordered, take_over
from .graph_edit import add_control_inputs, replace_input
from .graph_state import graph_state
from .store_call import OUTPUTS, Member, build_call


class _FusedCall:
    def __init__(self, is_train: bool):
        self.is_train = is_train
        self.members: list[Member] = []
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
    calls = graph_state().fused_calls
    key = (merged.op, is_train)
    member = Member(table, merged, step, stamp, has_timestamp, pad_to)
    call = calls.get(key)
    if call is not None:
        grown = _build(call, call.members + [member], is_train)
        if _can_replace(call, grown, member, is_train):
            for old in call.members:          # the earlier tables now read the grown call
                for identity, index in zip(old.outputs, _indexes(call.members + [member], old)):
                    replace_input(identity.op, 0, grown.op.outputs[index])
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


def _in_call_order(members: list[Member]) -> list[Member]:
    """Table-name order: the same on every rank, so sharded tables exchange in one order (SHARD-12)."""
    return sorted(members, key=lambda m: m.table.table_name)


def _indexes(members: list[Member], member: Member) -> range:
    position = _in_call_order(members).index(member)
    return range(len(OUTPUTS) * position, len(OUTPUTS) * (position + 1))


def _build(call: _FusedCall, members: list[Member], is_train: bool):
    """A store call for ``members``, in table-name order (a numpy_function; its first output)."""
    def mark_ran():
        call.ran = True
    return build_call(_in_call_order(members), is_train, on_run=mark_ran)[0]


def _can_replace(call: _FusedCall, grown, member: Member, is_train: bool) -> bool:
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
        add_control_inputs(grown.op, missing)    # what the old call waited for, the grown one waits for
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
