from mxrec_ref.tf.optimizers.base import CustomizedOptimizer  # noqa: F401
