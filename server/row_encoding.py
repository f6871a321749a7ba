"""Export's ROWS format encoded straight from Arrow columns into RowBatch wire bytes.

Building one `Row` message per stored row (and a Python float per vector element) made
Export in ROWS format many times slower than reading the table. The wire format of a
RowBatch is simple: per row, its string fields, two Timestamps and one packed float
field, whose bytes are the vector's little-endian float32 bytes as stored. This module
writes those bytes from the columns; `RowBatch.FromString` then reads them in C.
tests/server/test_row_encoding.py checks the bytes against the message built field by
field.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

# (field number, column) of Row's string fields, and of its Timestamp fields
_STRINGS_BEFORE_TIMESTAMP = ((1, "id"), (2, "env"), (3, "label"), (4, "split"))
_STRINGS_AFTER_TIMESTAMP = ((6, "uri"), (7, "sha256"), (8, "model_id"))
_TIMESTAMP, _INGESTED_AT, _VECTOR = 5, 9, 10
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    value &= 0xFFFF_FFFF_FFFF_FFFF           # negative int64: two's complement, 10 bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int) -> bytes:
    return _varint(field << 3 | _LENGTH_DELIMITED)


def _string(key: bytes, value: str | None) -> bytes:
    if not value:
        return b""
    data = value.encode()
    return key + _varint(len(data)) + data


def _timestamp(key: bytes, micros: int | None) -> bytes:
    if micros is None:
        return b""
    seconds, rest = divmod(micros, 1_000_000)
    body = ((b"\x08" + _varint(seconds) if seconds else b"")
            + (b"\x10" + _varint(rest * 1000) if rest else b""))
    return key + _varint(len(body)) + body


def row_batch_bytes(batch: pa.RecordBatch) -> bytes:
    """The serialized RowBatch of a record batch of store rows (vector optional)."""
    strings = {name: batch.column(name).to_pylist()
               for _, name in _STRINGS_BEFORE_TIMESTAMP + _STRINGS_AFTER_TIMESTAMP}
    times = {name: batch.column(name).cast(pa.int64()).to_pylist()
             for name in ("timestamp", "ingested_at")}
    keys = {field: _key(field) for field in range(1, 11)}
    vectors, vector_head, width = None, b"", 0
    if "vector" in batch.schema.names:
        column = batch.column("vector")
        width = column.type.list_size * 4
        flat = column.flatten().to_numpy(zero_copy_only=False)
        vectors = np.ascontiguousarray(flat, dtype="<f4").tobytes()
        vector_head = keys[_VECTOR] + _varint(width)
    rows = []
    for i in range(batch.num_rows):
        parts = [_string(keys[f], strings[name][i]) for f, name in _STRINGS_BEFORE_TIMESTAMP]
        parts.append(_timestamp(keys[_TIMESTAMP], times["timestamp"][i]))
        parts.extend(_string(keys[f], strings[name][i]) for f, name in _STRINGS_AFTER_TIMESTAMP)
        parts.append(_timestamp(keys[_INGESTED_AT], times["ingested_at"][i]))
        if vectors is not None and width:
            parts += [vector_head, vectors[i * width:(i + 1) * width]]
        body = b"".join(parts)
        rows.append(keys[1] + _varint(len(body)) + body)
    return b"".join(rows)
