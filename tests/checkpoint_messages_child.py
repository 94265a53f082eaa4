"""Damages a checkpoint table in ~57 ways (every file flipped, truncated, deleted; meta.json fields; key
problems alone and two at once; a missing table) and prints, as JSON, what each of the two readers --
``checkpoint.read_table`` and the streaming ``read_owned`` of the sharded load -- raises, with the
temporary folder written as ROOT.

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
from mxrec_ref.state import TableState
from mxrec_ref.distributed import checkpoint as dck

def state(opt, dim, n, m, seed, keys_override=None):
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.choice(np.arange(0, 5000), n + m, replace=False)).astype(np.int64)
    adm = np.sort(rng.choice(keys, n, replace=False))
    return TableState(keys=adm, values=rng.standard_normal((n, dim)).astype(np.float32),
        slots={s: rng.standard_normal((n, dim)).astype(np.float32) for s in opt.slot_names},
        counts=rng.integers(0, 9, n).astype(np.int64), last_seen=rng.integers(0, 7, n).astype(np.int64),
        pending_keys=np.setdiff1d(keys, adm), pending_counts=rng.integers(0, 3, m).astype(np.int64),
        pending_last_seen=rng.integers(0, 7, m).astype(np.int64), clock=6, clock_source="step")

def remanifest(folder):
    man = json.loads((folder / "manifest.json").read_text())
    for name in man["files"]:
        data = (folder / name).read_bytes()
        man["files"][name] = {"bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    (folder / "manifest.json").write_text(json.dumps(man, indent=1, sort_keys=True))

root = Path(sys.argv[1]); out = {}
opt = Adagrad(learning_rate=0.1); cfg = TableConfig(name="t", dim=2)
base = state(opt, 2, 30, 6, 1)
files = ["key/slice.data", "key/slice.attribute", "embedding/slice.data", "embedding/slice.attribute",
         "Adagrad_accumulator/slice.data", "feat_info/slice.data", "feat_info/slice.attribute", "meta.json", "manifest.json"]
cases = {}
def case(name, mutate, st=None, config=cfg, optimizer=opt):
    d = root / name; checkpoint.write_table(d, cfg, opt, st or base); mutate(d / "t"); cases[name] = (d, config, optimizer)
for f in files:
    def flip(t, f=f):
        b = bytearray((t / f).read_bytes()); b[len(b)//2] ^= 1; (t / f).write_bytes(bytes(b))
    case("flip " + f, flip)
    def trunc(t, f=f):
        b = (t / f).read_bytes(); (t / f).write_bytes(b[:-3])
    case("trunc " + f, trunc)
    def rm(t, f=f): (t / f).unlink()
    case("rm " + f, rm)
    def trunc_re(t, f=f):
        if f == "manifest.json": return
        b = (t / f).read_bytes(); (t / f).write_bytes(b[:-8]); remanifest(t)
    case("trunc+manifest " + f, trunc_re)
def meta_edit(**kw):
    def m(t):
        meta = json.loads((t / "meta.json").read_text()); meta.update(kw)
        for k, v in list(meta.items()):
            if v == "DEL": del meta[k]
        (t / "meta.json").write_text(json.dumps(meta)); remanifest(t)
    return m
for name, kw in {"dim": {"dim": 3}, "n_keys": {"n_keys": 31}, "n_pending": {"n_pending": 2}, "fmt": {"format_version": 2},
                 "clock": {"clock": None}, "src": {"clock_source": "x"}, "kind": {"kind": "delta"},
                 "missing": {"clock": "DEL"}, "opt": {"optimizer": []}, "negdim": {"dim": -1}}.items():
    case("meta " + name, meta_edit(**kw))
case("optimizer kind", lambda t: None, optimizer=LazyAdam(learning_rate=0.1))
case("other dim", lambda t: None, config=TableConfig(name="t", dim=3))
def keys_case(name, fn, config=cfg):
    s = state(opt, 2, 30, 6, 1); keys, counts, pend = s.keys.copy(), s.counts.copy(), s.pending_keys.copy(); fn(keys, counts, pend)
    st = TableState(**{**s.__dict__, "keys": keys, "counts": counts, "pending_keys": pend})
    case(name, lambda t: None, st=st, config=config)
keys_case("unsorted", lambda k, c, p: k.__setitem__([3, 9], k[[9, 3]]))
keys_case("padding", lambda k, c, p: k.__setitem__(0, -1))
keys_case("negcount", lambda k, c, p: c.__setitem__(5, -2))
keys_case("both", lambda k, c, p: p.__setitem__(0, k[4]) or p.sort())
keys_case("range", lambda k, c, p: k.__setitem__(-1, 3_000_000_000), config=TableConfig(name="t", dim=2, key_dtype="int32"))
keys_case("unsorted+range", lambda k, c, p: (k.__setitem__(-1, 3_000_000_000), k.__setitem__([3, 9], k[[9, 3]])), config=TableConfig(name="t", dim=2, key_dtype="int32"))
keys_case("pad+neg", lambda k, c, p: (k.__setitem__(0, -1), c.__setitem__(5, -2)))
def feat_mismatch(t):
    f = np.fromfile(t / "feat_info/slice.data", "<i8").reshape(-1, 3); f[2, 0] += 1; f.tofile(t / "feat_info/slice.data"); remanifest(t)
case("feat mismatch", feat_mismatch)
case("missing table", lambda t: shutil.rmtree(t))
for name, (d, config, optimizer) in sorted(cases.items()):
    res = []
    for read in (lambda: checkpoint.read_table(d, config, optimizer),
                 lambda: dck.read_owned(d, config, optimizer, lambda k: np.ones(len(k), bool))):
        try:
            read(); res.append("OK")
        except Exception as e:
            res.append(f"{type(e).__name__}: {str(e).replace(str(root), 'ROOT')}")
    out[name] = res
print(json.dumps(out, indent=1, sort_keys=True))
