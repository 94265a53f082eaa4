"""``npu_bridge.hccl.hccl_ops``: collectives over the NPU ranks (TF-29).  One process is every rank,
so each collective returns its input: a sum, mean or max over one rank is the rank's own tensor."""
from __future__ import annotations

import tensorflow as tf

REDUCTIONS = ("sum", "prod", "max", "min")


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group="hccl_world_group"):
    if reduction not in REDUCTIONS:
        raise ValueError(f"hccl_ops.allreduce: reduction: must be one of {REDUCTIONS}, got {reduction!r}")
    return tf.identity(tensor)


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group="hccl_world_group"):
    """Upstream takes and returns a list of tensors."""
    return [tf.identity(t) for t in tensor]


def allgather(tensor, rank_size, group="hccl_world_group"):
    return tf.identity(tensor)


def reduce_scatter(tensor, reduction, rank_size, group="hccl_world_group"):
    if reduction not in REDUCTIONS:
        raise ValueError(f"hccl_ops.reduce_scatter: reduction: must be one of {REDUCTIONS}, got {reduction!r}")
    return tf.identity(tensor)
