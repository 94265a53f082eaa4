"""A Wide&Deep CTR model on Criteo-format TFRecords, written TF 1.15-style as mxRec's model zoo is
(examples/WideDeep/model/main_mxrec.py upstream): ``tf.ConfigProto``, ``tf.variable_scope``,
``tf.layers.dense``, ``tf.train.AdamOptimizer`` for the dense part, mx_rec tables, lookups and a
hash optimizer for the sparse part, ``tf.Session`` and ``make_initializable_iterator``.  Run it in
the TF1 mode of mxrec-ref (spec/tf.md, TF-26..TF-28), one phase per process:

    mxrec-ref run --tf1 examples/mxrec_widedeep_tf1.py --phase train --model_dir M --data_dir D
    mxrec-ref run --tf1 examples/mxrec_widedeep_tf1.py --phase predict --model_dir M --data_dir D

Phases: ``train`` writes the TFRecords into --data_dir when they are not there yet (from the Criteo
rows of --criteo: label, I1..I13, C1..C26 tab-separated), trains --steps steps, evaluates and saves
to --model_dir; ``predict`` restores the latest checkpoint and scores the evaluation records.
Environment switches (default in brackets):
  USE_MODIFY_GRAPH  1 graph modification | 0 FeatureSpec mode     [0]
  STORAGE           hbm | ddr                                      [hbm]
Each phase prints "PHASE <name> ok ...", and the script ends with mxRec's "Demo done!".
"""
import argparse
import math
import os
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from mx_rec.core.asc.feature_spec import FeatureSpec
from mx_rec.core.asc.helper import get_asc_insert_func
from mx_rec.core.asc.manager import start_asc_pipeline
from mx_rec.core.embedding import create_table, sparse_lookup
from mx_rec.graph.modifier import modify_graph_and_start_emb_cache
from mx_rec.optimizers.lazy_adam import create_hash_optimizer
from mx_rec.util.initialize import ConfigInitializer, init, terminate_config_initializer
from mx_rec.util.log import logger
from mx_rec.util.variable import get_dense_and_sparse_variable

USE_MODIFY_GRAPH = os.getenv("USE_MODIFY_GRAPH", "0") == "1"
STORAGE = os.getenv("STORAGE", "hbm")
DENSE_FIELDS, CAT_FIELDS, EMB_DIM = 13, 26, 8
TRAIN_FILE, EVAL_FILE = "train.tfrecord", "eval.tfrecord"
EVAL_ROWS = 100


# ---------------------------------------------------------------- data
def default_criteo():
    """The Criteo sample rows in a ``shared/data`` folder beside the checkout (never copied into it)."""
    for folder in Path(__file__).resolve().parents:
        candidate = folder / "shared" / "data" / "criteo_kaggle_sample" / "dac_train_head900.txt"
        if candidate.is_file():
            return str(candidate)
    return None


def criteo_rows(path):
    """label, 13 integer fields (log(1 + x), missing 0) and 26 categorical ids: the field number in the
    high 32 bits, the hex value in the low 32 (missing 0), so the fields never share a key."""
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            dense = [math.log1p(max(float(v), 0.0)) if v else 0.0 for v in parts[1:1 + DENSE_FIELDS]]
            cats = [(i << 32) | (int(v, 16) if v else 0) for i, v in enumerate(parts[1 + DENSE_FIELDS:])]
            yield float(parts[0]), dense, cats


def write_tfrecords(criteo, data_dir):
    rows = list(criteo_rows(criteo))
    os.makedirs(data_dir, exist_ok=True)
    for name, part in ((TRAIN_FILE, rows[:-EVAL_ROWS]), (EVAL_FILE, rows[-EVAL_ROWS:])):
        with tf.python_io.TFRecordWriter(os.path.join(data_dir, name)) as writer:
            for label, dense, cats in part:
                example = tf.train.Example(features=tf.train.Features(feature={
                    "label": tf.train.Feature(float_list=tf.train.FloatList(value=[label])),
                    "dense": tf.train.Feature(float_list=tf.train.FloatList(value=dense)),
                    "cat": tf.train.Feature(int64_list=tf.train.Int64List(value=cats))}))
                writer.write(example.SerializeToString())
    logger.info("wrote %d training and %d evaluation records to %s", len(rows) - EVAL_ROWS, EVAL_ROWS, data_dir)


def input_fn(args, file_name, is_training, specs):
    def parse(serialized):
        return tf.parse_example(serialized, features={
            "label": tf.FixedLenFeature([1], tf.float32),
            "dense": tf.FixedLenFeature([DENSE_FIELDS], tf.float32),
            "cat": tf.FixedLenFeature([CAT_FIELDS], tf.int64)})

    dataset = tf.data.TFRecordDataset(os.path.join(args.data_dir, file_name))
    if is_training:
        dataset = dataset.repeat()
    dataset = dataset.batch(args.batch if is_training else EVAL_ROWS // 2, drop_remainder=True).map(parse)
    if not USE_MODIFY_GRAPH:
        dataset = dataset.map(get_asc_insert_func(tgt_key_specs=specs, is_training=is_training))
    return dataset


# ---------------------------------------------------------------- model
def feature_specs():
    """FeatureSpec mode: both tables look up the 26 ids of 'cat'."""
    return [FeatureSpec("deep_ids", table_name="deep_emb", index_key="cat"),
            FeatureSpec("wide_ids", table_name="wide_emb", index_key="cat")]


def storage(args):
    if STORAGE == "ddr":
        return {"device_vocabulary_size": 2 * args.batch * CAT_FIELDS, "host_vocabulary_size": 50000}
    return {"device_vocabulary_size": 50000}


def create_tables(args):
    initializer = tf.truncated_normal_initializer(stddev=0.05, seed=1)
    return {"deep_emb": create_table(tf.int64, EMB_DIM, "deep_emb", initializer, **storage(args)),
            "wide_emb": create_table(tf.int64, 1, "wide_emb", tf.zeros_initializer(), **storage(args))}


def wide_and_deep(tables, batch, is_training, specs):
    def lookup(name, spec):
        if USE_MODIFY_GRAPH:
            return sparse_lookup(tables[name], batch["cat"], is_train=is_training, modify_graph=True)
        return sparse_lookup(tables[name], spec, batch=batch, is_train=is_training)

    deep_spec, wide_spec = specs
    deep_emb = tf.reshape(lookup("deep_emb", deep_spec), [-1, CAT_FIELDS * EMB_DIM])
    wide_emb = tf.reshape(lookup("wide_emb", wide_spec), [-1, CAT_FIELDS])
    with tf.variable_scope("wide_deep", reuse=tf.AUTO_REUSE):
        with tf.variable_scope("deep"):
            hidden = tf.concat([deep_emb, batch["dense"]], axis=1)
            for i, units in enumerate((64, 32)):
                hidden = tf.layers.dense(hidden, units, activation=tf.nn.relu, name=f"hidden_{i}",
                                         kernel_initializer=tf.glorot_uniform_initializer(seed=i))
            deep_logit = tf.layers.dense(hidden, 1, name="logit", kernel_initializer=tf.glorot_uniform_initializer(seed=9))
        with tf.variable_scope("wide"):
            wide_logit = tf.reduce_sum(wide_emb, axis=1, keepdims=True) + tf.layers.dense(
                batch["dense"], 1, name="dense_part", kernel_initializer=tf.zeros_initializer())
    return deep_logit + wide_logit


def session_config():
    """The model zoo's session config: the NpuOptimizer custom optimizer (skipped by TensorFlow on a CPU)."""
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False)
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["mix_compile_mode"].b = False
    custom_op.parameter_map["use_off_line"].b = True
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    return config


# ---------------------------------------------------------------- phases
def build(args, is_training):
    init(use_dynamic=True, train_steps=args.steps, eval_steps=-1)
    tables = create_tables(args)
    sparse_optimizer = create_hash_optimizer(learning_rate=0.01)     # predict too: the checkpoint holds its slots
    specs = feature_specs()
    graph = {"tables": tables}
    if is_training:
        train_iterator = input_fn(args, TRAIN_FILE, True, specs).make_initializable_iterator()
        graph["train_init"] = train_iterator.initializer
        batch = train_iterator.get_next()
        logit = wide_and_deep(tables, batch, True, specs)
        graph["loss"] = loss = tf.losses.sigmoid_cross_entropy(batch["label"], logit)
        dense_vars, sparse_vars = get_dense_and_sparse_variable()
        global_step = tf.train.get_or_create_global_step()
        sparse_grads = tf.gradients(loss, sparse_vars)
        graph["train_op"] = tf.group(
            sparse_optimizer.apply_gradients(zip(sparse_grads, sparse_vars)),
            tf.train.AdamOptimizer(learning_rate=0.001).minimize(loss, global_step=global_step, var_list=dense_vars))
    eval_iterator = input_fn(args, EVAL_FILE, False, specs).make_initializable_iterator()
    eval_batch = eval_iterator.get_next()
    prob = tf.sigmoid(wide_and_deep(tables, eval_batch, False, specs))
    graph["auc"], graph["auc_update"] = tf.metrics.auc(eval_batch["label"], prob, num_thresholds=2000)
    graph["prob"] = prob
    graph["eval_init"] = eval_iterator.initializer
    if USE_MODIFY_GRAPH:
        modify_graph_and_start_emb_cache()
        params = ConfigInitializer.get_instance().train_params_config
        graph["eval_init"] = params.get_initializer(False)
        if is_training:
            graph["train_init"] = params.get_initializer(True)
    else:
        start_asc_pipeline()
    graph["saver"] = tf.train.Saver()
    return graph


def evaluate(session, graph):
    session.run([tf.local_variables_initializer(), graph["eval_init"]])
    scores = []
    while True:
        try:
            scores.append(session.run([graph["prob"], graph["auc_update"]])[0])
        except tf.errors.OutOfRangeError:
            break
    return session.run(graph["auc"]), np.concatenate(scores)


def run_phase(args):
    is_training = args.phase == "train"
    if is_training and not os.path.isfile(os.path.join(args.data_dir, TRAIN_FILE)):
        if not args.criteo:
            raise SystemExit("no Criteo rows: pass --criteo FILE (label, I1..I13, C1..C26 tab-separated)")
        write_tfrecords(args.criteo, args.data_dir)
    with tf.Graph().as_default():
        graph = build(args, is_training)
        with tf.Session(config=session_config()) as session:
            session.run(tf.global_variables_initializer())
            step = 0
            if is_training:
                session.run(graph["train_init"])
                losses = [session.run([graph["loss"], graph["train_op"]])[0] for _ in range(args.steps)]
                assert np.all(np.isfinite(losses)), "non-finite loss"
                step = args.steps
                graph["saver"].save(session, os.path.join(args.model_dir, "model"), global_step=step)
                logger.info("train: %d steps, loss %.4f -> %.4f", step, np.mean(losses[:5]), np.mean(losses[-5:]))
            else:
                latest = tf.train.latest_checkpoint(args.model_dir)
                assert latest, f"predict: no checkpoint in {args.model_dir}; run --phase train first"
                graph["saver"].restore(session, latest)
                step = int(latest.rsplit("-", 1)[1])
            auc, scores = evaluate(session, graph)
            sizes = {name: table.size() for name, table in graph["tables"].items()}
        terminate_config_initializer()
    print(f"PHASE {args.phase} ok step={step} auc={auc:.6f} scores={len(scores)} mean_score={scores.mean():.6f} "
          f"tables={sizes}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=["train", "predict"], default="train")
    parser.add_argument("--model_dir", required=True, help="checkpoint folder")
    parser.add_argument("--data_dir", required=True, help="TFRecord folder (written by train when empty)")
    parser.add_argument("--criteo", default=default_criteo(), help="Criteo rows (default: shared/data's sample)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    run_phase(parser.parse_args())
    print("Demo done!", flush=True)


if __name__ == "__main__":
    main()
