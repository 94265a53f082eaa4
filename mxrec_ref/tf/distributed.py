"""The TF layer on several MPI ranks (spec/sharding.md, SHARD-12..SHARD-14).

* the rank queries of mxRec's ``hccl_ops`` and its collectives on tensors (``allreduce``,
  ``allgather``, ``broadcast``), on the same communicator as the sharded tables;
* ``DistributedOptimizer``: the dense gradients of a step reduced in one fused buffer;
* ``broadcast_global_variables``: rank 0's dense variables on every rank;
* ``ordered``: every op that runs a collective waits for the one built before it in the same chain
  (training or evaluation), so all ranks run their collectives in one order (SHARD-12).

With one rank (no launcher) every function here is the identity and adds no op dependency.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading

import numpy as np
import tensorflow as tf

from .. import backends
from ..distributed.comm import rank_order_sum, world
from ..errors import ConfigError
from .constants import ASCEND_GLOBAL_HASHTABLE_COLLECTION
from .graph_edit import add_control_inputs
from .graph_state import graph_state

DENSE_REDUCE_VARIABLE = "MXREC_REF_DENSE_REDUCE"
DENSE_REDUCTIONS = ("rankorder", "allreduce")


def rank_id() -> int:
    return world().rank


def rank_size() -> int:
    return world().size


def share_cores() -> tuple[int, int] | None:
    """SHARD-14: ranks sharing a host split its cores: TF's intra-op threads default to
    ``max(1, cores // ranks on the host)`` and inter-op to 2, unless the job set them (or TF already
    started, when they can no longer change).  Returns the (intra, inter) set, or None."""
    local = local_rank_size()
    threading_config = tf.config.threading
    if local <= 1 or threading_config.get_intra_op_parallelism_threads() or \
            threading_config.get_inter_op_parallelism_threads():
        return None
    intra = max(1, (os.cpu_count() or 1) // local)
    try:
        threading_config.set_intra_op_parallelism_threads(intra)
        threading_config.set_inter_op_parallelism_threads(2)
    except RuntimeError:      # the TF runtime is already initialised: its pools stay as they are
        return None
    return intra, 2


def world_barrier() -> None:
    world().barrier()


def shared_path(path):
    """Rank 0's ``path`` on every rank (SHARD-14): where the ranks of a job save and restore together."""
    comm = world()
    return path if comm.size == 1 else comm.bcast(path, root=0)


def local_rank_size() -> int:
    """Ranks on this host (1 without a launcher)."""
    return getattr(world(), "local_size", 1)


def device_id() -> int:
    """No accelerator: the rank's index on its host."""
    comm = world()
    return comm.rank % max(1, getattr(comm, "local_size", 1))


def rank_config(config):
    """A table's config for this rank's store on the world's ranks (``backends.rank_config``, SHARD-14)."""
    return backends.rank_config(config, world())


def ordered(op, chain: str) -> None:
    """SHARD-12: ``op`` (it runs a collective) waits for the previous op of ``chain`` in its graph.
    Ops are built in the same order on every rank (the same script), and a later op can only depend on
    earlier ones, so the chain never makes a cycle.  Training ops and evaluation ops are separate chains,
    so running evaluation never pulls in a training step.  Nothing changes on one rank or eagerly (eager
    ops run in program order)."""
    if world().size == 1 or tf.executing_eagerly():
        return
    op = getattr(op, "op", op)
    chains = graph_state(op.graph).chains
    previous = chains.get(chain)
    if previous is not None and previous is not op:
        add_control_inputs(op, [previous])
        chains[(_BEFORE, op.name)] = previous
    chains[chain] = op


_BEFORE = "before"      # graph_state(graph).chains[(_BEFORE, op name)]: the op that op waits for in its chain


def ordered_before(op, anchor) -> None:
    """SHARD-12 for an op built after its place in a chain: ``op`` (it runs a collective) takes the place
    just before ``anchor`` (an op of a chain): it waits for what ``anchor`` waited for in the chain and
    ``anchor`` waits for it.  The graph modifier's merged store call of a table runs before the first
    lookup that reads it, so the merged calls of several tables run in the lookups' order on every rank
    (otherwise TF runs them in its own order per process).  Nothing changes on one rank or eagerly."""
    if world().size == 1 or tf.executing_eagerly():
        return
    op, anchor = getattr(op, "op", op), getattr(anchor, "op", anchor)
    chains = graph_state(anchor.graph).chains
    previous = chains.get((_BEFORE, anchor.name))
    if previous is not None:
        add_control_inputs(op, [previous])
        chains[(_BEFORE, op.name)] = previous
    add_control_inputs(anchor, [op])
    chains[(_BEFORE, anchor.name)] = op


def take_over(old, new, chain: str) -> bool:
    """SHARD-12 for an op built to replace ``old`` (TF-20: a batch's fused lookup grows by one table):
    if ``old`` is still the last op of ``chain``, ``new`` becomes it and True is returned (``new`` must
    wait for what ``old`` waited for; the caller copies ``old``'s control inputs).  False when another
    op was chained after ``old``: ``new`` cannot replace it without running out of order.  True on one
    rank or eagerly, where there is no chain."""
    if world().size == 1 or tf.executing_eagerly():
        return True
    old, new = getattr(old, "op", old), getattr(new, "op", new)
    chains = graph_state(new.graph).chains
    if chains.get(chain) is not old:
        return False
    chains[chain] = new
    if (_BEFORE, old.name) in chains:
        chains[(_BEFORE, new.name)] = chains[(_BEFORE, old.name)]
    return True


_POOL: list = []                  # the thread pool of each_table, made on first use
_POOL_LOCK = threading.Lock()


def each_table(calls: list) -> list:
    """Run the per-table store calls of one fused op (TF-19, TF-20) and return their results in order.
    On several ranks, one after the other in the given (table-name) order: a sharded table's
    collectives must run in one order on every rank (SHARD-12).  On one rank, side by side on a
    thread pool, as separate ops ran on TF's threads: the tables' stores are independent, each
    serialises its own calls (CON-8) and the fast kernels release the GIL in their loops.  Every call
    runs to its end; the first failure in the given order is raised."""
    if world().size > 1 or len(calls) < 2:
        return [call() for call in calls]
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(concurrent.futures.ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2)),
                                                               thread_name_prefix="mxrec_tables"))
    futures = [_POOL[0].submit(call) for call in calls[1:]]
    first = concurrent.futures.Future()          # the first call runs on the calling thread: one hand-off fewer
    try:
        first.set_result(calls[0]())
    except Exception as error:                   # noqa: BLE001 -- re-raised below, after the others finish
        first.set_exception(error)
    concurrent.futures.wait(futures)
    return [future.result() for future in [first] + futures]


def dense_reduction() -> str:
    value = os.environ.get(DENSE_REDUCE_VARIABLE, "rankorder").strip().lower() or "rankorder"
    if value not in DENSE_REDUCTIONS:
        raise ConfigError(f"{DENSE_REDUCE_VARIABLE}: must be one of {DENSE_REDUCTIONS}, got {value!r}")
    return value


def _reduce_sum(array: np.ndarray) -> np.ndarray:
    """SHARD-7 by default: gathered and summed in rank order; MXREC_REF_DENSE_REDUCE=allreduce: MPI's."""
    comm = world()
    if dense_reduction() == "allreduce":
        return comm.allreduce_array(array)
    return rank_order_sum(comm, array)


def allreduce(tensor, reduction: str = "sum", fusion=None, fusion_id=None, group=None, name=None):
    """mxRec's ``hccl_ops.allreduce(tensor, "sum")`` (also "max", "min", "prod")."""
    if reduction not in ("sum", "max", "min", "prod"):
        raise ValueError(f"allreduce: reduction: must be 'sum', 'max', 'min' or 'prod', got {reduction!r}")
    tensor = tf.convert_to_tensor(tensor)
    if world().size == 1:
        return tf.identity(tensor, name=name)

    def run(value):
        if reduction == "sum":
            return _reduce_sum(value).astype(value.dtype)
        parts = world().allgather_array(value)
        return getattr(np, {"max": "maximum", "min": "minimum", "prod": "multiply"}[reduction]).reduce(parts) \
            .astype(value.dtype)

    out = tf.numpy_function(run, [tensor], tensor.dtype, stateful=True, name=name or "mxrec_allreduce")
    out.set_shape(tensor.shape)
    ordered(out, "train")
    return out


def allgather(tensor, rank_size_=None, group=None, fusion=None, fusion_id=None, name=None):
    """Every rank's tensor, concatenated along axis 0 in rank order."""
    tensor = tf.convert_to_tensor(tensor)
    if world().size == 1:
        return tf.identity(tensor, name=name)
    out = tf.numpy_function(lambda v: np.concatenate(world().allgather(v), axis=0), [tensor], tensor.dtype,
                            stateful=True, name=name or "mxrec_allgather")
    out.set_shape(tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else None)
    ordered(out, "train")
    return out


def broadcast(tensor, root_rank: int = 0, fusion=2, fusion_id=0, group=None, name=None):
    """Rank ``root_rank``'s tensor on every rank (a list of tensors: each of them)."""
    if isinstance(tensor, (list, tuple)):
        return [broadcast(t, root_rank, name=None) for t in tensor]
    tensor = tf.convert_to_tensor(tensor)
    if world().size == 1:
        return tf.identity(tensor, name=name)
    out = tf.numpy_function(lambda v: np.asarray(world().bcast(v, root=root_rank), dtype=v.dtype), [tensor],
                            tensor.dtype, stateful=True, name=name or "mxrec_broadcast")
    out.set_shape(tensor.shape)
    ordered(out, "train")
    return out


def broadcast_global_variables(root_rank: int = 0, variables=None):
    """SHARD-14: an op that gives every rank ``root_rank``'s values of the global variables (the tables'
    one-row proxies excluded: their rows live in the stores), in one fused message.  Run it once after
    the variables are initialised; ``BroadcastGlobalVariablesHook`` does that for a MonitoredSession."""
    proxies = {v.ref() for v in tf.compat.v1.get_collection(ASCEND_GLOBAL_HASHTABLE_COLLECTION)}
    variables = [v for v in (tf.compat.v1.global_variables() if variables is None else variables)
                 if v.ref() not in proxies]
    if world().size == 1 or not variables:
        return tf.no_op(name="broadcast_global_variables")
    fused = _fuse([v.read_value() for v in variables])
    received = tf.numpy_function(lambda v: world().bcast(v, root=root_rank), [fused], fused.dtype, stateful=True,
                                 name="mxrec_broadcast_variables")
    ordered(received, "init")
    received.set_shape(fused.shape)
    return tf.group(*[v.assign(value) for v, value in zip(variables, _split(received, variables))],
                    name="broadcast_global_variables")


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Runs ``broadcast_global_variables`` once, after the session is created (and initialised)."""

    def __init__(self, root_rank: int = 0):
        self.root_rank = root_rank
        self._op = None

    def begin(self):
        self._op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self._op)


def _fuse(tensors):
    return tf.concat([tf.reshape(tf.cast(t, tf.float64), [-1]) for t in tensors], axis=0)


def _split(fused, like):
    sizes = [int(np.prod(v.shape.as_list())) for v in like]
    parts = tf.split(fused, sizes) if len(sizes) > 1 else [fused]
    return [tf.cast(tf.reshape(p, v.shape), v.dtype) for p, v in zip(parts, like)]


def reduce_dense_gradients(grads_and_vars, op: str = "average") -> list:
    """(gradient, variable) pairs with the dense gradients reduced over ranks in one fused buffer (SHARD-13):
    summed in rank order (SHARD-7) and divided by the rank count (``op="average"``) or not ("sum").  The
    tables' gradients (IndexedSlices of their proxy variables) pass through: their owners reduce them.
    ``DistributedOptimizer`` and the Keras layer's ``fit`` under ``mpirun`` (KERAS-17) share it."""
    pairs = list(grads_and_vars)
    if world().size == 1:
        return pairs
    proxies = {v.ref() for v in tf.compat.v1.get_collection(ASCEND_GLOBAL_HASHTABLE_COLLECTION)}
    dense = [i for i, (g, v) in enumerate(pairs)
             if g is not None and not (isinstance(v, tf.Variable) and v.ref() in proxies)
             and not _is_lookup_offset(v)]
    if not dense:
        return pairs
    grads = [tf.convert_to_tensor(pairs[i][0]) for i in dense]   # IndexedSlices of a dense variable: densified
    fused = tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) for g in grads], axis=0)
    scale = np.float32(1.0 / world().size) if op == "average" else np.float32(1.0)
    reduced = tf.numpy_function(lambda v: (_reduce_sum(v) * scale).astype(np.float32), [fused], tf.float32,
                                stateful=True, name="mxrec_dense_allreduce")
    reduced.set_shape(fused.shape)
    ordered(reduced, "train")
    sizes = [tf.size(g) for g in grads]
    parts = tf.split(reduced, sizes) if len(grads) > 1 else [reduced]
    for i, g, part in zip(dense, grads, parts):
        pairs[i] = (tf.reshape(tf.cast(part, g.dtype), tf.shape(g)), pairs[i][1])
    return pairs


class DistributedOptimizer:
    """SHARD-13: wraps a TF optimizer; the dense gradients of a step go through one fused buffer, summed
    over ranks in rank order (``MXREC_REF_DENSE_REDUCE=allreduce``: MPI_Allreduce) and divided by the rank
    count (``op="average"``, the default) or not (``op="sum"``).  The tables' gradients (IndexedSlices of
    their proxy variables) pass through untouched: their owners reduce them (SHARD-5)."""

    def __init__(self, optimizer, op: str = "average", name: str | None = None, **_ignored):
        if op not in ("average", "sum"):
            raise ValueError(f"DistributedOptimizer: op: must be 'average' or 'sum', got {op!r}")
        self._optimizer, self._op = optimizer, op

    def __getattr__(self, attribute):
        return getattr(self._optimizer, attribute)

    def compute_gradients(self, loss, var_list=None, **kwargs):
        pairs = self._optimizer.compute_gradients(loss, var_list=var_list, **kwargs)
        return self.reduce(pairs)

    def reduce(self, grads_and_vars):
        """(gradient, variable) pairs with the dense gradients reduced over ranks."""
        return reduce_dense_gradients(grads_and_vars, self._op)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def minimize(self, loss, global_step=None, var_list=None, name=None, **kwargs):
        pairs = self.compute_gradients(loss, var_list=var_list, **kwargs)
        return self.apply_gradients(pairs, global_step=global_step, name=name)


def _is_lookup_offset(var) -> bool:
    """The dynamic-expansion recipe pairs a gradient with a lookup's unique-keys tensor, not a variable."""
    return isinstance(var, tf.Tensor) and not isinstance(var, tf.Variable)
