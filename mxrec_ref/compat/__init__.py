"""mxRec compatibility: the ``mx_rec`` module tree, opt-in (see alias.py)."""
