"""The ``NpuOptimizer`` session-config knobs (TF-29).  Scripts write

    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")

TensorFlow 2.21's Grappler skips a custom optimizer that no library registered (a VLOG line, no
error), so such a config runs a CPU session unchanged; ``npu_config_proto`` and friends build that
config as the NPU adapter does and log its knobs once as NPU-only."""
from __future__ import annotations

import logging

import tensorflow as tf
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from .notes import npu_only

NPU_OPTIMIZER = "NpuOptimizer"
# knobs whose NPU result differs from a float32 CPU run
_NUMERIC_KNOBS = ("precision_mode", "precision_mode_v2", "enable_reduce_precision", "customize_dtypes",
                  "modify_mixlist", "op_precision_mode")


def npu_knobs(config_proto) -> dict:
    """The ``NpuOptimizer`` custom optimizer's parameters in a ConfigProto ({} when it has none)."""
    if config_proto is None:
        return {}
    for custom in config_proto.graph_options.rewrite_options.custom_optimizers:
        if custom.name == NPU_OPTIMIZER:
            return {key: _value(attr) for key, attr in custom.parameter_map.items()}
    return {}


def note_knobs(config_proto, where: str) -> None:
    """Log once each ``NpuOptimizer`` knob of ``config_proto`` as NPU-only."""
    for key in sorted(npu_knobs(config_proto)):
        level = logging.WARNING if key in _NUMERIC_KNOBS else logging.INFO
        npu_only(f"{where}: NpuOptimizer parameter_map[{key!r}]",
                 "an NPU graph-compiler setting; this machine computes in float32" if level == logging.WARNING
                 else "an NPU graph-compiler setting (TensorFlow skips the unregistered NpuOptimizer)", level)


def _value(attr):
    kind = attr.WhichOneof("value")
    if kind == "s":
        return attr.s.decode(errors="replace")
    return getattr(attr, kind) if kind else None


def npu_config_proto(config_proto=None):
    """The NPU adapter's session config: ``config_proto`` (or a new one) with an ``NpuOptimizer``
    custom optimizer and remapping off, as upstream builds it; runs unchanged on CPU."""
    config = tf.compat.v1.ConfigProto() if config_proto is None else config_proto
    if not any(c.name == NPU_OPTIMIZER for c in config.graph_options.rewrite_options.custom_optimizers):
        config.graph_options.rewrite_options.custom_optimizers.add().name = NPU_OPTIMIZER
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    note_knobs(config, "npu_config_proto")
    return config


def npu_session_config_init(session_config=None):
    """As ``npu_config_proto``, for ``tf.compat.v1.Session(config=...)``; also the
    ``allow_soft_placement`` the migration tool sets."""
    config = npu_config_proto(session_config)
    config.allow_soft_placement = True
    return config
