"""``npu_bridge.estimator.npu.npu_config``: ``NPURunConfig``, ``DumpConfig``, ``ProfilingConfig`` (TF-29).

``NPURunConfig`` is the Estimator's ``RunConfig`` (mxrec_ref.tf.estimator) plus the NPU adapter's
options: every one is accepted under its upstream name and default and kept as an attribute, and one
given a value other than its default is logged once as NPU-only (WARNING for the precision options,
whose NPU result differs from a float32 CPU run).  A name the adapter does not have is a TypeError.
"""
from __future__ import annotations

import logging

from .....tf.estimator import RunConfig
from ...notes import npu_only
from ...session_config import note_knobs

_PRECISION = "the NPU's reduced precision; this machine computes in float32"
_DEVICE = "an NPU device or graph-compiler setting"
_RANKS = "one process: rank 0 of 1"
# option -> (default, why it does not apply here, log level); upstream's order and defaults
NPU_OPTIONS = {
    "enable_data_pre_proc": (True, "the NPU's input pipeline offload: tf.data runs on the host", logging.INFO),
    "precision_mode": (None, _PRECISION, logging.WARNING),
    "enable_reduce_precision": (False, _PRECISION, logging.WARNING),
    "variable_format_optimize": (True, _DEVICE, logging.INFO),
    "mix_compile_mode": (False, _DEVICE, logging.INFO),
    "hcom_parallel": (False, _RANKS, logging.INFO),
    "graph_memory_max_size": (None, _DEVICE, logging.INFO),
    "variable_memory_max_size": (None, _DEVICE, logging.INFO),
    "auto_tune_mode": (None, _DEVICE, logging.INFO),
    "dump_config": (None, "the NPU's tensor dump", logging.INFO),
    "stream_max_parallel_num": (None, _DEVICE, logging.INFO),
    "is_tailing_optimization": (False, _DEVICE, logging.INFO),
    "horovod_mode": (False, _RANKS, logging.INFO),
    "graph_run_mode": (1, _DEVICE, logging.INFO),
    "op_debug_level": (0, _DEVICE, logging.INFO),
    "enable_scope_fusion_passes": (None, _DEVICE, logging.INFO),
    "enable_exception_dump": (0, "the NPU's tensor dump", logging.INFO),
    "op_select_implmode": (None, _PRECISION, logging.WARNING),
    "optypelist_for_implmode": (None, _PRECISION, logging.WARNING),
    "dynamic_input_config": (None, _DEVICE, logging.INFO),
    "aoe_mode": (None, _DEVICE, logging.INFO),
    "work_path": (None, _DEVICE, logging.INFO),
    "buffer_optimize": ("l2_optimize", _DEVICE, logging.INFO),
    "enable_small_channel": (0, _DEVICE, logging.INFO),
    "fusion_switch_file": (None, _DEVICE, logging.INFO),
    "enable_compress_weight": (False, _DEVICE, logging.INFO),
    "compress_weight_conf": (None, _DEVICE, logging.INFO),
    "op_compiler_cache_mode": (None, _DEVICE, logging.INFO),
    "op_compiler_cache_dir": (None, _DEVICE, logging.INFO),
    "debug_dir": (None, _DEVICE, logging.INFO),
    "hcom_multi_mode": (False, _RANKS, logging.INFO),
    "dynamic_input": (False, _DEVICE, logging.INFO),
    "dynamic_graph_execute_mode": ("dynamic_execute", _DEVICE, logging.INFO),
    "dynamic_inputs_shape_range": (None, _DEVICE, logging.INFO),
    "train_distribute": (None, _RANKS, logging.INFO),
    "eval_distribute": (None, _RANKS, logging.INFO),
    "local_rank_id": (None, _RANKS, logging.INFO),
    "local_device_list": (None, _RANKS, logging.INFO),
    "session_device_id": (None, "the NPU device of the session: this machine's CPU", logging.INFO),
    "distribute_config": (None, _RANKS, logging.INFO),
    "modify_mixlist": (None, _PRECISION, logging.WARNING),
    "op_precision_mode": (None, _PRECISION, logging.WARNING),
    "device_type": ("default_device_type", _DEVICE, logging.INFO),
    "soc_config": (None, _DEVICE, logging.INFO),
    "hccl_timeout": (None, _RANKS, logging.INFO),
    "op_wait_timeout": (None, _DEVICE, logging.INFO),
    "op_execute_timeout": (None, _DEVICE, logging.INFO),
    "HCCL_algorithm": (None, _RANKS, logging.INFO),
    "customize_dtypes": (None, _PRECISION, logging.WARNING),
    "op_debug_config": (None, _DEVICE, logging.INFO),
    "memory_config": (None, _DEVICE, logging.INFO),
    "experimental_config": (None, _DEVICE, logging.INFO),
    "topo_sorting_mode": (None, _DEVICE, logging.INFO),
    "aoe_config_file": (None, _DEVICE, logging.INFO),
    "insert_op_file": (None, _DEVICE, logging.INFO),
    "stream_sync_timeout": (-1, _DEVICE, logging.INFO),
    "event_sync_timeout": (-1, _DEVICE, logging.INFO),
    "external_weight": (False, _DEVICE, logging.INFO),
    "es_cluster_config": (None, _RANKS, logging.INFO),
    "deterministic": (0, "this machine's float32 CPU kernels", logging.INFO),
    "frozen_variable": (False, _DEVICE, logging.INFO),
    "variable_placement": ("Device", _DEVICE, logging.INFO),
    "jit_compile": ("auto", _DEVICE, logging.INFO),
    "precision_mode_v2": (None, _PRECISION, logging.WARNING),
    "ac_parallel_enable": (None, _DEVICE, logging.INFO),
    "quant_dumpable": (None, _DEVICE, logging.INFO),
    "input_fusion_size": (131072, _DEVICE, logging.INFO),
    "compile_dynamic_mode": (None, _DEVICE, logging.INFO),
    "graph_max_parallel_model_num": (1, _DEVICE, logging.INFO),
    "export_compile_stat": (1, _DEVICE, logging.INFO),
    "aicore_num": (None, _DEVICE, logging.INFO),
    "oo_constant_folding": (True, _DEVICE, logging.INFO),
    "input_batch_cpy": (False, _DEVICE, logging.INFO),
    "shape_generalization_mode": ("STRICT", _DEVICE, logging.INFO),
    "all_tensor_not_empty": (False, _DEVICE, logging.INFO),
    "auto_multistream_parallel_mode": (None, _DEVICE, logging.INFO),
    "oo_level": (None, _DEVICE, logging.INFO),
    "optimization_switch": (None, _DEVICE, logging.INFO),
}


class DumpConfig:
    """The NPU's tensor dump settings: kept, never used (no device tensors to dump)."""

    def __init__(self, enable_dump=False, dump_path=None, dump_step=None, dump_mode="output", enable_dump_debug=False,
                 dump_debug_mode="all", dump_data="tensor", dump_layer=None):
        self._enable_dump, self._dump_path, self._dump_step = enable_dump, dump_path, dump_step
        self._dump_mode, self._enable_dump_debug, self._dump_debug_mode = dump_mode, enable_dump_debug, dump_debug_mode
        self._dump_data, self._dump_layer = dump_data, dump_layer


class ProfilingConfig:
    """The NPU profiler's settings: kept, never used."""

    def __init__(self, enable_profiling=False, profiling_options=None):
        self._enable_profiling, self._profiling_options = enable_profiling, profiling_options


class NPURunConfig(RunConfig):
    def __init__(self, iterations_per_loop=1, profiling_config=None, model_dir=None, tf_random_seed=None,
                 save_summary_steps=0, save_checkpoints_steps=None, save_checkpoints_secs=None, session_config=None,
                 keep_checkpoint_max=5, keep_checkpoint_every_n_hours=10000, log_step_count_steps=100,
                 distribute=None, **npu_options):
        unknown = sorted(set(npu_options) - set(NPU_OPTIONS))
        if unknown:
            raise TypeError(f"NPURunConfig: {unknown[0]}: not a parameter of NPURunConfig")
        if isinstance(iterations_per_loop, bool) or not isinstance(iterations_per_loop, int) or iterations_per_loop < 1:
            raise ValueError(f"NPURunConfig: iterations_per_loop: must be an integer >= 1, got {iterations_per_loop!r}")
        if save_checkpoints_steps is None and save_checkpoints_secs is None:
            save_checkpoints_steps = 100          # the NPU adapter's default when neither is given
        super().__init__(model_dir=model_dir, tf_random_seed=tf_random_seed, save_summary_steps=save_summary_steps,
                         save_checkpoints_steps=save_checkpoints_steps, save_checkpoints_secs=save_checkpoints_secs,
                         session_config=session_config, keep_checkpoint_max=keep_checkpoint_max,
                         keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
                         log_step_count_steps=log_step_count_steps,
                         train_distribute=npu_options.get("train_distribute"),
                         eval_distribute=npu_options.get("eval_distribute"))
        self._iterations_per_loop = iterations_per_loop
        self._profiling_config = profiling_config
        self._distribute = distribute
        for name, (default, reason, level) in NPU_OPTIONS.items():
            value = npu_options.get(name, default)
            setattr(self, f"_{name}", value)
            if value is not default and value != default:
                npu_only(f"NPURunConfig({name}=...)", reason, level)
        if iterations_per_loop > 1:
            npu_only("NPURunConfig(iterations_per_loop=...)", "the NPU's device loop: the Estimator counts and "
                     "stops at the same steps, one session.run each")
        for name, value in (("profiling_config", profiling_config), ("distribute", distribute)):
            if value is not None:
                npu_only(f"NPURunConfig({name}=...)", _RANKS if name == "distribute" else _DEVICE)
        note_knobs(session_config, "NPURunConfig(session_config)")

    @property
    def iterations_per_loop(self):
        return self._iterations_per_loop
