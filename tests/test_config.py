"""Table and optimizer configuration (spec/config.md)."""
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mxrec_ref import (SGD, Adagrad, ConfigError, Ftrl, Initializer, LazyAdam, TableConfig, open_store)


def test_cfg_1_name_rules():
    TableConfig("user_id.v2", dim=4)
    TableConfig("a..b", dim=4)
    for bad in ("", "a" * 101, "has space", "x/y", 3):
        with pytest.raises(ConfigError, match="name"):
            TableConfig(bad, dim=4)


@pytest.mark.parametrize("bad", [".", "..", ".hidden", ".t.writing-1", "abc\n", "abc\r", "a\0b", "a\\b", "/abs",
                                 "t\u00e9", "\u2024", "a\tb", "\ufeffa"])
def test_cfg_1_a_name_is_one_safe_path_component(bad):
    """A name is the table's checkpoint folder: '.' and '..' would name the
    checkpoint folder itself or its parent, a leading '.' the save's temporary
    folders; '$' used to let a trailing newline through."""
    with pytest.raises(ConfigError, match=r"name: must be 1\.\.100 characters .* not starting with '\.'"):
        TableConfig(bad, dim=4)


def test_cfg_1_create_table_refuses_unsafe_names():
    tf = pytest.importorskip("tensorflow")
    import mxrec_ref.tf as mx

    with tf.Graph().as_default():
        mx.init(backend="ref")
        try:
            for bad in (".", "..", "abc\n"):
                with pytest.raises(ConfigError, match="name"):
                    mx.create_table(tf.int64, 4, bad, tf.compat.v1.zeros_initializer(), device_vocabulary_size=4)
        finally:
            mx.terminate_config_initializer()


names = st.one_of(  # arbitrary unicode with separators, dots and control characters; and mostly-valid names
    st.text(alphabet=st.one_of(st.characters(), st.sampled_from("._/\\\0\n-aZ09")), min_size=0, max_size=120),
    st.from_regex(r"[A-Za-z0-9_.]{1,110}\n?", fullmatch=True))


@settings(max_examples=60, deadline=None)
@given(name=names)
def test_cfg_1_every_accepted_name_round_trips_beside_other_tables(backend, name):
    """Any text: accepted names save and load in a folder shared with other
    tables, which keep their own rows; rejected ones raise ConfigError naming
    ``name`` (CFG-1)."""
    try:
        config = TableConfig(name, dim=2, device_vocabulary_size=4)
    except ConfigError as error:
        assert str(error).startswith(f"table {name!r}: name: ")
        return
    with tempfile.TemporaryDirectory() as folder:
        others = {}
        for other in ("neighbour", "t"):
            if other != name:
                store = open_store(TableConfig(other, dim=2, device_vocabulary_size=4), backend=backend)
                store.lookup(np.array([7, 8]), step=0)
                store.save(folder)
                others[other] = store.export()
        store = open_store(config, backend=backend)
        store.lookup(np.array([1, 2, 3]), step=1)
        path = store.save(folder)
        assert os.path.dirname(path) == folder and os.path.basename(path) == name
        fresh = open_store(config, backend=backend)
        fresh.load(folder)
        assert fresh.export().differences(store.export()) == []
        for other, state in others.items():
            again = open_store(TableConfig(other, dim=2, device_vocabulary_size=4), backend=backend)
            again.load(folder)
            assert again.export().differences(state) == []
        assert sorted(os.listdir(folder)) == sorted({name, *others})


@pytest.mark.parametrize("dim", [0, -1, 8193, 2.5, True, "4"])
def test_cfg_2_dim_range(dim):
    with pytest.raises(ConfigError, match=r"table 't': dim"):
        TableConfig("t", dim=dim)


def test_cfg_2_key_dtype_accepts_numpy_tf_and_names():
    import tensorflow as tf

    assert TableConfig("t", dim=1, key_dtype=tf.int32).key_dtype == "int32"
    assert TableConfig("t", dim=1, key_dtype=np.int64).key_dtype == "int64"
    with pytest.raises(ConfigError, match="key_dtype"):
        TableConfig("t", dim=1, key_dtype="float32")


@pytest.mark.parametrize("field,value", [
    ("device_vocabulary_size", 0), ("device_vocabulary_size", 10**9 + 1),
    ("host_vocabulary_size", -1), ("ssd_vocabulary_size", 10**9 + 1),
])
def test_cfg_3_vocabulary_ranges(field, value):
    with pytest.raises(ConfigError, match=field):
        TableConfig("t", dim=4, **{field: value})


def test_cfg_3_ssd_needs_host_and_paths_are_a_list():
    with pytest.raises(ConfigError, match="ssd_vocabulary_size"):
        TableConfig("t", dim=4, ssd_vocabulary_size=10)
    with pytest.raises(ConfigError, match="ssd_data_path"):
        TableConfig("t", dim=4, host_vocabulary_size=10, ssd_vocabulary_size=10, ssd_data_path="/tmp")
    config = TableConfig("t", dim=4, host_vocabulary_size=10, ssd_vocabulary_size=10, ssd_data_path=["/a", "/b"])
    assert config.ssd_data_path == ("/a", "/b")


def test_cfg_4_dynamic_expansion_with_host_tier_is_rejected():
    with pytest.raises(ConfigError, match="host_vocabulary_size"):
        TableConfig("t", dim=4, dynamic_expansion=True, host_vocabulary_size=8)
    with pytest.raises(ConfigError, match="dynamic_expansion"):
        TableConfig("t", dim=4, dynamic_expansion=1)


@pytest.mark.parametrize("field,value", [
    ("access_threshold", -2), ("access_threshold", 2**31), ("eviction_threshold", -2),
    ("faae_coefficient", 0), ("faae_coefficient", 1.5),
])
def test_cfg_5_admission_ranges(field, value):
    extra = {"access_threshold": 2} if field == "eviction_threshold" else {}
    with pytest.raises(ConfigError, match=field):
        TableConfig("t", dim=4, **{field: value}, **extra)


def test_cfg_5_eviction_needs_admission():
    with pytest.raises(ConfigError, match="eviction_threshold"):
        TableConfig("t", dim=4, eviction_threshold=5)
    assert TableConfig("t", dim=4, eviction_threshold=5, access_threshold=1).eviction_enabled
    assert not TableConfig("t", dim=4, eviction_threshold=-1, access_threshold=1).eviction_enabled


@pytest.mark.parametrize("threshold,enabled,admit_at", [
    (None, False, 1), (-1, False, 1), (0, False, 1), (1, False, 1), (2, True, 2), (7, True, 7)])
def test_cfg_6_admission_switch(threshold, enabled, admit_at):
    config = TableConfig("t", dim=4, access_threshold=threshold)
    assert config.admission_enabled is enabled
    assert config.admit_threshold == admit_at


def test_cfg_7_initializer_validation():
    with pytest.raises(ConfigError, match="initializer.kind"):
        TableConfig("t", dim=4, initializer=Initializer(kind="normal"))
    with pytest.raises(ConfigError, match="initializer.minval"):
        TableConfig("t", dim=4, initializer=Initializer(kind="uniform", minval=1, maxval=1))
    with pytest.raises(ConfigError, match="initializer.stddev"):
        TableConfig("t", dim=4, initializer=Initializer(stddev=0))
    with pytest.raises(ConfigError, match="init_param"):
        TableConfig("t", dim=4, init_param=10.5)
    with pytest.raises(ConfigError, match="initializer"):
        TableConfig("t", dim=4, initializer="zeros")


def test_cfg_8_send_count_is_save_and_serving_default():
    with pytest.raises(ConfigError, match="send_count"):
        TableConfig("t", dim=4, send_count=0)
    with pytest.raises(ConfigError, match="is_save"):
        TableConfig("t", dim=4, is_save="yes")
    assert TableConfig("t", dim=3, serving_default_value=0.5).serving_default_value == (0.5, 0.5, 0.5)
    assert TableConfig("t", dim=2, serving_default_value=[1, 2]).default_row().tolist() == [1.0, 2.0]
    with pytest.raises(ConfigError, match="serving_default_value"):
        TableConfig("t", dim=2, serving_default_value=[1, 2, 3])
    with pytest.raises(ConfigError, match="serving_default_value"):
        TableConfig("t", dim=2, serving_default_value=float("nan"))
    for text in ("x", ["a", "b"], object()):
        with pytest.raises(ConfigError, match="table 't': serving_default_value: must be a finite number"):
            TableConfig("t", dim=2, serving_default_value=text)


def test_cfg_11_unknown_parameters_raise_config_error_naming_them():
    with pytest.raises(ConfigError, match=r"table 't': dimension: not a parameter of TableConfig"):
        TableConfig("t", dimension=4)
    with pytest.raises(ConfigError, match=r"table 't': 20 positional arguments: not a parameter of TableConfig"):
        TableConfig("t", 4, *range(18))
    assert TableConfig(name="t", dim=4).dim == 4
    with pytest.raises(ConfigError, match=r"optimizer 'Adagrad': learningrate: not a parameter of Adagrad"):
        Adagrad(learningrate=0.1)
    with pytest.raises(ConfigError, match=r"optimizer 'ftrl': beta: not a parameter of Ftrl"):
        Ftrl(beta=0.1)
    assert LazyAdam(0.01).learning_rate == 0.01


@pytest.mark.parametrize("factory,parameter", [
    (lambda: SGD(learning_rate=11), "learning_rate"),
    (lambda: SGD(learning_rate=0.1, weight_decay=0.5), "weight_decay"),
    (lambda: Adagrad(initial_accumulator_value=0), "initial_accumulator_value"),
    (lambda: LazyAdam(beta1=1.0), "beta1"),
    (lambda: LazyAdam(beta2=1.0), "beta2"),
    (lambda: LazyAdam(epsilon=0), "epsilon"),
    (lambda: Ftrl(learning_rate=0), "learning_rate"),
    (lambda: Ftrl(learning_rate_power=0.5), "learning_rate_power"),
    (lambda: Ftrl(l1_regularization_strength=-1), "l1_regularization_strength"),
    (lambda: SGD(learning_rate=float("nan")), "learning_rate"),
])
def test_cfg_9_optimizer_ranges(factory, parameter):
    with pytest.raises(ConfigError, match=parameter):
        factory()


@pytest.mark.parametrize("store_backend", ["ref", "fast"])
def test_cfg_10_tier_sizes_choose_the_storage_mode(store_backend):
    from mxrec_ref import open_store

    tiered = open_store(TableConfig("t", dim=2, device_vocabulary_size=4, host_vocabulary_size=8), backend=store_backend)
    hbm = open_store(TableConfig("t", dim=2, device_vocabulary_size=12), backend=store_backend)
    assert tiered.tiered and not hbm.tiered
    assert tiered.capacity() == 12
    for step in range(5):                       # the host tier grows past host_vocabulary_size
        tiered.lookup(np.arange(4 * step, 4 * step + 4), step=step)
    assert tiered.size() == tiered.capacity() == 20