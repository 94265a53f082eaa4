"""The conformance suite: the spec's rules as tests, runnable against any store.

``mxrec-ref conformance --backend ref|fast|module:factory`` runs it (see
``mxrec_ref.conformance.run``); ``make test`` runs it against both built-in
backends.  A third-party store subclasses ``mxrec_ref.contract.Store`` and
implements its hooks (spec/contract.md); ``module:factory`` names a callable
``factory(config, optimizer) -> Store``.
"""
