"""The sizing planner `mxrec-ref plan` (spec/plan.md, PLAN-1..PLAN-9), and the plan checked against
training through the TF layer (issue 20 item 2)."""
import json

import numpy as np
import pytest

from mxrec_ref import cli
from mxrec_ref.backends import open_store
from mxrec_ref.config import TableConfig
from mxrec_ref.plan import recommend, replay, sources, tables

BATCH = 32
STEPS = 16


def click_columns(rows=BATCH * STEPS, seed=3):
    """Zipf users (one id a row) and items (two a row), one timestamp per row (the --source generator)."""
    rng = np.random.default_rng(seed)
    return {"user": rng.zipf(1.3, size=rows) % 300, "item": rng.zipf(1.2, size=(rows, 2)) % 900 + 1000,
            "timestamp": 1000 + np.arange(rows, dtype=np.int64) * 10, "label": (np.arange(rows) % 3 == 0) * 1.0}


def sample():
    return sources.from_generator("test_plan:click_columns")


def planned(access_threshold=2, eviction_threshold=600, optimizer="adagrad", host=0):
    opt = tables.optimizer_named(optimizer)
    return [tables.PlannedTable(TableConfig(name=name, dim=4, access_threshold=access_threshold,
                                            eviction_threshold=eviction_threshold, host_vocabulary_size=host),
                                (name,), opt)
            for name in ("user", "item")]


def plan_all(storage, *, ranks=1, backend="fast", margin=0.1, curves=False, eviction_threshold=600):
    s = sample()
    sched = replay.schedule(s, batch_size=BATCH, ranks=ranks)
    return s, sched, [recommend.plan_table(s, t, sched, storage=storage, margin=margin, backend=backend,
                                           curves=curves) for t in planned(eviction_threshold=eviction_threshold)]


def test_plan_1_replay_is_one_store_per_owner_rank_fed_as_training_feeds_it():
    """PLAN-1: steps cut as N x B rows, each owner's store gets the keys it owns; on one rank the replay
    is exactly a store looked up with each step's keys and evicted after it."""
    s = sample()
    table = planned()[1]
    config = tables.in_storage(table.config, "hbm", device=5000)
    two = replay.schedule(s, batch_size=BATCH, ranks=2)
    assert two.steps == STEPS // 2
    trace = replay.replay_stores(s, table, config, two, backend="ref")
    shares = replay.owner_shares(replay.batch_keys(s, ("item",), two, 0), 2)
    assert all((share % 2 == owner).all() for owner, share in enumerate(shares))
    assert (trace.owner_peak.sum(axis=1) >= trace.size).all()
    one = replay.schedule(s, batch_size=BATCH)
    trace = replay.replay_stores(s, table, config, one, backend="ref")
    store = open_store(config, table.optimizer, backend="ref")
    for step in range(one.steps):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        store.lookup(s.columns["item"][rows], train=True, step=step, timestamp=int(s.timestamps[rows].max()))
        store.evict()
        assert trace.size[step] == store.size()
    assert trace.totals["admitted"] == store.stats()["admitted"]


def test_plan_2_minimums_are_the_largest_distinct_keys_and_one_below_fails_at_the_reported_step():
    """PLAN-2: send_count's and the device tier's minimum from the batches' distinct keys, per rank and owner."""
    s, sched, plans = plan_all("ddr", ranks=2)
    item = plans[1]
    batches = [[np.unique(s.columns["item"][sched.rows(t, r)]) for r in range(2)] for t in range(sched.steps)]
    per_rank = np.array([[len(b) for b in step] for step in batches])
    per_owner = np.array([[len(np.unique(np.concatenate(step))[np.unique(np.concatenate(step)) % 2 == o])
                           for o in range(2)] for step in batches])
    assert item.sizes.min_send_count == per_rank.max()
    assert item.sizes.min_device == per_owner.max()
    assert item.sizes.device_fails_at == int(np.flatnonzero(per_owner.max(axis=1) == per_owner.max())[0])
    assert item.sizes.send_count_fails_at == int(np.flatnonzero(per_rank.max(axis=1) == per_rank.max())[0])
    hbm = plan_all("hbm")[2][1]
    assert hbm.sizes.min_device == hbm.trace.owner_peak.max()   # EXP-2: an HBM table holds every row


def test_plan_3_margin_is_exact_and_checked(capsys):
    """PLAN-3: ceil(minimum x (1 + margin)) on the decimal margin; a bad margin names --margin."""
    assert recommend.with_margin(100, 0.1) == 110 and recommend.with_margin(101, 0.1) == 112
    assert recommend.with_margin(7, 0) == 7 and recommend.with_margin(0, 0.5) == 1
    assert cli.main(["plan", "--margin", "-0.5", "--rows", "2048"]) == 2
    assert "--margin" in capsys.readouterr().err


def test_plan_4_host_and_disk_sizes_and_the_spill_step():
    """PLAN-4: DDR host = its peak with the margin; SSD keeps the host budget and reports the first spill."""
    _, _, ddr = plan_all("ddr")
    for plan in ddr:
        assert plan.sizes.host == recommend.with_margin(int(plan.trace.placement["host_rows"].max()), 0.1)
        assert plan.sizes.spill_step is None and plan.trace.totals["disk_rows"] == 0
    _, _, ssd = plan_all("ssd", eviction_threshold=None)
    item = ssd[1]
    assert item.sizes.host == item.sizes.device      # no host size configured: the device size
    spills = np.flatnonzero(item.trace.traffic["host_to_disk_rows"])
    assert len(spills) and item.sizes.spill_step == spills[0]
    assert item.sizes.ssd == recommend.with_margin(int(item.trace.placement["disk_rows"].max()), 0.1)


def test_plan_4_an_ssd_table_over_two_owners_spills_into_each_owner_folder(monkeypatch):
    """PLAN-4 on two owner ranks: each owner's store opens as a job's rank opens it (backends.rank_config,
    SHARD-14), its SSD files in its own rank<r> folder of one temporary folder, and both owners spill."""
    opened = []

    def recording_open_store(config, *args, **kwargs):
        opened.append(config.ssd_data_path)
        return open_store(config, *args, **kwargs)

    monkeypatch.setattr(replay, "open_store", recording_open_store)
    s = sample()
    sched = replay.schedule(s, batch_size=8, ranks=2)        # 32 steps: enough keys per owner to spill
    plan = recommend.plan_table(s, planned(eviction_threshold=None)[1], sched, storage="ssd", margin=0.1,
                                backend="fast", curves=False)
    assert [path[-1].split("/")[-1] for path in opened] == ["rank0", "rank1"]
    assert opened[0][0].rsplit("/", 1)[0] == opened[1][0].rsplit("/", 1)[0]
    assert (plan.trace.placement["disk_rows"].max(axis=0) > 0).all()
    assert plan.sizes.spill_step is not None


def test_plan_6_curves_over_alternative_thresholds():
    """PLAN-6: admission off holds every key seen; a higher access threshold never holds more; a longer
    eviction threshold never holds fewer."""
    s, _, plans = plan_all("ddr", curves=True)
    item = plans[1]
    by = {(c.access_threshold, c.eviction_threshold): c.size for c in item.curves}
    assert {(None, 600), (2, 600), (4, 600), (8, 600), (2, 300), (2, 1200)} <= set(by)
    assert (by[(2, 600)] == item.trace.size).all()          # the configured one is the replay's own
    assert (by[(None, 600)] >= by[(2, 600)]).all() and (by[(2, 600)] >= by[(4, 600)]).all()
    assert (by[(2, 300)] <= by[(2, 600)]).all() and (by[(2, 600)] <= by[(2, 1200)]).all()


def test_plan_7_deterministic_and_the_same_for_both_backends(tmp_path, capsys):
    """PLAN-7: the JSON document is the same on every run and for --backend ref and fast."""
    documents = []
    for backend in ("fast", "ref", "fast"):
        assert cli.main(["plan", "--source", "test_plan:click_columns", "--batch", "32", "--storage", "ssd",
                         "--access-threshold", "2", "--eviction-threshold", "500", "--json",
                         "--backend", backend]) == 0
        documents.append(capsys.readouterr().out)
    assert documents[0] == documents[1] == documents[2]
    assert json.loads(documents[0])["tables"]["features"]["columns"] == ["user", "item"]


def test_plan_8_sources_and_tables(tmp_path, capsys):
    """PLAN-8: CSV, TFRecord, config and script tables; a missing column names the table and the column."""
    tf = pytest.importorskip("tensorflow")
    data = click_columns(64)
    csv = tmp_path / "ids.csv"
    csv.write_text("user,item,label,timestamp\n" + "".join(
        f"{u},{i},1,{t}\n" for u, i, t in zip(data["user"], data["item"][:, 0], data["timestamp"])))
    read = sources.open_sample(str(csv), None)
    assert sorted(read.columns) == ["item", "user"] and (read.columns["user"] == data["user"]).all()
    assert (read.timestamps == data["timestamp"]).all()
    record = tmp_path / "ids.tfrecord"
    with tf.io.TFRecordWriter(str(record)) as writer:
        for u, items in zip(data["user"], data["item"]):
            features = {"user": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(u)])),
                        "item": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(x) for x in items]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    read = sources.open_sample(str(record), None)
    assert (read.columns["item"] == data["item"]).all() and read.timestamps is None
    config = tmp_path / "tables.json"
    config.write_text(json.dumps({"tables": [{"name": "t", "dim": 4, "columns": ["item"],
                                              "access_threshold": 2}]}))
    assert cli.main(["plan", "--data", str(csv), "--config", str(config), "--batch", "16", "--no-curves"]) == 0
    assert "table 't'" in capsys.readouterr().out
    assert cli.main(["plan", "--data", str(csv), "--config", str(config), "--column", "t=movie"]) == 2
    assert "table 't': column" in capsys.readouterr().err
    script = tables.from_script("examples/mxrec_two_tables.py")
    assert [(t.name, t.columns, t.config.access_threshold, t.config.eviction_threshold) for t in script] == \
        [("user", ("user",), 2, 4000), ("item", ("item",), 2, 4000)]
    assert script[0].optimizer.kind == "LazyAdam"


def test_plan_8_missing_column_is_named():
    """PLAN-8: a column the sample lacks raises UsageError naming the table and the column."""
    from mxrec_ref.errors import UsageError

    with pytest.raises(UsageError, match=r"table 'user': column: .*'uid'"):
        tables.with_columns(planned(), {"user": ["uid"]}, sample().columns)


def test_plan_9_outputs_table_json_and_plots(tmp_path, capsys):
    """PLAN-9: the terminal table with the snippet, plan.json and three PNGs per table under --out."""
    out = tmp_path / "out"
    assert cli.main(["plan", "--rows", "4096", "--batch", "256", "--access-threshold", "2", "--no-curves",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "device_vocabulary_size" in printed and "create_table(tf.int64, 8, 'features'" in printed
    document = json.loads((out / "plan.json").read_text())
    table = document["tables"]["features"]
    assert table["device_vocabulary_size"]["recommended"] == \
        recommend.with_margin(table["device_vocabulary_size"]["minimum"], 0.1)
    assert sorted(p.name for p in out.glob("*.png")) == ["features_batch_keys.png", "features_size.png",
                                                         "features_traffic.png"]
    assert all((out / name).read_bytes()[:4] == b"\x89PNG" for name in ("features_size.png",))


# ------------------------------------------------ the plan against training (issue 20 item 2)
COMPARED = ("size", "device_rows", "host_rows", "disk_rows", *replay.TRAFFIC, "admitted", "evicted",
            "key_positions", "hot_hit_positions")
EVICTION = 3000       # timestamps advance 320 a step: keys leave after about ten steps


def tf_train(tmp_path, plans, *, device=None, send_count=None):
    """Train on the sample through the TF layer as an mxRec user writes it (create_table with the plan's
    sizes, FeatureSpecs, the insert function, a hash optimizer, EvictHook every step); ``device`` /
    ``send_count``: {table: value} overrides.  Returns (steps that ran, the error or None, the tables)."""
    import tensorflow as tf

    import mxrec_ref.tf as mx
    import tf_model
    from mxrec_ref.tf.optimizers import adagrad

    tf_model.fresh_graph()
    graph = tf.Graph()
    try:
        with graph.as_default():
            mx.init(backend="fast", use_dynamic=send_count is None)
            initializer = tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1)
            tables, specs = {}, []
            for plan in plans:
                c = plan.config
                name = c.name
                sizes = dict(device_vocabulary_size=(device or {}).get(name, c.device_vocabulary_size),
                             host_vocabulary_size=c.host_vocabulary_size)
                if c.ssd_vocabulary_size:
                    sizes.update(ssd_vocabulary_size=c.ssd_vocabulary_size, ssd_data_path=[str(tmp_path / name)])
                tables[name] = mx.create_table(tf.int64, 4, name, initializer, **sizes)
                specs.append(mx.FeatureSpec(name, table_name=name, access_threshold=c.access_threshold,
                                            eviction_threshold=c.eviction_threshold))
            stamp = mx.FeatureSpec("timestamp", is_timestamp=True)
            ds = tf.data.Dataset.from_tensor_slices(click_columns()).batch(BATCH, drop_remainder=True)
            ds = ds.map(lambda b: {**b, "timestamp": tf.reduce_max(b["timestamp"])})
            batch = tf.compat.v1.data.make_one_shot_iterator(ds.map(mx.get_asc_insert_func(specs + [stamp]))).get_next()
            plan_of = {plan.config.name: plan for plan in plans}
            embs = [mx.sparse_lookup(tables[s.table_name], s, batch=batch, send_count=(send_count or {}).get(
                        s.table_name, plan_of[s.table_name].config.send_count)) for s in specs]
            global_step = tf.compat.v1.train.get_or_create_global_step()
            loss, train, _, _ = tf_model.head(embs, tf.cast(batch["label"], tf.float32),
                                              adagrad.create_hash_optimizer(learning_rate=0.1), global_step)
            hook = mx.EvictHook(evict_enable=True, evict_step_interval=1)
            steps, error = 0, None
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                hook.begin()
                try:
                    for _ in range(STEPS):
                        session.run(train)
                        hook.after_run(None, None)
                        steps += 1
                except tf.errors.OpError as caught:
                    error = caught
            return steps, error, tables
    finally:       # the next test file may build its own graph without forgetting ours
        tf_model.fresh_graph()


def reality_plans(storage):
    s = sample()
    sched = replay.schedule(s, batch_size=BATCH)
    return [recommend.plan_table(s, t, sched, storage=storage, margin=0.1, curves=False)
            for t in planned(eviction_threshold=EVICTION, host=8 if storage == "ssd" else 0)]


@pytest.mark.parametrize("storage", ["ddr", "ssd"])
def test_plan_5_training_with_the_recommended_sizes_moves_exactly_the_predicted_rows(storage, tmp_path, monkeypatch):
    """PLAN-5: the recommended sizes train without a capacity error, and every table's tier traffic,
    placement, size and hot hits after training equal the plan's (tolerance 0)."""
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "4")       # read by the replay's and the training's stores alike
    plans = reality_plans(storage)
    steps, error, trained = tf_train(tmp_path, plans)
    assert error is None and steps == STEPS
    for plan in plans:
        observed = trained[plan.config.name].store.stats()
        assert {k: observed[k] for k in COMPARED} == {k: plan.trace.totals[k] for k in COMPARED}
        assert plan.trace.totals["device_to_host_rows"] > 0 and plan.trace.totals["hot_hit_positions"] > 0
    if storage == "ssd":          # the configured host budget is kept (PLAN-4), and rows went to disk and back
        assert all(plan.sizes.host == 8 and plan.trace.totals["disk_to_host_rows"] > 0 for plan in plans)


def test_plan_5_one_below_the_minimum_fails_at_the_predicted_step(tmp_path):
    """PLAN-5: device_vocabulary_size one below the minimum raises CapacityError at the step the plan
    named; send_count one below its minimum raises the send_count error at its predicted step."""
    plans = reality_plans("ddr")
    item = plans[0] if plans[0].config.name == "item" else plans[1]
    assert item.config.name == "item"
    steps, error, _ = tf_train(tmp_path, plans, device={"item": item.sizes.min_device - 1})
    assert steps == item.sizes.device_fails_at and error is not None
    assert "CapacityError" in error.message and "device_vocabulary_size" in error.message
    steps, error, _ = tf_train(tmp_path, plans, send_count={"item": item.sizes.min_send_count - 1})
    assert steps == item.sizes.send_count_fails_at and error is not None
    assert "send_count" in error.message and "'item'" in error.message
