from mxrec_ref.tf import create_table, sparse_lookup  # noqa: F401
