from mxrec_ref.tf import start_asc_pipeline  # noqa: F401
