"""TF-15: the audit table of spec/tf.md -- every row is imported and called through
the ``mx_rec`` alias, and the table and this file name the same rows."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

SPEC = Path(__file__).resolve().parent.parent / "spec" / "tf.md"

PRELUDE = """
import json, logging, os, sys, tempfile
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
import mxrec_ref.compat.enable_mx_rec  # noqa: F401
import mx_rec
from mx_rec.util import initialize as I
from mx_rec.core.embedding import create_table, sparse_lookup
from mx_rec.constants import constants as C
from mx_rec.util.ops import import_host_pipeline_ops
logging.getLogger("mxrec_ref").setLevel(logging.INFO)
records = []
logging.getLogger("mxrec_ref").addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: records.append(r)})())

def fresh(**kw):
    I.terminate_config_initializer()
    tf.compat.v1.reset_default_graph()
    return I.init(**kw)

def table(name="t", **kw):
    return create_table(tf.int64, 4, name, tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                        device_vocabulary_size=kw.pop("device_vocabulary_size", 100), **kw)

def logged(text):
    return any(text in r.getMessage() for r in records)

def raises(kind, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except kind as error:
        return str(error)
    raise AssertionError(f"{fn} did not raise {kind.__name__}")

def train_graph(t, ids, **lookup_kw):
    from mx_rec.optimizers.adagrad import create_hash_optimizer
    opt = create_hash_optimizer(learning_rate=0.1)
    emb = sparse_lookup(t, tf.constant(ids, tf.int64), modify_graph=True, **lookup_kw)
    loss = tf.reduce_sum(emb)
    from mx_rec.util.variable import get_dense_and_sparse_variable
    _, sparse = get_dense_and_sparse_variable()
    return emb, opt.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
"""

# One check per row of the audit table (the key is the row's first cell, as written there).
CALLS = {
    "mx_rec.version": "assert mx_rec.version() == mx_rec.__version__",
    "mx_rec.util.initialize.init": "fresh(); raises(EnvironmentError, I.init)",
    "init(max_steps=-1)": "fresh(max_steps=5); assert I.ConfigInitializer.get_instance().max_steps == 5; "
                          "I.terminate_config_initializer(); raises(ValueError, I.init, max_steps=-2)",
    "init(train_steps=-1)": "I.terminate_config_initializer(); "
                            "raises(ValueError, I.init, max_steps=0, train_steps=0, eval_steps=0)",
    "init(eval_steps=-1)": "fresh(eval_steps=3); assert I.ConfigInitializer.get_instance().eval_steps == 3",
    "init(save_steps=-1)": "fresh(save_steps=3); assert I.ConfigInitializer.get_instance().save_steps == 3",
    "init(if_load=False)": "fresh(if_load=True); assert logged('if_load')",
    "init(use_dynamic=True)": "fresh(use_dynamic=False); assert I.get_use_static()",
    "init(use_dynamic_expansion=False)": "fresh(use_dynamic_expansion=True); assert I.get_use_dynamic_expansion()",
    "init(use_lccl=False)": "fresh(use_lccl=True); assert logged('use_lccl')",
    "init(bind_cpu=True)": "fresh(bind_cpu=False); assert logged('bind_cpu')",
    "init(save_checkpoint_due_time=None)": "fresh(save_checkpoint_due_time=60); assert logged('save_checkpoint_due_time')",
    "init(save_delta_checkpoints_secs=None)": "fresh(save_delta_checkpoints_secs=60); "
                                              "assert logged('save_delta_checkpoints_secs')",
    "init(is_incremental_checkpoint=False)": "fresh(is_incremental_checkpoint=True); "
                                             "assert logged('is_incremental_checkpoint')",
    "init(restore_model_version=None)": "fresh(restore_model_version=3); assert logged('restore_model_version')",
    "init(recent_key_count_threshold=0)": "fresh(recent_key_count_threshold=2); "
                                          "assert logged('recent_key_count_threshold')",
    "init(use_mpi, rank_id, rank_size, train_interval, prefetch_batch_number, use_hot)":
        "fresh(use_mpi=True, rank_id=0, rank_size=1, train_interval=10, prefetch_batch_number=2, use_hot=False); "
        "assert all(logged(n) for n in ('use_mpi', 'rank_id', 'rank_size', 'train_interval', "
        "'prefetch_batch_number', 'use_hot'))",
    "mx_rec.util.initialize.terminate_config_initializer":
        "I.terminate_config_initializer(); I.terminate_config_initializer(); "
        "raises(EnvironmentError, I.ConfigInitializer.get_instance)",
    "mx_rec.util.initialize.ConfigInitializer.get_instance": "fresh(); I.ConfigInitializer.get_instance()",
    "ConfigInitializer.use_dynamic_expansion": "assert I.ConfigInitializer.get_instance().use_dynamic_expansion is False",
    "ConfigInitializer.use_static": "assert I.ConfigInitializer.get_instance().use_static is False",
    "ConfigInitializer.if_load": "c = I.ConfigInitializer.get_instance(); c.if_load = True; assert c.if_load",
    "ConfigInitializer.modify_graph": "fresh(); t = table(); assert not I.ConfigInitializer.get_instance().modify_graph; "
                                      "sparse_lookup(t, tf.constant([1], tf.int64), modify_graph=True); "
                                      "assert I.ConfigInitializer.get_instance().modify_graph",
    "ConfigInitializer.max_steps / train_steps / eval_steps / save_steps":
        "c = I.ConfigInitializer.get_instance(); assert (c.max_steps, c.train_steps, c.eval_steps, c.save_steps) "
        "== (-1, -1, -1, -1)",
    "ConfigInitializer.use_lccl": "assert I.ConfigInitializer.get_instance().use_lccl is False",
    "ConfigInitializer.sparse_embed_config":
        "assert 't' in I.ConfigInitializer.get_instance().sparse_embed_config.table_instance_dict",
    "ConfigInitializer.feature_spec_config":
        "from mx_rec.core.asc.feature_spec import FeatureSpec; s = FeatureSpec('t'); "
        "assert s in I.ConfigInitializer.get_instance().feature_spec_config.feature_spec_list",
    "ConfigInitializer.hybrid_manager_config":
        "assert I.ConfigInitializer.get_instance().hybrid_manager_config.freeze is False",
    "ConfigInitializer.optimizer_config":
        "from mx_rec.optimizers.lazy_adam import create_hash_optimizer; o = create_hash_optimizer(); "
        "assert I.ConfigInitializer.get_instance().optimizer_config.optimizer_instance is o",
    "train_params_config.ascend_global_hashtable_collection":
        "I.set_ascend_global_hashtable_collection('X'); "
        "assert I.ConfigInitializer.get_instance().train_params_config.ascend_global_hashtable_collection == 'X'",
    "train_params_config.get_initializer":
        "fresh(); t = table(); ds = tf.data.Dataset.from_tensor_slices({'i': np.arange(8)}).batch(2).repeat(); "
        "it = tf.compat.v1.data.make_initializable_iterator(ds); b = it.get_next(); "
        "e = sparse_lookup(t, b['i'], modify_graph=True, is_train=False); "
        "from mx_rec.graph import modify_graph_and_start_emb_cache; modify_graph_and_start_emb_cache(); "
        "init = I.get_initializer(False); s = tf.compat.v1.Session(); s.run(init); s.run(e); s.close()",
    "train_params_config.get_target_batch":
        "assert I.ConfigInitializer.get_instance().train_params_config.get_target_batch(False) is not None",
    "train_params_config.get_training_mode_channel_id":
        "p = I.ConfigInitializer.get_instance().train_params_config; "
        "assert (p.get_training_mode_channel_id(True), p.get_training_mode_channel_id(False)) == (0, 1)",
    "mx_rec.util.initialize.get_rank_id / get_rank_size / get_device_id":
        "assert (I.get_rank_id(), I.get_rank_size(), I.get_device_id()) == (0, 1, 0)",
    "mx_rec.util.initialize.set_if_load": "I.set_if_load(True); assert I.ConfigInitializer.get_instance().if_load",
    "mx_rec.util.initialize.get_initializer": "I.get_initializer(True)",
    "mx_rec.util.initialize.clear_channel": "I.clear_channel(True); assert logged('clear_channel')",
    "mx_rec.util.initialize.trigger_evict":
        "fresh(); t = table(); from mx_rec.core.asc.feature_spec import FeatureSpec; "
        "emb, train = train_graph(t, [1, 2], access_and_evict_config={'access_threshold': 1, "
        "'eviction_threshold': 0}); s = tf.compat.v1.Session(); s.run(train); s.close(); I.trigger_evict(); "
        "assert t.size() == 0",
    "mx_rec.util.initialize.get_use_dynamic_expansion": "assert I.get_use_dynamic_expansion() is False",
    "mx_rec.util.initialize.get_host_pipeline_ops": "assert callable(I.get_host_pipeline_ops().set_threshold)",
    "mx_rec.util.initialize.get_use_static": "assert I.get_use_static() is False",
    "mx_rec.util.initialize.set_ascend_global_hashtable_collection": "I.set_ascend_global_hashtable_collection('Y')",
    "mx_rec.core.embedding.create_table": "fresh(); t = table('u'); assert t.table_name == 'u'",
    "create_table(key_dtype, dim, name, emb_initializer)":
        "raises(TypeError, create_table, tf.float32, 4, 'bad', tf.compat.v1.zeros_initializer()); "
        "create_table(tf.int32, 4, 'i32', tf.compat.v1.ones_initializer())",
    "create_table(device_vocabulary_size=1, host_vocabulary_size=0, ssd_vocabulary_size=0, ssd_data_path)":
        "fresh(); d = table('ddr', device_vocabulary_size=10, host_vocabulary_size=20); "
        "s = table('ssd', device_vocabulary_size=10, host_vocabulary_size=20, ssd_vocabulary_size=30, "
        "ssd_data_path=[tempfile.mkdtemp()]); assert (d.capacity(), s.capacity()) == (30, 60); "
        "assert not d.is_hbm",
    "create_table(is_save=True)": "fresh(); t = table(is_save=False); assert t.is_save is False",
    "create_table(is_dp=False)": "fresh(); t = table(is_dp=True); assert t.is_dp and logged('is_dp')",
    "create_table(init_param=1.0)":
        "fresh(); t = create_table(tf.int64, 2, 'p', tf.compat.v1.ones_initializer(), device_vocabulary_size=5, "
        "init_param=0.5); e = sparse_lookup(t, tf.constant([3], tf.int64), modify_graph=True); "
        "s = tf.compat.v1.Session(); assert s.run(e).tolist() == [[0.5, 0.5]]; s.close()",
    "create_table(all2all_gradients_op=\"sum_gradients\")":
        "fresh(); table('a', all2all_gradients_op='sum_gradients_and_div_by_ranksize'); "
        "raises(ValueError, table, 'b', all2all_gradients_op='mean')",
    "create_table(enable_merge=False)": "assert 'enable_merge' in raises(ValueError, table, 'm', enable_merge=True)",
    "create_table(padding_keys=None, padding_keys_mask=False, padding_keys_len=None)":
        "assert 'padding_keys' in raises(ValueError, table, 'pk', padding_keys=[0], padding_keys_mask=True, "
        "padding_keys_len=4)",
    "create_table(value_dtype=tf.float32)": "raises(TypeError, table, 'v', value_dtype=tf.float16)",
    "create_table(shard_num=1)": "table('sh', shard_num=2); assert logged('shard_num'); "
                                 "raises(ValueError, table, 'sh2', shard_num=0)",
    "create_table(fusion_optimizer_var=True, hashtable_threshold=0)":
        "table('f', fusion_optimizer_var=False, hashtable_threshold=5); assert logged('fusion_optimizer_var')",
    "create_table(optimizer_list=)": "table('ol', optimizer_list=[]); assert logged('optimizer_list')",
    "table.table_name / emb_size / embedding_size / key_dtype / emb_initializer / init_param / is_save / is_dp / is_hbm":
        "fresh(); t = table(); assert (t.table_name, t.emb_size, t.embedding_size, t.key_dtype, t.init_param, "
        "t.is_save, t.is_dp, t.is_hbm) == ('t', 4, 4, tf.int64, 1.0, True, False, True) and t.emb_initializer",
    "table.send_count / multi_lookup_times / variable":
        "fresh(use_dynamic=False); t = table(); sparse_lookup(t, tf.constant([1], tf.int64), send_count=4, "
        "modify_graph=True); assert t.send_count == 4 and t.multi_lookup_times[True] == 1 and t.variable is not None",
    "table.slice_device_vocabulary_size": "assert t.slice_device_vocabulary_size == 100",
    "table.padding_keys / padding_keys_mask / padding_keys_len":
        "assert (t.padding_keys, t.padding_keys_mask, t.padding_keys_len) == (None, False, None)",
    "table.size()": "fresh(); t = table(); emb, train = train_graph(t, [4, 5, 4]); s = tf.compat.v1.Session(); "
                    "s.run(train); s.close(); assert t.size() == 2",
    "table.capacity()": "assert t.capacity() == 100",
    "mx_rec.core.embedding.sparse_lookup": "raises(TypeError, sparse_lookup, 'not a table', tf.constant([1]))",
    "sparse_lookup(hashtable, ids)": "fresh(); t = table(); "
                                     "raises(ValueError, sparse_lookup, t, tf.constant([1], tf.int64))",
    "sparse_lookup(send_count=None)": "fresh(use_dynamic=False); t = table(); "
                                      "raises(ValueError, sparse_lookup, t, tf.constant([1], tf.int64), modify_graph=True)",
    "sparse_lookup(is_train=True, name=None)":
        "fresh(); t = table(); e = sparse_lookup(t, tf.constant([1], tf.int64), modify_graph=True, is_train=False, "
        "name='look'); assert 'look' in e.name",
    "sparse_lookup(modify_graph=False)": "fresh(); t = table(); sparse_lookup(t, tf.constant([1], tf.int64), "
                                         "modify_graph=True)",
    "sparse_lookup(batch=None)":
        "fresh(); t = table(); from mx_rec.core.asc.feature_spec import FeatureSpec; "
        "raises(ValueError, sparse_lookup, t, FeatureSpec('t'))",
    "sparse_lookup(access_and_evict_config=None)":
        "fresh(); t = table(); emb, train = train_graph(t, [7, 8, 8], access_and_evict_config={'access_threshold': 2}); "
        "s = tf.compat.v1.Session(); s.run(train); s.close(); assert t.size() == 1",
    "sparse_lookup(is_grad=True)":
        "fresh(); t = table(); e = sparse_lookup(t, tf.constant([1], tf.int64), modify_graph=True, is_grad=False); "
        "assert e.op.type == 'StopGradient'",
    "sparse_lookup(serving_default_value=None)":
        "fresh(); t = table(); e = sparse_lookup(t, tf.constant([9], tf.int64), modify_graph=True, is_train=False, "
        "serving_default_value=tf.constant(7.0)); s = tf.compat.v1.Session(); "
        "assert s.run(e).tolist() == [[7.0] * 4]; s.close()",
    "sparse_lookup(feature_spec_name_ids_dict, multi_lookup, lookup_ids)":
        "fresh(); t = table(); sparse_lookup(t, tf.constant([1], tf.int64), modify_graph=True, multi_lookup=True); "
        "assert logged('multi_lookup'); raises(TypeError, sparse_lookup, t, tf.constant([1], tf.int64), "
        "modify_graph=True, bogus=1)",
    "mx_rec.core.asc.feature_spec.FeatureSpec":
        "from mx_rec.core.asc.feature_spec import FeatureSpec; "
        "s = FeatureSpec('a', table_name='t', index_key='x', access_threshold=2, eviction_threshold=5, "
        "faae_coefficient=2); assert (s.table_name, s.index_key) == ('t', 'x'); "
        "raises(ValueError, FeatureSpec, 'b', eviction_threshold=5)",
    "FeatureSpec(batch_size=None)": "from mx_rec.core.asc.feature_spec import FeatureSpec; "
                                    "assert FeatureSpec('c', batch_size=8).batch_size == 8",
    "mx_rec.core.asc.helper.get_asc_insert_func":
        "from mx_rec.core.asc.helper import get_asc_insert_func; fresh(); table('t'); "
        "f = get_asc_insert_func(args_index_list=['i'], table_names=['t']); "
        "ds = tf.data.Dataset.from_tensor_slices({'i': np.arange(4)}).batch(2).map(f); "
        "raises(ValueError, get_asc_insert_func)",
    "get_asc_insert_func(dump_graph=False)":
        "from mx_rec.core.asc.helper import get_asc_insert_func; from mx_rec.core.asc.feature_spec import FeatureSpec; "
        "get_asc_insert_func(tgt_key_specs=[FeatureSpec('t')], dump_graph=True); assert logged('dump_graph')",
    "mx_rec.core.asc.manager.start_asc_pipeline":
        "from mx_rec.core.asc.manager import start_asc_pipeline; start_asc_pipeline(); "
        "raises(RuntimeError, table, 'late')",
    "mx_rec.core.feature_process.EvictHook":
        "from mx_rec.core.feature_process import EvictHook; h = EvictHook(evict_enable=True, evict_time_interval=10, "
        "evict_step_interval=5); raises(ValueError, EvictHook, evict_step_interval=0)",
    "mx_rec.graph.modify_graph_and_start_emb_cache":
        "from mx_rec.graph import modify_graph_and_start_emb_cache; fresh(); "
        "raises(RuntimeError, modify_graph_and_start_emb_cache, full_graph=None, dump_graph=False)",
    "mx_rec.graph.GraphModifierHook": "from mx_rec.graph import GraphModifierHook; "
                                      "GraphModifierHook(dump_graph=False, modify_graph=True)",
    "mx_rec.graph.LookupSubgraphSlicerHook": "from mx_rec.graph import LookupSubgraphSlicerHook; "
                                             "LookupSubgraphSlicerHook(op_types=['StringToNumber']); "
                                             "assert logged('LookupSubgraphSlicerHook')",
    "mx_rec.graph.OrphanLookupKeySlicerHook": "from mx_rec.graph import OrphanLookupKeySlicerHook; "
                                              "OrphanLookupKeySlicerHook(); assert logged('OrphanLookupKeySlicerHook')",
    "mx_rec.graph.do_merge_lookup": "from mx_rec.graph import do_merge_lookup; do_merge_lookup(is_train=True); "
                                    "assert logged('do_merge_lookup')",
    "mx_rec.optimizers.create_hash_optimizer":
        "fresh(); from mx_rec.optimizers import create_hash_optimizer; "
        "assert create_hash_optimizer().store_optimizer.kind == 'LazyAdam'",
    "mx_rec.optimizers.lazy_adam.create_hash_optimizer":
        "from mx_rec.optimizers.lazy_adam import create_hash_optimizer as f; "
        "o = f(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, name='LazyAdam', use_fusion_optim=True); "
        "assert logged('use_fusion_optim'); raises(ValueError, f, beta1=1.5)",
    "mx_rec.optimizers.lazy_adam_by_addr.create_hash_optimizer_by_address":
        "from mx_rec.optimizers.lazy_adam_by_addr import create_hash_optimizer_by_address as f; "
        "raises(ValueError, f); fresh(use_dynamic_expansion=True); assert f().name.startswith('LazyAdamByAddress_')",
    "mx_rec.optimizers.adagrad.create_hash_optimizer":
        "fresh(); from mx_rec.optimizers.adagrad import create_hash_optimizer as f; "
        "f(learning_rate=0.001, initial_accumulator_value=0.9, use_locking=True, name='Adagrad'); "
        "assert logged('use_locking')",
    "mx_rec.optimizers.adagrad_by_addr.create_hash_optimizer_by_address":
        "from mx_rec.optimizers.adagrad_by_addr import create_hash_optimizer_by_address as f; "
        "assert f().store_optimizer.slot_names == ('accumulator',); raises(ValueError, f, learning_rate=20)",
    "mx_rec.optimizers.ftrl.create_hash_optimizer":
        "from mx_rec.optimizers.ftrl import create_hash_optimizer as f; "
        "assert f(0.1, accum_name='a', linear_name='l', l1_regularization_strength=0.1).store_optimizer.kind == "
        "'ftrl'; raises(TypeError, f, 0.1, bogus=1)",
    "mx_rec.optimizers.gradient_descent.create_hash_optimizer":
        "from mx_rec.optimizers.gradient_descent import create_hash_optimizer as f; f(0.1, weight_decay=1e-4); "
        "raises(ValueError, f, 0.1, weight_decay=0.5)",
    "mx_rec.optimizers.gradient_descent_by_addr.create_hash_optimizer_by_addr":
        "from mx_rec.optimizers.gradient_descent_by_addr import create_hash_optimizer_by_addr as f; "
        "assert f(0.1).store_optimizer.weight_decay == 0.0001",
    "optimizer.apply_gradients":
        "fresh(); t = table(); emb, train = train_graph(t, [1]); s = tf.compat.v1.Session(); s.run(train); "
        "s.close(); assert t.store.stats()['grad_applies'] == 1",
    "tf.compat.v1.train.Saver (patched)":
        "d = tempfile.mkdtemp(); w = tf.compat.v1.get_variable('w', [1]); saver = tf.compat.v1.train.Saver(); "
        "s = tf.compat.v1.Session(); s.run(w.initializer); s.run(train); "
        "saver.save(s, os.path.join(d, 'model'), global_step=1); s.close(); "
        "assert os.path.isdir(os.path.join(d, 'sparse-model-1', 't'))",
    "mx_rec.saver.sparse.export":
        "from mx_rec.saver.sparse import export; d = tempfile.mkdtemp(); export(export_dir=d); "
        "rows = np.load(os.path.join(d, 't', 'key-emb.npy'), allow_pickle=True).item(); assert list(rows) == [1]",
    "mx_rec.saver.warm_start.WarmStartSettings / warm_start / WarmStartHook":
        "from mx_rec.saver.warm_start import WarmStartSettings, warm_start, WarmStartHook; "
        "assert callable(warm_start) and WarmStartSettings and WarmStartHook",
    "mx_rec.util.variable.get_dense_and_sparse_variable":
        "from mx_rec.util.variable import get_dense_and_sparse_variable; d, s_ = get_dense_and_sparse_variable(); "
        "assert t.variable in s_",
    "mx_rec.util.log.logger": "from mx_rec.util.log import logger; logger.info('audit')",
    "mx_rec.util.communication.hccl_ops.get_rank_id / get_rank_size / get_device_id":
        "from mx_rec.util.communication import hccl_ops as h; "
        "assert (h.get_rank_id(), h.get_rank_size(), h.get_device_id()) == (0, 1, 0)",
    "mx_rec.util.tf_version_adapter.hccl_ops / npu_ops":
        "from mx_rec.util.tf_version_adapter import hccl_ops, npu_ops; npu_ops.initialize_system(); "
        "assert hccl_ops.get_rank_size() == 1",
    "mx_rec.util.ops.import_host_pipeline_ops": "import_host_pipeline_ops('librecsdk_tf_npu_ops.so')",
    "host_pipeline_ops.set_threshold":
        "op = import_host_pipeline_ops().set_threshold(3, emb_name='t', ids_name='t'); "
        "raises(ValueError, import_host_pipeline_ops().set_threshold, 3, emb_name='nope')",
    "host_pipeline_ops.clear_channel": "import_host_pipeline_ops().clear_channel(0); assert logged('clear_channel')",
    "host_pipeline_ops.return_timestamp":
        "r = import_host_pipeline_ops().return_timestamp(tf.constant([1, 2], tf.int64)); assert r.shape.rank == 0",
    "host_pipeline_ops.read_emb_key_v2 / read_emb_key_v2_dynamic / embedding_lookup_by_address / lazy_adam / lccl_all_to_all":
        "ops = import_host_pipeline_ops(); [raises(NotImplementedError, getattr(ops, n)) for n in ('read_emb_key_v2', "
        "'read_emb_key_v2_dynamic', 'embedding_lookup_by_address', 'lazy_adam', 'lccl_all_to_all')]",
    "mx_rec.constants.constants.ASCEND_* collections":
        "assert all(getattr(C, n) == n for n in ('ASCEND_GLOBAL_HASHTABLE_COLLECTION', 'ASCEND_SPARSE_LOOKUP_ENTRANCE', "
        "'ASCEND_SPARSE_LOOKUP_LOCAL_EMB', 'ASCEND_SPARSE_LOOKUP_ID_OFFSET', 'ASCEND_TIMESTAMP', "
        "'ASCEND_CUTTING_POINT_INITIALIZER'))",
    "mx_rec.constants.constants.MULTI_LOOKUP_TIMES / MAX_VOCABULARY_SIZE / DEFAULT_EVICT_TIME_INTERVAL":
        "assert (C.MULTI_LOOKUP_TIMES, C.MAX_VOCABULARY_SIZE, C.DEFAULT_EVICT_TIME_INTERVAL) == (128, 10**9, 86400)",
    "mx_rec.constants.constants.TRAIN_CHANNEL_ID / EVAL_CHANNEL_ID":
        "assert (C.TRAIN_CHANNEL_ID, C.EVAL_CHANNEL_ID) == (0, 1)",
    "mx_rec.constants.constants.BaseEnum": "assert issubclass(C.All2allGradientsOp, C.BaseEnum)",
    "mx_rec.constants.constants.All2allGradientsOp":
        "assert C.All2allGradientsOp.mapping('sum_gradients') is C.All2allGradientsOp.SUM_GRADIENTS",
    "HOT_EMB_UPDATE_STEP": "from mxrec_ref import hot; assert hot.UPDATE_STEP_VARIABLE == 'HOT_EMB_UPDATE_STEP'",
    "USE_COMBINE_FAAE": "os.environ['USE_COMBINE_FAAE'] = '1'; fresh(); assert logged('USE_COMBINE_FAAE')",
    "KEY_PROCESS_THREAD_NUM / FAST_UNIQUE / MAX_UNIQUE_THREAD_NUM / HD_CHANNEL_SIZE / SSD_SAVE_COMPACT_LEVEL / USE_SHM_SWAP / RECORD_KEY_COUNT / AclTimeout":
        "names = ('KEY_PROCESS_THREAD_NUM', 'FAST_UNIQUE', 'MAX_UNIQUE_THREAD_NUM', 'HD_CHANNEL_SIZE', "
        "'SSD_SAVE_COMPACT_LEVEL', 'USE_SHM_SWAP', 'RECORD_KEY_COUNT', 'AclTimeout'); "
        "os.environ.update({n: '1' for n in names}); fresh(); assert all(logged(n) for n in names)",
    # issue 29 (TF-31, TF-32, TF-33)
    "mx_rec.util.tf_version_adapter.NPUCheckpointSaverHook":
        "from mx_rec.util.tf_version_adapter import NPUCheckpointSaverHook as H; "
        "assert issubclass(H, tf.compat.v1.train.CheckpointSaverHook)",
    "mx_rec.util.init / terminate_config_initializer / ConfigInitializer / get_dense_and_sparse_variable / "
    "import_host_pipeline_ops / hccl_ops / npu_ops / communication":
        "import mx_rec.util as U; assert U.init is I.init and U.ConfigInitializer is I.ConfigInitializer; "
        "assert U.communication.hccl_ops.get_rank_id() == U.hccl_ops.get_rank_id() == 0; "
        "assert callable(U.terminate_config_initializer) and callable(U.get_dense_and_sparse_variable) and "
        "callable(U.import_host_pipeline_ops) and callable(U.npu_ops.initialize_system)",
    "mx_rec.optimizers.base.CustomizedOptimizer":
        "from mx_rec.optimizers.base import CustomizedOptimizer as B; "
        "K = type('K', (tf.compat.v1.train.GradientDescentOptimizer, B), "
        "{'__init__': lambda self: B._get_name(self, name='x')}); "
        "assert 'mx_rec.optimizers factories' in raises(NotImplementedError, K)",
    "mx_rec.optimizers.*.Customized*":
        "fresh(); from mx_rec.optimizers.lazy_adam import CustomizedLazyAdam, create_hash_optimizer as f; "
        "from mx_rec.optimizers.adagrad import CustomizedAdagrad; "
        "from mx_rec.optimizers.gradient_descent import CustomizedGradientDescentWithWeighDecay; "
        "from mx_rec.optimizers.ftrl import CustomizedFtrl; "
        "from mx_rec.optimizers.lazy_adam_by_addr import CustomizedLazyAdamByAddress; "
        "from mx_rec.optimizers.adagrad_by_addr import CustomizedAdagradByAddress; "
        "from mx_rec.optimizers.gradient_descent_by_addr import CustomizedGradientDescentByAddr; "
        "o = f(learning_rate=tf.constant(0.01)); assert isinstance(o, CustomizedLazyAdam) and "
        "isinstance(o, tf.compat.v1.train.AdamOptimizer) and o._lr is not None; "
        "assert issubclass(CustomizedGradientDescentByAddr, tf.compat.v1.train.GradientDescentOptimizer); "
        "assert issubclass(CustomizedAdagradByAddress, tf.compat.v1.train.AdagradOptimizer); "
        "assert issubclass(CustomizedFtrl, tf.compat.v1.train.FtrlOptimizer) and "
        "issubclass(CustomizedGradientDescentWithWeighDecay, tf.compat.v1.train.Optimizer) and "
        "issubclass(CustomizedLazyAdamByAddress, CustomizedLazyAdam) and CustomizedAdagrad",
    "mx_rec.core.asc.helper.FeatureSpec":
        "from mx_rec.core.asc.helper import FeatureSpec as F; from mx_rec.core.asc.feature_spec import FeatureSpec; "
        "assert F is FeatureSpec",
    "mx_rec.graph.hooks.LookupSubgraphSlicerHook / OrphanLookupKeySlicerHook":
        "from mx_rec.graph.hooks import LookupSubgraphSlicerHook, OrphanLookupKeySlicerHook; "
        "assert isinstance(LookupSubgraphSlicerHook(op_types=[]), tf.compat.v1.train.SessionRunHook); "
        "OrphanLookupKeySlicerHook()",
    "mx_rec.graph.acg_push_ops.ACGPushOpsToDatasetHook":
        "from mx_rec.graph.acg_push_ops import ACGPushOpsToDatasetHook as H; H(dump_graph=True); "
        "assert logged('ACGPushOpsToDatasetHook'); raises(TypeError, H, dump_graph=1)",
    "mx_rec.graph.merge_lookup.do_merge_lookup":
        "from mx_rec.graph.merge_lookup import do_merge_lookup; do_merge_lookup(is_train=False)",
    "mx_rec.graph.run":
        "from mx_rec.graph import run; s = tf.compat.v1.Session(); assert run(s, tf.constant(2)) == 2; s.close()",
    "sparse_lookup(dim=None)":
        "fresh(); t = table(); e = sparse_lookup(t, tf.constant([1], tf.int64), modify_graph=True, dim=8); "
        "assert e.shape.as_list() == [1, 4] and logged('dim=8 is unused')",
    "Dataset.eos_map":
        "ds = tf.data.Dataset.range(4); "
        "assert ds.eos_map(import_host_pipeline_ops(C.LIBREC_EOS_OPS_SO), 0, 10, 5) is ds; "
        "raises(ValueError, ds.eos_map, import_host_pipeline_ops(), 3, 10, 5)",
    "mx_rec.constants.constants.LIBREC_EOS_OPS_SO / LIBREC_TF_REC_V1_CPU_SO / LIBREC_TF_NPU_OPS_SO / LIBASC_OPS_SO":
        "assert all(import_host_pipeline_ops(getattr(C, n)) for n in ('LIBREC_EOS_OPS_SO', "
        "'LIBREC_TF_REC_V1_CPU_SO', 'LIBREC_TF_NPU_OPS_SO', 'LIBASC_OPS_SO'))",
    "mx_rec.constants.constants.GET_CONFIG_INSTANCE_ERR_MSG / MAX_DEVICE_VOCABULARY_SIZE":
        "I.terminate_config_initializer(); "
        "assert raises(EnvironmentError, I.ConfigInitializer.get_instance) == C.GET_CONFIG_INSTANCE_ERR_MSG; "
        "assert C.MAX_DEVICE_VOCABULARY_SIZE == 10**9",
}

RUNNER = """
results = {}
for name, code in CALLS.items():
    try:
        exec(code, globals())
        results[name] = "ok"
    except Exception as error:  # noqa: BLE001
        results[name] = f"{type(error).__name__}: {error}"
print("AUDIT " + json.dumps(results))
"""


def _audit_rows():
    text = SPEC.read_text()
    table = text[text.index("## Audit of mxRec's public surface"):].split("\n## ", 1)[0]   # not the NPU audit
    rows = {}
    for line in table.splitlines():
        match = re.match(r"^\| `(.+?)`(?: \(patched\)| collections)? \| (\w+) \|", line)
        if match:
            name = line.split(" | ")[0][2:].replace("`", "")
            rows[name] = match.group(2)
    return rows


def test_tf_15_the_audit_has_no_missing_row():
    rows = _audit_rows()
    assert len(rows) > 100
    assert set(rows.values()) <= {"implemented", "accepted", "rejected"}, set(rows.values())
    assert set(rows) == set(CALLS), (sorted(set(rows) - set(CALLS)), sorted(set(CALLS) - set(rows)))


def test_tf_15_every_audited_name_imports_and_runs(tmp_path):
    script = tmp_path / "audit.py"
    script.write_text(textwrap.dedent(PRELUDE) + f"\nCALLS = {CALLS!r}\n" + RUNNER)
    env = {k: v for k, v in os.environ.items() if k != "USE_COMBINE_FAAE"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            cwd=str(tmp_path), env=dict(env, TF_CPP_MIN_LOG_LEVEL="3"))
    lines = [line for line in result.stdout.splitlines() if line.startswith("AUDIT ")]
    assert lines, result.stderr[-3000:]
    failures = {name: outcome for name, outcome in json.loads(lines[-1][6:]).items() if outcome != "ok"}
    assert failures == {}
