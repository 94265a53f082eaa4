"""A two-tower recommender written the way mxRec's own demos are (little_demo):
switches in environment variables, phases on the command line, one checkpoint
folder shared by the phases.  It imports only TensorFlow, numpy and ``mx_rec``:

    mxrec-ref run examples/mxrec_two_tower.py --run_mode train,load_and_train,predict

Phases (``--run_mode``, comma-separated phases run one after another, each in a
fresh graph with its own ``init()``, as separate processes would):
  train           train, evaluate, save to --model_dir
  load_and_train  restore the latest checkpoint, train more, save again
  predict         restore the latest checkpoint, score the evaluation data
Environment switches (default in brackets):
  USE_DYNAMIC            1 dynamic shape | 0 static shape (send_count)          [1]
  USE_MODIFY_GRAPH       1 graph modification | 0 FeatureSpec mode             [0]
  USE_TENSOR_IDS         1: tensor ids, no graph rewrite (a store call per lookup) [0]
  STORAGE                hbm | ddr | ssd                                       [hbm]
  USE_DYNAMIC_EXPANSION  1: HBM dynamic expansion (LazyAdamByAddress)          [0]
  SPARSE_OPTIMIZER       lazy_adam | adagrad_by_addr | gradient_descent_by_addr [lazy_adam]
  USE_TIMESTAMP          1: admission and eviction by the batch timestamp      [1]
  USE_ONE_SHOT           1: one-shot training iterator | 0: initializable      [1]
  MULTI_LOOKUP_TIMES     N: the item table is looked up 1 + N times (history)  [2]
  USE_COMBINE_FAAE       passed through (mxRec pools admission history)        [unset]
Tables: user, item (1 + N lookups), category (``is_dp=True``).  The data is a
synthetic click log made here (``--data`` reads a MovieLens ratings file instead:
``user::item::rating::time`` lines).  Each phase ends with a line "PHASE <name> ok".
"""
import argparse
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

from mx_rec.constants.constants import ASCEND_TIMESTAMP  # noqa: E402
from mx_rec.core.asc.feature_spec import FeatureSpec  # noqa: E402
from mx_rec.core.asc.helper import get_asc_insert_func  # noqa: E402
from mx_rec.core.asc.manager import start_asc_pipeline  # noqa: E402
from mx_rec.core.embedding import create_table, sparse_lookup  # noqa: E402
from mx_rec.core.feature_process import EvictHook  # noqa: E402
from mx_rec.graph.modifier import modify_graph_and_start_emb_cache  # noqa: E402
from mx_rec.util.initialize import ConfigInitializer, init, terminate_config_initializer  # noqa: E402
from mx_rec.util.log import logger  # noqa: E402
from mx_rec.util.ops import import_host_pipeline_ops  # noqa: E402
from mx_rec.util.variable import get_dense_and_sparse_variable  # noqa: E402

USE_DYNAMIC = os.getenv("USE_DYNAMIC", "1") == "1"
USE_MODIFY_GRAPH = os.getenv("USE_MODIFY_GRAPH", "0") == "1"
USE_TENSOR_IDS = os.getenv("USE_TENSOR_IDS", "0") == "1" and not USE_MODIFY_GRAPH
ID_TENSORS = USE_MODIFY_GRAPH or USE_TENSOR_IDS      # the lookups take the batch's id tensors
STORAGE = os.getenv("STORAGE", "hbm")
USE_DYNAMIC_EXPANSION = os.getenv("USE_DYNAMIC_EXPANSION", "0") == "1"
SPARSE_OPTIMIZER = os.getenv("SPARSE_OPTIMIZER", "lazy_adam_by_addr" if USE_DYNAMIC_EXPANSION else "lazy_adam")
USE_TIMESTAMP = os.getenv("USE_TIMESTAMP", "1") == "1"
USE_ONE_SHOT = os.getenv("USE_ONE_SHOT", "1") == "1"
MULTI_LOOKUP_TIMES = int(os.getenv("MULTI_LOOKUP_TIMES", "2"))

DIM, CATEGORIES = 8, 20
# admission on the item table; eviction (seconds of data time) needs the timestamp
ITEM_ADMIT = {"access_threshold": 2, "eviction_threshold": 3600 if USE_TIMESTAMP else None, "faae_coefficient": 1}
if USE_DYNAMIC_EXPANSION:      # mxRec: no admission/eviction with dynamic expansion
    ITEM_ADMIT = {}


# ----------------------------------------------------------------- data
def click_log(rows, seed, path=None):
    """(user, item, history of N items, category, label): a MovieLens ratings file
    (label = rating >= 4) or a synthetic Zipf log with a hidden preference."""
    rng = np.random.default_rng(seed)
    if path:
        raw = np.loadtxt(path, delimiter="::", dtype=np.int64, max_rows=rows) if path.endswith(".dat") else \
            np.loadtxt(path, delimiter=",", dtype=np.float64, skiprows=1, max_rows=rows).astype(np.int64)
        user, item, label = raw[:, 0], raw[:, 1], (raw[:, 2] >= 4).astype(np.float32)
    else:
        user = rng.zipf(1.3, size=rows) % 3000
        item = rng.zipf(1.2, size=rows) % 8000
        taste = np.random.default_rng(7).normal(size=8000)
        label = (rng.random(rows) < 1 / (1 + np.exp(-(taste[item] + 0.3 * np.sin(user))))).astype(np.float32)
    history = (item[:, None] + rng.integers(1, 50, size=(rows, MULTI_LOOKUP_TIMES))) % 8000
    return {"user": user.astype(np.int64), "item": item.astype(np.int64), "history": history.astype(np.int64),
            "category": (item % CATEGORIES).astype(np.int64), "label": label}


def dataset(args, seed, repeat, is_training, specs):
    data = click_log(args.rows, seed, args.data)
    n = len(data["label"])

    def batches():                       # a Python generator, as upstream demos feed their data
        while True:
            for start in range(0, n - args.batch + 1, args.batch):
                yield {k: v[start:start + args.batch] for k, v in data.items()}
            if not repeat:
                return

    signature = {k: tf.TensorSpec([args.batch, *v.shape[1:]], tf.as_dtype(v.dtype)) for k, v in data.items()}
    ds = tf.data.Dataset.from_generator(batches, output_signature=signature)
    if USE_TIMESTAMP:                    # the upstream recipe: the host op stamps each batch
        ops = import_host_pipeline_ops()
        ds = ds.map(lambda b: {**b, "timestamp": ops.return_timestamp(tf.cast(b["label"], tf.int64))})
    if not ID_TENSORS:
        ds = ds.map(get_asc_insert_func(tgt_key_specs=specs, is_training=is_training))
    return ds.prefetch(2)


# ---------------------------------------------------------------- model
def send_count(args, table):
    if USE_DYNAMIC:
        return None
    return {"user": args.batch, "item": args.batch * (1 + MULTI_LOOKUP_TIMES), "category": args.batch}[table]


def storage(args, table):
    unique = args.batch * (1 + MULTI_LOOKUP_TIMES)
    if USE_DYNAMIC_EXPANSION:
        return {"device_vocabulary_size": 1}
    if STORAGE == "ddr":
        return {"device_vocabulary_size": 2 * unique, "host_vocabulary_size": 20000}
    if STORAGE == "ssd":
        return {"device_vocabulary_size": 2 * unique, "host_vocabulary_size": 4 * unique,
                "ssd_vocabulary_size": 20000, "ssd_data_path": [os.path.join(args.model_dir, f"ssd-{table}")]}
    return {"device_vocabulary_size": 20000}


def create_tables(args):
    init_ = tf.compat.v1.truncated_normal_initializer(stddev=0.05, seed=1)
    tables = {name: create_table(tf.int64, DIM, name, init_, **storage(args, name)) for name in ("user", "item")}
    tables["category"] = create_table(tf.int64, DIM, "category", init_, is_dp=True, **storage(args, "category"))
    return tables


def feature_specs():
    """FeatureSpec mode: one spec per lookup; the 1 + N item lookups share the item table."""
    specs = {"user": FeatureSpec("user", table_name="user"),
             "item": FeatureSpec("item", table_name="item", **ITEM_ADMIT),
             "category": FeatureSpec("category", table_name="category")}
    for i in range(MULTI_LOOKUP_TIMES):
        specs[f"history_{i}"] = FeatureSpec(f"history_{i}", table_name="item", index_key="history", **ITEM_ADMIT)
    if USE_TIMESTAMP:
        specs["timestamp"] = FeatureSpec("timestamp", is_timestamp=True)
    return specs


def lookups(args, tables, batch, specs, is_train):
    def lookup(table, spec_name, ids, **admit):
        if ID_TENSORS:
            return sparse_lookup(tables[table], ids, send_count=send_count(args, table), is_train=is_train,
                                 modify_graph=True, access_and_evict_config=admit or None)
        return sparse_lookup(tables[table], specs[spec_name], send_count=send_count(args, table), batch=batch,
                             is_train=is_train)

    user = lookup("user", "user", batch["user"])
    item = lookup("item", "item", batch["item"], **ITEM_ADMIT)
    history = [lookup("item", f"history_{i}", batch["history"], **ITEM_ADMIT) for i in range(MULTI_LOOKUP_TIMES)]
    category = lookup("category", "category", batch["category"])
    return user, item, history, category


def two_tower(user, item, history, category):
    with tf.compat.v1.variable_scope("towers", reuse=tf.compat.v1.AUTO_REUSE):
        seen = tf.reduce_mean(tf.stack([h[:, i] for i, h in enumerate(history)], axis=0), axis=0)
        user_vec = _dense(tf.concat([user, seen], 1), DIM, "user_tower")
        item_vec = _dense(tf.concat([item, category], 1), DIM, "item_tower")
        return tf.reduce_sum(user_vec * item_vec, axis=1)


def _dense(x, units, name):
    w = tf.compat.v1.get_variable(f"{name}_w", [x.shape[-1], units],
                                  initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
    return tf.nn.tanh(tf.matmul(x, w))


def sparse_optimizer():
    if SPARSE_OPTIMIZER == "lazy_adam_by_addr":
        from mx_rec.optimizers.lazy_adam_by_addr import create_hash_optimizer_by_address
        return create_hash_optimizer_by_address(learning_rate=0.01)
    if SPARSE_OPTIMIZER == "adagrad_by_addr":
        from mx_rec.optimizers.adagrad_by_addr import create_hash_optimizer_by_address
        return create_hash_optimizer_by_address(learning_rate=0.05)
    if SPARSE_OPTIMIZER == "gradient_descent_by_addr":
        from mx_rec.optimizers.gradient_descent_by_addr import create_hash_optimizer_by_addr
        return create_hash_optimizer_by_addr(learning_rate=0.1)
    from mx_rec.optimizers.lazy_adam import create_hash_optimizer
    return create_hash_optimizer(learning_rate=0.01)


# ---------------------------------------------------------------- phases
def build(args, train):
    """The graph of one phase: training (unless predicting) and evaluation."""
    init(use_dynamic=USE_DYNAMIC, use_dynamic_expansion=USE_DYNAMIC_EXPANSION, train_steps=args.steps,
         eval_steps=-1)
    tables = create_tables(args)
    optimizer = sparse_optimizer()       # predict too: the checkpoint holds the optimizer's slots
    specs = feature_specs()
    spec_list = list(specs.values())
    graph = {"tables": tables}
    if train:
        train_ds = dataset(args, 0, True, True, spec_list)
        iterator = (tf.compat.v1.data.make_one_shot_iterator(train_ds) if USE_ONE_SHOT
                    else tf.compat.v1.data.make_initializable_iterator(train_ds))
        graph["train_init"] = None if USE_ONE_SHOT else iterator.initializer
        batch = iterator.get_next()
        if ID_TENSORS and USE_TIMESTAMP:
            tf.compat.v1.add_to_collection(ASCEND_TIMESTAMP, batch["timestamp"])
        logit = two_tower(*lookups(args, tables, batch, specs, True))
        graph["loss"] = loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"],
                                                                                      logits=logit))
        dense_vars, sparse_vars = get_dense_and_sparse_variable()
        sparse_grads = tf.gradients(loss, sparse_vars)
        graph["train_op"] = tf.group(optimizer.apply_gradients(zip(sparse_grads, sparse_vars)),
                                     tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, var_list=dense_vars))
        graph["set_threshold"] = import_host_pipeline_ops().set_threshold(3, emb_name="item", ids_name="item")
    eval_iterator = tf.compat.v1.data.make_initializable_iterator(dataset(args, 1, False, False, spec_list))
    eval_batch = eval_iterator.get_next()
    if ID_TENSORS and USE_TIMESTAMP:
        tf.compat.v1.add_to_collection(ASCEND_TIMESTAMP, eval_batch["timestamp"])
    graph["prob"] = tf.sigmoid(two_tower(*lookups(args, tables, eval_batch, specs, False)))
    graph["label"] = tf.identity(eval_batch["label"])
    graph["eval_init"] = eval_iterator.initializer
    if USE_MODIFY_GRAPH:
        modify_graph_and_start_emb_cache()
        params = ConfigInitializer.get_instance().train_params_config
        graph["eval_init"] = params.get_initializer(False)
        if train and not USE_ONE_SHOT:
            graph["train_init"] = params.get_initializer(True)
    elif not USE_TENSOR_IDS:
        start_asc_pipeline()
    graph["clear_channel"] = import_host_pipeline_ops().clear_channel(
        ConfigInitializer.get_instance().train_params_config.get_training_mode_channel_id(True))
    graph["saver"] = tf.compat.v1.train.Saver()
    return graph


def train_steps(args, session, graph, first_step):
    if graph["train_init"] is not None:
        session.run(graph["train_init"])
    hook = EvictHook(evict_enable=USE_TIMESTAMP and not USE_DYNAMIC_EXPANSION, evict_step_interval=10)
    hook.begin()
    losses = []
    for step in range(args.steps):
        losses.append(session.run([graph["loss"], graph["train_op"]])[0])
        hook.after_run(None, None)
        if step == args.steps // 2:
            session.run(graph["set_threshold"])          # raise the item table's admission threshold
    session.run(graph["clear_channel"])                  # switching to evaluation, as mxRec demos do
    return losses, first_step + args.steps


def evaluate(session, graph):
    session.run(graph["eval_init"])
    scores, labels = [], []
    while True:
        try:
            p, y = session.run([graph["prob"], graph["label"]])
        except tf.errors.OutOfRangeError:
            break
        scores.append(p)
        labels.append(y)
    scores, labels = np.concatenate(scores), np.concatenate(labels)
    return float(np.mean((scores > 0.5) == (labels > 0.5))), len(scores)


def table_report(tables):
    return {name: (t.size(), t.capacity()) for name, t in tables.items()}


def run_phase(args, phase):
    train = phase != "predict"
    for table in ("user", "item", "category"):     # SSD files must not pre-exist (the checkpoint holds every key)
        shutil.rmtree(os.path.join(args.model_dir, f"ssd-{table}"), ignore_errors=True)
    with tf.Graph().as_default():
        graph = build(args, train)
        session = tf.compat.v1.Session()           # closed at exit, as in upstream demos
        session.run(tf.compat.v1.global_variables_initializer())
        step = 0
        if phase != "train":
            latest = tf.train.latest_checkpoint(args.model_dir)
            assert latest, f"{phase}: no checkpoint in {args.model_dir}; run --run_mode train first"
            graph["saver"].restore(session, latest)
            step = int(latest.rsplit("-", 1)[1])
            restored = table_report(graph["tables"])
            assert all(size > 0 for size, _ in restored.values()), restored
        if train:
            losses, step = train_steps(args, session, graph, step)
            assert np.all(np.isfinite(losses)), "non-finite loss"
            graph["saver"].save(session, os.path.join(args.model_dir, "model"), global_step=step)
            logger.info("%s: %d steps, loss %.4f -> %.4f", phase, args.steps, np.mean(losses[:5]),
                        np.mean(losses[-5:]))
        accuracy, scored = evaluate(session, graph)
        report = table_report(graph["tables"])
        assert all(0 < size <= capacity for size, capacity in report.values()), report
        terminate_config_initializer()
    print(f"PHASE {phase} ok step={step} eval_accuracy={accuracy:.3f} scored={scored} tables={report}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run_mode", default="train,load_and_train,predict")
    parser.add_argument("--model_dir", default=None, help="checkpoint folder (default: a new temporary one)")
    parser.add_argument("--data", default=None, help="a MovieLens ratings file (ratings.dat or ratings.csv)")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    temporary = args.model_dir is None
    args.model_dir = args.model_dir or tempfile.mkdtemp(prefix="mxrec-two-tower-")
    try:
        for phase in args.run_mode.split(","):
            if phase not in ("train", "load_and_train", "predict"):
                parser.error(f"--run_mode: unknown phase {phase!r}")
            run_phase(args, phase)
    finally:
        if temporary:
            shutil.rmtree(args.model_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
