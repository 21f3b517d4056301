import pytest

from pjrt_hub import gate
from pjrt_hub.abi import ApiVersion, Buffer, Client, ExecuteResult, LoadedExecutable, Unimplemented


class _Buffer(Buffer):
    def __init__(self, value):
        self.value = value

    def dimensions(self):
        return (self.value,)


class _Exe(LoadedExecutable):
    def execute(self, argument_lists, options=None, execute_device=None):
        assert all(type(b) is _Buffer for args in argument_lists for b in args)
        return ExecuteResult([[_Buffer(sum(b.value for b in argument_lists[0]))]], [])


class _Client(Client):
    def platform_name(self):
        return "x"

    def compile(self, program, options=None):
        return _Exe()

    def create_view_of_device_buffer(self, producer, *, device=None, on_delete=None):
        return _Buffer(1)


def test_call_newer_than_the_plugin_raises_unimplemented_naming_everything():
    client = gate(_Client(), plugin="old", plugin_version=ApiVersion(0, 32), call_limit=32)
    assert client.platform_name() == "x"
    with pytest.raises(Unimplemented) as info:
        client.create_view_of_device_buffer(object())
    message = str(info.value)
    assert "create_view_of_device_buffer" in message
    assert "PJRT_Client_CreateViewOfDeviceBuffer" in message
    assert "0.33" in message and "0.32" in message and "old" in message


def test_unimplemented_method_of_base_is_unimplemented_not_attribute_error():
    client = gate(_Client(), plugin="p", plugin_version=ApiVersion(0, 105), call_limit=105)
    with pytest.raises(Unimplemented, match="devices is not implemented"):
        client.devices()


def test_results_are_gated_and_arguments_unwrapped():
    client = gate(_Client(), plugin="p", plugin_version=ApiVersion(0, 105), call_limit=105)
    exe = client.compile(None)
    b1 = client.create_view_of_device_buffer(None)
    result = exe.execute([[b1, b1]])
    assert isinstance(result, ExecuteResult)
    out = result.outputs[0][0]
    assert out.dimensions() == (2,)
    assert out.unwrapped.value == 2
    assert out.value == 2  # plain attributes pass through


def test_framework_limit_applies_to_newer_plugins():
    client = gate(_Client(), plugin="new", plugin_version=ApiVersion(0, 115), call_limit=32)
    with pytest.raises(Unimplemented, match="framework's version"):
        client.create_view_of_device_buffer(None)


def test_gated_objects_are_read_only():
    client = gate(_Client(), plugin="p", plugin_version=ApiVersion(0, 105), call_limit=105)
    with pytest.raises(AttributeError):
        client.platform_name = lambda: "y"


def test_execute_hands_the_plugin_the_argument_structure_it_was_given():
    seen = []

    class _Recording(_Exe):
        def execute(self, argument_lists, options=None, execute_device=None):
            seen.append(argument_lists)
            return ExecuteResult([[_Buffer(0)]], [])

    class _RecordingClient(_Client):
        def compile(self, program, options=None):
            return _Recording()

    client = gate(_RecordingClient(), plugin="p", plugin_version=ApiVersion(0, 105), call_limit=105)
    exe = client.compile(None)
    b = client.create_view_of_device_buffer(None)
    exe.execute([[b, [b]], (b,)])
    exe.execute(((b,),))
    exe.execute(["ab"])
    lists, tuples, text = seen
    assert type(lists[0][0]) is _Buffer and lists[0][1] == [lists[0][0]]  # nested lists walked
    assert lists[1] == (lists[0][0],) and type(lists[1]) is tuple
    assert tuples == ((lists[0][0],),)
    assert text == ["ab"]  # not split into characters: the plugin reports what it was given
