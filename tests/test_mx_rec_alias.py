"""An mxRec script run unchanged through `mxrec-ref run`: `import mx_rec` paths,
graph modification mode, tf.gradients on the tables, a hash optimizer (GRAPH-4)."""
import subprocess
import sys

SCRIPT = r'''
import sys

import numpy as np
import tensorflow as tf
tf.compat.v1.disable_eager_execution()

from mx_rec.util.initialize import init, terminate_config_initializer
from mx_rec.core.embedding import create_table, sparse_lookup
from mx_rec.optimizers.lazy_adam import create_hash_optimizer
from mx_rec.graph import modify_graph_and_start_emb_cache
from mx_rec.util.variable import get_dense_and_sparse_variable
from mx_rec.core.feature_process import EvictHook
from mx_rec.constants.constants import ASCEND_TIMESTAMP

init(use_dynamic=True, backend=sys.argv[1])
rng = np.random.default_rng(0)
ids = rng.zipf(1.3, size=(512, 3)) % 200
label = (ids[:, 0] % 2).astype(np.float32)
ds = tf.data.Dataset.from_tensor_slices({"ids": ids, "label": label,
                                         "ts": np.arange(512, dtype=np.int64)}).batch(32).repeat()
batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
tf.compat.v1.add_to_collection(ASCEND_TIMESTAMP, tf.reduce_max(batch["ts"]))
table = create_table(key_dtype=tf.int64, dim=8, name="item",
                     emb_initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                     device_vocabulary_size=1000)
sparse_optimizer = create_hash_optimizer(learning_rate=0.01)
emb = sparse_lookup(table, batch["ids"], modify_graph=True,
                    access_and_evict_config={"access_threshold": 2, "eviction_threshold": 100})
w = tf.compat.v1.get_variable("w", [8, 1])
logit = tf.reduce_sum(tf.reshape(tf.matmul(tf.reshape(emb, [-1, 8]), w), [-1, 3]), axis=1)
loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"], logits=logit))
dense, sparse = get_dense_and_sparse_variable()
gs = tf.compat.v1.train.get_or_create_global_step()
train = tf.group(sparse_optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse)),
                 tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, global_step=gs, var_list=dense))
modify_graph_and_start_emb_cache()
with tf.compat.v1.train.MonitoredTrainingSession(hooks=[EvictHook(evict_enable=True, evict_step_interval=10)]) as s:
    losses = [s.run([loss, train])[0] for _ in range(60)]
print(np.mean(losses[:10]), np.mean(losses[-10:]), table.size())
terminate_config_initializer()
'''


def test_graph_4_unmodified_mx_rec_script_trains(backend, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, "-m", "mxrec_ref", "run", str(script), backend], capture_output=True,
                            text=True, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    first, last, size = result.stdout.split()
    assert float(last) < float(first) and int(size) > 0


def test_graph_4_alias_is_opt_in():
    plain = subprocess.run([sys.executable, "-c", "import mx_rec"], capture_output=True, text=True, cwd="/")
    assert plain.returncode != 0 and "No module named 'mx_rec'" in plain.stderr
    enabled = subprocess.run([sys.executable, "-c", "import mxrec_ref.compat.enable_mx_rec\n"
                              "from mx_rec.util.communication.hccl_ops import get_rank_id, get_rank_size\n"
                              "from mx_rec.util.ops import import_host_pipeline_ops\n"
                              "ops = import_host_pipeline_ops()\n"
                              "print(get_rank_id(), get_rank_size(), callable(ops.set_threshold))"],
                             capture_output=True, text=True, cwd="/")
    assert enabled.stdout.split() == ["0", "1", "True"], enabled.stderr[-2000:]
