"""Checkpoint save/load of a 1M-key table vs copying the same bytes with
shutil.copytree (the I/O floor)."""
from __future__ import annotations

import shutil

import pytest

from mxrec_ref import Adagrad, TableConfig, open_store

from workloads import BATCH, DIM, all_keys, size_scaled

KEYS = size_scaled(1_000_000)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    store = open_store(TableConfig("bench", dim=DIM, device_vocabulary_size=KEYS), Adagrad(0.05), backend="fast")
    keys = all_keys(KEYS)
    for start in range(0, KEYS, BATCH):
        store.lookup(keys[start:start + BATCH], step=0)
    root = tmp_path_factory.mktemp("ckpt")
    store.save(root / "reference")
    return store, root


def test_checkpoint_save(benchmark, saved):
    store, root = saved
    benchmark.extra_info.update(ratio_group="checkpoint save: fast / file copy", role="candidate")
    benchmark.pedantic(lambda: store.save(root / "saves"), rounds=3, warmup_rounds=1)


def test_checkpoint_load(benchmark, saved):
    store, root = saved
    benchmark.extra_info.update(ratio_group="checkpoint load: fast / file copy", role="candidate")
    benchmark.pedantic(lambda: store.load(root / "reference"), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("group", ["checkpoint save: fast / file copy", "checkpoint load: fast / file copy"])
def test_plain_file_copy(benchmark, saved, group):
    _, root = saved

    def copy():
        target = root / "copy"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(root / "reference", target)

    benchmark.extra_info.update(ratio_group=group, role="shutil.copytree")
    benchmark.pedantic(copy, rounds=3, warmup_rounds=1)
