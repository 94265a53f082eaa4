"""mxRec's logger: INFO lines to the console."""
import logging
import os

logger = logging.getLogger("mx_rec")
if not logger.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[mx_rec] %(levelname)s %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(os.environ.get("MXREC_LOG_LEVEL", "INFO").upper())
    logger.propagate = False
