from mxrec_ref.tf.optimizers.ftrl import *  # noqa: F401,F403
from mxrec_ref.tf.optimizers.ftrl import create_hash_optimizer  # noqa: F401
