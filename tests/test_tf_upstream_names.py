"""mxRec names a real script imports before it runs (issue 29): TF-32 (modules and constants,
``sparse_lookup(dim=)``) and TF-33 (``Dataset.eos_map``), through the ``mx_rec`` alias."""
import logging

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.compat.enable_mx_rec  # noqa: F401
import mxrec_ref.tf as mx


@pytest.fixture(autouse=True)
def _graph():
    if mx.is_initialized():
        mx.terminate_config_initializer()
    with tf.Graph().as_default():
        yield
    if mx.is_initialized():
        mx.terminate_config_initializer()


def _table(name="t", dim=4):
    return mx.create_table(tf.int64, dim, name, tf.compat.v1.ones_initializer(), device_vocabulary_size=50)


def test_tf_32_helper_reexports_feature_spec():
    from mx_rec.core.asc.feature_spec import FeatureSpec as spec_module
    from mx_rec.core.asc.helper import FeatureSpec, get_asc_insert_func
    assert FeatureSpec is spec_module and callable(get_asc_insert_func)


def test_tf_32_graph_hooks_modules():
    from mx_rec.graph import ACGPushOpsToDatasetHook as from_package
    from mx_rec.graph import run
    from mx_rec.graph.acg_push_ops import ACGPushOpsToDatasetHook
    from mx_rec.graph.hooks import LookupSubgraphSlicerHook, OrphanLookupKeySlicerHook
    from mx_rec.graph.merge_lookup import do_merge_lookup
    assert from_package is ACGPushOpsToDatasetHook and callable(do_merge_lookup)
    for hook in (LookupSubgraphSlicerHook(op_types=["StringToNumber"]), OrphanLookupKeySlicerHook(),
                 ACGPushOpsToDatasetHook(dump_graph=False)):
        assert isinstance(hook, tf.compat.v1.train.SessionRunHook)
    with pytest.raises(TypeError, match="dump_graph"):
        ACGPushOpsToDatasetHook(dump_graph="yes")
    with tf.compat.v1.Session() as session:           # mx_rec.graph.run: Session.run's signature and result
        assert run(session, tf.constant(3)) == 3


def test_tf_32_constants_name_the_op_libraries():
    from mx_rec.constants import constants as C
    assert (C.LIBREC_EOS_OPS_SO, C.LIBREC_TF_REC_V1_CPU_SO, C.LIBREC_TF_NPU_OPS_SO, C.LIBASC_OPS_SO) == (
        "librec_eos_ops.so", "librecsdk_tf_rec_v1_cpu_ops.so", "librecsdk_tf_npu_ops.so", "libasc_ops.so")
    assert C.GET_CONFIG_INSTANCE_ERR_MSG == "Please init the environment for mx_rec at first."
    from mx_rec.util.initialize import ConfigInitializer
    with pytest.raises(EnvironmentError, match=C.GET_CONFIG_INSTANCE_ERR_MSG):
        ConfigInitializer.get_instance()


def test_tf_32_sparse_lookup_accepts_unused_dim(caplog):
    from mx_rec.core.embedding import sparse_lookup
    mx.init()
    table = _table()
    with caplog.at_level(logging.INFO, logger="mxrec_ref"):
        same = sparse_lookup(table, tf.constant([1, 2], tf.int64), modify_graph=True, dim=4)
        other = sparse_lookup(table, tf.constant([1, 2], tf.int64), modify_graph=True, dim=16, is_train=False)
    assert same.shape.as_list() == other.shape.as_list() == [2, 4]      # the table's dim, whatever dim says
    assert any("dim=16 is unused" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    with pytest.raises(TypeError, match="bogus"):
        sparse_lookup(table, tf.constant([1], tf.int64), modify_graph=True, dim=4, bogus=1)


def test_tf_33_eos_map_returns_the_dataset_unchanged():
    from mx_rec.constants.constants import LIBREC_EOS_OPS_SO
    from mx_rec.util.ops import import_host_pipeline_ops
    librec = import_host_pipeline_ops(LIBREC_EOS_OPS_SO)
    dataset = tf.data.Dataset.from_tensor_slices({"ids": np.arange(10)}).batch(3)
    mapped = dataset.eos_map(librec, 0, 2, -1)
    assert mapped is dataset                           # not bounded by max_train_steps: every batch comes
    batch = tf.compat.v1.data.make_one_shot_iterator(mapped).get_next()
    seen = []
    with tf.compat.v1.Session() as session:
        try:
            while True:
                seen.append(session.run(batch)["ids"].tolist())
        except tf.errors.OutOfRangeError:
            pass
    assert seen == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


@pytest.mark.parametrize("args, parameter", [((None, 0), "librec"), (("ops", 2), "channel_id"),
                                             (("ops", 1, -2), "max_train_steps"),
                                             (("ops", 1, 5, True), "max_eval_steps")])
def test_tf_33_eos_map_checks_its_arguments(args, parameter):
    from mx_rec.util.ops import import_host_pipeline_ops
    args = tuple(import_host_pipeline_ops() if a == "ops" else a for a in args)
    dataset = tf.data.Dataset.range(3)
    with pytest.raises((TypeError, ValueError), match=parameter):
        dataset.eos_map(*args)


def test_tf_32_util_package_reexports_as_mxrec():
    import mx_rec.util as mxrec_util
    from mx_rec.util.initialize import ConfigInitializer, init
    assert mxrec_util.init is init and mxrec_util.ConfigInitializer is ConfigInitializer
    assert mxrec_util.communication.hccl_ops.get_rank_id() == 0          # as model-zoo scripts call it
    from mx_rec.util.tf_version_adapter import NPUCheckpointSaverHook
    assert NPUCheckpointSaverHook is tf.compat.v1.train.CheckpointSaverHook


def test_tf_32_a_scripts_own_customized_optimizer_is_rejected_clearly():
    from tensorflow.python.training import gradient_descent

    from mx_rec.optimizers.base import CustomizedOptimizer

    class OwnSGD(gradient_descent.GradientDescentOptimizer, CustomizedOptimizer):   # as WideDeep writes it
        def __init__(self, learning_rate, name="GradientDescent"):
            super()._get_name(name=name)
            super().__init__(learning_rate=learning_rate, name=name)

    mx.init()
    with pytest.raises(NotImplementedError, match="'OwnSGD'.*gradient_descent with weight_decay="):
        OwnSGD(0.1)
    assert mx.ConfigInitializer.get_instance().optimizer_instance is None
