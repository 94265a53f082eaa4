"""The repository's tests use the conformance plugin's fixtures (backend,
fast_backend) and hypothesis profiles; see mxrec_ref/conformance/plugin.py."""
