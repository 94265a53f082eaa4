"""The wire format between a peer store's client and its server process (spec/backends.md, BE-3).

One message: a 4-byte little-endian length, a JSON header of that length, then the raw bytes of the
header's arrays in order.  The header is ``{"op" | "ok": ..., "fields": {...}, "arrays": [[name, dtype,
shape], ...]}``: plain values travel in JSON, numpy arrays as their bytes (C order, the dtype's own byte
order), so neither side unpickles anything and the two numpy versions (2.x in the client, 1.26 in TFRA's
environment) need not agree on a pickle format.  Standard library and numpy only: the server imports it
by path.
"""
from __future__ import annotations

import json
import struct

import numpy as np

_LENGTH = struct.Struct("<I")


class ConnectionClosed(EOFError):
    """The other side's pipe closed (its process ended) in the middle of or before a message."""


def write_message(stream, header: dict, arrays: dict[str, np.ndarray] | None = None) -> None:
    """Send ``header`` (JSON-serialisable) and ``arrays`` as one message and flush."""
    arrays = {name: np.ascontiguousarray(a) for name, a in (arrays or {}).items()}
    header = dict(header, arrays=[[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()])
    encoded = json.dumps(header).encode("utf-8")
    stream.write(_LENGTH.pack(len(encoded)) + encoded)
    for array in arrays.values():
        stream.write(memoryview(array).cast("B") if array.size else b"")
    stream.flush()


def read_message(stream) -> tuple[dict, dict[str, np.ndarray]]:
    """(header without its array list, {name: array}); ConnectionClosed if the pipe ends."""
    (length,) = _LENGTH.unpack(_read_exactly(stream, _LENGTH.size))
    header = json.loads(_read_exactly(stream, length).decode("utf-8"))
    arrays = {}
    for name, dtype, shape in header.pop("arrays"):
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        data = _read_exactly(stream, count * dtype.itemsize)
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count).reshape(shape).copy()
    return header, arrays


def _read_exactly(stream, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise ConnectionClosed(f"the pipe closed with {left} of {n} bytes unread")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve(reader, writer, table_class, versions: dict) -> None:
    """A server's loop until the client closes its pipe: ``open`` makes ``table_class(table, **fields)``,
    ``close`` drops it, ``hello`` answers ``versions``, ``exit`` ends the process at once (the tests of
    BE-3), any other op calls that method of the table with the message's fields and arrays.  A method
    returns (fields, arrays); an exception goes back to the client as ``{"ok": false}``."""
    import os

    tables = {}
    while True:
        try:
            header, arrays = read_message(reader)
        except ConnectionClosed:
            return
        op, fields = header["op"], header["fields"]
        try:
            if op == "hello":
                reply = dict(versions), {}
            elif op == "open":
                tables[fields["table"]] = table_class(**fields)
                reply = {}, {}
            elif op == "close":
                tables.pop(fields["table"], None)
                reply = {}, {}
            elif op == "exit":
                os._exit(int(fields.get("code", 0)))
            else:
                table = tables[fields.pop("table")]
                reply = getattr(table, op)(**fields, **arrays)
            write_message(writer, {"ok": True, "fields": reply[0]}, reply[1])
        except Exception as error:       # reported to the client, which raises it
            write_message(writer, {"ok": False, "fields": {"error": type(error).__name__, "message": str(error)}})
