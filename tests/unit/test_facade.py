import inspect
import pickle

import pytest

from pjrt_hub import gate
from pjrt_hub.abi import (ApiVersion, Buffer, Client, ErrorCode, ExecuteResult, LoadedExecutable, Unimplemented,
                          VersionGateRefusal)


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


def test_the_gate_refuses_with_its_own_error_type_and_says_what_it_refused():
    client = gate(_Client(), plugin="old", plugin_version=ApiVersion(0, 32), call_limit=32)
    with pytest.raises(VersionGateRefusal) as info:
        client.create_view_of_device_buffer(object())
    refusal = info.value
    assert isinstance(refusal, Unimplemented) and refusal.code is ErrorCode.UNIMPLEMENTED
    assert (refusal.plugin, refusal.method, refusal.since, refusal.call_limit) == \
        ("old", "_Client.create_view_of_device_buffer", 33, 32)
    assert pickle.loads(pickle.dumps(refusal)).__dict__ == refusal.__dict__
    # A plugin's own Unimplemented is not the gate's, whatever it says.
    with pytest.raises(Unimplemented) as info:
        gate(_Client(), plugin="p", plugin_version=ApiVersion(0, 105), call_limit=105).devices()
    assert not isinstance(info.value, VersionGateRefusal)


def test_the_suite_skips_what_the_gate_refused_and_fails_what_the_plugin_refused():
    from pjrt_hub import PluginRegistry, Policy, RegistrySettings
    from pjrt_hub.testing import Case, CaseFailure, CaseSkipped, PluginUnderTest, run_case
    from pjrt_hub.testing.toy import ToyPlugin

    # A plugin and a framework at 0.81: Device.get_attributes (0.92) is beyond the gate.
    registry = PluginRegistry(RegistrySettings(policy=Policy(framework=ApiVersion(0, 81)), autoload=False), environ={})
    registry.register(ToyPlugin(api_version="0.81"), "toy")
    ctx = PluginUnderTest(registry, "toy")

    def gated(ctx):
        ctx.devices[0].get_attributes()

    def mimic(ctx):
        raise Unimplemented("Device.get_attributes: calls are limited to 0.81 here", plugin="toy")

    with pytest.raises(CaseSkipped, match="the version gate refused a call: .*get_attributes"):
        run_case(Case("device", "gated", "a call the gate refuses", gated), ctx)
    with pytest.raises(CaseFailure, match="the plugin raised UNIMPLEMENTED: .*calls are limited to"):
        run_case(Case("device", "mimic", "the plugin's own Unimplemented, in the gate's words", mimic), ctx)


@pytest.mark.parametrize("code", [c for c in ErrorCode if c is not ErrorCode.OK], ids=lambda c: c.name)
def test_each_code_has_a_declared_class_in_the_public_namespace(code):
    import pjrt_hub
    from pjrt_hub.abi import error_for_code, errors

    cls = type(error_for_code(code, "m"))
    assert cls.code is code and cls.__module__ == "pjrt_hub" and cls.__doc__
    assert getattr(pjrt_hub, cls.__name__) is cls is getattr(errors, cls.__name__)
    # Declared in the module's source (so type checkers see it), not made by a call.
    assert f"\nclass {cls.__name__}(PjrtError):\n" in inspect.getsource(errors)
    error = cls("went wrong", plugin="p")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and str(again) == str(error) and again.plugin == "p"


class _ListingClient(_Client):
    def devices(self):
        return [_Buffer(3)]  # a method of self alone that returns plugin objects


def test_parameterless_methods_wrap_their_results_and_leave_argument_errors_to_the_plugin():
    client = gate(_ListingClient(), plugin="p", plugin_version=ApiVersion(0, 105), call_limit=105)
    (device,) = client.devices()
    assert device.unwrapped.value == 3 and device.dimensions() == (3,)  # wrapped, and gated in turn
    assert client.platform_name() == "x"
    with pytest.raises(TypeError, match=r"platform_name\(\) takes 1 positional argument but 2 were given"):
        client.platform_name("unexpected")
    with pytest.raises(TypeError, match="platform_name"):
        client.platform_name(extra=1)


def test_a_gate_with_nothing_to_refuse_hands_out_the_plugins_own_objects():
    # At or past the newest function the history knows, no call can be refused: a proxy would
    # only cost time on every execute, so the plugin's own objects come back, with ``unwrapped``.
    from pjrt_hub.abi import api
    from pjrt_hub.abi.history import _introductions, newest_addition

    newest = newest_addition()
    function = next(name for name, minor in _introductions().items() if minor == newest)

    class _Newest(_Client):
        @api(function)
        def newest_call(self):
            return "called"

    own = _Newest()
    for limit in (newest, newest + 7):
        assert gate(own, plugin="p", plugin_version=ApiVersion(0, limit), call_limit=limit) is own
    assert own.unwrapped is own and own.newest_call() == "called"
    assert type(own.compile(None).execute([[_Buffer(2), _Buffer(3)]]).outputs[0][0]) is _Buffer
    # One minor short of it, the gate is there and refuses what was added last.
    gated = gate(own, plugin="p", plugin_version=ApiVersion(0, newest - 1), call_limit=newest - 1)
    assert gated is not own and gated.unwrapped is own
    with pytest.raises(VersionGateRefusal, match=function):
        gated.newest_call()


def test_a_plugins_own_unwrapped_attribute_still_wins():
    own = _Client()
    own.unwrapped = "the plugin's own meaning"  # a plugin class without __slots__ may set one
    assert own.unwrapped == "the plugin's own meaning"
    assert _Client().unwrapped is not None and type(_Client().unwrapped) is _Client
