from mxrec_ref.tf.graph_modifier import do_merge_lookup  # noqa: F401
