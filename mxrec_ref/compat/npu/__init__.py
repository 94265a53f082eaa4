"""The NPU adapter's CPU face (spec/tf.md, TF-29): ``tf_adapter`` and ``npu_bridge`` (one package,
as the adapter installs it under both names) for ``mxrec-ref run``; ``npu_device`` (the TF2
adapter) lives beside it.  Each name is accepted, mapped to its CPU equivalent or logged once as
NPU-only; the audit in spec/tf.md lists them.  The Estimator names load the Estimator package
when first used."""
import importlib

from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig  # noqa: F401

from . import estimator, hccl  # noqa: F401
from .estimator import npu_ops  # noqa: F401
from .estimator.npu import npu_plugin, util  # noqa: F401
from .hooks import NPUBroadcastGlobalVariablesHook, npu_hooks_append  # noqa: F401
from .optimizers import (ExponentialUpdateLossScaleManager, FixedLossScaleManager,  # noqa: F401
                         NPUDistributedOptimizer, NPULossScaleOptimizer, npu_distributed_optimizer_wrapper)
from .session_config import npu_config_proto, npu_session_config_init  # noqa: F401

# loaded when first used: they import the Estimator package
_LAZY = {"NPURunConfig": "estimator.npu.npu_config", "DumpConfig": "estimator.npu.npu_config",
         "ProfilingConfig": "estimator.npu.npu_config", "NPUEstimator": "estimator.npu.npu_estimator",
         "npu_run_config_init": "run_config_init"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NPUEstimator", "NPURunConfig", "DumpConfig", "ProfilingConfig", "npu_hooks_append",
           "NPUBroadcastGlobalVariablesHook", "NPUDistributedOptimizer", "npu_distributed_optimizer_wrapper",
           "NPULossScaleOptimizer", "FixedLossScaleManager", "ExponentialUpdateLossScaleManager", "npu_ops", "util",
           "npu_plugin", "npu_config_proto", "npu_session_config_init", "npu_run_config_init", "RewriterConfig"]
