from mxrec_ref.tf.optimizers.lazy_adam import *  # noqa: F401,F403
from mxrec_ref.tf.optimizers.lazy_adam import create_hash_optimizer  # noqa: F401
from mxrec_ref.tf.optimizers.lazy_adam import create_hash_optimizer_by_address  # noqa: F401
