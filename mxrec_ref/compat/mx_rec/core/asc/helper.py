from mxrec_ref.tf import FeatureSpec, get_asc_insert_func  # noqa: F401  (mxRec's helper imports FeatureSpec too)
