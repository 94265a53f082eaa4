from mxrec_ref.tf import WarmStartHook, WarmStartSettings, warm_start  # noqa: F401
