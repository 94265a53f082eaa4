"""Serving with incremental updates (spec/serving.md).

``export_saved_model(..., updatable=True)`` (``mxrec_ref.keras`` and ``mxrec_ref.tf``) writes tables a served
model can change -- a ``MutableHashTable`` of keys to row indices and a growable ``tf.Variable`` of rows --
with an ``apply_delta`` signature beside ``serving_default``.  ``export_delta(export, path)`` writes the rows
added, changed or evicted since that export (or the last delta written for it) and the dense variables;
``apply_delta(loaded, path)`` / ``read_delta(path)`` read one on the server side (the format is simple enough
to read without mxrec-ref: SERVE-4).
"""
from .delta import FORMAT, FORMAT_VERSION, apply_delta, export_delta, read_delta

__all__ = ["export_delta", "apply_delta", "read_delta", "FORMAT", "FORMAT_VERSION"]
