"""The 26-table model (bench/criteo26.py) in one process, TF1 graph: ``mxrec`` (mxrec-ref's TF
layer, fast backend, dynamic expansion) or ``static`` (tf.Variable tables of the final sizes).

Usage: python worker_criteo26_tf1.py BENCH_DIR STREAM_NPZ mxrec|static; prints one JSON line."""
import json
import sys

import tensorflow as tf

sys.path.insert(0, sys.argv[1])
import criteo26  # noqa: E402

stream = criteo26.load_stream(sys.argv[2])
variant = sys.argv[3]
with tf.Graph().as_default():
    if variant == "mxrec":
        import mxrec_ref.tf as mx   # the mxrec-ref venv only; the static variant runs without it

        mx.init(backend="fast", use_dynamic_expansion=True)
        train_op = criteo26.mxrec_graph(tf, mx, stream)
    else:
        train_op = criteo26.static_graph(tf, stream)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        result = criteo26.time_steps(lambda: session.run(train_op))
    keys = (sum(t.store.size() for t in mx.ConfigInitializer.get_instance().tables.values())
            if variant == "mxrec" else int(stream["sizes"].sum()))
print(json.dumps({"system": "mxrec-ref" if variant == "mxrec" else "static", "tf": tf.__version__, "keys": keys,
                  **result}))
