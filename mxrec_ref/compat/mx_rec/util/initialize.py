from mxrec_ref.tf.config_initializer import ConfigInitializer, init, terminate_config_initializer  # noqa: F401
