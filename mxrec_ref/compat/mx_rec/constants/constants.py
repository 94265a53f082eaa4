from mxrec_ref.tf.constants import *  # noqa: F401,F403
