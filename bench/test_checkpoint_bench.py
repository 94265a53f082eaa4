"""Checkpoint save and load of a table with Adagrad slots (values + accumulator) vs copying
the same bytes: with ``shutil.copytree`` (the page-cache floor, no fsync) and with
``shutil.copytree`` then an fsync of every file (the floor of a durable copy, which is what
a crash-safe save has to be: CKPT-4, CKPT-8).  1M keys and 100k keys in both profiles: issue
16's target is stated at 1M keys, and the committed baseline (quick profile) must watch that size,
not a tenth of it (~25 s for the whole file).  Ratios are the copy's time over the save's or the
load's: above 0.5 means the save takes less than twice the copy (issue 16's target)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mxrec_ref import Adagrad, TableConfig, open_store

from workloads import BATCH, DIM, all_keys

SIZES = {"": 1_000_000, " 100k": 100_000}   # group suffix -> keys, the same in both profiles


@pytest.fixture(scope="module", params=list(SIZES), ids=lambda s: s.strip() or "1M")
def saved(request, tmp_path_factory):
    n = SIZES[request.param]
    store = open_store(TableConfig("bench", dim=DIM, device_vocabulary_size=n), Adagrad(0.05), backend="fast")
    keys = all_keys(n)
    for start in range(0, n, BATCH):
        store.lookup(keys[start:start + BATCH], step=0)
    root = tmp_path_factory.mktemp("ckpt")
    store.save(root / "reference")
    yield request.param, store, root
    shutil.rmtree(root, ignore_errors=True)


def _group(kind: str, suffix: str) -> str:
    return f"checkpoint {kind}{suffix}: fast / file copy"


def test_checkpoint_save(benchmark, saved):
    suffix, store, root = saved
    benchmark.extra_info.update(ratio_group=_group("save", suffix), role="candidate")
    benchmark.pedantic(lambda: store.save(root / "saves"), rounds=3, warmup_rounds=1)


def test_checkpoint_load(benchmark, saved):
    suffix, store, root = saved
    benchmark.extra_info.update(ratio_group=_group("load", suffix), role="candidate")
    benchmark.pedantic(lambda: store.load(root / "reference"), rounds=3, warmup_rounds=1)


def _copy(root: Path, durable: bool) -> None:
    target = root / "copy"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root / "reference", target)
    if durable:
        for folder, _, files in os.walk(target):
            for name in [*files, "."]:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


@pytest.mark.parametrize("kind", ["save", "load"])
@pytest.mark.parametrize("durable", [False, True], ids=["copytree", "copytree+fsync"])
def test_plain_file_copy(benchmark, saved, kind, durable):
    suffix, _, root = saved
    benchmark.extra_info.update(ratio_group=_group(kind, suffix),
                                role="shutil.copytree + fsync" if durable else "shutil.copytree")
    benchmark.pedantic(lambda: _copy(root, durable), rounds=3, warmup_rounds=1)
