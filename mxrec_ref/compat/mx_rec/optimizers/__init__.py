from mxrec_ref.tf.optimizers import create_hash_optimizer  # noqa: F401  (LazyAdam's, as in mxRec)
