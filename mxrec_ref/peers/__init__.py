"""Stores of third-party systems behind the store contract, for the conformance suite (spec/contract.md,
CON-11; spec/backends.md, BE-3).

``mxrec_ref.peers.tfra:open_tfra_store`` is TFRA's ``dynamic_embedding`` (TFRA 0.8.1, TF 2.16.2), which
cannot share a process with this package's TensorFlow: the client store forwards each call over two
pipes to a server (``tfra_server.py``) started with the peers environment's Python.  ``protocol`` is the
wire format both sides import; it needs only the standard library and numpy.
"""
