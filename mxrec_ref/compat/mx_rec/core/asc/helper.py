from mxrec_ref.tf import get_asc_insert_func  # noqa: F401
