from mxrec_ref.tf.optimizers.adagrad_by_addr import *  # noqa: F401,F403
from mxrec_ref.tf.optimizers.adagrad_by_addr import create_hash_optimizer_by_address  # noqa: F401
