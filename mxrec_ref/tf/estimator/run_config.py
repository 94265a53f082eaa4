"""``RunConfig``: tf.estimator's run configuration, with its signature and defaults (EST-2).

One process is the whole cluster here (rank 0 of 1 is the chief); the distribution arguments are
accepted and recorded, as TF records them, and never change what runs.
"""
from __future__ import annotations

import copy

_USE_DEFAULT = object()
DEFAULT_CHECKPOINT_SECS = 600      # TF's default when neither steps nor seconds are given


class RunConfig:
    def __init__(self, model_dir=None, tf_random_seed=None, save_summary_steps=100,
                 save_checkpoints_steps=_USE_DEFAULT, save_checkpoints_secs=_USE_DEFAULT, session_config=None,
                 keep_checkpoint_max=5, keep_checkpoint_every_n_hours=10000, log_step_count_steps=100,
                 train_distribute=None, device_fn=None, protocol=None, eval_distribute=None,
                 experimental_distribute=None, experimental_max_worker_delay_secs=None,
                 session_creation_timeout_secs=7200, checkpoint_save_graph_def=True):
        steps = None if save_checkpoints_steps is _USE_DEFAULT else save_checkpoints_steps
        secs = None if save_checkpoints_secs is _USE_DEFAULT else save_checkpoints_secs
        if steps is not None and secs is not None:
            raise ValueError("RunConfig: save_checkpoints_steps, save_checkpoints_secs: give at most one of them")
        if steps is None and secs is None and save_checkpoints_steps is _USE_DEFAULT \
                and save_checkpoints_secs is _USE_DEFAULT:
            secs = DEFAULT_CHECKPOINT_SECS
        for name, value in (("save_checkpoints_steps", steps), ("save_checkpoints_secs", secs),
                            ("save_summary_steps", save_summary_steps), ("log_step_count_steps", log_step_count_steps),
                            ("keep_checkpoint_max", keep_checkpoint_max), ("tf_random_seed", tf_random_seed)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"RunConfig: {name}: must be None or a non-negative integer, got {value!r}")
        self._model_dir = None if model_dir is None else str(model_dir)
        self._tf_random_seed = tf_random_seed
        self._save_summary_steps = save_summary_steps
        self._save_checkpoints_steps = steps
        self._save_checkpoints_secs = secs
        self._session_config = session_config
        self._keep_checkpoint_max = keep_checkpoint_max
        self._keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._log_step_count_steps = log_step_count_steps
        self._train_distribute = train_distribute
        self._eval_distribute = eval_distribute
        self._device_fn = device_fn
        self._protocol = protocol
        self._experimental_distribute = experimental_distribute
        self._experimental_max_worker_delay_secs = experimental_max_worker_delay_secs
        self._session_creation_timeout_secs = session_creation_timeout_secs
        self._checkpoint_save_graph_def = checkpoint_save_graph_def

    # the cluster of one process: it is the chief (TF's properties, for scripts that read them)
    cluster_spec = None
    master = ""
    evaluation_master = ""
    is_chief = True
    num_ps_replicas = 0
    num_worker_replicas = 1
    task_id = 0
    task_type = "worker"
    global_id_in_cluster = 0
    service = None

    model_dir = property(lambda self: self._model_dir)
    tf_random_seed = property(lambda self: self._tf_random_seed)
    save_summary_steps = property(lambda self: self._save_summary_steps)
    save_checkpoints_steps = property(lambda self: self._save_checkpoints_steps)
    save_checkpoints_secs = property(lambda self: self._save_checkpoints_secs)
    session_config = property(lambda self: self._session_config)
    keep_checkpoint_max = property(lambda self: self._keep_checkpoint_max)
    keep_checkpoint_every_n_hours = property(lambda self: self._keep_checkpoint_every_n_hours)
    log_step_count_steps = property(lambda self: self._log_step_count_steps)
    train_distribute = property(lambda self: self._train_distribute)
    eval_distribute = property(lambda self: self._eval_distribute)
    device_fn = property(lambda self: self._device_fn)
    protocol = property(lambda self: self._protocol)
    experimental_max_worker_delay_secs = property(lambda self: self._experimental_max_worker_delay_secs)
    session_creation_timeout_secs = property(lambda self: self._session_creation_timeout_secs)
    checkpoint_save_graph_def = property(lambda self: self._checkpoint_save_graph_def)

    _REPLACEABLE = ("model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
                    "save_checkpoints_secs", "session_config", "keep_checkpoint_max",
                    "keep_checkpoint_every_n_hours", "log_step_count_steps", "train_distribute", "device_fn",
                    "protocol", "eval_distribute", "experimental_distribute", "experimental_max_worker_delay_secs",
                    "session_creation_timeout_secs", "checkpoint_save_graph_def")

    def replace(self, **kwargs) -> "RunConfig":
        """A copy with ``kwargs`` changed (TF's ``replace``): only RunConfig's own arguments."""
        unknown = sorted(set(kwargs) - set(self._REPLACEABLE))
        if unknown:
            raise ValueError(f"RunConfig.replace: {unknown[0]}: not a RunConfig property")
        if "save_checkpoints_steps" in kwargs and kwargs["save_checkpoints_steps"] is not None \
                and "save_checkpoints_secs" not in kwargs:
            kwargs["save_checkpoints_secs"] = None
        if "save_checkpoints_secs" in kwargs and kwargs["save_checkpoints_secs"] is not None \
                and "save_checkpoints_steps" not in kwargs:
            kwargs["save_checkpoints_steps"] = None
        if kwargs.get("save_checkpoints_steps") is not None and kwargs.get("save_checkpoints_secs") is not None:
            raise ValueError("RunConfig: save_checkpoints_steps, save_checkpoints_secs: give at most one of them")
        new = copy.copy(self)
        for key, value in kwargs.items():
            setattr(new, f"_{key}", str(value) if key == "model_dir" and value is not None else value)
        return new
