"""A bounded look at protobuf wire format, for telling binary files apart without parsing them."""

from __future__ import annotations

from dataclasses import dataclass

VARINT, I64, LEN, I32 = 0, 1, 2, 5


@dataclass(frozen=True)
class Field:
    """One top-level field: its number, wire type, and value (int) or payload (bytes)."""

    number: int
    wire_type: int
    value: int | bytes


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it; ValueError when it is cut off or too long."""
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def top_level_fields(data: bytes, limit: int | None = 64) -> list[Field] | None:
    """The first `limit` top-level fields of `data`, or None if it is not valid wire format.

    A field cut off by the end of `data` ends the list without failing, so a prefix of a large
    file can be inspected. Groups (wire types 3 and 4) count as invalid: no format we read uses
    them, and text files are most often rejected that way.
    """
    fields: list[Field] = []
    pos = 0
    try:
        while pos < len(data) and (limit is None or len(fields) < limit):
            tag, pos = read_varint(data, pos)
            number, wire_type = tag >> 3, tag & 7
            if number == 0:
                return None
            if wire_type == VARINT:
                value, pos = read_varint(data, pos)
                fields.append(Field(number, wire_type, value))
            elif wire_type == LEN:
                size, pos = read_varint(data, pos)
                if pos + size > len(data):
                    break
                fields.append(Field(number, wire_type, data[pos:pos + size]))
                pos += size
            elif wire_type in (I64, I32):
                size = 8 if wire_type == I64 else 4
                if pos + size > len(data):
                    break
                value = int.from_bytes(data[pos:pos + size], "little")
                fields.append(Field(number, wire_type, value))
                pos += size
            else:
                return None
    except ValueError:
        return fields or None
    return fields


def encode_varint(value: int) -> bytes:
    """The varint encoding of a non-negative integer."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a sub-message) with the given number, as protobuf encodes it."""
    return encode_varint(number << 3 | LEN) + encode_varint(len(payload)) + payload
