import pytest

from pjrt_hub.abi import ExtensionType
from pjrt_hub.extensions import (
    KNOWN_EXTENSIONS,
    ExtensionRequest,
    extension_spec,
    negotiate,
    parse_request,
    version_from_struct_size,
)

REQUIRED_BY_ISSUE = ["Layouts", "MemoryDescriptions", "Profiler", "FFI", "Stream", "RawBuffer",
                     "CrossHostTransfers"]


@pytest.mark.parametrize("name", REQUIRED_BY_ISSUE)
def test_each_extension_has_type_id_version_and_protocol(name):
    spec = KNOWN_EXTENSIONS[name]
    assert spec.type_id == ExtensionType[name]
    assert spec.version >= 1
    assert spec.protocol is not None
    assert spec.methods(spec.version)


def test_every_pjrt_extension_type_is_known():
    assert set(KNOWN_EXTENSIONS) == {t.name for t in ExtensionType}
    assert extension_spec(4).name == "Layouts"
    assert extension_spec("layouts").name == "Layouts"
    assert extension_spec("Nope") is None


def test_protocol_methods_grow_with_version():
    spec = KNOWN_EXTENSIONS["Layouts"]
    assert "executable_output_layouts" not in spec.methods(1)
    assert "executable_output_layouts" in spec.methods(2)
    assert "executable_parameter_layouts" in spec.methods(3)

    class V1:
        def buffer_memory_layout(self, buffer): ...
        def client_default_layout(self, client, element_type, dims): ...

    assert spec.missing_methods(V1(), 1) == ()
    assert spec.missing_methods(V1(), 2) == ("executable_output_layouts",)


def test_c_versions_follow_struct_size():
    layouts = KNOWN_EXTENSIONS["Layouts"]
    assert version_from_struct_size(layouts, 56) == 1  # up to Buffer_MemoryLayout
    assert version_from_struct_size(layouts, 64) == 1  # and Topology_GetDefaultLayout
    assert version_from_struct_size(layouts, 72) == 2  # xla-cpu-pjrt 0.81
    assert version_from_struct_size(layouts, 80) == 3  # 0.106 and later
    assert version_from_struct_size(layouts, 16) == 0
    assert version_from_struct_size(KNOWN_EXTENSIONS["PhaseCompile"], 64) == 1


def test_negotiation_agrees_on_the_older_version():
    result = negotiate({"Layouts": 7, "FFI": 1}, [])
    assert result.agreed == {"Layouts": 3, "FFI": 1}
    assert result.accepted and not result.degraded


def test_absent_optional_extension_degrades_with_a_message_naming_it():
    result = negotiate({"FFI": 2}, [ExtensionRequest("Layouts", 1, required=False)], plugin="plugin x")
    assert result.accepted
    assert len(result.degraded) == 1
    assert "Layouts" in result.degraded[0] and "plugin x" in result.degraded[0]


def test_absent_or_old_required_extension_refuses():
    result = negotiate({"Layouts": 1}, [ExtensionRequest("Layouts", 2, required=True),
                                        ExtensionRequest("Stream", 1, required=True)])
    assert not result.accepted
    assert len(result.refusals) == 2
    assert "version 1, older than the version 2" in result.refusals[0]
    assert "does not offer the Stream extension" in result.refusals[1]


def test_parse_request():
    assert parse_request("Layouts>=2", required=True) == ExtensionRequest("Layouts", 2, True)
    assert parse_request("ffi", required=False) == ExtensionRequest("FFI", 1, False)
    with pytest.raises(ValueError, match="unknown extension"):
        parse_request("Warp>=1", required=True)
    with pytest.raises(ValueError, match="bad extension request"):
        parse_request("Layouts>2", required=True)
