from mxrec_ref.tf import get_dense_and_sparse_variable  # noqa: F401
