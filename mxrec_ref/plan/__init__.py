"""`mxrec-ref plan`: size a table's tiers by replaying a data sample through the real stores (spec/plan.md).

``sources`` reads a sample, ``tables`` finds the tables, ``replay`` runs them through the stores,
``recommend`` turns the replay into sizes, ``report`` and ``plots`` show them, ``command`` wires the CLI.
"""
