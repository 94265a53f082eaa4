"""``ModeKeys``: the three modes a model function is called in (tf.estimator's strings)."""


class ModeKeys:
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"
