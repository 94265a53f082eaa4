from mxrec_ref.tf.graph_modifier import (GraphModifierHook, LookupSubgraphSlicerHook,  # noqa: F401
                                       OrphanLookupKeySlicerHook, do_merge_lookup,
                                       modify_graph_and_start_emb_cache)
