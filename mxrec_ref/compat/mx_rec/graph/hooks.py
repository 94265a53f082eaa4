from mxrec_ref.tf.graph_modifier import LookupSubgraphSlicerHook, OrphanLookupKeySlicerHook  # noqa: F401
