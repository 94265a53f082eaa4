from mxrec_ref.tf.optimizers.adagrad import *  # noqa: F401,F403
from mxrec_ref.tf.optimizers.adagrad import create_hash_optimizer  # noqa: F401
from mxrec_ref.tf.optimizers.adagrad import create_hash_optimizer_by_address  # noqa: F401
