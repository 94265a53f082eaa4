"""A stand-in for mxrec_ref/peers/tfra_server.py in the main environment (no TFRA): the same protocol and
operations over a dictionary and plain SGD, so the client's side of BE-3 is tested in CI.

Usage: python peers_fake_server.py [--die-on OP] READ_FD WRITE_FD -- with ``--die-on`` the process exits
(code 7) when it receives OP, as a crashed server would."""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mxrec_ref" / "peers"))
import protocol  # noqa: E402


class Table:
    def __init__(self, table, dim, initializer, optimizer):
        assert optimizer["kind"] == "gradient_descent", "the fake server knows SGD only"
        self.dim, self.lr = dim, np.float32(optimizer["learning_rate"])
        self.default = np.float32(0.0 if initializer is None else initializer)
        self.rows, self.meta = {}, {}

    def lookup(self, keys, defaults=None):
        exists = np.array([k in self.rows for k in keys.tolist()], dtype=bool)
        rows = np.full((len(keys), self.dim), self.default, np.float32) if defaults is None else defaults.copy()
        for i, k in enumerate(keys.tolist()):
            if exists[i]:
                rows[i] = self.rows[k]
        return {}, {"rows": rows, "exists": exists}

    def commit(self, clock, new_keys, new_rows, keys, added):
        for k, row in zip(new_keys.tolist(), new_rows):
            self.rows[k] = row.copy()
        for k, n in zip(keys.tolist(), added.tolist()):
            self.meta[k] = (self.meta.get(k, (0, 0))[0] + n, clock)
        return {}, {}

    def apply(self, step, keys, grads):
        applied = 0
        for k, g in zip(keys.tolist(), grads):
            if k in self.rows:
                self.rows[k] = self.rows[k] - self.lr * g
                applied += 1
        return {"applied": applied}, {}

    def export(self):
        keys = np.array(sorted(self.rows), dtype=np.int64)
        values = np.array([self.rows[k] for k in keys.tolist()], np.float32).reshape(len(keys), self.dim)
        meta = np.array([self.meta[k] for k in keys.tolist()], np.int64).reshape(len(keys), 2)
        return {}, {"keys": keys, "values": values, "counts": meta[:, 0].copy(), "last_seen": meta[:, 1].copy()}

    def import_state(self, keys, values, counts, last_seen):
        self.rows = {k: v.copy() for k, v in zip(keys.tolist(), values)}
        self.meta = {k: (c, t) for k, c, t in zip(keys.tolist(), counts.tolist(), last_seen.tolist())}
        return {}, {}

    def size(self):
        return {"size": len(self.rows)}, {}


def main(argv):
    die_on = argv[argv.index("--die-on") + 1] if "--die-on" in argv else None
    reader, writer = os.fdopen(int(argv[-2]), "rb"), os.fdopen(int(argv[-1]), "wb")
    if die_on is not None:
        original = protocol.read_message

        def read_or_die(stream):
            header, arrays = original(stream)
            if header["op"] == die_on:
                sys.stderr.write(f"fake server: dying on {die_on}\n")
                sys.stderr.flush()
                os._exit(7)
            return header, arrays

        protocol.read_message = read_or_die
    protocol.serve(reader, writer, Table, {"fake": True})


if __name__ == "__main__":
    main(sys.argv)
