from pjrt_hub.abi import Client, api_methods, history


def test_slot_counts_match_real_plugins():
    # xla-cpu-pjrt 0.81: PJRT_Api.struct_size 984 = 40 + 118 * 8; fastatomstruct 0.106: 1128.
    assert history.slot_count(81) == 118
    assert history.slot_count(105) == 136
    assert history.slot_count(106) == 136
    assert history.slot_count(115) == 138


def test_slot_order_begins_and_ends_as_the_header():
    slots = history.function_slots(105)
    assert slots[:3] == ("PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode")
    assert slots.index("PJRT_Client_Create") == 10
    assert slots.index("PJRT_LoadedExecutable_Execute") == 55
    assert slots.index("PJRT_Buffer_ToHostBuffer") == 70
    assert slots.index("PJRT_Compile") == 89
    assert slots[-1] == "PJRT_Buffer_CopyRawFromHost"


def test_introduced_in_knows_base_and_later_functions():
    assert history.introduced_in("PJRT_Client_Compile") == 0
    assert history.introduced_in("PJRT_Executable_OutputElementTypes") == 29
    assert history.introduced_in("PJRT_Client_CreateViewOfDeviceBuffer") == 33
    assert history.introduced_in("PJRT_Device_GetAttributes") == 92
    assert history.introduced_in("PJRT_Not_A_Function") is None


def test_history_is_ordered_and_dated_monotonically():
    minors = [r.minor for r in history.HISTORY]
    assert minors == sorted(set(minors))
    dates = [r.date for r in history.HISTORY if r.date]
    assert dates == sorted(dates)
    assert history.OLDEST_KNOWN.minor == history.FLOOR_MINOR == 29


def test_every_binding_method_is_tagged_with_its_minor():
    info = api_methods(Client)
    assert info["compile"].c_function == "PJRT_Client_Compile"
    assert info["create_view_of_device_buffer"].since == 33
    assert info["topology_description"].since == 36


def test_unknown_minors_have_no_facts():
    assert history.release(200) is None
    assert history.slot_count(200) is None
    assert history.slot_count(10) is None
