from mxrec_ref.tf.graph_modifier import ACGPushOpsToDatasetHook  # noqa: F401
