import pytest

from pjrt_hub.abi import ApiVersion


def test_parse_and_print_round_trip():
    v = ApiVersion.parse("0.105")
    assert (v.major, v.minor) == (0, 105)
    assert str(v) == "0.105"
    assert ApiVersion.parse(str(v)) == v
    assert repr(v) == "ApiVersion(0, 105)"


def test_order_is_numeric_not_lexical():
    versions = [ApiVersion.parse(t) for t in ("0.105", "0.9", "0.81", "1.0", "0.29")]
    assert [str(v) for v in sorted(versions)] == ["0.9", "0.29", "0.81", "0.105", "1.0"]
    assert ApiVersion(0, 9) < ApiVersion(0, 81)


def test_parse_accepts_tuple_and_instance():
    assert ApiVersion.parse((0, 81)) == ApiVersion(0, 81)
    v = ApiVersion(0, 1)
    assert ApiVersion.parse(v) is v


@pytest.mark.parametrize("text", ["", "0", "0.x", "a.b", "0.-1", "-1.5", "0.1.2", "0,105"])
def test_parse_rejects_garbage_with_a_message(text):
    with pytest.raises(ValueError, match="not a PJRT API version"):
        ApiVersion.parse(text)


@pytest.mark.parametrize("major, minor", [(-1, 0), (0, -3)])
def test_negative_parts_are_refused(major, minor):
    with pytest.raises(ValueError, match="must not be negative"):
        ApiVersion(major, minor)


def test_non_int_parts_are_refused():
    with pytest.raises(TypeError):
        ApiVersion(0, "5")  # type: ignore[arg-type]  # the wrong type is what is tested
    with pytest.raises(TypeError):
        ApiVersion(0, True)  # type: ignore[arg-type]  # the wrong type is what is tested
    with pytest.raises(TypeError):
        ApiVersion.parse(0.5)  # type: ignore[arg-type]  # the wrong type is what is tested
