"""`mxrec-ref train`: a Wide&Deep click model trained through the TF layer.

The script is written the way mxRec scripts are (TF1 graph,
``FeatureSpec`` + insert function, ``tf.gradients`` on the tables'
variables, a hash optimizer for the sparse side and a TF optimizer for the
dense side, ``EvictHook``, ``MonitoredTrainingSession`` with checkpoints), so
it doubles as the end-to-end check that such scripts run unchanged.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from . import data as datasets
from .metrics import auc, log_loss

SPARSE_OPTIMIZERS = ("adagrad", "lazy_adam", "ftrl", "sgd")
STORAGE_MODES = ("hbm", "dynamic", "ddr", "ssd")


@dataclass
class TrainConfig:
    backend: str = "fast"
    storage: str = "dynamic"
    data: str = "synthetic"          # "synthetic" or a MovieLens folder
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
    checkpoint_dir: str | None = None
    save_checkpoint_steps: int = 200
    device_vocabulary_size: int = 50_000
    warm_start: str | None = None    # a checkpoint (or folder) to warm-start tables and dense variables from
    seed: int = 0
    progress: bool = True


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="mxrec-ref train")
    d = TrainConfig()
    parser.add_argument("--backend", default=d.backend, choices=["fast", "ref"])
    parser.add_argument("--storage", default=d.storage, choices=STORAGE_MODES,
                        help="hbm: fixed device table; dynamic: dynamic expansion; ddr/ssd: host/disk tiers")
    parser.add_argument("--data", default=d.data, help="'synthetic' (embedded default) or a MovieLens folder")
    parser.add_argument("--rows", type=int, default=d.rows, help="rows of the synthetic data set")
    parser.add_argument("--steps", type=int, default=d.steps)
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--dim", type=int, default=d.dim)
    parser.add_argument("--access-threshold", type=int, default=d.access_threshold)
    parser.add_argument("--eviction-threshold", type=int, default=d.eviction_threshold,
                        help="seconds of data time; -1 disables eviction")
    parser.add_argument("--evict-step-interval", type=int, default=d.evict_step_interval)
    parser.add_argument("--sparse-optimizer", default=d.sparse_optimizer, choices=SPARSE_OPTIMIZERS)
    parser.add_argument("--sparse-learning-rate", type=float, default=d.sparse_learning_rate)
    parser.add_argument("--dense-learning-rate", type=float, default=d.dense_learning_rate)
    parser.add_argument("--eval-every", type=int, default=d.eval_every)
    parser.add_argument("--checkpoint-dir", default=d.checkpoint_dir)
    parser.add_argument("--save-checkpoint-steps", type=int, default=d.save_checkpoint_steps)
    parser.add_argument("--device-vocabulary-size", type=int, default=d.device_vocabulary_size)
    parser.add_argument("--warm-start", default=d.warm_start,
                        help="warm-start every table and dense variable from this checkpoint or folder")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


def config_from_args(args) -> TrainConfig:
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__})


def load_data(config: TrainConfig):
    if config.data == "synthetic":
        return datasets.synthetic_criteo(config.rows, seed=config.seed)
    return datasets.movielens(config.data)


def _sparse_optimizer(config: TrainConfig):
    from .tf.optimizers import adagrad, ftrl, gradient_descent, lazy_adam   # local: TensorFlow loads for a run only

    lr = config.sparse_learning_rate
    return {"adagrad": lambda: adagrad.create_hash_optimizer(learning_rate=lr, initial_accumulator_value=0.1),
            "lazy_adam": lambda: lazy_adam.create_hash_optimizer(learning_rate=lr),
            "ftrl": lambda: ftrl.create_hash_optimizer(learning_rate=lr),
            "sgd": lambda: gradient_descent.create_hash_optimizer(learning_rate=lr)}[config.sparse_optimizer]()


def _storage(config: TrainConfig) -> dict:
    vocab = config.device_vocabulary_size
    return {"hbm": dict(device_vocabulary_size=vocab),
            "dynamic": dict(device_vocabulary_size=max(1, vocab // 16)),
            "ddr": dict(device_vocabulary_size=vocab, host_vocabulary_size=4 * vocab),
            "ssd": dict(device_vocabulary_size=vocab, host_vocabulary_size=max(1, vocab // 4),
                        ssd_vocabulary_size=16 * vocab, ssd_data_path=(tempfile.mkdtemp(prefix="mxrec-ssd-"),)),
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


def _input(tf, dataset, batch_size: int, insert, repeat: bool):
    features = {name: dataset.categorical[:, i] for i, name in enumerate(dataset.field_names)}
    features.update(dense=dataset.dense, label=dataset.labels, timestamp=dataset.timestamps)
    ds = tf.data.Dataset.from_tensor_slices(features)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=repeat)
    # mxRec's timestamp feature is one scalar per batch: the batch's latest event time
    ds = ds.map(lambda b: {**b, "timestamp": tf.reduce_max(b["timestamp"])})
    return ds.map(insert).prefetch(2)


def run(config: TrainConfig, echo=print) -> dict:
    import tensorflow as tf

    from . import tf as mx   # local: TensorFlow loads for a run only, not for --help

    data = load_data(config)
    train_data, test_data = data.split(0.85)
    if mx.is_initialized():
        mx.terminate_config_initializer()
    mx.init(backend=config.backend, use_dynamic_expansion=config.storage == "dynamic")
    try:
        with tf.Graph().as_default():
            return _train(tf, mx, config, data, train_data, test_data, echo)
    finally:
        mx.terminate_config_initializer()


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


def build_training_graph(tf, mx, config: TrainConfig, data) -> Graph:
    """Tables, feature specs, input pipeline, Wide&Deep model and both optimizers,
    in the default graph (mxRec's script structure)."""
    storage = _storage(config)
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
    all_specs = specs[0] + specs[1] + [mx.FeatureSpec("timestamp", index_key="timestamp", is_timestamp=True)]
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
        tf.compat.v1.train.AdamOptimizer(config.dense_learning_rate).minimize(loss, global_step=global_step,
                                                                              var_list=dense_vars))
    return Graph(tables, specs, all_specs, loss, train_op, global_step, evicting)


def _train(tf, mx, config, data, train_data, test_data, echo):
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
    checkpoint_dir = config.checkpoint_dir or tempfile.mkdtemp(prefix="mxrec-train-")
    echo(f"mxrec-ref train: Wide&Deep on {data.name} ({len(train_data.labels)} train / {len(test_data.labels)} test "
         f"rows, {len(data.field_names)} fields), backend={config.backend}, storage={config.storage}, "
         f"access_threshold={config.access_threshold}, eviction_threshold={config.eviction_threshold}, "
         f"sparse optimizer={config.sparse_optimizer}; checkpoints in {checkpoint_dir}")
    if data.best_scores is not None:
        echo(f"the hidden model's own test AUC is {auc(test_data.labels, test_data.best_scores):.4f}")

    def evaluate(session):
        session.run(eval_iterator.initializer)
        scores = []
        while True:
            try:
                scores.append(session.run(eval_prob))
            except tf.errors.OutOfRangeError:
                break
        scores = np.concatenate(scores)
        return auc(test_data.labels, scores), log_loss(test_data.labels, scores)

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
                progress.note(f"step {step}: train logloss {history[-1]['train_loss']:.4f}  test AUC "
                              f"{test_auc:.4f}  test logloss {test_loss:.4f}  "
                              f"{len(losses) * config.batch_size / train_seconds:,.0f} examples/s")
    elapsed = time.perf_counter() - started
    stats = {name: t.store.stats() for name, t in tables.items()}
    _print_stats(stats, echo)
    examples_per_second = len(losses) * config.batch_size / train_seconds
    echo(f"final: test AUC {history[-1]['test_auc']:.4f}, test logloss {history[-1]['test_loss']:.4f}, "
         f"{examples_per_second:,.0f} training examples/s ({len(losses)} steps; {elapsed:.1f}s in all with "
         f"evaluation)")
    return {"history": history, "stats": stats, "examples_per_second": examples_per_second,
            "checkpoint_dir": checkpoint_dir}


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
        else:
            print(line)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)


def _print_stats(stats: dict, echo) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = ("size", "capacity", "pending", "admitted", "evicted", "key_positions", "default_positions",
               "device_rows", "host_rows", "disk_rows", "hot_hit_positions")
    table = Table(title="per-table statistics")
    table.add_column("table")
    for name in columns:
        table.add_column(name, justify="right")
    for name, s in stats.items():
        table.add_row(name, *(f"{s[c]:,}" for c in columns))
    if echo is print:
        console = Console()
        console.width = max(console.width, 170)   # keep the numbers whole when not on a wide terminal
        console.print(table)
    else:
        for name, s in stats.items():
            echo(f"{name}: " + ", ".join(f"{c}={s[c]}" for c in columns))
