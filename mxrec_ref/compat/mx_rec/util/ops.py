from mxrec_ref.tf.host_ops import clear_channel, import_host_pipeline_ops, return_timestamp  # noqa: F401
