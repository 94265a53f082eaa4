from mxrec_ref.tf import EvictHook  # noqa: F401
