"""The key pipeline in the TF layer (spec/pipeline.md, PIPE-8): training with the pipeline on and off gives
the same losses, tables, statistics and checkpoints, bit for bit -- a FeatureSpec model (dynamic and static
shape, admission, and saves, evictions and threshold changes between steps while tf.data has batches
resolved ahead), the graph-modification model, the Wide&Deep job (`mxrec-ref train`, with its EvictHook,
checkpoints and evaluations) and the upstream-shaped two-tower example in every lookup style, on 1 and 2
ranks.  With the pipeline on, the steps' lookups must actually have taken batches the input pipeline
resolved ahead (else the comparison would prove nothing)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tf_model
from mxrec_ref import train
from mxrec_ref.pipeline import SWITCH
from test_graph import _modify_mode
from test_sharding_examples import EXAMPLES, SMALL, STYLES, launch, phase_lines

# the example's batch timestamps are mxRec's ReturnTimestamp, the wall clock: two runs differ in their last-seen times
NO_WALL_CLOCK = {"USE_TIMESTAMP": "0"}
# TF writes these with its own timestamps, and the graph holds the pipeline's op: everything else must match
TF_OWN = ("checkpoint", "graph.pbtxt", "events.out.tfevents")


def _files(folder) -> dict[str, bytes]:
    root = Path(folder)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(TF_OWN) and not p.name.endswith(".meta")}


def _train_feature_spec(backend, tmp_path, *, static):
    handles = tf_model.build(backend, access_threshold=2, eviction_threshold=3, send_count=40 if static else None)
    stores = {name: table.store for name, table in handles["tables"].items()}
    session = tf.compat.v1.Session(graph=handles["graph"])
    session.run(handles["init"])
    losses = []
    for step in range(14):
        losses.append(session.run([handles["loss"], handles["train"]])[0])
        if step == 4:     # calls between steps, while tf.data's prefetch holds batches resolved ahead (PIPE-4)
            for name, store in stores.items():
                store.save(tmp_path / name)
                store.evict()          # now: the table clock (the batches' timestamps)
                store.set_threshold(1)
    taken = sum(table.ahead.taken for table in handles["tables"].values())
    return losses, {n: s.export() for n, s in stores.items()}, {n: s.stats() for n, s in stores.items()}, taken


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_pipe_8_a_feature_spec_model_is_the_same_with_the_pipeline_on_and_off(backend, monkeypatch, tmp_path, static):
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        runs[switch] = _train_feature_spec(backend, tmp_path / switch, static=static)
    (on_losses, on_state, on_stats, on_taken), (off_losses, off_state, off_stats, off_taken) = runs["1"], runs["0"]
    assert on_taken >= 2 * 12 and off_taken == 0      # two tables; tf.data resolved (almost) every batch ahead
    assert on_losses == off_losses
    assert all(on_state[n].differences(off_state[n]) == [] for n in on_state)
    assert on_stats == off_stats and on_stats["item"]["evicted"] > 0
    assert _files(tmp_path / "1") == _files(tmp_path / "0")


def test_pipe_8_the_graph_modification_model_is_the_same_with_the_pipeline_on_and_off(backend, monkeypatch):
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        handles = _modify_mode(backend, access_threshold=2, optimizer="lazy_adam", multi_lookup=True)
        with tf.compat.v1.Session(graph=handles["graph"]) as session:
            session.run(handles["init"])
            losses = [session.run([handles["loss"], handles["train"]])[0] for _ in range(12)]
        tables = handles["tables"]
        runs[switch] = (losses, {n: t.store.export() for n, t in tables.items()},
                        {n: t.store.stats() for n, t in tables.items()}, sum(t.ahead.taken for t in tables.values()))
    assert runs["1"][3] >= 2 * 10 and runs["0"][3] == 0
    assert runs["1"][0] == runs["0"][0]
    assert all(runs["1"][1][n].differences(runs["0"][1][n]) == [] for n in runs["1"][1])
    assert runs["1"][2] == runs["0"][2]


def test_pipe_8_the_wide_and_deep_job_is_the_same_with_the_pipeline_on_and_off(backend, monkeypatch, tmp_path):
    """`mxrec-ref train`: evaluations, the EvictHook every 10 steps and checkpoints every 25 steps meet
    batches resolved ahead; the history, statistics and checkpoint files are the same."""
    results = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        config = train.TrainConfig(backend=backend, rows=12_000, steps=60, batch_size=256, eval_every=30,
                                   eviction_threshold=40, evict_step_interval=10, save_checkpoint_steps=25,
                                   checkpoint_dir=str(tmp_path / switch), progress=False)
        results[switch] = train.run(config, echo=lambda *args: None)
    on, off = results["1"], results["0"]
    strip = lambda history: [{k: v for k, v in h.items() if k != "examples_per_second"} for h in history]  # noqa: E731
    assert strip(on["history"]) == strip(off["history"]) and len(on["history"]) == 2
    assert on["stats"] == off["stats"] and on["stats"]["deep"]["evicted"] > 0
    on_files, off_files = _files(tmp_path / "1"), _files(tmp_path / "0")
    assert on_files == off_files and any("sparse" in name for name in on_files)


@pytest.mark.parametrize("style", ["feature_spec", "modify_graph"])
def test_pipe_8_the_upstream_two_tower_example_is_the_same_with_the_pipeline_on_and_off(style, tmp_path,
                                                                                          mxrec_ref_command):
    """One rank: train, reload and train on, predict; the same phase lines and checkpoint files."""
    lines, files = {}, {}
    for switch in ("1", "0"):
        folder = tmp_path / switch
        done = mxrec_ref_command(["run", EXAMPLES / "mxrec_two_tower.py", "--run_mode", "train,load_and_train,predict",
                                  "--model_dir", folder, *SMALL],
                                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **STYLES[style], **NO_WALL_CLOCK,
                                          **{SWITCH: switch}),
                                 timeout=240, cwd="/")
        assert done.returncode == 0, done.stderr[-3000:]
        lines[switch], files[switch] = phase_lines(done.stdout), _files(folder)
    assert [name for name, _ in lines["1"]] == ["train", "load_and_train", "predict"]
    assert lines["1"] == lines["0"]
    assert files["1"] == files["0"] and files["1"]


def test_pipe_8_the_upstream_example_on_two_ranks_is_the_same_with_the_pipeline_on_and_off(tmp_path):
    """Two ranks, graph modification (the sharded store does no work ahead yet, PIPE-6: its batches must
    still come out exact through the pipeline's path)."""
    lines, files = {}, {}
    for switch in ("1", "0"):
        folder = tmp_path / switch
        done = launch(EXAMPLES / "mxrec_two_tower.py", ["--run_mode", "train,predict", "--model_dir", str(folder),
                                                        *SMALL], {**STYLES["modify_graph"], **NO_WALL_CLOCK,
                                                                  SWITCH: switch})
        assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        lines[switch], files[switch] = phase_lines(done.stdout), _files(folder)
    assert [name for name, _ in lines["1"]] == ["train"] * 2 + ["predict"] * 2
    assert lines["1"] == lines["0"]
    assert files["1"] == files["0"] and files["1"]
