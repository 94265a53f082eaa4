"""``install_into_tensorflow()``: ``tf.estimator`` and ``tf.compat.v1.estimator`` resolve to this
package for the rest of the process (EST-9).  TensorFlow 2.16 removed ``tf.estimator``, and the last
``tensorflow-estimator`` (2.15.0) does not import on TF 2.21; ``mxrec-ref run`` calls this, as it
enables the ``mx_rec`` alias, and scripts that import the project may call it themselves.

The patch itself lives with the TF layer's other patches (``tf/patches.py``)."""
from __future__ import annotations

from ..patches import estimator_installed as installed
from ..patches import install_into_tensorflow, uninstall_from_tensorflow

__all__ = ["install_into_tensorflow", "uninstall_from_tensorflow", "installed"]
