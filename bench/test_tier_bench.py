"""Storage tiers: DDR and SSD tables vs an HBM table on the same training
sequence, and the SSD tier's file I/O vs plain sequential file I/O of the
same bytes, all in one run (bench/README.md)."""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from mxrec_ref import Adagrad, Initializer, TableConfig, open_store
from mxrec_ref.fast.disk import FastDiskKernels    # the fast store's disk tier, as the stores above use
from mxrec_ref.tiers.disk import DiskTier

from workloads import DIM, scramble, size_scaled, zipf_batches

BATCH = 8192                       # positions per step; the device tier must hold a batch's keys
STEPS = 12
DEVICE_ROWS = BATCH
HOST_ROWS = BATCH // 2           # SSD: most rows live on disk
SEQUENCE = [batch[:BATCH] for batch in zipf_batches(STEPS, seed=5)]
_folders = itertools.count()


def _config(mode: str, folder) -> TableConfig:
    init = Initializer(kind="uniform", minval=-0.1, maxval=0.1)
    if mode == "hbm":
        return TableConfig("bench", dim=DIM, initializer=init, device_vocabulary_size=BATCH, dynamic_expansion=True)
    ssd = dict(ssd_vocabulary_size=10 * HOST_ROWS, ssd_data_path=[str(folder)]) if mode == "ssd" else {}
    return TableConfig("bench", dim=DIM, initializer=init, device_vocabulary_size=DEVICE_ROWS,
                       host_vocabulary_size=HOST_ROWS, **ssd)


def _train(store):
    for step, batch in enumerate(SEQUENCE):
        result = store.lookup(batch, step=step)
        store.apply_gradients(result, np.full(result.rows.shape, 0.01, np.float32), step=step)
    return store


@pytest.mark.parametrize("mode", ["hbm", "ddr", "ssd"])
def test_training_sequence_by_storage_mode(benchmark, mode, tmp_path):
    """The same Zipf training sequence (lookups and Adagrad applies) through
    an HBM table and through DDR and SSD tables whose device tier holds one
    batch and whose host tier (SSD) holds a fraction of the keys."""
    def setup():
        folder = tmp_path / f"ssd-{next(_folders)}"
        return (open_store(_config(mode, folder), Adagrad(0.05), backend="fast"),), {}

    role = "candidate" if mode == "hbm" else mode.upper()
    benchmark.extra_info.update(ratio_group="tiers: mode / HBM, same sequence", role=role, better="lower")
    benchmark.pedantic(_train, setup=setup, rounds=3)
    if mode == "ssd":   # the sequence must really exercise the disk tier
        store = _train(open_store(_config(mode, tmp_path / "check"), Adagrad(0.05), backend="fast"))
        assert store.stats()["disk_rows"] > 0


# ------------------------------------------------------- SSD file I/O
ROWS = size_scaled(200_000)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    keys = np.arange(ROWS, dtype=np.int64) * 7 + 1
    values = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    slots = [rng.normal(size=(ROWS, DIM)).astype(np.float32)]
    return keys, values, slots, np.ones(ROWS, np.int64), np.zeros(ROWS, np.int64)


def _record_bytes() -> int:
    return 32 + 4 * 2 * DIM + 4


def test_ssd_write(benchmark, rows, tmp_path):
    def setup():
        return (DiskTier("bench", [str(tmp_path / f"w{next(_folders)}")], DIM, 1, kernels=FastDiskKernels),), {}

    benchmark.extra_info.update(ratio_group="SSD write: disk tier / sequential file write", role="candidate")
    benchmark.pedantic(lambda tier: tier.write(*rows[:2], rows[2], *rows[3:]), setup=setup, rounds=3)


def test_ssd_read(benchmark, rows, tmp_path):
    tier = DiskTier("bench", [str(tmp_path / "r")], DIM, 1, kernels=FastDiskKernels)
    keys = rows[0]
    tier.write(keys, rows[1], rows[2], *rows[3:])
    order = np.random.default_rng(1).permutation(keys)   # rows come back in the order a batch asks
    benchmark.extra_info.update(ratio_group="SSD read: disk tier / sequential file read", role="candidate")
    benchmark.pedantic(lambda: tier.read(order), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("direction", ["write", "read"])
def test_plain_sequential_file(benchmark, tmp_path, direction):
    """The floor: the same number of bytes written or read with one call."""
    payload = np.random.default_rng(2).bytes(ROWS * _record_bytes())
    path = tmp_path / "plain.bin"
    path.write_bytes(payload)

    def write():
        with open(path, "wb") as out:
            out.write(payload)

    def read():
        with open(path, "rb") as source:
            source.read()

    group = f"SSD {direction}: disk tier / sequential file {direction}"
    benchmark.extra_info.update(ratio_group=group, role=f"sequential file {direction}")
    benchmark.pedantic(write if direction == "write" else read, rounds=3, warmup_rounds=1)
    os.remove(path)


# ----------------------------------------------- step cost by table size (issue 16)
# One training step (lookup + Adagrad apply) of 8,192 Zipf(1.05) keys over a table of N keys, device
# tier 16,384 rows: HBM (dynamic expansion), DDR (host tier grows), SSD with a quarter of the keys in
# host memory (cold reads every step), and SSD with the batch's universe in host memory and a fifth
# of the table on disk ("SSD hot": the tier bookkeeping without cold reads).  The tier ratios are a
# mode's step over the HBM step at the same size, the flatness ratios a mode's step at N over its step
# at the smallest size (bench/README.md).  10^7 keys only with MXREC_BENCH_TIER_HUGE=1 (minutes, ~3 GB).
# bench/tier_scaling.py runs the same stores with the modes' rounds interleaved and draws the plot.
STEP_BATCH = 8192
STEP_DEVICE_ROWS = 16384
STEPS_PER_ROUND = 8
STEP_SIZES = [size_scaled(100_000), size_scaled(1_000_000)] + (
    [size_scaled(10_000_000)] if os.environ.get("MXREC_BENCH_TIER_HUGE") == "1" else [])
STEP_MODES = ["hbm", "ddr", "ssd", "ssd-hot"]
_stores: dict = {}


def step_store(mode: str, n: int, folder):
    """A fast-backend store of ``mode`` holding ``n`` keys (``n`` + n/4 cold keys for SSD hot), filled
    by training lookups, and the Zipf steps over ``n`` keys to run on it."""
    init = Initializer(kind="uniform", minval=-0.1, maxval=0.1)
    cold = n // 4 if mode == "ssd-hot" else 0
    if mode == "hbm":
        config = TableConfig("step", dim=DIM, initializer=init, device_vocabulary_size=STEP_DEVICE_ROWS,
                             dynamic_expansion=True)
    else:
        host = {"ddr": n, "ssd": n // 4, "ssd-hot": n}[mode]
        ssd = dict(ssd_vocabulary_size=n, ssd_data_path=[str(folder)]) if mode.startswith("ssd") else {}
        config = TableConfig("step", dim=DIM, initializer=init, device_vocabulary_size=STEP_DEVICE_ROWS,
                             host_vocabulary_size=host, **ssd)
    store = open_store(config, Adagrad(0.05), backend="fast")
    keys = np.concatenate([scramble(np.arange(n, n + cold)), scramble(np.arange(n))])  # the cold ones first
    for step, start in enumerate(range(0, len(keys), STEP_BATCH)):   # later fills are seen later (TIER-5)
        store.lookup(keys[start:start + STEP_BATCH], step=step)
    return store, zipf_batches(64, seed=7, batch=STEP_BATCH, universe=n), step


def run_steps(store, batches, state):
    for _ in range(STEPS_PER_ROUND):
        state["step"] += 1
        batch = batches[state["step"] % len(batches)]
        result = store.lookup(batch, step=state["step"])
        store.apply_gradients(result, np.full(result.rows.shape, 0.01, np.float32), step=state["step"])


@pytest.mark.parametrize("mode", STEP_MODES)
@pytest.mark.parametrize("n", STEP_SIZES)
def test_tier_step_by_table_size(benchmark, mode, n, tmp_path_factory):
    """8 training steps at one table size and mode; ratios: bench/README.md (tier_step extra_info)."""
    store, batches, filled = step_store(mode, n, tmp_path_factory.mktemp(f"step-{mode}-{n}"))
    state = {"step": filled}
    run_steps(store, batches, state)                # warm: the tiers reach their steady state
    # tracked ratios (bench/baseline.json): the mode's step over HBM's at this size, and (at the largest
    # size) the mode's step over its step at the smallest size, the flatness that issue 16 asks for
    label = {"hbm": "HBM", "ddr": "DDR", "ssd": "SSD cold", "ssd-hot": "SSD hot"}[mode]
    also = []
    if n in (STEP_SIZES[0], STEP_SIZES[-1]):
        also.append([f"tier step flatness, {label}: largest / smallest table",
                     "candidate" if n == STEP_SIZES[0] else f"{STEP_SIZES[-1]:,} keys"])
    benchmark.extra_info.update(tier_step=mode, keys=n, steps=STEPS_PER_ROUND, better="lower",
                                ratio_group=f"tier step, {n:,} keys: mode / HBM",
                                role="candidate" if mode == "hbm" else label, also=also)
    benchmark.pedantic(run_steps, args=(store, batches, state), rounds=5)
    if mode == "ssd" and n > 4 * STEP_DEVICE_ROWS:      # smaller tables fit on the device
        assert store.stats()["disk_rows"] > 0 and store.stats()["disk_to_host_rows"] > 0
    if mode == "ssd-hot" and n > 4 * STEP_DEVICE_ROWS:
        assert store.stats()["disk_rows"] > 0
