from mxrec_ref.tf.graph_modifier import (ACGPushOpsToDatasetHook, GraphModifierHook,  # noqa: F401
                                       LookupSubgraphSlicerHook, OrphanLookupKeySlicerHook, do_merge_lookup,
                                       modify_graph_and_start_emb_cache, session_run as run)
