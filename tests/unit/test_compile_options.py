import pytest

from pjrt_hub.abi import CompileOptions, InvalidArgument, decode_compile_options, encode_compile_options


def test_the_bytes_xla_uses_for_one_replica():
    # build_options{num_replicas:1, num_partitions:1}, as the research drove XLA's CPU plugin.
    assert encode_compile_options(CompileOptions()) == bytes.fromhex("1a0420012801")
    assert decode_compile_options(bytes.fromhex("1a0420012801")) == CompileOptions()


def test_round_trip_with_assignment_and_overrides():
    options = CompileOptions(2, 2, ((0, 1), (2, 3)), {"a": 1, "b": "x", "c": True, "d": 0.5})
    assert decode_compile_options(encode_compile_options(options)) == options


def test_unknown_fields_are_skipped():
    data = encode_compile_options(CompileOptions(3, 1)) + bytes.fromhex("2001")  # field 4 varint
    assert decode_compile_options(data).num_replicas == 3


@pytest.mark.parametrize("data", [b"\xff\xff", b"\x1a\x10\x20", b"\x07", bytes.fromhex("1a0420002801")])
def test_malformed_bytes_raise_upstreams_message(data):
    with pytest.raises(InvalidArgument, match="failed to deserialize CompileOptionsProto"):
        decode_compile_options(data)


def test_none_and_instances_pass_through():
    assert decode_compile_options(None) == CompileOptions()
    o = CompileOptions(4)
    assert decode_compile_options(o) is o
