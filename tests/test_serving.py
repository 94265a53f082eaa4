"""Serving with incremental updates (spec/serving.md, issue 33 item 5): an updatable export takes deltas
through its apply_delta signature in a process that never imports mxrec_ref, and then serves what the
trainer's predict returns, bit for bit."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref
import mxrec_ref.tf as mx
from mxrec_ref import CheckpointError, UsageError
from mxrec_ref.demo import synthetic_click_log
from mxrec_ref.keras import Embedding, EvictCallback, Model, export_saved_model
from mxrec_ref.serving import apply_delta, export_delta, read_delta
from mxrec_ref.tf.optimizers import adagrad

UNIFORM = mxrec_ref.Initializer(kind="uniform", minval=-0.5, maxval=0.5, seed=7)

# The server: numpy, zlib, json and TensorFlow only.  It reads a delta as spec SERVE-4 describes (manifest
# checked first) and feeds its inputs by name to the apply_delta signature.
SERVER = textwrap.dedent("""
    import json, sys, zlib
    import numpy as np
    import tensorflow as tf

    def read_delta(folder):
        files = {}
        for name, entry in json.load(open(f"{folder}/manifest.json"))["files"].items():
            data = open(f"{folder}/{name}", "rb").read()
            assert len(data) == entry["bytes"] and f"{zlib.crc32(data):08x}" == entry["crc32"], name
            files[name] = data
        meta = json.loads(files["meta.json"])
        assert (meta["format"], meta["format_version"]) == ("mxrec-ref serving delta", 1), meta
        feeds = {name: np.frombuffer(files[f"{name}.data"], entry["dtype"]).reshape(entry["shape"])
                 for name, entry in meta["inputs"].items()}
        return {"sequence": np.int64(meta["sequence"]), **feeds}

    folder, steps = sys.argv[1], json.loads(sys.argv[2])
    model = tf.saved_model.load(f"{folder}/export")
    serve, apply = model.signatures["serving_default"], model.signatures["apply_delta"]
    x = np.load(f"{folder}/x.npy")
    for step in steps:           # "delta<k>": apply it; "expect<k>": serve and compare with the trainer
        if step.startswith("delta"):
            print(step, {k: int(v) for k, v in apply(**read_delta(f"{folder}/{step}")).items()})
        else:
            served = serve(ids=tf.constant(x))["output_0"].numpy()
            expected = np.load(f"{folder}/{step}.npy")
            assert np.array_equal(served, expected), (step, np.abs(served - expected).max())
    try:
        apply(**read_delta(f"{folder}/delta1"))          # applied already: refused, nothing changes
        raise SystemExit("a delta applied twice was accepted")
    except tf.errors.InvalidArgumentError as error:
        assert "sequence" in str(error), error
    assert np.array_equal(serve(ids=tf.constant(x))["output_0"].numpy(), np.load(f"{folder}/{steps[-1]}.npy"))
    assert "mxrec_ref" not in sys.modules and not [m for m in sys.modules if m.startswith("mxrec_ref")]
    print("SERVED")
""")


def run_server(folder, steps) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", SERVER, str(folder), json.dumps(steps)], capture_output=True,
                            text=True, timeout=300, cwd=folder, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0 and "SERVED" in result.stdout, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def evicting_model(backend, name="srv"):
    """ids [batch, 12] -> Embedding(8) with admission and eviction -> Dense(1, sigmoid)."""
    keras.utils.set_random_seed(0)
    ids = keras.Input((12,), dtype="int64", name="ids")
    table = Embedding(8, name=name, optimizer=mxrec_ref.Adagrad(0.3), backend=backend, initializer=UNIFORM,
                      access_threshold=1, eviction_threshold=3, serving_default_value=0.125)
    out = keras.layers.Dense(1, activation="sigmoid", name="head")(keras.layers.Flatten()(table(ids)))
    model = Model(ids, out)
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy")
    return model, table


def test_serve_1_to_5_deltas_applied_without_mxrec_ref_serve_what_predict_returns(backend, tmp_path):
    """SERVE-1 (updatable export, the rows grow past the spare ones), SERVE-2 (apply_delta in order, twice
    refused), SERVE-3 (new, changed and evicted keys and the dense weights since the export, then since the
    last delta, from the change log; after a load, a full delta), SERVE-4 (the format read with numpy and zlib), SERVE-5 (bit for bit, no mxrec_ref)."""
    model, table = evicting_model(backend)
    log = synthetic_click_log(6_000, seed=0)
    fit = dict(batch_size=256, epochs=1, verbose=0, callbacks=[EvictCallback(every_n_batches=2)])
    model.fit(log.keys[:2_000], log.labels[:2_000], **fit)
    exported = table.store.export()
    export_saved_model(model, tmp_path / "export", updatable=True, spare_rows=16)
    x = np.concatenate([log.keys[5_000:], log.keys[5_000:] + 7, np.full((1, 12), -1)])   # old, new, padding keys
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "expect0.npy", model.predict(x, verbose=0))

    summaries, states = [], []
    for k, (start, stop, shift) in enumerate([(2_000, 3_500, 7), (3_500, 5_000, 13)], start=1):
        model.fit(log.keys[start:stop] + shift, log.labels[start:stop], **fit)   # new keys, old ones evicted
        summaries.append(export_delta(tmp_path / "export", tmp_path / f"delta{k}"))
        np.save(tmp_path / f"expect{k}.npy", model.predict(x, verbose=0))
        states.append(table.store.export())
        if k == 1:
            table.store.save(tmp_path / "ckpt")
    first, second = (s["tables"]["srv"] for s in summaries)
    assert [s["sequence"] for s in summaries] == [1, 2] and not first["full"] and not second["full"]
    assert first["evicted"] > 0 and second["evicted"] > 0 and first["keys"] > 16       # grows past the spare rows
    evicted_since_export = np.setdiff1d(exported.keys, states[1].keys)
    assert len(evicted_since_export) > 0 and np.isin(x, evicted_since_export).any()    # served rows that go away
    assert not np.array_equal(np.load(tmp_path / "expect0.npy"), np.load(tmp_path / "expect2.npy"))
    table.store.load(tmp_path / "ckpt")          # rows replaced wholesale: the log cannot say, a full delta
    third = export_delta(tmp_path / "export", tmp_path / "delta3")["tables"]["srv"]
    assert third["full"] and third["keys"] == len(states[0].keys)
    assert third["evicted"] == len(np.setdiff1d(states[1].keys, states[0].keys)) > 0
    np.save(tmp_path / "expect3.npy", model.predict(x, verbose=0))
    model.fit(log.keys[:500] + 99, log.labels[:500], **fit)      # and the log again after the full delta
    assert not export_delta(tmp_path / "export", tmp_path / "delta4")["tables"]["srv"]["full"]
    np.save(tmp_path / "expect4.npy", model.predict(x, verbose=0))

    out = run_server(tmp_path, ["expect0", "delta1", "expect1", "delta2", "expect2", "delta3", "expect3",
                                "delta4", "expect4"])
    used = json.loads(out.split("delta2 ")[1].splitlines()[0].replace("'", '"'))
    assert used["srv_rows_used"] == len(states[1].keys) and used["srv_capacity"] >= used["srv_rows_used"]
    assert used["srv_capacity"] > len(exported.keys) + 16                               # it grew


def test_serve_2_a_bad_delta_is_refused_before_anything_changes(tmp_path):
    """SERVE-2: rows of the wrong length, a key twice, a key both updated and evicted, a sequence out of
    order: InvalidArgumentError naming the table and the input, the served model unchanged."""
    model, table = evicting_model("ref", name="srv2")
    log = synthetic_click_log(1_000, seed=1)
    model.fit(log.keys, log.labels, batch_size=256, epochs=1, verbose=0)
    export_saved_model(model, tmp_path / "export", updatable=True)
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    serve, apply = loaded.signatures["serving_default"], loaded.signatures["apply_delta"]
    before = serve(ids=tf.constant(log.keys[:64]))["output_0"].numpy()
    key = int(table.store.export().keys[0])
    dense = {f"dense_{i}": tf.zeros_like(v) for i, v in enumerate([model.get_layer("head").kernel,
                                                                   model.get_layer("head").bias])}
    good = dict(sequence=np.int64(1), srv2_keys=np.array([key], np.int64), srv2_rows=np.ones((1, 8), np.float32),
                srv2_evicted=np.zeros(0, np.int64), **dense)
    for bad, message in [(dict(srv2_rows=np.ones((2, 8), np.float32)), "srv2.': apply_delta: rows"),
                         (dict(srv2_keys=np.array([key, key], np.int64), srv2_rows=np.ones((2, 8), np.float32)),
                          "srv2.': apply_delta: keys"),
                         (dict(srv2_evicted=np.array([key], np.int64)), "srv2.': apply_delta: evicted"),
                         (dict(sequence=np.int64(2)), "sequence")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            apply(**{**good, **bad})
        assert np.array_equal(serve(ids=tf.constant(log.keys[:64]))["output_0"].numpy(), before)
    assert int(apply(**good)["sequence"]) == 1           # the good one still applies, as the first delta


def test_serve_3_and_4_errors_name_the_parameter_and_change_nothing(tmp_path):
    """SERVE-3: an export this process did not write, a bad ``updatable`` or ``spare_rows``; SERVE-4: a
    corrupted or truncated delta file, or a FIFO in its place (CKPT-13), is refused by read_delta naming the file; a failed export_delta keeps
    the base (the next delta is still number 1, from the export)."""
    model, table = evicting_model("ref", name="srv3")
    log = synthetic_click_log(1_000, seed=2)
    model.fit(log.keys, log.labels, batch_size=256, epochs=1, verbose=0)
    with pytest.raises(UsageError, match="export_delta: export"):
        export_delta(tmp_path / "nowhere", tmp_path / "d")
    with pytest.raises(UsageError, match="updatable"):
        export_saved_model(model, tmp_path / "e", updatable="yes")
    with pytest.raises(UsageError, match="spare_rows"):
        export_saved_model(model, tmp_path / "e", updatable=True, spare_rows=-1)
    with pytest.raises(UsageError, match="spare_rows"):
        export_saved_model(model, tmp_path / "e", spare_rows=8)
    assert not (tmp_path / "e").exists()
    export_saved_model(model, tmp_path / "export", updatable=True)
    model.fit(log.keys + 1, log.labels, batch_size=256, epochs=1, verbose=0)
    (tmp_path / "blocked").write_text("a file where the delta's parent folder would be")
    with pytest.raises(CheckpointError, match="export_delta: path"):     # it took the log: the next one carries it
        export_delta(tmp_path / "export", tmp_path / "blocked" / "d1")
    assert export_delta(tmp_path / "export", tmp_path / "d1")["sequence"] == 1
    meta, inputs = read_delta(tmp_path / "d1")
    assert meta["sequence"] == 1 and set(inputs) == {"sequence", "srv3_keys", "srv3_rows", "srv3_evicted",
                                                     "dense_0", "dense_1"}
    for damage in ("flip", "truncate"):
        broken = tmp_path / f"broken_{damage}"
        shutil.copytree(tmp_path / "d1", broken)
        data = bytearray((broken / "srv3_rows.data").read_bytes())
        data = data[:-4] if damage == "truncate" else data[:5] + bytes([data[5] ^ 1]) + data[6:]
        (broken / "srv3_rows.data").write_bytes(bytes(data))
        with pytest.raises(CheckpointError, match="srv3_rows.data.*corrupted"):
            read_delta(broken)
    lying = tmp_path / "broken_meta"                  # intact files, but meta.json's shape disagrees with them
    shutil.copytree(tmp_path / "d1", lying)
    meta["inputs"]["srv3_rows"]["shape"][0] += 1
    (lying / "meta.json").write_text(json.dumps(meta))
    manifest = json.loads((lying / "manifest.json").read_text())
    data = (lying / "meta.json").read_bytes()
    manifest["files"]["meta.json"] = {"bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    (lying / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="srv3_rows.data.*meta.json says"):
        read_delta(lying)
    fifo = tmp_path / "broken_fifo"                   # CKPT-13: a FIFO in a file's place is refused, not waited on
    shutil.copytree(tmp_path / "d1", fifo)
    (fifo / "srv3_rows.data").unlink()
    os.mkfifo(fifo / "srv3_rows.data")
    outcome = []

    def read_fifo():
        try:
            read_delta(fifo)
        except CheckpointError as error:
            outcome.append(error)

    reader = threading.Thread(target=read_fifo, daemon=True)    # a blocked open must not hang the suite
    reader.start()
    reader.join(60)
    assert outcome and "srv3_rows.data" in str(outcome[0]) and "not a regular file (a FIFO)" in str(outcome[0])
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    assert int(apply_delta(loaded, tmp_path / "d1")["sequence"]) == 1
    served = loaded.signatures["serving_default"](ids=tf.constant(log.keys[:64]))["output_0"].numpy()
    assert np.array_equal(served, model.predict(log.keys[:64], verbose=0))


@pytest.mark.parametrize("tiered", [False, True], ids=["hbm", "ddr"])
def test_serve_3_the_change_log_lists_exactly_the_keys_touched_and_every_changed_row(backend, tiered, tmp_path):
    """SERVE-3: after keep_change_log, take_change_log lists the keys of the training lookups,
    apply_gradients and evict calls since (so every key whose row changed, appeared or went), none other;
    rows_now reads their rows as export() holds them and changes no statistic; a load makes it None."""
    tiers = dict(host_vocabulary_size=4_096, device_vocabulary_size=64) if tiered else dict(dynamic_expansion=True)
    config = mxrec_ref.TableConfig("log", dim=4, access_threshold=2, eviction_threshold=5,
                                   initializer=UNIFORM, **tiers)
    store = mxrec_ref.open_store(config, mxrec_ref.Adagrad(0.1), backend=backend)
    rng = np.random.default_rng(0)
    for step in range(6):
        result = store.lookup(rng.integers(0, 400, 64), step=step)
        store.apply_gradients(result, rng.normal(size=(len(result.unique_keys), 4)).astype(np.float32), step=step)
    assert store.take_change_log() is None                 # no log kept yet
    store.keep_change_log()
    before, touched = store.export(), []
    for step in range(6, 12):
        keys = rng.integers(300, 700, 64)
        result = store.lookup(keys, step=step)
        store.apply_gradients(result, rng.normal(size=(len(result.unique_keys), 4)).astype(np.float32), step=step)
        touched += [keys, store.evict(step)]
    store.lookup(np.arange(800, 900), train=False)           # evaluation: changes nothing, not logged
    after, stats = store.export(), store.stats()
    logged = store.take_change_log()
    assert np.array_equal(logged, np.unique(np.concatenate(touched)))
    changed = np.setxor1d(before.keys, after.keys)
    common = np.intersect1d(before.keys, after.keys)
    moved = common[(before.values[np.searchsorted(before.keys, common)] !=
                    after.values[np.searchsorted(after.keys, common)]).any(axis=1)]
    assert np.isin(np.union1d(changed, moved), logged).all() and len(moved) > 0 and len(changed) > 0
    held, rows = store.rows_now(logged)
    assert np.array_equal(logged[held], np.intersect1d(logged, after.keys))
    assert np.array_equal(rows, after.values[np.searchsorted(after.keys, logged[held])])
    assert store.stats() == stats and store.export().differences(after) == []
    assert len(store.take_change_log()) == 0                 # taken: the log restarted
    store.save(tmp_path / "ckpt")
    store.load(tmp_path / "ckpt")
    assert store.take_change_log() is None                 # rows replaced wholesale: the log cannot say
    assert len(store.take_change_log()) == 0


@pytest.mark.parametrize("tf1_backend", ["ref", "fast"])
def test_serve_1_and_5_the_tf1_export_takes_deltas_too(tf1_backend, tmp_path):
    """SERVE-1 for mxrec_ref.tf.export_saved_model(updatable=True): a sparse_lookup graph trained on after the
    export (new keys, dense weights) and served through deltas without mxrec_ref, bit for bit as session.run."""
    if mx.is_initialized():
        mx.terminate_config_initializer()
    graph = tf.Graph()
    with graph.as_default():
        mx.init(backend=tf1_backend)
        table = mx.create_table(tf.int64, 4, "user", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                                device_vocabulary_size=500)
        ids = tf.compat.v1.placeholder(tf.int64, [None, 2], name="ids")
        head = tf.keras.layers.Dense(1)
        logits = tf.reduce_sum(head(tf.reshape(mx.sparse_lookup(table, ids, modify_graph=True), [-1, 8])), axis=1)
        evaluation = mx.sparse_lookup(table, ids, modify_graph=True, is_train=False, serving_default_value=0.25)
        eval_logits = tf.reduce_sum(head(tf.reshape(evaluation, [-1, 8])), axis=1)
        loss = tf.reduce_mean(tf.square(logits - 1.0))
        _, sparse = mx.get_dense_and_sparse_variable()
        dense = tf.compat.v1.trainable_variables()
        train = [adagrad.create_hash_optimizer(learning_rate=0.2).apply_gradients(
                     zip(tf.gradients(loss, sparse), sparse)),
                 tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=dense)]
        session = tf.compat.v1.Session()
        session.run(tf.compat.v1.global_variables_initializer())
    x = np.random.default_rng(0).integers(0, 50, (32, 2))
    query = np.concatenate([x, x + 100, [[999, -1]]])
    np.save(tmp_path / "x.npy", query)
    outputs = {"output_0": eval_logits}
    try:
        for _ in range(3):
            session.run(train, {ids: x})
        with pytest.raises(UsageError, match="spare_rows"):
            mx.export_saved_model(session, {"ids": ids}, outputs, tmp_path / "bad", spare_rows=4)
        mx.export_saved_model(session, {"ids": ids}, outputs, tmp_path / "export", updatable=True, spare_rows=8)
        np.save(tmp_path / "expect0.npy", session.run(eval_logits, {ids: query}))
        for _ in range(3):
            session.run(train, {ids: x + 100})                  # 40-odd new keys: past the 8 spare rows
        summary = export_delta(tmp_path / "export", tmp_path / "delta1")
        np.save(tmp_path / "expect1.npy", session.run(eval_logits, {ids: query}))
    finally:
        session.close()
        mx.terminate_config_initializer()
    assert summary["tables"]["user"]["keys"] > 8 and not summary["tables"]["user"]["full"]
    assert not np.array_equal(np.load(tmp_path / "expect0.npy"), np.load(tmp_path / "expect1.npy"))
    run_server(tmp_path, ["expect0", "delta1", "expect1"])


def test_serve_3_a_sharded_store_cannot_log_so_its_deltas_are_full():
    """SERVE-3: ShardedStore overrides the logged calls (its collectives), so its log says None (and
    export_delta writes a full delta) even after calls that would be logged on a plain store."""
    from mxrec_ref.distributed import ShardedStore, VirtualWorld

    config = mxrec_ref.TableConfig("shard", dim=4, dynamic_expansion=True)

    def rank(index, comm):
        store = ShardedStore(mxrec_ref.open_store(config, backend="fast"), comm)
        store.keep_change_log()
        store.lookup(np.array([1, 2, 3]), step=0)
        return store.take_change_log()

    assert VirtualWorld(2).run(rank) == [None, None]


def test_serve_3_a_change_log_nobody_takes_gives_up_instead_of_growing(backend, monkeypatch):
    """SERVE-3: past CHANGE_LOG_MIN_KEYS and 4x the table's rows the log keeps nothing and says None (a full
    delta); taken, it starts again."""
    from mxrec_ref import contract

    monkeypatch.setattr(contract, "CHANGE_LOG_MIN_KEYS", 100)
    store = mxrec_ref.open_store(mxrec_ref.TableConfig("grow", dim=2, dynamic_expansion=True), backend=backend)
    store.keep_change_log()
    for step in range(4):                                   # 4 x 10 keys: under the limit
        store.lookup(np.arange(10) + 10 * step, step=step)
    assert len(store.take_change_log()) == 40
    for step in range(4, 16):                               # 12 x 10 = 120 keys: under max(100, 4 x 40 rows)
        store.lookup(np.arange(10), step=step)
    assert len(store.take_change_log()) == 10
    for step in range(16, 40):                              # 24 x 10 = 240 > max(100, 4 x 40)
        store.lookup(np.arange(10), step=step)
    assert store._change_log == [contract.ALL_KEYS] and store.take_change_log() is None
    store.lookup(np.array([5]), step=40)
    assert store.take_change_log().tolist() == [5]
