"""``CompileOptionsProto`` in and out, for the fields pjrt-hub uses.

``PJRT_Client_Compile`` takes its options as a serialized ``xla.CompileOptionsProto``. The C bridge
must produce one and a Python plugin must accept one, so both share this small protobuf codec
rather than depending on protobuf and XLA's generated classes. Field numbers (from
``xla/pjrt/proto/compile_options.proto`` and ``xla/xla_data.proto``)::

    CompileOptionsProto:          3 executable_build_options, 7 env_option_overrides (map)
    ExecutableBuildOptionsProto:  4 num_replicas, 5 num_partitions, 9 device_assignment
    DeviceAssignmentProto:        1 replica_count, 2 computation_count,
                                  3 computation_devices { 1 replica_device_ids (packed) }
    OptionOverrideProto:          1 string_field, 2 bool_field, 3 int_field, 4 double_field

Unknown fields are skipped, as protobuf does.
"""

from __future__ import annotations

import struct
from typing import Iterator

from .binding import CompileOptions
from .errors import InvalidArgument

__all__ = ["decode_compile_options", "encode_compile_options", "encode_device_assignment"]

#: Upstream's message when the bytes are not a CompileOptionsProto (pjrt_c_api_test.cc).
DESERIALIZE_ERROR = "PJRT_Client_Compile: failed to deserialize CompileOptionsProto"

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, _LEN) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _key(number, _VARINT) + _varint(value)


def encode_compile_options(options: CompileOptions) -> bytes:
    """Serialize the fields of :class:`CompileOptions` as a ``CompileOptionsProto``."""
    build = _int_field(4, options.num_replicas) + _int_field(5, options.num_partitions)
    if options.device_assignment is not None:
        build += _len_field(9, encode_device_assignment(options.device_assignment))
    out = _len_field(3, build)
    for name, value in options.env_option_overrides.items():
        if isinstance(value, bool):
            override = _int_field(2, int(value))
        elif isinstance(value, int):
            override = _int_field(3, value)
        elif isinstance(value, float):
            override = _key(4, _I64) + struct.pack("<d", value)
        else:
            override = _len_field(1, str(value).encode())
        entry = _len_field(1, name.encode()) + _len_field(2, override)
        out += _len_field(7, entry)
    return out


def encode_device_assignment(rows: "tuple[tuple[int, ...], ...]") -> bytes:
    """A ``DeviceAssignmentProto`` for ``rows[replica][partition]`` = device id (what
    ``PJRT_LoadedExecutable_GetDeviceAssignment`` hands out)."""
    replicas, partitions = len(rows), len(rows[0]) if rows else 0
    assignment = _int_field(1, replicas) + _int_field(2, partitions)
    for partition in range(partitions):
        ids = b"".join(_varint(rows[r][partition]) for r in range(replicas))
        assignment += _len_field(3, _len_field(1, ids))
    return assignment


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    pos, end = 0, len(data)

    def read_varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= end or shift > 63:
                raise ValueError("truncated varint")
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    while pos < end:
        key = read_varint()
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == _VARINT:
            yield number, wire, read_varint()
        elif wire == _I64:
            if pos + 8 > end:
                raise ValueError("truncated fixed64")
            yield number, wire, data[pos:pos + 8]
            pos += 8
        elif wire == _LEN:
            size = read_varint()
            if pos + size > end:
                raise ValueError("truncated length-delimited field")
            yield number, wire, data[pos:pos + size]
            pos += size
        elif wire == _I32:
            if pos + 4 > end:
                raise ValueError("truncated fixed32")
            yield number, wire, data[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _packed_ints(payload: bytes | int) -> list[int]:
    if isinstance(payload, int):
        return [_signed(payload)]
    values, pos = [], 0
    while pos < len(payload):
        shift = result = 0
        while True:
            if pos >= len(payload):
                raise ValueError("truncated packed varint")
            byte = payload[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        values.append(_signed(result))
    return values


def decode_compile_options(data: bytes | CompileOptions | None) -> CompileOptions:
    """Read a serialized ``CompileOptionsProto``; InvalidArgument with upstream's message if malformed."""
    if data is None:
        return CompileOptions()
    if isinstance(data, CompileOptions):
        return data
    try:
        return _decode(bytes(data))
    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"{DESERIALIZE_ERROR} ({exc})") from None


def _decode(data: bytes) -> CompileOptions:
    replicas, partitions = 1, 1
    assignment: tuple[tuple[int, ...], ...] | None = None
    overrides: dict[str, str | int | float | bool] = {}
    # A field's value is an int for a varint and bytes otherwise (_fields): each test of the wire
    # type below also tests the value's type, which is what lets the type checker follow.
    for number, wire, value in _fields(data):
        if number == 3 and wire == _LEN and isinstance(value, bytes):
            for bnum, bwire, bval in _fields(value):
                if bnum == 4 and bwire == _VARINT and isinstance(bval, int):
                    replicas = _signed(bval)
                elif bnum == 5 and bwire == _VARINT and isinstance(bval, int):
                    partitions = _signed(bval)
                elif bnum == 9 and bwire == _LEN and isinstance(bval, bytes):
                    assignment = _decode_assignment(bval)
        elif number == 7 and wire == _LEN and isinstance(value, bytes):
            name: str = ""
            override: str | int | float | bool | None = None
            for enum_, ewire, evalue in _fields(value):
                if enum_ == 1 and ewire == _LEN and isinstance(evalue, bytes):
                    name = evalue.decode()
                elif enum_ == 2 and ewire == _LEN and isinstance(evalue, bytes):
                    for onum, owire, ovalue in _fields(evalue):
                        if onum == 1 and owire == _LEN and isinstance(ovalue, bytes):
                            override = ovalue.decode()
                        elif onum == 2 and owire == _VARINT:
                            override = bool(ovalue)
                        elif onum == 3 and owire == _VARINT and isinstance(ovalue, int):
                            override = _signed(ovalue)
                        elif onum == 4 and owire == _I64 and isinstance(ovalue, bytes):
                            override = struct.unpack("<d", ovalue)[0]
            if override is not None:
                overrides[name] = override
        elif wire not in (_VARINT, _I64, _LEN, _I32):
            raise ValueError(f"unsupported wire type {wire}")
    if replicas < 1 or partitions < 1:
        raise ValueError(f"num_replicas={replicas} and num_partitions={partitions} must be >= 1")
    return CompileOptions(replicas, partitions, assignment, overrides)


def _decode_assignment(data: bytes) -> tuple[tuple[int, ...], ...]:
    replica_count, computations = 0, []
    for number, wire, value in _fields(data):
        if number == 1 and wire == _VARINT and isinstance(value, int):
            replica_count = _signed(value)
        elif number == 3 and wire == _LEN and isinstance(value, bytes):
            ids: list[int] = []
            for cnum, _cwire, cval in _fields(value):
                if cnum == 1:
                    ids.extend(_packed_ints(cval))
            computations.append(ids)
    if any(len(ids) != replica_count for ids in computations):
        raise ValueError("device_assignment rows do not match replica_count")
    return tuple(tuple(ids[r] for ids in computations) for r in range(replica_count))
