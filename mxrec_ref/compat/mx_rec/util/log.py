"""mxRec's logger: INFO lines to the console.  An mxRec script also sees, on the
same console, what mxrec-ref accepts and ignores (logger ``mxrec_ref.tf``, TF-15)."""
import logging
import os

logger = logging.getLogger("mx_rec")
if not logger.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[mx_rec] %(levelname)s %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(os.environ.get("MXREC_LOG_LEVEL", "INFO").upper())
    logger.propagate = False

_layer = logging.getLogger("mxrec_ref.tf")
if not any(h is logger.handlers[0] for h in _layer.handlers):
    _layer.addHandler(logger.handlers[0])
    if _layer.level == logging.NOTSET:
        _layer.setLevel(logger.level)
