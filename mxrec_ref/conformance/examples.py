"""The old name of ``mxrec_ref.conformance.broken_stores``, kept so that
``mxrec-ref conformance --backend mxrec_ref.conformance.examples:EarlyAdmissionStore`` still works."""
from .broken_stores import EarlyAdmissionStore

__all__ = ["EarlyAdmissionStore"]
