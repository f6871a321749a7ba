"""Export's ROWS format encoded straight from Arrow columns into RowBatch wire bytes.

The wire format of a RowBatch is simple: per row, its string fields, two Timestamps, one
packed float field, whose bytes are the vector's little-endian float32 bytes as stored,
and the event string. This module builds those bytes column by column, never row by
row: each field becomes a binary column of its per-row bytes (tag, length, value; empty
where proto3 writes nothing), Arrow joins the columns element-wise, and the joined
column's data buffer is the RowBatch. `rows_chunk_bytes` wraps it (and
`arrow_chunk_bytes` an Arrow IPC stream) into a whole serialized ExportChunk, which the
server sends as it is (`interceptors.PreSerializedResponses`): no message is built,
copied or re-serialized. tests/server/test_row_encoding.py checks the bytes against the
message built field by field. Against protobuf building the messages and serialising
them (the same bytes), a whole Export RPC moves several times the rows a second
(benchmarks/rows_export.py, docs/benchmarks.md), so this encoder stays.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# (field number, column, few distinct values?) of Row's string fields, and of its
# Timestamp fields
_STRINGS_BEFORE_TIMESTAMP = ((1, "id", False), (2, "env", True), (3, "label", True),
                             (4, "split", True))
_STRINGS_AFTER_TIMESTAMP = ((6, "uri", False), (7, "sha256", False), (8, "model_id", True))
_STRINGS_AFTER_VECTOR = ((11, "event", True),)     # a burst's frames share one
_TIMESTAMP, _INGESTED_AT, _VECTOR = 5, 9, 10
_LENGTH_DELIMITED, _VARINT = 2, 0
_ROWBATCH_ROWS = 1
_CHUNK_ARROW_IPC, _CHUNK_ROWS, _CHUNK_PROVENANCE = 1, 2, 3   # ExportChunk's fields
_MAX_VARINT_BYTES = 10
_EMPTY = pa.scalar(b"", pa.large_binary())
# Distinct values up to which a field's bytes are encoded value by value in Python:
# below it that beats the column operations' fixed cost (a 4,096-row chunk, one value:
# 87 us against 160 for a text field, 67 against 194 for a time; they meet at about
# 64-128 values, and at 1,024 the column operations are 4-6x faster)
FEW_VALUES = 64


def _varint(value: int) -> bytes:
    value &= 0xFFFF_FFFF_FFFF_FFFF           # negative int64: two's complement, 10 bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int = _LENGTH_DELIMITED) -> bytes:
    return _varint(field << 3 | wire_type)


def _binary(offsets: np.ndarray, data: np.ndarray | pa.Buffer) -> pa.Array:
    """A large_binary column from int64 offsets (n + 1) and its data (not copied)."""
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets), buffer])


def _varints(values: np.ndarray, prefix: bytes = b"", present: np.ndarray | None = None
             ) -> pa.Array:
    """Per row: `prefix` + the varint of the row's int64 value (negative: two's
    complement, 10 bytes); an empty value where `present` is False."""
    unsigned = values.astype(np.int64, copy=False).view(np.uint64)
    rows = len(unsigned)
    shortest = _varint_bytes(int(unsigned.min())) if rows else 1
    longest = _varint_bytes(int(unsigned.max())) if rows else 1
    cells = np.empty((rows, len(prefix) + longest), np.uint8)
    cells[:, :len(prefix)] = np.frombuffer(prefix, np.uint8)
    for group in range(longest):                    # 7 bits a byte, low bits first
        cells[:, len(prefix) + group] = (unsigned >> np.uint64(7 * group)) & np.uint64(0x7F)
    if shortest == longest:                         # every value the same length
        cells[:, len(prefix):-1] |= 0x80
        width = np.full(rows, cells.shape[1], np.int64)
    else:
        count = np.ones(rows, np.int64)
        for group in range(1, longest):
            count += unsigned >= np.uint64(1 << (7 * group))
        position = np.arange(longest)
        cells[:, len(prefix):][position[None, :] < count[:, None] - 1] |= 0x80
        width = count + len(prefix)
    if present is not None:
        width = np.where(present, width, 0)
    offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(width, out=offsets[1:])
    if offsets[-1] == rows * cells.shape[1]:           # every row full width
        return _binary(offsets, cells.ravel())
    keep = np.arange(cells.shape[1])[None, :] < width[:, None]
    return _binary(offsets, cells[keep])


def _varint_bytes(unsigned: int) -> int:
    """The length of the varint of an unsigned 64-bit value."""
    return max(1, (unsigned.bit_length() + 6) // 7)


def _string_field(field: int, column: pa.Array) -> list[pa.Array]:
    """Tag + length + UTF-8 bytes per row; nothing for an empty or missing string."""
    values = pc.fill_null(column.cast(pa.large_binary()), b"")
    lengths = _lengths(values)
    if not lengths.any():               # e.g. no row has a uri: nothing to write
        return []
    return [_varints(lengths, _key(field), lengths > 0), values]


def _timestamp_field(field: int, column: pa.Array) -> list[pa.Array]:
    """A Timestamp message per row (seconds, then nanos, each only when non-zero);
    nothing for a missing timestamp. Each distinct value is encoded once and taken per
    row: `ingested_at` is one value per write, and capture times repeat in bursts."""
    encoded = pc.dictionary_encode(column, null_encoding="encode")
    values = encoded.dictionary.cast(pa.int64())
    if len(values) <= FEW_VALUES:
        return _taken_pieces([_timestamp_piece(field, v) for v in values.to_pylist()],
                             encoded.indices)
    present = values.is_valid().to_numpy(zero_copy_only=False)
    micros = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
    seconds, rest = np.divmod(micros, 1_000_000)
    nanos = rest * 1000
    body = _join([_varints(seconds, _key(1, _VARINT), present & (seconds != 0)),
                  _varints(nanos, _key(2, _VARINT), present & (nanos != 0))])
    return _taken(_join([_varints(_lengths(body), _key(field), present), body]),
                  encoded.indices)


def _timestamp_piece(field: int, micros: int | None) -> bytes:
    """One row's Timestamp field for a time in microseconds since the epoch (none when
    missing): `_timestamp_field`'s bytes, for one value."""
    if micros is None:
        return b""
    seconds, rest = divmod(micros, 1_000_000)        # floored, as numpy's divmod
    nanos = rest * 1000
    body = ((_key(1, _VARINT) + _varint(seconds) if seconds else b"")
            + (_key(2, _VARINT) + _varint(nanos) if nanos else b""))
    return _key(field) + _varint(len(body)) + body


def _category_field(field: int, column: pa.Array) -> list[pa.Array]:
    """`_string_field` for a column of few distinct values (camera, label, split,
    model): each distinct value's tag, length and bytes encoded once, then taken per
    row, so the row join has one column for the field instead of two."""
    encoded = pc.dictionary_encode(column, null_encoding="encode")
    if len(encoded.dictionary) <= FEW_VALUES:
        return _taken_pieces([_string_piece(field, v) for v in encoded.dictionary.to_pylist()],
                             encoded.indices)
    values = pc.fill_null(encoded.dictionary.cast(pa.large_binary()), b"")
    lengths = _lengths(values)
    return _taken(_join([_varints(lengths, _key(field), lengths > 0), values]),
                  encoded.indices)


def _string_piece(field: int, value: str | None) -> bytes:
    """One row's string field (nothing for an empty or missing string)."""
    data = (value or "").encode()
    return _key(field) + _varint(len(data)) + data if data else b""


def _text_field(field: int, column: pa.Array, categorical: bool) -> list[pa.Array]:
    return (_category_field if categorical else _string_field)(field, column)


def _taken(pieces: pa.Array, indices: pa.Array) -> list[pa.Array]:
    """The per-row column `pieces[indices]`; nothing when every piece is empty."""
    if not _lengths(pieces).any():
        return []
    return [pieces.take(indices)]


def _taken_pieces(pieces: list[bytes], indices: pa.Array) -> list[pa.Array]:
    """`_taken` of pieces encoded one by one in Python."""
    if not any(pieces):
        return []
    return [pa.array(pieces, pa.large_binary()).take(indices)]


def _vector_field(column: pa.Array) -> list[pa.Array]:
    """The packed float field per row: tag, byte length, the float32 bytes as stored."""
    dim = column.type.list_size
    if dim == 0:
        return []
    flat = column.flatten()
    if flat.null_count == 0 and np.little_endian:     # the stored bytes, not copied
        data = flat.buffers()[1].slice(flat.offset * 4, len(flat) * 4)
    else:
        values = flat.to_numpy(zero_copy_only=False)
        data = pa.py_buffer(np.ascontiguousarray(values, dtype="<f4").tobytes())
    offsets = np.arange(len(column) + 1, dtype=np.int64) * dim * 4
    rows = np.full(len(column), dim * 4, np.int64)
    return [_varints(rows, _key(_VECTOR)), _binary(offsets, data)]


def _join(columns: list[pa.Array]) -> pa.Array:
    """Row i of the result: row i of every column, concatenated."""
    return pc.binary_join_element_wise(*columns, _EMPTY)


def _lengths(column: pa.Array) -> np.ndarray:
    return pc.binary_length(column).to_numpy(zero_copy_only=False)


def _data(column: pa.Array) -> pa.Buffer:
    """The concatenated values of a large_binary column without nulls (not copied)."""
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset:]
    start, stop = int(offsets[0]), int(offsets[len(column)])
    return column.buffers()[2].slice(start, stop - start)


def row_batch_bytes(batch: pa.RecordBatch) -> bytes:
    """The serialized RowBatch of a record batch of store rows (vector optional)."""
    return _row_batch(batch).to_pybytes()


def _row_batch(batch: pa.RecordBatch) -> pa.Buffer:
    if batch.num_rows == 0:
        return pa.py_buffer(b"")
    fields: list[pa.Array] = []
    for field, name, categorical in _STRINGS_BEFORE_TIMESTAMP:
        fields += _text_field(field, batch.column(name), categorical)
    fields += _timestamp_field(_TIMESTAMP, batch.column("timestamp"))
    for field, name, categorical in _STRINGS_AFTER_TIMESTAMP:
        fields += _text_field(field, batch.column(name), categorical)
    fields += _timestamp_field(_INGESTED_AT, batch.column("ingested_at"))
    if "vector" in batch.schema.names:
        fields += _vector_field(batch.column("vector"))
    for field, name, categorical in _STRINGS_AFTER_VECTOR:
        fields += _text_field(field, batch.column(name), categorical)
    length = np.sum([_lengths(field) for field in fields], axis=0)
    return _data(_join([_varints(length, _key(_ROWBATCH_ROWS)), *fields]))


def rows_chunk_bytes(batch: pa.RecordBatch, provenance: bytes) -> bytes:
    """A serialized ExportChunk holding the batch as a RowBatch, and the serialized
    Provenance."""
    return _chunk(_CHUNK_ROWS, _row_batch(batch), provenance)


def arrow_chunk_bytes(arrow_ipc: bytes, provenance: bytes) -> bytes:
    """A serialized ExportChunk holding an Arrow IPC stream, and the serialized
    Provenance."""
    return _chunk(_CHUNK_ARROW_IPC, arrow_ipc, provenance)


def _chunk(field: int, payload: bytes | pa.Buffer, provenance: bytes) -> bytes:
    size = payload.size if isinstance(payload, pa.Buffer) else len(payload)
    return b"".join([_key(field), _varint(size), payload,
                     _key(_CHUNK_PROVENANCE), _varint(len(provenance)), provenance])
