"""A click-through model written the way mxRec's Estimator demos are: ``NPUEstimator`` and
``NPURunConfig`` from ``tf_adapter``, a ``model_fn`` with ``create_table`` / ``sparse_lookup`` and a
hash optimizer, ``tf.estimator.train_and_evaluate``, ``EvictHook`` and ``GraphModifierHook`` as
Estimator hooks, and prediction in a separate process.  It imports only TensorFlow, numpy, ``mx_rec``
and ``tf_adapter``; run it on mxrec-ref with

    mxrec-ref run examples/mxrec_estimator.py --run_mode train_and_evaluate --model_dir /tmp/m
    mxrec-ref run examples/mxrec_estimator.py --run_mode predict --model_dir /tmp/m

Flags choose the mode: ``--use_mode feature_spec|modify_graph`` (FeatureSpec lookups through the insert
function, or id tensors rewritten by the graph modifier) and ``--storage hbm|ddr``.  Every Estimator
call builds the model in a new graph; the tables carry over (spec/tf.md TF-21) and the predict process
reads them from ``model_dir``.  The train phase saves its own predictions; the predict phase checks that
it reproduces them exactly.  Each phase ends with mxRec's "Demo done!".
"""
import argparse
import os

import numpy as np
import tensorflow as tf
from tf_adapter import NPUEstimator, NPURunConfig

from mx_rec.core.asc.feature_spec import FeatureSpec
from mx_rec.core.asc.helper import get_asc_insert_func
from mx_rec.core.embedding import create_table, sparse_lookup
from mx_rec.core.feature_process import EvictHook
from mx_rec.graph.modifier import GraphModifierHook
from mx_rec.optimizers.lazy_adam import create_hash_optimizer
from mx_rec.util.initialize import init, terminate_config_initializer
from mx_rec.util.log import logger
from mx_rec.util.variable import get_dense_and_sparse_variable

DIM, BATCH = 8, 64
ACCESS_AND_EVICT = {"access_threshold": 2, "eviction_threshold": 30, "faae_coefficient": 1}
PREDICTIONS = "train_phase_predictions.npy"


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--run_mode", choices=["train_and_evaluate", "predict"], default="train_and_evaluate")
    parser.add_argument("--use_mode", choices=["feature_spec", "modify_graph"], default="feature_spec")
    parser.add_argument("--storage", choices=["hbm", "ddr"], default="hbm")
    parser.add_argument("--model_dir", default="./mxrec_estimator_model")
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--save_checkpoints_steps", type=int, default=30)
    return parser.parse_args()


def click_log(rows, seed):
    """Zipf users and items, a hidden item preference."""
    rng = np.random.default_rng(seed)
    user = (rng.zipf(1.3, size=rows) % 3000).astype(np.int64)
    item = (rng.zipf(1.2, size=rows) % 6000).astype(np.int64)
    taste = np.random.default_rng(7).normal(size=6000)
    label = (rng.random(rows) < 1 / (1 + np.exp(-2 * taste[item]))).astype(np.float32)
    return {"user_ids": user.reshape(-1, 1), "item_ids": item.reshape(-1, 1)}, label


def create_fs_params():
    """The feature specs, made once and shared by input_fn and model_fn, as mxRec's demos do."""
    return {"user_table": FeatureSpec("user_ids", table_name="user_table", **ACCESS_AND_EVICT),
            "item_table": FeatureSpec("item_ids", table_name="item_table", **ACCESS_AND_EVICT)}


def get_input_fn(args, feature_specs, rows, seed, epochs, is_training):
    def input_fn():
        features, label = click_log(rows, seed)
        dataset = tf.data.Dataset.from_tensor_slices((features, label)).repeat(epochs).batch(BATCH)
        if args.use_mode == "feature_spec":
            insert = get_asc_insert_func(tgt_key_specs=list(feature_specs.values()), is_training=is_training)
            dataset = dataset.map(lambda f, y: (insert(f), y))
        return dataset
    return input_fn


def storage_sizes(args):
    if args.storage == "ddr":
        return {"device_vocabulary_size": 1000, "host_vocabulary_size": 20000}
    return {"device_vocabulary_size": 20000}


def get_model_fn(args, feature_specs):
    def model_fn(features, labels, mode, params):
        is_training = mode == tf.estimator.ModeKeys.TRAIN
        embeddings = []
        for name in ("user_table", "item_table"):
            table = create_table(key_dtype=tf.int64, dim=DIM, name=name,
                                 emb_initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.05, seed=1),
                                 **storage_sizes(args))
            if args.use_mode == "feature_spec":
                emb = sparse_lookup(table, feature_specs[name], batch=features, is_train=is_training)
            else:
                emb = sparse_lookup(table, features[feature_specs[name].index_key], is_train=is_training,
                                    modify_graph=True, access_and_evict_config=ACCESS_AND_EVICT)
            embeddings.append(tf.reshape(emb, [-1, DIM]))
        x = tf.concat(embeddings, axis=1)
        with tf.compat.v1.variable_scope("mlp"):
            w1 = tf.compat.v1.get_variable("w1", [2 * DIM, 16],
                                           initializer=tf.compat.v1.glorot_uniform_initializer(seed=2))
            w2 = tf.compat.v1.get_variable("w2", [16, 1], initializer=tf.compat.v1.glorot_uniform_initializer(seed=3))
            logit = tf.reshape(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2), [-1])
        prob = tf.sigmoid(logit)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"probability": prob})
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
        if mode == tf.estimator.ModeKeys.EVAL:
            metrics = {"auc": tf.compat.v1.metrics.auc(labels, prob),
                       "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.cast(prob > 0.5, tf.float32))}
            return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
        sparse_optimizer = create_hash_optimizer(learning_rate=0.01)
        dense_vars, sparse_vars = get_dense_and_sparse_variable()
        sparse_grads = tf.gradients(loss, sparse_vars)
        train_op = tf.group(
            sparse_optimizer.apply_gradients(zip(sparse_grads, sparse_vars)),
            tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, global_step=tf.compat.v1.train.get_global_step(),
                                                            var_list=dense_vars))
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
    return model_fn


def graph_hooks(args):
    """The graph modifier as an Estimator hook: it rewrites the lookups in modify_graph mode and runs the
    new iterators' initializers; in FeatureSpec mode there is nothing to rewrite."""
    return [GraphModifierHook(modify_graph=args.use_mode == "modify_graph")]


def main():
    args = parse_args()
    init(use_dynamic=True)
    feature_specs = create_fs_params()
    run_config = NPURunConfig(model_dir=args.model_dir, save_checkpoints_steps=args.save_checkpoints_steps,
                              keep_checkpoint_max=3, log_step_count_steps=20, tf_random_seed=5)
    est = NPUEstimator(model_fn=get_model_fn(args, feature_specs), params={}, model_dir=args.model_dir,
                       config=run_config)
    predict_input_fn = get_input_fn(args, feature_specs, rows=512, seed=2, epochs=1, is_training=False)
    predictions_path = os.path.join(args.model_dir, PREDICTIONS)
    if args.run_mode == "train_and_evaluate":
        train_spec = tf.estimator.TrainSpec(
            input_fn=get_input_fn(args, feature_specs, rows=4096, seed=0, epochs=None, is_training=True),
            max_steps=args.max_steps,
            hooks=graph_hooks(args) + [EvictHook(evict_enable=True, evict_step_interval=20)])
        eval_spec = tf.estimator.EvalSpec(
            input_fn=get_input_fn(args, feature_specs, rows=1024, seed=1, epochs=1, is_training=False),
            steps=None, hooks=graph_hooks(args))
        metrics, _ = tf.estimator.train_and_evaluate(est, train_spec, eval_spec)
        logger.info("evaluation at step %d: loss %.4f auc %.4f", metrics["global_step"], metrics["loss"],
                    metrics["auc"])
        probabilities = np.array([p["probability"] for p in est.predict(predict_input_fn, hooks=graph_hooks(args))])
        np.save(predictions_path, probabilities)
        print(f"TRAINED mode={args.use_mode} storage={args.storage} global_step={int(metrics['global_step'])} "
              f"eval_auc={metrics['auc']:.4f} predictions={len(probabilities)}")
    else:
        probabilities = np.array([p["probability"] for p in est.predict(predict_input_fn, hooks=graph_hooks(args))])
        expected = np.load(predictions_path)
        same = bool(np.array_equal(probabilities, expected))
        checkpoint = os.path.basename(est.latest_checkpoint())
        print(f"PREDICTED mode={args.use_mode} storage={args.storage} checkpoint={checkpoint} "
              f"predictions={len(probabilities)} same_as_train_phase={same}")
        if not same:
            raise SystemExit("the predict process did not reproduce the train phase's predictions")
    terminate_config_initializer()
    print("Demo done!")


if __name__ == "__main__":
    main()
