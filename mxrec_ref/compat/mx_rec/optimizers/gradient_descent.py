from mxrec_ref.tf.optimizers.gradient_descent import *  # noqa: F401,F403
from mxrec_ref.tf.optimizers.gradient_descent import create_hash_optimizer  # noqa: F401
from mxrec_ref.tf.optimizers.gradient_descent import create_hash_optimizer_by_addr  # noqa: F401
