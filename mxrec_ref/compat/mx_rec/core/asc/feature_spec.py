from mxrec_ref.tf import FeatureSpec  # noqa: F401
