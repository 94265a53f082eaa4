"""``npu_bridge.estimator.npu.npu_estimator.NPUEstimator``: the Estimator (mxrec_ref.tf.estimator)
under the NPU adapter's name and signature, configured by an ``NPURunConfig`` (TF-29)."""
from __future__ import annotations

from .....tf.estimator import Estimator
from ...notes import npu_only
from .npu_config import NPURunConfig


class NPUEstimator(Estimator):
    def __init__(self, model_fn=None, model_dir=None, config=None, params=None, job_start_file="",
                 warm_start_from=None):
        if config is None:
            config = NPURunConfig(model_dir=model_dir)
        if not isinstance(config, NPURunConfig):
            raise ValueError(f"NPUEstimator: config: must be an NPURunConfig, got {type(config).__name__}")
        if job_start_file:
            npu_only("NPUEstimator(job_start_file=...)", "the NPU job's start-file handshake")
        super().__init__(model_fn=model_fn, model_dir=model_dir, config=config, params=params,
                         warm_start_from=warm_start_from)
