"""Model quality as evidence (issue 34): AUC parity with static tables, and the admission/eviction curve.

One Wide&Deep model (mxrec_ref/train.py's ``build_model``: wide = sum of 1-d rows, deep = MLP 128-64 over
the rows) is trained one pass over the training rows, in time order, batch by batch, twice:

- **static**: plain ``tf.Variable`` tables holding every training key (``tf.nn.embedding_lookup``, TF's
  sparse Adagrad), each key's first row drawn by the store's own initializer (``initial_rows``, INIT-1),
  keys unseen in training read a zero row (what a dynamic table returns for them, ADM-5);
- **dynamic**: the training job's graph (``train.build_training_graph``: mxRec tables, FeatureSpecs,
  hash Adagrad, ``EvictHook``) on a store backend and storage mode,

with the same dense initial values (graph seed) and the same batches, so a gap is the backend's.  The
curve trains the dynamic model under ``access_threshold`` x eviction (off; keys unseen for a quarter of
the run's steps; keys unseen for a quarter of its data-time span) and puts the planner's replay
(mxrec_ref/plan, the library behind ``mxrec-ref plan``) of each setting beside the measured rows.

Run: ``python bench/quality.py [--profile quick|full] [--output-dir bench]`` (MXREC_QUALITY_PROFILE picks the
profile when no flag does); ``make bench`` runs the quick profile through bench/test_quality_bench.py.
Under ``mpirun -np 2`` ``--ranks-run`` trains the dynamic model sharded and prints its AUCs (rank 0).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mxrec_ref import data as datasets
from mxrec_ref import train
from mxrec_ref.config import TableConfig
from mxrec_ref.initializers import initial_rows



def shared_data() -> Path:
    """The shared data folder: ../shared/data beside the checkout (or beside its parent, for a worktree)."""
    repo = Path(__file__).resolve().parents[1]
    candidates = [repo.parent / "shared" / "data", repo.parent.parent / "shared" / "data"]
    return next((c for c in candidates if c.is_dir()), candidates[0])


MOVIELENS = shared_data() / "movielens_latest_small"
THRESHOLDS = (1, 2, 3, 5, 10, 15)
EVICTIONS = ("off", "step", "time")
EVICTION_FRACTION = 4          # evict keys unseen for 1/4 of the run (in steps, or in data time)
EVICT_EVERY = 10               # steps between eviction passes (EvictHook)
TEST_FRACTION = 0.15           # the last 15 % of the rows in time order are the test set
DIM = 8


@dataclass(frozen=True)
class Profile:
    synthetic_rows: int
    seeds: tuple[int, ...]
    parity_modes: tuple[str, ...]          # storage modes of the parity table
    curve_data: tuple[str, ...]
    curve_evictions: tuple[str, ...]


PROFILES = {
    # quick: `make bench`; a few minutes on an idle 2-core machine
    "quick": Profile(synthetic_rows=60_000, seeds=(0, 1, 2), parity_modes=("hbm",),
                     curve_data=("movielens", "synthetic"), curve_evictions=("off", "time")),
    "full": Profile(synthetic_rows=200_000, seeds=(0, 1, 2), parity_modes=("hbm", "ddr", "ssd"),
                    curve_data=("movielens", "synthetic"), curve_evictions=EVICTIONS),
}


def profile_name() -> str:
    """MXREC_QUALITY_PROFILE (quick or full); quick when unset, whatever MXREC_BENCH_PROFILE says."""
    name = os.environ.get("MXREC_QUALITY_PROFILE", "quick")
    if name not in PROFILES:
        raise ValueError(f"quality: MXREC_QUALITY_PROFILE: {name!r} is not a profile ({', '.join(sorted(PROFILES))})")
    return name


# ------------------------------------------------------------------ data
def with_cross(dataset: datasets.Dataset, first: int, second: int, name: str) -> datasets.Dataset:
    """``dataset`` plus a crossed field (each pair of ids of two fields is one id): a vocabulary with a tail."""
    mask = (1 << datasets.FIELD_SHIFT) - 1
    a, b = dataset.categorical[:, first] & mask, dataset.categorical[:, second] & mask
    field = dataset.categorical.shape[1]
    crossed = (np.int64(field) << datasets.FIELD_SHIFT) | (a * (int(b.max()) + 1) + b)
    return dataclasses.replace(dataset, categorical=np.column_stack([dataset.categorical, crossed]),
                               field_names=(*dataset.field_names, name))


def _rows(dataset: datasets.Dataset, which) -> datasets.Dataset:
    """The rows ``which`` (a boolean mask or a slice) of ``dataset``."""
    return dataclasses.replace(dataset, categorical=dataset.categorical[which], dense=dataset.dense[which],
                               labels=dataset.labels[which], timestamps=dataset.timestamps[which], best_scores=None)


def split_by_user_time(dataset: datasets.Dataset, test_fraction: float) -> tuple:
    """Each user's latest ``test_fraction`` of ratings (in time order) is held out: a forward split in
    time per user, so that the test users are known ones (a global time cut leaves mostly new users)."""
    users = dataset.categorical[:, 0]
    order = np.lexsort((np.arange(len(users)), users))          # by user, then time (rows are time-sorted)
    _, first, counts = np.unique(users[order], return_index=True, return_counts=True)
    rank = np.arange(len(users)) - np.repeat(first, counts)      # position within the user's history
    held = rank >= np.repeat(np.ceil(counts * (1 - test_fraction)), counts)
    test = np.zeros(len(users), bool)
    test[order[held]] = True
    return _rows(dataset, ~test), _rows(dataset, test)


def criteo_sample(path: Path) -> datasets.Dataset:
    """Criteo Kaggle rows (label, I1..I13, C1..C26, tab-separated) in file order; a missing id is id 0 of its
    field (a value of its own), a dense value log1p(max(x, 0))."""
    labels, dense, categorical = [], [], []
    for line in path.read_text().splitlines():
        cells = line.split("\t")
        labels.append(float(cells[0]))
        dense.append([np.log1p(max(float(c), 0.0)) if c else 0.0 for c in cells[1:14]])
        categorical.append([(field << datasets.FIELD_SHIFT) | (int(c, 16) if c else 0)
                            for field, c in enumerate(cells[14:40])])
    n = len(labels)
    return datasets.Dataset("criteo-sample", np.array(categorical, np.int64), np.array(dense, np.float32),
                            np.array(labels, np.float32), np.arange(n, dtype=np.int64),
                            tuple(f"C{i + 1}" for i in range(26)))


def load(name: str, profile: Profile) -> tuple[datasets.Dataset, datasets.Dataset]:
    """(train, test), split by time: "movielens" (rating >= 4 is a click, user x genre crossed) or
    "synthetic" (the project's Criteo-shaped log)."""
    if name == "movielens":
        return split_by_user_time(with_cross(datasets.movielens(MOVIELENS), 0, 2, "user_x_genre"), TEST_FRACTION)
    elif name == "synthetic":
        data = datasets.synthetic_criteo(profile.synthetic_rows, seed=0)
    elif name == "criteo":         # the 900 Kaggle rows in shared/data: too few for a stable AUC (README)
        data = criteo_sample(shared_data() / "criteo_kaggle_sample" / "dac_train_head900.txt")
    elif name == "tiny":           # the mutant test's data: seconds, not minutes
        data = datasets.synthetic_criteo(4_000, scale=1 / 4000, seed=0)
    else:
        raise ValueError(f"quality: data: unknown data set {name!r} (movielens, synthetic, criteo, tiny)")
    return data.split(1 - TEST_FRACTION)


# ------------------------------------------------------------------ one training run
@dataclass(frozen=True)
class Run:
    """One model trained and evaluated."""
    data: str
    tables: str                    # "static" or "dynamic"
    storage: str = "hbm"
    backend: str = "fast"
    access_threshold: int | None = None
    eviction: str = "off"
    seed: int = 0


@dataclass(frozen=True)
class Recipe:
    """How a data set is trained (one pass, in time order); tuned on the static model only."""
    batch_size: int
    sparse_learning_rate: float
    dense_learning_rate: float


RECIPES = {"movielens": Recipe(128, 0.2, 0.003), "synthetic": Recipe(512, 0.05, 0.001),
           "criteo": Recipe(32, 0.05, 0.001), "tiny": Recipe(256, 0.1, 0.003)}


def trained_rows(train_data, batch_size: int):
    """The rows one pass of whole batches reads (the last partial batch is not trained)."""
    return _rows(train_data, slice(0, len(train_data.labels) // batch_size * batch_size))


def train_config(run: Run, train_data, batch_size: int, vocabulary: int) -> train.TrainConfig:
    steps = len(train_data.labels) // batch_size
    evicting = run.eviction != "off"
    if run.eviction == "time":
        span = int(train_data.timestamps[-1] - train_data.timestamps[0])
        eviction_threshold = max(1, span // EVICTION_FRACTION)
    else:
        eviction_threshold = max(1, steps // EVICTION_FRACTION) if evicting else -1
    # hbm: one device table holding every key; ddr/ssd: the device tier holds a batch's keys (TIER-3), the rest
    # lives in host memory (and on disk)
    device = vocabulary if run.storage == "hbm" else batch_size * train_data.categorical.shape[1]
    access = run.access_threshold if (run.access_threshold or 0) > 1 or evicting else None
    return train.TrainConfig(backend=run.backend, storage=run.storage, steps=steps, batch_size=batch_size, dim=DIM,
                             access_threshold=access, eviction_threshold=eviction_threshold,
                             evict_step_interval=EVICT_EVERY, device_vocabulary_size=device, seed=run.seed,
                             sparse_learning_rate=RECIPES[run.data].sparse_learning_rate,
                             dense_learning_rate=RECIPES[run.data].dense_learning_rate,
                             progress=False)


def train_static(run: Run, train_data, test_data, batch_size: int) -> dict:
    """The model on tf.Variable tables (every training key a row, initial rows from the store's initializer)."""
    import tensorflow as tf

    vocabulary = np.unique(train_data.categorical)
    config = train_config(run, train_data, batch_size, len(vocabulary))

    def ids(dataset):
        position = np.minimum(np.searchsorted(vocabulary, dataset.categorical), len(vocabulary) - 1)
        known = vocabulary[position] == dataset.categorical
        return dataclasses.replace(dataset, categorical=np.where(known, position, len(vocabulary)).astype(np.int64))

    deep = TableConfig("deep", dim=DIM, initializer=_deep_initializer(config))
    first_rows = np.vstack([initial_rows(deep, vocabulary), np.zeros((1, DIM), np.float32)])   # + the unseen row
    static_train, static_test = ids(train_data), ids(test_data)
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(run.seed)
        tables = {"wide": tf.compat.v1.get_variable("wide", [len(vocabulary) + 1, 1],
                                                    initializer=tf.zeros_initializer()),
                  "deep": tf.compat.v1.get_variable("deep", initializer=tf.constant(first_rows))}

        def feed(dataset, size, repeat):
            return tf.compat.v1.data.make_initializable_iterator(tf.data.Dataset.from_generator(
                lambda: train.batches(dataset, size, repeat),
                output_signature=train.batch_signature(tf, dataset, size if repeat else None)).prefetch(2))

        def model(batch):
            return train.build_model(tf, lambda table, field: tf.nn.embedding_lookup(tables[table], batch[field]),
                                     train_data.field_names, DIM, batch["dense"], train_data.dense.shape[1])

        train_iterator, test_iterator = feed(static_train, batch_size, True), feed(static_test, 4096, False)
        batch = train_iterator.get_next()
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"], logits=model(batch)))
        sparse = list(tables.values())
        dense = [v for v in tf.compat.v1.trainable_variables() if all(v is not t for t in sparse)]
        train_op = tf.group(
            tf.compat.v1.train.AdagradOptimizer(config.sparse_learning_rate, 0.1).minimize(loss, var_list=sparse),
            tf.compat.v1.train.AdamOptimizer(config.dense_learning_rate).minimize(loss, var_list=dense))
        prob = tf.sigmoid(model(test_iterator.get_next()))
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(), train_iterator.initializer])
            losses = [session.run([train_op, loss])[1] for _ in range(config.steps)]
            test_auc, test_loss = train.held_out_auc_and_log_loss(tf, session, prob, test_iterator.initializer,
                                                                  static_test.labels)
    return {"auc": test_auc, "log_loss": test_loss, "rows": len(vocabulary), "peak_rows": len(vocabulary),
            "train_losses": losses}


def _deep_initializer(config: train.TrainConfig):
    """The deep table's initializer as the TF layer reads it (train.build_training_graph's)."""
    import tensorflow as tf

    from mxrec_ref.tf.table import initializer_from_tf

    return initializer_from_tf(tf.compat.v1.truncated_normal_initializer(stddev=0.05, seed=config.seed), "deep")


def train_dynamic(run: Run, train_data, test_data, batch_size: int) -> dict:
    """The training job's graph (train.build_training_graph) on the store; rows held at the end and at the
    peak (after a step's lookups, before its eviction) are the deep table's (the wide one holds the same keys)."""
    import tensorflow as tf

    import mxrec_ref.tf as mx

    from mxrec_ref.distributed import world

    vocabulary = len(np.unique(train_data.categorical))
    config = train_config(run, train_data, batch_size, vocabulary + vocabulary // 4)
    # on N ranks (mpirun) each reads 1/N of every global batch (train.batches, SHARD-9): the same steps and rows
    config = dataclasses.replace(config, batch_size=batch_size // world().size)
    if mx.is_initialized():
        mx.terminate_config_initializer()
    with _scratch(run.storage) as ssd:
        config = dataclasses.replace(config, ssd_data_path=ssd)
        mx.init(backend=config.backend, use_dynamic_expansion=False)
        try:
            with tf.Graph().as_default():
                tf.compat.v1.set_random_seed(run.seed)
                graph = train.build_training_graph(tf, mx, config, train_data, data_time=run.eviction != "step")
                test_iterator = tf.compat.v1.data.make_initializable_iterator(train._input(
                    tf, test_data, 4096, mx.get_asc_insert_func(tgt_key_specs=graph.all_specs, is_training=False),
                    False))
                test_batch = test_iterator.get_next()
                prob = tf.sigmoid(train.build_model(
                    tf, train.sparse_lookup_fn(mx, graph.tables, graph.specs, test_batch, False),
                    train_data.field_names, DIM, test_batch["dense"], train_data.dense.shape[1]))
                rows = _RowsHook(graph.tables["deep"])
                hooks = [rows, mx.EvictHook(evict_enable=graph.evicting, evict_step_interval=EVICT_EVERY)]
                with tf.compat.v1.train.MonitoredTrainingSession(
                        checkpoint_dir=None, hooks=hooks, save_summaries_steps=None, save_summaries_secs=None,
                        log_step_count_steps=None) as session:
                    losses = [session.run([graph.train_op, graph.loss])[1] for _ in range(config.steps)]
                    test_auc, test_loss = train.held_out_auc_and_log_loss(tf, session, prob, test_iterator.initializer,
                                                                          test_data.labels)
                    held = graph.tables["deep"].store.stats()["size"]
        finally:
            mx.terminate_config_initializer()
    return {"auc": test_auc, "log_loss": test_loss, "rows": held, "peak_rows": rows.peak, "train_losses": losses}


class _scratch:
    """A temporary SSD folder for the ssd mode, None otherwise."""

    def __init__(self, storage: str):
        self.storage = storage

    def __enter__(self):
        import tempfile

        self._folder = tempfile.TemporaryDirectory(prefix="mxrec-quality-") if self.storage == "ssd" else None
        return self._folder.name if self._folder else None

    def __exit__(self, *exc):
        if self._folder:
            self._folder.cleanup()


def _rows_hook_base():
    import tensorflow as tf

    return tf.compat.v1.train.SessionRunHook


class _RowsHook(_rows_hook_base()):
    """The table's largest size after a training step's lookups (runs before EvictHook's eviction)."""

    def __init__(self, table):
        self.table, self.peak = table, 0

    def after_run(self, run_context, run_values):
        self.peak = max(self.peak, self.table.store.stats()["size"])


def measure(run: Run, split, trace: list | None = None) -> dict:
    """Train and evaluate ``run``; ``trace``, a list, receives the run's per-step training losses."""
    batch_size = RECIPES[run.data].batch_size
    started = time.perf_counter()
    train_data, test_data = split
    train_data = trained_rows(train_data, batch_size)
    result = (train_static if run.tables == "static" else train_dynamic)(run, train_data, test_data, batch_size)
    losses = result.pop("train_losses")
    # the first step whose training loss differs from the static model's shows where a parity gap starts
    result["train_loss_last_100"] = float(np.mean(losses[-100:]))
    if trace is not None:
        trace.append(np.asarray(losses, np.float64))
    return {**dataclasses.asdict(run), **result, "seconds": time.perf_counter() - started}


# ------------------------------------------------------------------ the planner's prediction
def planned_rows(run: Run, train_data) -> tuple[int, int]:
    """(rows at the end, peak rows) the planner's replay (mxrec_ref.plan) predicts for ``run``'s deep table."""
    from mxrec_ref.optimizers import Adagrad
    from mxrec_ref.plan.replay import replay_stores, schedule
    from mxrec_ref.plan.sources import Sample
    from mxrec_ref.plan.tables import PlannedTable, in_storage

    batch_size = RECIPES[run.data].batch_size
    train_data = trained_rows(train_data, batch_size)
    config = train_config(run, train_data, batch_size, 1)
    columns = {name: train_data.categorical[:, i] for i, name in enumerate(train_data.field_names)}
    sample = Sample(train_data.name, columns, None if run.eviction == "step" else train_data.timestamps)
    whole = len(np.unique(train_data.categorical))
    evicting = run.eviction != "off"
    table = TableConfig("deep", dim=DIM, access_threshold=config.access_threshold if config.access_threshold else None,
                        eviction_threshold=config.eviction_threshold if evicting else None)
    planned = PlannedTable(table, tuple(columns), Adagrad(config.sparse_learning_rate, 0.1))
    sched = schedule(sample, batch_size=batch_size, steps=config.steps, evict_every=EVICT_EVERY)
    trace = replay_stores(sample, planned, in_storage(table, "hbm", device=whole), sched)
    return int(trace.size[-1]), int(trace.peak_size.max())


# ------------------------------------------------------------------ the profile
def parity(profile: Profile, data_names=("synthetic", "movielens"), backend: str = "fast", echo=print) -> list[dict]:
    """The static model and the dynamic one (no admission, no eviction) in each storage mode, per seed."""
    rows = []
    for name in data_names:
        split = load(name, profile)
        for seed in profile.seeds:
            rows.append(measure(Run(name, "static", seed=seed), split))
            echo(_line(rows[-1]))
            for mode in profile.parity_modes:
                rows.append(measure(Run(name, "dynamic", storage=mode, backend=backend, seed=seed), split))
                echo(_line(rows[-1]))
    return rows


def ranks_parity(profile: Profile, data_names=("synthetic", "movielens"), echo=print) -> list[dict]:
    """Under ``mpirun -np N``: the dynamic model sharded over the ranks (HBM), and on rank 0 the static
    model on the same global batches, per seed; rank 0 returns the rows, the others an empty list."""
    from mxrec_ref.distributed import world

    comm, rows = world(), []
    for name in data_names:
        split = load(name, profile)
        for seed in profile.seeds:
            dynamic = measure(Run(name, "dynamic", seed=seed), split)   # collective: every rank trains
            if comm.rank == 0:
                rows += [{**dynamic, "storage": f"hbm, {comm.size} ranks"},
                         measure(Run(name, "static", seed=seed), split)]
                echo(_line(rows[-2]))
                echo(_line(rows[-1]))
            comm.barrier()
    return rows


def curve(profile: Profile, echo=print) -> list[dict]:
    rows = []
    for name in profile.curve_data:
        split = load(name, profile)
        for eviction in profile.curve_evictions:
            for threshold in THRESHOLDS:
                run = Run(name, "dynamic", access_threshold=threshold, eviction=eviction)
                row = measure(run, split)
                row["planned_rows"], row["planned_peak_rows"] = planned_rows(run, split[0])
                rows.append(row)
                echo(_line(row))
    return rows


def _line(row: dict) -> str:
    setting = "" if row["tables"] == "static" else (
        f" {row['storage']} threshold={row['access_threshold']} eviction={row['eviction']}")
    planned = f" (planned {row['planned_rows']:,} / {row['planned_peak_rows']:,})" if "planned_rows" in row else ""
    return (f"{row['data']:9} {row['tables']:7}{setting} seed={row['seed']}: AUC {row['auc']:.4f} "
            f"logloss {row['log_loss']:.4f} rows {row['rows']:,} peak {row['peak_rows']:,}{planned} "
            f"[{row['seconds']:.0f}s]")


def summarize(parity_rows: list[dict], curve_rows: list[dict]) -> dict:
    """Per data set: each mode's mean AUC and log loss over seeds, the static model's, the gap, and the
    noise band (max - min of the static AUC over seeds and of each mode's); the curve's AUC loss and row
    reduction against no admission (threshold 1, eviction off)."""
    summary = {"parity": {}, "curve": []}
    for name in sorted({r["data"] for r in parity_rows}):
        of = [r for r in parity_rows if r["data"] == name]
        static = [r for r in of if r["tables"] == "static"]
        entry = {"static_auc": _mean(static, "auc"), "static_log_loss": _mean(static, "log_loss"),
                 "static_auc_by_seed": {r["seed"]: r["auc"] for r in static},
                 "band": _spread(static), "seeds": len(static), "modes": {}}
        for mode in sorted({r["storage"] for r in of if r["tables"] == "dynamic"}):
            runs = [r for r in of if r["tables"] == "dynamic" and r["storage"] == mode]
            gaps = [d["auc"] - s["auc"] for d in runs for s in static if s["seed"] == d["seed"]]
            entry["modes"][mode] = {"auc": _mean(runs, "auc"), "log_loss": _mean(runs, "log_loss"),
                                    "gap": float(np.mean(gaps)), "max_abs_gap": float(np.max(np.abs(gaps))),
                                    "band": _spread(runs)}
            entry["band"] = max(entry["band"], entry["modes"][mode]["band"])
        summary["parity"][name] = entry
    for name in sorted({r["data"] for r in curve_rows}):
        of = [r for r in curve_rows if r["data"] == name]
        base = next(r for r in of if r["access_threshold"] == 1 and r["eviction"] == "off")
        for r in of:
            summary["curve"].append({**{k: r[k] for k in ("data", "seed", "access_threshold", "eviction", "auc",
                                                           "log_loss",
                                                           "rows", "peak_rows", "planned_rows", "planned_peak_rows")},
                                     "auc_loss": base["auc"] - r["auc"],
                                     "fewer_rows": base["rows"] / max(1, r["rows"])})
    return summary


def _mean(rows, key) -> float:
    return float(np.mean([r[key] for r in rows]))


def _spread(rows) -> float:
    values = [r["auc"] for r in rows]
    return float(max(values) - min(values)) if values else 0.0


def quality_entries(summary: dict) -> dict:
    """The entries `mxrec-ref bench --compare` tracks (higher is better, each with its noise band):
    each data set and mode's dynamic AUC, its gap to the static model, and each curve point's AUC."""
    entries = {}
    for name, entry in summary["parity"].items():
        band = max(entry["band"], 0.002)
        for mode, m in entry["modes"].items():
            entries[f"quality {name} {mode}: dynamic AUC"] = {"value": m["auc"], "band": band}
            entries[f"quality {name} {mode}: AUC dynamic - static"] = {"value": m["gap"], "band": band}
    for point in summary["curve"]:
        band = max(summary["parity"].get(point["data"], {}).get("band", 0.0), 0.002)
        entries[f"quality {point['data']} curve: AUC at access_threshold {point['access_threshold']}, "
                f"eviction {point['eviction']}"] = {"value": point["auc"], "band": band}
    return entries


# ------------------------------------------------------------------ reports
def markdown(summary: dict) -> str:
    lines = ["| data | static AUC | mode | dynamic AUC | gap (dyn - static) | max abs gap | static logloss | "
             "dynamic logloss | noise band (AUC, seeds) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for name, e in summary["parity"].items():
        for mode, m in e["modes"].items():
            lines.append(f"| {name} | {e['static_auc']:.4f} | {mode} | {m['auc']:.4f} | {m['gap']:+.4f} | "
                         f"{m['max_abs_gap']:.4f} | {e['static_log_loss']:.4f} | {m['log_loss']:.4f} | "
                         f"{e['band']:.4f} ({e['seeds']}) |")
    if not summary["curve"]:
        return "\n".join(lines) + "\n"
    lines += ["", "| data | access_threshold | eviction | test AUC | AUC loss | rows at end | planned | peak rows | "
              "planned peak | fewer rows |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in summary["curve"]:
        lines.append(f"| {p['data']} | {p['access_threshold']} | {p['eviction']} | {p['auc']:.4f} | "
                     f"{p['auc_loss']:+.4f} | {p['rows']:,} | {p['planned_rows']:,} | {p['peak_rows']:,} | "
                     f"{p['planned_peak_rows']:,} | {p['fewer_rows']:.1f}x |")
    return "\n".join(lines) + "\n"


def plot(summary: dict, output: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({p["data"] for p in summary["curve"]})
    figure, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4.2), squeeze=False)
    for panel, name in zip(axes.flat, names):
        for eviction, marker in zip(EVICTIONS, "osD"):
            points = [p for p in summary["curve"] if p["data"] == name and p["eviction"] == eviction]
            if not points:
                continue
            panel.plot([p["rows"] for p in points], [p["auc"] for p in points], marker + "-",
                       label=f"eviction {eviction}")
            for p in points:
                panel.annotate(str(p["access_threshold"]), (p["rows"], p["auc"]), fontsize=7,
                               xytext=(3, 3), textcoords="offset points")
        seed = next((p["seed"] for p in summary["curve"] if p["data"] == name), 0)
        static = summary["parity"].get(name, {}).get("static_auc_by_seed", {}).get(seed)
        if static is not None:     # the static model of the curve's seed, and the noise band over seeds around it
            band = summary["parity"][name]["band"]
            panel.axhline(static, color="grey", linestyle="--", linewidth=1,
                          label=f"static tf.Variable tables (seed {seed})")
            panel.axhspan(static - band, static + band, color="grey", alpha=0.12,
                          label=f"noise band over seeds ({band:.4f})")
        panel.set_xscale("log")
        panel.set_xlabel("rows held at the end (deep table)")
        panel.set_ylabel("test AUC")
        panel.set_title(f"{name}: access_threshold (labels) x eviction", fontsize=9)
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=7)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def run_profile(name: str, output_dir: Path | None, echo=print) -> dict:
    profile = PROFILES[name]
    parity_rows = parity(profile, echo=echo)
    curve_rows = curve(profile, echo=echo)
    summary = summarize(parity_rows, curve_rows)
    result = {"profile": name, "summary": summary, "runs": parity_rows + curve_rows,
              "quality": quality_entries(summary)}
    if output_dir is not None:       # quick: quality.{md,json,png}; full: quality-full.*
        stem = Path(output_dir) / ("quality" if name == "quick" else f"quality-{name}")
        stem.with_suffix(".json").write_text(json.dumps(result, indent=1, sort_keys=True))
        report(result["runs"], stem)
        echo(f"wrote {stem}.md, .json and .png")
    echo(markdown(summary))
    return result


def report(runs: list[dict], stem: Path) -> dict:
    """The summary, table and plot of ``runs`` (the runs of a quality.json), written beside ``stem``."""
    summary = summarize([r for r in runs if "planned_rows" not in r], [r for r in runs if "planned_rows" in r])
    stem.with_suffix(".md").write_text(markdown(summary))
    plot(summary, stem.with_suffix(".png"))
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES),
                        default=profile_name())
    parser.add_argument("--output-dir", default=str(Path(__file__).parent))
    parser.add_argument("--only", choices=["parity", "curve", "ranks"],
                        help="run one part (prints, writes nothing); ranks: the parity under mpirun (rank 0 prints)")
    parser.add_argument("--replot", metavar="QUALITY_JSON", help="rewrite the table and plot of a quality.json's runs")
    parser.add_argument("--data", nargs="+", default=["synthetic", "movielens"], choices=sorted(RECIPES))
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.only == "parity":
        print(markdown(summarize(parity(profile, args.data), [])))
        return 0
    if args.only == "ranks":
        rows = ranks_parity(profile, args.data)
        if rows:
            print(markdown(summarize(rows, [])))
        return 0
    if args.only == "curve":
        profile = dataclasses.replace(profile, curve_data=tuple(args.data))
        print(markdown(summarize([], curve(profile))))
        return 0
    if args.replot:
        report(json.loads(Path(args.replot).read_text())["runs"], Path(args.replot).with_suffix(""))
        return 0
    run_profile(args.profile, Path(args.output_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
