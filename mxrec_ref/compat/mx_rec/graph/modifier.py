from mxrec_ref.tf.graph_modifier import GraphModifierHook, modify_graph_and_start_emb_cache  # noqa: F401
