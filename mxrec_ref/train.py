"""`mxrec-ref train`: a Wide&Deep click model trained through the TF layer.

The script is written the way mxRec scripts are (TF1 graph,
``FeatureSpec`` + insert function, ``tf.gradients`` on the tables'
variables, a hash optimizer for the sparse side and a TF optimizer for the
dense side, ``EvictHook``, ``MonitoredTrainingSession`` with checkpoints), so
it doubles as the end-to-end check that such scripts run unchanged.
"""
from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from . import data as datasets
from . import readers
from .backends import available_backends, unknown_backend_reason
from .distributed import world
from .errors import UsageError
from .metrics import auc, log_loss

SPARSE_OPTIMIZERS = ("adagrad", "lazy_adam", "ftrl", "sgd")
STORAGE_MODES = ("hbm", "dynamic", "ddr", "ssd")


@dataclass
class TrainConfig:
    backend: str = "fast"
    storage: str = "dynamic"
    data: str = "synthetic"          # "synthetic" or a file or folder readers.read takes (what plan --data reads)
    rows: int = 300_000
    steps: int = 400
    batch_size: int = 512
    dim: int = 16
    access_threshold: int | None = 2
    eviction_threshold: int | None = 600    # seconds of data time (a batch spans 8 s)
    evict_step_interval: int = 50
    sparse_optimizer: str = "adagrad"
    sparse_learning_rate: float = 0.05
    dense_learning_rate: float = 0.001
    eval_every: int = 100
    checkpoint_dir: str | None = None   # None: a temporary folder, removed when the run ends
    save_checkpoint_steps: int = 200
    device_vocabulary_size: int = 50_000
    warm_start: str | None = None    # a checkpoint (or folder) to warm-start tables and dense variables from
    ssd_data_path: str | None = None  # storage "ssd": the SSD tier's folder (None: temporary, removed at the end)
    seed: int = 0
    progress: bool = True
    logdir: str | None = None        # TensorBoard scalars: loss, AUC, each table's statistics (OBS-5)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--steps 0`` would train nothing and divide by zero)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The training job's options, on ``parser`` (the CLI's ``train`` subcommand) or a parser of their own."""
    parser = parser or argparse.ArgumentParser(prog="mxrec-ref train",
                                               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = TrainConfig()
    add = parser.add_argument
    add("--backend", default=d.backend, choices=["fast", "ref"],
        help="store backend: the Cython fast path or the pure-Python reference model")
    add("--storage", default=d.storage, choices=STORAGE_MODES,
        help="hbm: fixed device table; dynamic: dynamic expansion; ddr/ssd: host/disk tiers")
    add("--data", default=d.data, help="'synthetic' (generated, Criteo-shaped), or what plan --data reads: a "
                                       "MovieLens folder, a Criteo .txt/.tsv, a .csv or a .tfrecord, with labels")
    add("--rows", type=positive_int, default=d.rows, help="rows of the synthetic data set, or the first rows of "
                                                          "a --data file read (PLAN-11)")
    add("--steps", type=positive_int, default=d.steps, help="training steps (global step to reach)")
    add("--batch-size", type=positive_int, default=d.batch_size, help="examples per training step")
    add("--dim", type=positive_int, default=d.dim, help="embedding dimension of the deep table")
    add("--access-threshold", type=int, default=d.access_threshold,
        help="accesses before a key is admitted (gets a row)")
    add("--eviction-threshold", type=int, default=d.eviction_threshold,
        help="evict keys unseen for this many seconds of data time; -1 disables eviction")
    add("--evict-step-interval", type=positive_int, default=d.evict_step_interval,
        help="steps between eviction passes (EvictHook)")
    add("--sparse-optimizer", default=d.sparse_optimizer, choices=SPARSE_OPTIMIZERS,
        help="hash optimizer of the embedding tables")
    add("--sparse-learning-rate", type=float, default=d.sparse_learning_rate,
        help="learning rate of the sparse optimizer")
    add("--dense-learning-rate", type=float, default=d.dense_learning_rate,
        help="learning rate of the dense (Adam) optimizer")
    add("--eval-every", type=positive_int, default=d.eval_every, help="steps between test-set evaluations")
    add("--checkpoint-dir", default=d.checkpoint_dir,
        help="where checkpoints are kept (default: a temporary folder, removed at the end of the run)")
    add("--save-checkpoint-steps", type=positive_int, default=d.save_checkpoint_steps,
        help="steps between checkpoints")
    add("--device-vocabulary-size", type=positive_int, default=d.device_vocabulary_size,
        help="rows of the device tier (the dynamic mode starts at 1/16 of it and grows)")
    add("--ssd-data-path", default=d.ssd_data_path,
        help="--storage ssd: the SSD tier's folder (default: a temporary folder, removed at the end of the run)")
    add("--warm-start", default=d.warm_start,
        help="warm-start every table and dense variable from this checkpoint or folder")
    add("--seed", type=int, default=d.seed, help="seed of the synthetic data and the initializers")
    add("--logdir", default=d.logdir,
        help="write TensorBoard scalars here at every evaluation: train/loss, test/auc, test/logloss and each "
             "table's statistics mxrec/<table>/<statistic>")
    add("--no-progress", dest="progress", action="store_false", help="plain lines instead of a progress bar")
    return parser


def config_from_args(args) -> TrainConfig:
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__})


def load_data(config: TrainConfig):
    if config.data == "synthetic":
        return datasets.synthetic_criteo(config.rows, seed=config.seed)
    flag = "train: --data"
    return readers.training_dataset(readers.read(config.data, rows=config.rows, flag=flag), flag=flag)   # PLAN-10


def _sparse_optimizer(config: TrainConfig):
    """The hash optimizer; with dynamic expansion, mxRec's by-address variant where it has
    one (it requires them there; FTRL has none and is accepted with a warning)."""
    # local: TensorFlow loads for a run only
    from .tf.optimizers import (adagrad, adagrad_by_addr, ftrl, gradient_descent, gradient_descent_by_addr,
                                lazy_adam, lazy_adam_by_addr)

    lr = config.sparse_learning_rate
    if config.storage == "dynamic":
        choices = {"adagrad": lambda: adagrad_by_addr.create_hash_optimizer_by_address(
                       learning_rate=lr, initial_accumulator_value=0.1),
                   "lazy_adam": lambda: lazy_adam_by_addr.create_hash_optimizer_by_address(learning_rate=lr),
                   "sgd": lambda: gradient_descent_by_addr.create_hash_optimizer_by_addr(learning_rate=lr)}
    else:
        choices = {"adagrad": lambda: adagrad.create_hash_optimizer(learning_rate=lr, initial_accumulator_value=0.1),
                   "lazy_adam": lambda: lazy_adam.create_hash_optimizer(learning_rate=lr),
                   "sgd": lambda: gradient_descent.create_hash_optimizer(learning_rate=lr)}
    choices["ftrl"] = lambda: ftrl.create_hash_optimizer(learning_rate=lr)
    return choices[config.sparse_optimizer]()


def _storage(config: TrainConfig) -> dict:
    vocab = config.device_vocabulary_size
    if config.storage == "ssd":
        if config.ssd_data_path is None:
            raise ValueError("train: ssd_data_path: the ssd mode needs a folder (run() makes a temporary one)")
        return dict(device_vocabulary_size=vocab, host_vocabulary_size=max(1, vocab // 4),
                    ssd_vocabulary_size=16 * vocab, ssd_data_path=(config.ssd_data_path,))
    return {"hbm": dict(device_vocabulary_size=vocab),
            "dynamic": dict(device_vocabulary_size=max(1, vocab // 16)),
            "ddr": dict(device_vocabulary_size=vocab, host_vocabulary_size=4 * vocab),
            }[config.storage]


def _dense_layer(tf, x, units, name, activation=True):
    w = tf.compat.v1.get_variable(f"{name}/kernel", [x.shape[-1], units],
                                  initializer=tf.compat.v1.glorot_uniform_initializer(seed=len(name)))
    b = tf.compat.v1.get_variable(f"{name}/bias", [units], initializer=tf.zeros_initializer())
    y = tf.matmul(x, w) + b
    return tf.nn.relu(y) if activation else y


def build_model(tf, lookup, field_names, deep_dim: int, dense, n_dense: int):
    """Wide & Deep: wide = sum of 1-d embeddings + linear(dense); deep = MLP(embeddings, dense).

    ``lookup(table, field)`` returns the field's embeddings ``[batch, dim]``
    (``table`` is "wide" or "deep"), so the same model runs on dynamic tables
    (sparse_lookup) and, in the benchmark, on plain tf.Variable tables.
    """
    with tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
        logit_wide = tf.add_n([tf.reshape(lookup("wide", f), [-1]) for f in field_names])
        deep_in = [tf.reshape(lookup("deep", f), [-1, deep_dim]) for f in field_names]
        if n_dense:
            logit_wide += tf.reshape(_dense_layer(tf, dense, 1, "wide_dense", activation=False), [-1])
            deep_in.append(dense)
        hidden = _dense_layer(tf, tf.concat(deep_in, axis=1), 128, "deep_1")
        hidden = _dense_layer(tf, hidden, 64, "deep_2")
        return logit_wide + tf.reshape(_dense_layer(tf, hidden, 1, "deep_out", activation=False), [-1])


def sparse_lookup_fn(mx, tables, specs, batch, is_train: bool):
    """``lookup`` for build_model over mxRec tables and their FeatureSpecs."""
    by_field = {("wide", s.index_key): s for s in specs[0]} | {("deep", s.index_key): s for s in specs[1]}
    return lambda table, field: mx.sparse_lookup(tables[table], by_field[(table, field)], batch=batch,
                                                 is_train=is_train)


def batches(dataset, batch_size: int, repeat: bool, rank: int = 0, ranks: int = 1):
    """The data set's batches as dicts of numpy columns (the input pipeline's feed).

    ``repeat``: forever, each batch exactly ``batch_size`` rows, wrapping from the last
    row to the first (what ``Dataset.repeat().batch(drop_remainder=True)`` gives); else
    one pass, the last batch short.  On ``ranks`` ranks (repeat only) a step's global batch is
    ``ranks x batch_size`` rows and ``rank`` reads its slice of it, so the ranks' batches
    concatenated in rank order are one process's batch of ``ranks x batch_size`` (SHARD-9)."""
    columns = {name: np.ascontiguousarray(dataset.categorical[:, i]) for i, name in enumerate(dataset.field_names)}
    columns.update(dense=dataset.dense, label=dataset.labels, timestamp=dataset.timestamps)
    n = len(dataset.labels)
    if not repeat:
        for start in range(0, n, batch_size):
            yield {name: column[start:start + batch_size] for name, column in columns.items()}
        return
    start = 0
    while True:
        rows = (start + rank * batch_size + np.arange(batch_size)) % n
        yield {name: column[rows] for name, column in columns.items()}
        start = (start + ranks * batch_size) % n


def batch_signature(tf, dataset, batch_size: int | None) -> dict:
    """The ``tf.TensorSpec`` of each column of a batch from :func:`batches`."""
    return {**{name: tf.TensorSpec([batch_size], tf.int64) for name in dataset.field_names},
            "dense": tf.TensorSpec([batch_size, dataset.dense.shape[1]], tf.float32),
            "label": tf.TensorSpec([batch_size], tf.float32), "timestamp": tf.TensorSpec([batch_size], tf.int64)}


def _input(tf, dataset, batch_size: int, insert, repeat: bool):
    # Fed from a Python generator: the rows stay in this process instead of being embedded in
    # the GraphDef as constants (``from_tensor_slices``), which checkpoints would copy.
    # Training reads this rank's slice of each global batch; evaluation reads every row on every rank.
    comm = world()
    shard = (comm.rank, comm.size) if repeat else (0, 1)
    ds = tf.data.Dataset.from_generator(lambda: batches(dataset, batch_size, repeat, *shard),
                                        output_signature=batch_signature(tf, dataset, batch_size if repeat else None))
    # mxRec's timestamp feature is one scalar per batch: the batch's latest event time
    ds = ds.map(lambda b: {**b, "timestamp": tf.reduce_max(b["timestamp"])})
    return ds.map(insert).prefetch(2)


def run(config: TrainConfig, echo=print) -> dict:
    """Train and evaluate; scratch folders (checkpoints, SSD files) that the config does not
    name are temporary and removed when the run ends, whether it succeeds or fails."""
    import dataclasses

    import tensorflow as tf

    from . import tf as mx   # local: TensorFlow loads for a run only, not for --help

    for name in ("steps", "eval_every", "batch_size"):
        if getattr(config, name) < 1:
            raise UsageError(f"train: {name}: must be an integer >= 1, got {getattr(config, name)!r}")
    if config.backend not in available_backends():
        raise UsageError(f"train: backend: {unknown_backend_reason(config.backend)}")
    data = load_data(config)
    train_data, test_data = data.split(0.85)
    if mx.is_initialized():
        mx.terminate_config_initializer()
    named_checkpoint_dir = config.checkpoint_dir is not None
    comm = world()
    if comm.rank != 0:              # several ranks (mpirun): rank 0 reports
        echo = _quiet
        config = dataclasses.replace(config, progress=False)
    with contextlib.ExitStack() as scratch:
        def temporary(prefix: str) -> str:
            return scratch.enter_context(tempfile.TemporaryDirectory(prefix=prefix))

        if comm.size > 1:
            # every rank saves into rank 0's folder (the tables' save is collective, SHARD-10); the
            # barrier keeps rank 0 from removing it while another rank still reads it; after an error no
            # barrier: the failing rank ends the job (SHARD-21) and the others must not wait for it here
            scratch.push(lambda kind, error, tb: comm.barrier() if kind is None else None)
            shared = comm.bcast(temporary("mxrec-train-") if comm.rank == 0 and not named_checkpoint_dir else None)
            config = dataclasses.replace(config, checkpoint_dir=config.checkpoint_dir or shared)

        config = dataclasses.replace(
            config, checkpoint_dir=config.checkpoint_dir or temporary("mxrec-train-"),
            ssd_data_path=config.ssd_data_path or (temporary("mxrec-ssd-") if config.storage == "ssd" else None))
        mx.init(backend=config.backend, use_dynamic_expansion=config.storage == "dynamic")
        try:
            with tf.Graph().as_default():
                result = _train(tf, mx, config, data, train_data, test_data, echo, named_checkpoint_dir)
        finally:
            mx.terminate_config_initializer()
    return result


def _quiet(*args, **kwargs) -> None:
    return None


@dataclass
class Graph:
    """The training graph's handles."""
    tables: dict
    specs: tuple
    all_specs: list
    loss: object
    train_op: object
    global_step: object
    evicting: bool


def held_out_auc_and_log_loss(tf, session, prob, initializer, labels) -> tuple[float, float]:
    """AUC and log loss of ``prob`` over one pass of the test iterator that ``initializer`` restarts."""
    session.run(initializer)
    scores = []
    while True:
        try:
            scores.append(session.run(prob))
        except tf.errors.OutOfRangeError:
            break
    scores = np.concatenate(scores)
    return auc(labels, scores), log_loss(labels, scores)


def build_training_graph(tf, mx, config: TrainConfig, data, *, data_time: bool = True) -> Graph:
    """Tables, feature specs, input pipeline, Wide&Deep model and both optimizers,
    in the default graph (mxRec's script structure).  ``data_time``: the batches' timestamps
    drive the tables' clock (a timestamp FeatureSpec); False: the clock counts steps (EVI-1)."""
    # the loss is each rank's mean: gradients divided by the rank count add up to the global mean's (SHARD-5)
    storage = dict(_storage(config), all2all_gradients_op="sum_gradients_and_div_by_ranksize")
    tables = {
        "wide": mx.create_table(tf.int64, 1, "wide", tf.compat.v1.zeros_initializer(), **storage),
        "deep": mx.create_table(tf.int64, config.dim, "deep",
                                tf.compat.v1.truncated_normal_initializer(stddev=0.05, seed=config.seed), **storage),
    }
    evicting = config.eviction_threshold is not None and config.eviction_threshold >= 0
    admission = {}
    if config.access_threshold is not None:
        admission = dict(access_threshold=config.access_threshold,
                         eviction_threshold=config.eviction_threshold if evicting else None)
    specs = ([mx.FeatureSpec(f"wide_{f}", table_name="wide", index_key=f, **admission) for f in data.field_names],
             [mx.FeatureSpec(f"deep_{f}", table_name="deep", index_key=f, **admission) for f in data.field_names])
    all_specs = specs[0] + specs[1]
    if data_time:
        all_specs.append(mx.FeatureSpec("timestamp", index_key="timestamp", is_timestamp=True))
    sparse_optimizer = _sparse_optimizer(config)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    batch = tf.compat.v1.data.make_one_shot_iterator(
        _input(tf, data, config.batch_size, mx.get_asc_insert_func(tgt_key_specs=all_specs), True)).get_next()
    logit = build_model(tf, sparse_lookup_fn(mx, tables, specs, batch, True), data.field_names, config.dim,
                        batch["dense"], data.dense.shape[1])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"], logits=logit))
    dense_vars, sparse_vars = mx.get_dense_and_sparse_variable()
    sparse_grads = tf.gradients(loss, sparse_vars)
    train_op = tf.group(
        sparse_optimizer.apply_gradients(zip(sparse_grads, sparse_vars)),
        mx.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer(config.dense_learning_rate)).minimize(
            loss, global_step=global_step, var_list=dense_vars))
    return Graph(tables, specs, all_specs, loss, train_op, global_step, evicting)


def _train(tf, mx, config, data, train_data, test_data, echo, named_checkpoint_dir: bool):
    from .tf.stats_scalars import stat_scalars   # local, as mx: TensorFlow loads for a run only

    graph = build_training_graph(tf, mx, config, train_data)
    tables, specs, loss, train_op, global_step = graph.tables, graph.specs, graph.loss, graph.train_op, graph.global_step
    evicting = graph.evicting
    eval_iterator = tf.compat.v1.data.make_initializable_iterator(
        _input(tf, test_data, 4096, mx.get_asc_insert_func(tgt_key_specs=graph.all_specs, is_training=False), False))
    eval_batch = eval_iterator.get_next()
    eval_prob = tf.sigmoid(build_model(tf, sparse_lookup_fn(mx, tables, specs, eval_batch, False), data.field_names,
                                       config.dim, eval_batch["dense"], data.dense.shape[1]))

    evict_hook = mx.EvictHook(evict_enable=evicting, evict_step_interval=config.evict_step_interval)
    hooks = [evict_hook]
    if config.warm_start:
        hooks.append(mx.WarmStartHook(mx.WarmStartSettings(config.warm_start)))
    checkpoint_dir = config.checkpoint_dir
    where = checkpoint_dir if named_checkpoint_dir else "a temporary folder (--checkpoint-dir keeps them)"
    echo(f"mxrec-ref train: Wide&Deep on {data.name} ({len(train_data.labels)} train / {len(test_data.labels)} test "
         f"rows, {len(data.field_names)} fields), backend={config.backend}, storage={config.storage}, "
         f"access_threshold={config.access_threshold}, eviction_threshold={config.eviction_threshold}, "
         f"sparse optimizer={config.sparse_optimizer}; checkpoints in {where}")
    if data.best_scores is not None:
        echo(f"the hidden model's own test AUC is {auc(test_data.labels, test_data.best_scores):.4f}")

    def evaluate(session):
        return held_out_auc_and_log_loss(tf, session, eval_prob, eval_iterator.initializer, test_data.labels)

    scalar_log = _scalar_log(config)
    history, losses = [], []
    train_seconds = 0.0          # training steps only: evaluation and start-up excluded
    started = time.perf_counter()
    with _progress(config) as progress, tf.compat.v1.train.MonitoredTrainingSession(
            checkpoint_dir=checkpoint_dir, save_checkpoint_steps=config.save_checkpoint_steps,
            save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None,
            hooks=hooks) as session:
        step = session.run(global_step)
        while step < config.steps:
            tick = time.perf_counter()
            batch_loss, _ = session.run([loss, train_op])
            train_seconds += time.perf_counter() - tick
            losses.append(batch_loss)
            step += 1
            progress.advance(step, batch_loss)
            if step % config.eval_every == 0 or step == config.steps:
                test_auc, test_loss = evaluate(session)
                history.append({"step": step, "train_loss": float(np.mean(losses[-config.eval_every:])),
                                "test_auc": test_auc, "test_loss": test_loss})
                if scalar_log is not None:
                    scalar_log.write(step, [("train/loss", history[-1]["train_loss"]), ("test/auc", test_auc),
                                            ("test/logloss", test_loss)] + stat_scalars(list(tables.values())))
                progress.note(f"step {step}: train logloss {history[-1]['train_loss']:.4f}  test AUC "
                              f"{test_auc:.4f}  test logloss {test_loss:.4f}  "
                              f"{len(losses) * config.batch_size / train_seconds:,.0f} examples/s")
        if not history:            # resumed at or past --steps: nothing trained; say how good the model is
            test_auc, test_loss = evaluate(session)
            history.append({"step": step, "train_loss": float("nan"), "test_auc": test_auc, "test_loss": test_loss})
    if scalar_log is not None:
        scalar_log.close()
    elapsed = time.perf_counter() - started
    stats = {name: t.store.stats() for name, t in tables.items()}
    _print_stats(stats, echo)
    examples_per_second = len(losses) * config.batch_size / train_seconds if train_seconds > 0 else 0.0
    echo(f"final: test AUC {history[-1]['test_auc']:.4f}, test logloss {history[-1]['test_loss']:.4f}, "
         f"{examples_per_second:,.0f} training examples/s ({len(losses)} steps; {elapsed:.1f}s in all with "
         f"evaluation)")
    return {"history": history, "stats": stats, "examples_per_second": examples_per_second,
            "checkpoint_dir": checkpoint_dir if named_checkpoint_dir else None}


def _scalar_log(config: TrainConfig):
    """--logdir's writer (OBS-5), on rank 0 only (every rank's tables report their own shard: rank 0's)."""
    if config.logdir is None or world().rank != 0:
        return None
    from .tf.scalar_log import ScalarLog      # local: TensorFlow loads for a run only

    return ScalarLog(config.logdir)


class _progress:
    """A rich progress bar (or plain lines when disabled or not a terminal)."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self._bar = None

    def __enter__(self):
        if self.config.progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("loss {task.fields[loss]:.4f}"), TimeRemainingColumn())
            self._bar.__enter__()
            self._task = self._bar.add_task("train", total=self.config.steps, loss=float("nan"))
        return self

    def advance(self, step: int, loss: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=step, loss=float(loss))

    def note(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, soft_wrap=True)
        elif world().rank == 0:       # several ranks: rank 0 reports
            print(line)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)


def _print_stats(stats: dict, echo) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = ("size", "capacity", "pending", "admitted", "evicted", "key_positions", "default_positions",
               "device_rows", "host_rows", "disk_rows", "hot_hit_positions")
    # one row per statistic and one column per table: as narrow as the table names and numbers,
    # so it fits an 80-column terminal however many statistics there are
    table = Table(title="per-table statistics")
    table.add_column("statistic")
    for name in stats:
        table.add_column(name, justify="right")
    for column in columns:
        table.add_row(column, *(f"{s[column]:,}" for s in stats.values()))
    if echo is print:
        Console().print(table)
    else:
        for name, s in stats.items():
            echo(f"{name}: " + ", ".join(f"{c}={s[c]}" for c in columns))
