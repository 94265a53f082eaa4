from mxrec_ref.tf import GraphModifierHook, modify_graph_and_start_emb_cache  # noqa: F401
