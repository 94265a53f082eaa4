"""The one reader of real data files (PLAN-10..PLAN-13, spec/plan.md): `plan --data` and `train --data`
read the same formats through mxrec_ref/readers.py, as a stream bounded by --rows, with one-line errors
naming the file, the line and the column, and one key function for string ids (KERAS-5's)."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref import cli
from mxrec_ref.plan import sources

HERE = Path(__file__).resolve()
SHARED = next((p / "shared" / "data" for p in (HERE.parents[2], HERE.parents[3]) if (p / "shared" / "data").is_dir()),
              None)
CRITEO = None if SHARED is None else SHARED / "criteo_kaggle_sample" / "dac_train_head900.txt"


def _criteo_lines(n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        dense = [str(int(v)) if v >= 0 else "" for v in rng.integers(-2, 50, 13)]
        cats = [f"{int(v):08x}" if v % 7 else "" for v in rng.integers(0, 2**32, 26)]
        lines.append("\t".join([str(i % 2)] + dense + cats) + "\n")
    return "".join(lines)


@pytest.fixture
def files(tmp_path):
    """One small file of each format, each with labels."""
    import tensorflow as tf
    criteo = tmp_path / "day.txt"
    criteo.write_text(_criteo_lines(64))
    csv = tmp_path / "ids.csv"
    csv.write_text("user,city,label,timestamp\n" + "".join(f"{i % 9},city{i % 5},{i % 2},{100 + i}\n"
                                                           for i in range(64)))
    record = tmp_path / "ids.tfrecord"
    with tf.io.TFRecordWriter(str(record)) as writer:
        for i in range(64):
            feature = {"user": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 9])),
                       "label": tf.train.Feature(float_list=tf.train.FloatList(value=[i % 2]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    movielens = tmp_path / "ml"
    movielens.mkdir()
    (movielens / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + "".join(
        f"{i % 7},{i % 11},{1 + i % 5},{1000 - i}\n" for i in range(64)))
    return {"criteo": criteo, "csv": csv, "tfrecord": record, "movielens": movielens}


# ------------------------------------------------------------------------------- PLAN-10
@pytest.mark.parametrize("kind", ["criteo", "csv", "tfrecord", "movielens"])
def test_plan_10_train_reads_what_plan_reads(files, kind):
    from mxrec_ref import train
    path = files[kind]
    sample = sources.open_sample(str(path), None)
    data = train.load_data(train.TrainConfig(data=str(path)))
    assert sample.rows == len(data.labels) == 64 and data.categorical.shape == (64, len(sample.columns))
    assert list(data.field_names) == list(sample.columns)
    if kind in ("criteo", "movielens"):          # keys already behind their field: the plan's keys are the job's
        order = np.argsort(sample.timestamps, kind="stable") if sample.timestamps is not None else slice(None)
        for i, name in enumerate(data.field_names):
            assert np.array_equal(data.categorical[:, i], sample.columns[name][order])


@pytest.mark.skipif(CRITEO is None or not CRITEO.is_file(), reason="shared Criteo sample not present")
def test_plan_10_train_on_the_shared_criteo_sample(tmp_path, capsys):
    """The issue's case: `train --data` on a Criteo file answered "movielens: no ratings.csv"."""
    code = cli.main(["train", "--data", str(CRITEO), "--steps", "4", "--batch-size", "64", "--eval-every", "4",
                     "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "dac_train_head900.txt" in captured.out and "ratings.csv" not in captured.err
    assert sources.open_sample(str(CRITEO), None).rows == 900


def test_plan_10_train_reads_the_first_rows_of_a_file_and_text_ids_inside_a_graph(files):
    import tensorflow as tf

    from mxrec_ref import train
    assert len(train.load_data(train.TrainConfig(data=str(files["criteo"]), rows=10)).labels) == 10
    eager = sources.open_sample(str(files["csv"]), None).columns["city"]
    with tf.Graph().as_default():                  # as after a TF1 script: the hash runs in a graph of its own
        assert np.array_equal(sources.open_sample(str(files["csv"]), None).columns["city"], eager)


def test_plan_10_train_refuses_a_file_without_labels(tmp_path):
    from mxrec_ref import UsageError, train
    path = tmp_path / "ids.csv"
    path.write_text("user,item\n1,2\n3,4\n")
    with pytest.raises(UsageError, match=r"train: --data: 'ids.csv' has no labels"):
        train.load_data(train.TrainConfig(data=str(path)))


# ------------------------------------------------------------------------------- PLAN-11
def test_plan_11_rows_bounds_the_memory_of_reading_a_million_row_csv(tmp_path):
    """`plan --rows 1000` on a 10^6-row CSV read the whole file first (483 MB at its peak); the reader
    stops after 1000 rows, so the reading's peak (tracemalloc: Python and numpy allocations) stays
    far below what the whole file needs."""
    path = tmp_path / "big.csv"
    n = 10**6
    with open(path, "w") as f:
        f.write("user,item,timestamp\n")
        block = 10**5
        for start in range(0, n, block):
            i = np.arange(start, start + block)
            f.write("".join(f"{u},{v},{t}\n" for u, v, t in zip(i % 50_000, i % 7_919, i)))
    tracemalloc.start()
    try:
        sample = sources.open_sample(str(path), None, rows=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sample.rows == 1000 and sample.columns["user"][-1] == 999 and sample.timestamps[-1] == 999
    assert peak < 4 * 2**20, f"reading 1000 rows peaked at {peak / 2**20:.1f} MiB"


# ------------------------------------------------------------------------------- PLAN-12
def _plan_error(capsys, path, *extra) -> str:
    code = cli.main(["plan", "--data", str(path), "--no-curves", "--batch", "2", *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("content,expected", [
    ("user,item\n1,2\n18446744073709551615,3\n", r"line 3, column 'user': id 18446744073709551615 is outside int64"),
    ("user,item\n1,2\n9223372036854775808,3\n", r"line 3, column 'user': id 9223372036854775808 is outside int64"),
    ("user,item\n1,2\n3\n", r"line 3: 1 fields, the header has 2 \(no value for column 'item' onward\)"),
    ("user,item\n1,2\n3,4,5\n", r"line 3: 3 fields, the header has 2"),
    ("user,timestamp\n1,2\n3,soon\n", r"line 3, column 'timestamp': 'soon' is not an integer"),
    (b"user,item\n1,2\n3,\xff\xfe\n", r"line 3: byte 0xff is not UTF-8 text \(at byte 3 of the line\)"),
], ids=["2^64-1", "2^63", "short row", "long row", "bad timestamp", "not utf-8"])
def test_plan_12_csv_problems_are_one_line_naming_file_line_and_column(tmp_path, capsys, content, expected):
    path = tmp_path / "ids.csv"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    err = _plan_error(capsys, path)
    assert f"plan: --data: {str(path)!r}" in err
    assert pytest.importorskip("re").search(expected, err), err


def test_plan_12_criteo_problems_name_line_and_column(tmp_path, capsys):
    path = tmp_path / "day.txt"
    lines = _criteo_lines(3).splitlines(keepends=True)
    parts = lines[1].split("\t")
    parts[14 + 4] = "zz"                                      # C5 of line 2
    path.write_text(lines[0] + "\t".join(parts) + lines[2])
    assert "line 2, column 'C5': 'zz' is not a hexadecimal id" in _plan_error(capsys, path)
    path.write_text(lines[0] + "1\t2\t3\n")
    assert "line 2: 3 tab-separated fields, the first line has 40" in _plan_error(capsys, path)


def test_plan_12_a_corrupt_tfrecord_is_one_line_naming_the_record(files, tmp_path, capsys):
    data = bytearray(files["tfrecord"].read_bytes())
    data[len(data) // 2] ^= 0xFF                               # a flipped byte: a record's CRC fails
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(data))
    err = _plan_error(capsys, path)
    assert f"{str(path)!r} record " in err and "not a readable TFRecord" in err


def test_plan_12_missing_config_and_unwritable_out_name_the_flag(files, tmp_path, capsys):
    err = _plan_error(capsys, files["csv"], "--config", str(tmp_path / "nope.json"))
    assert "plan: --config: cannot read" in err and "nope.json" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = _plan_error(capsys, files["csv"], "--out", str(blocker / "plots"))
    assert "plan: --out: cannot make the folder" in err


# ------------------------------------------------------------------------------- PLAN-13
def test_plan_13_string_ids_get_the_keras_layers_keys_in_the_plan_and_the_training_job(tmp_path):
    """The planner hashed CSV text with CRC-32, the Keras layer with Fingerprint64: now one function."""
    import tensorflow as tf

    from mxrec_ref import data as datasets
    from mxrec_ref import train
    from mxrec_ref.keras import Embedding, TableGradientTape, string_keys
    cities = ["Paris", "東京", "São Paulo", "x" * 100, "Paris"]
    path = tmp_path / "cities.csv"
    path.write_text("city,label\n" + "".join(f"{c},1\n" for c in cities), encoding="utf-8")
    planned = sources.open_sample(str(path), None).columns["city"]
    assert np.array_equal(planned, string_keys(tf.constant(cities)).numpy())
    layer = Embedding(2, name="cities")
    with TableGradientTape() as tape:                          # a training lookup: the layer's keys are stored
        loss = tf.reduce_sum(layer(tf.constant(cities), training=True))
    tape.gradient_and_apply(loss, [])
    assert sorted(layer.store.export().keys.tolist()) == sorted(set(planned.tolist()))
    trained = train.load_data(train.TrainConfig(data=str(path))).categorical[:, 0]
    mask = (1 << datasets.FIELD_SHIFT) - 1
    assert np.array_equal(trained, planned & mask)              # field 0: the job's field offset is 0 << 40


def test_plan_13_a_blank_cell_is_the_padding_key_not_id_0(tmp_path):
    path = tmp_path / "ids.csv"
    path.write_text("user,item\n0,1\n,2\n0,\n")
    sample = sources.open_sample(str(path), None)
    assert sample.columns["user"].tolist() == [0, -1, 0] and sample.columns["item"].tolist() == [1, 2, -1]
