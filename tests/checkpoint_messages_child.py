"""Damages a checkpoint table in 57 ways (every file flipped, truncated, deleted; meta.json fields; key
problems alone and two at once; a missing table) and prints, as JSON, what each of the two readers --
``checkpoint.read_table`` and the streaming ``read_owned`` of the sharded load -- raises, with the
folder given written as ROOT.

tests/test_checkpoint_package.py compares it with the messages recorded from main at 7e63fe5, before the
checkpoint module became a package (tests/data/checkpoint-messages.json): no error message changed.
Usage: python tests/checkpoint_messages_child.py FOLDER
"""
from __future__ import annotations

import json
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np

from mxrec_ref import Adagrad, LazyAdam, TableConfig, checkpoint
from mxrec_ref.distributed import checkpoint as sharded_checkpoint
from mxrec_ref.state import TableState

OPTIMIZER = Adagrad(learning_rate=0.1)
CONFIG = TableConfig(name="t", dim=2)
INT32_KEYS = TableConfig(name="t", dim=2, key_dtype="int32")
FILES = ["key/slice.data", "key/slice.attribute", "embedding/slice.data", "embedding/slice.attribute",
         "Adagrad_accumulator/slice.data", "feat_info/slice.data", "feat_info/slice.attribute", "meta.json",
         "manifest.json"]


def state() -> TableState:
    """30 admitted and 6 pending keys, the same every run."""
    rng = np.random.default_rng(1)
    keys = np.sort(rng.choice(np.arange(0, 5000), 36, replace=False)).astype(np.int64)
    admitted = np.sort(rng.choice(keys, 30, replace=False))
    return TableState(
        keys=admitted, values=rng.standard_normal((30, 2)).astype(np.float32),
        slots={slot: rng.standard_normal((30, 2)).astype(np.float32) for slot in OPTIMIZER.slot_names},
        counts=rng.integers(0, 9, 30).astype(np.int64), last_seen=rng.integers(0, 7, 30).astype(np.int64),
        pending_keys=np.setdiff1d(keys, admitted), pending_counts=rng.integers(0, 3, 6).astype(np.int64),
        pending_last_seen=rng.integers(0, 7, 6).astype(np.int64), clock=6, clock_source="step")


def rewrite_manifest(table: Path) -> None:
    """The manifest of the files as they are now: the damage is then the only problem."""
    manifest = json.loads((table / "manifest.json").read_text())
    for name in manifest["files"]:
        data = (table / name).read_bytes()
        manifest["files"][name] = {"bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    (table / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))


def flip(name):
    def damage(table):
        data = bytearray((table / name).read_bytes())
        data[len(data) // 2] ^= 1
        (table / name).write_bytes(bytes(data))
    return damage


def truncate(name, by: int, manifest_too: bool):
    def damage(table):
        if manifest_too and name == "manifest.json":
            return
        (table / name).write_bytes((table / name).read_bytes()[:-by])
        if manifest_too:
            rewrite_manifest(table)
    return damage


def delete(name):
    return lambda table: (table / name).unlink()


def edit_meta(**fields):
    def damage(table):
        meta = json.loads((table / "meta.json").read_text())
        meta.update(fields)
        meta = {key: value for key, value in meta.items() if value != "DELETE"}
        (table / "meta.json").write_text(json.dumps(meta))
        rewrite_manifest(table)
    return damage


def first_keys_differ(table):
    feat = np.fromfile(table / "feat_info/slice.data", "<i8").reshape(-1, 3)
    feat[2, 0] += 1
    feat.tofile(table / "feat_info/slice.data")
    rewrite_manifest(table)


def with_keys(change) -> TableState:
    """The state with its keys, counts or pending keys changed in place by ``change``."""
    base = state()
    keys, counts, pending = base.keys.copy(), base.counts.copy(), base.pending_keys.copy()
    change(keys, counts, pending)
    return TableState(**{**base.__dict__, "keys": keys, "counts": counts, "pending_keys": np.sort(pending)})


def swap(keys, i, j):
    keys[[i, j]] = keys[[j, i]]


def cases():
    """name -> (damage of the written table folder, state written, config and optimizer read with)."""
    found = {}
    for name in FILES:
        found[f"flip {name}"] = (flip(name), None, CONFIG, OPTIMIZER)
        found[f"trunc {name}"] = (truncate(name, 3, manifest_too=False), None, CONFIG, OPTIMIZER)
        found[f"rm {name}"] = (delete(name), None, CONFIG, OPTIMIZER)
        found[f"trunc+manifest {name}"] = (truncate(name, 8, manifest_too=True), None, CONFIG, OPTIMIZER)
    meta_edits = {"dim": {"dim": 3}, "n_keys": {"n_keys": 31}, "n_pending": {"n_pending": 2},
                  "fmt": {"format_version": 2}, "clock": {"clock": None}, "src": {"clock_source": "x"},
                  "kind": {"kind": "delta"}, "missing": {"clock": "DELETE"}, "opt": {"optimizer": []},
                  "negdim": {"dim": -1}}
    for name, fields in meta_edits.items():
        found[f"meta {name}"] = (edit_meta(**fields), None, CONFIG, OPTIMIZER)
    unchanged = lambda table: None          # noqa: E731 -- a damage that leaves the files as written
    found["optimizer kind"] = (unchanged, None, CONFIG, LazyAdam(learning_rate=0.1))
    found["other dim"] = (unchanged, None, TableConfig(name="t", dim=3), OPTIMIZER)
    found["unsorted"] = (unchanged, with_keys(lambda k, c, p: swap(k, 3, 9)), CONFIG, OPTIMIZER)
    found["padding"] = (unchanged, with_keys(lambda k, c, p: k.__setitem__(0, -1)), CONFIG, OPTIMIZER)
    found["negcount"] = (unchanged, with_keys(lambda k, c, p: c.__setitem__(5, -2)), CONFIG, OPTIMIZER)
    found["both"] = (unchanged, with_keys(lambda k, c, p: p.__setitem__(0, k[4])), CONFIG, OPTIMIZER)
    found["range"] = (unchanged, with_keys(lambda k, c, p: k.__setitem__(-1, 3_000_000_000)), INT32_KEYS, OPTIMIZER)
    found["unsorted+range"] = (unchanged, with_keys(lambda k, c, p: (k.__setitem__(-1, 3_000_000_000),
                                                                     swap(k, 3, 9))), INT32_KEYS, OPTIMIZER)
    found["pad+neg"] = (unchanged, with_keys(lambda k, c, p: (k.__setitem__(0, -1), c.__setitem__(5, -2))),
                        CONFIG, OPTIMIZER)
    found["feat mismatch"] = (first_keys_differ, None, CONFIG, OPTIMIZER)
    found["missing table"] = (shutil.rmtree, None, CONFIG, OPTIMIZER)
    return found


def main(root: Path) -> None:
    out = {}
    for name, (damage, written, config, optimizer) in sorted(cases().items()):
        folder = root / name
        checkpoint.write_table(folder, CONFIG, OPTIMIZER, written if written is not None else state())
        damage(folder / "t")
        raised = []
        for read in (lambda: checkpoint.read_table(folder, config, optimizer),
                     lambda: sharded_checkpoint.read_owned(folder, config, optimizer, lambda k: np.ones(len(k), bool))):
            try:
                read()
                raised.append("OK")
            except Exception as error:      # noqa: BLE001 -- what each reader raises is the output
                raised.append(f"{type(error).__name__}: {str(error).replace(str(root), 'ROOT')}")
        out[name] = raised
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
