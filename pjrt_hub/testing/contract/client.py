"""The contract of the client area of pjrt_c_api.h, behaviour by behaviour (see the package's doc).

Read from the header at PJRT API 0.105 (openxla/xla 0c79bedb): errors, plugin setup and
attributes, events, the client and its key-value callbacks, device descriptions, devices,
memories and topologies. A statement that only the caller can keep (a size it must pass, a
handle it must not free) is listed too, marked untestable with the reason, so the table shows
what the header asks and where the suite cannot look.
"""

from __future__ import annotations

from . import Behaviour

#: Why the C side of ownership cannot be seen from a case: the binding turns PJRT_Error* into
#: exceptions and strings, lists and bytes into Python values the caller owns.
_PYTHON_OWNS = ("the Python binding hands the caller Python values (exceptions, str, bytes, lists) that the "
                "garbage collector frees; the C pointer's lifetime is the C bridge's business, not visible to a case")
_NOT_BOUND = "the Python binding (abi/binding.py) has no call for this function"

BEHAVIOURS: tuple[Behaviour, ...] = (
    # -- errors ---------------------------------------------------------------------------------
    Behaviour("PJRT_Error_Destroy", "Every error a call returns is allocated by the plugin and freed by the caller, "
              "once, with PJRT_Error_Destroy (a null error included).", untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Error_Message", "An error carries a human-readable reason that says what went wrong.",
              cases=("client/lookup_device_negative_id", "client/lookup_device_out_of_range_id",
                     "compile/invalid_option", "compile/invalid_program_format")),
    Behaviour("PJRT_Error_Message", "The message stays readable for as long as the error is not destroyed.",
              untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Error_GetCode", "An error carries one of the absl status codes PJRT_Error_Code lists, the one "
              "that fits the failure.", cases=("errors/*", "client/lookup_device_negative_id")),
    # -- plugin ---------------------------------------------------------------------------------
    Behaviour("PJRT_Plugin_Initialize", "The plugin does its one-time setup here, and a client can be created "
              "once it returned.", cases=("client/create_makes_a_new_client",)),
    Behaviour("PJRT_Plugin_Initialize", "It is called before any other function of the plugin.",
              untestable="an obligation of the framework (pjrt-hub's registry initializes a plugin once, before "
                         "its first client); a plugin cannot break it"),
    Behaviour("PJRT_Plugin_Attributes", "The attributes are named values (string, int64, int64 list, float, bool) "
              "with unique names; common ones are xla_version, stablehlo_current_version and "
              "stablehlo_minimum_version.", cases=("plugin/attributes",)),
    Behaviour("PJRT_Plugin_Attributes", "The attributes live as long as the process: every call gives the same, and "
              "nothing a caller does to what it got changes them.", cases=("plugin/attributes_stay_the_same",)),
    # -- events ---------------------------------------------------------------------------------
    Behaviour("PJRT_Event_Await", "An event returned for asynchronous work becomes ready when the work is done and "
              "reports whether it failed.",
              cases=("events/await_", "events/pending_execution", "events/execution_error_reaches_every_event_and_output")),
    Behaviour("PJRT_Event_Destroy", "An event a call returns is the caller's to free; freeing it frees that handle "
              "only, never the work it tracks or the events other holders have.",
              cases=("events/destroying_an_event_leaves_the_work_alone",)),
    Behaviour("PJRT_Event_Destroy", "Destroying a null event is allowed and does nothing.",
              untestable="the Python binding has no null event to pass"),
    Behaviour("PJRT_Event_IsReady", "IsReady turns true once the work has completed, whether it succeeded or failed.",
              cases=("events/is_ready", "events/execution_error_reaches_every_event_and_output")),
    Behaviour("PJRT_Event_Error", "It may be asked only once the event is ready.",
              untestable="an obligation of the caller; what a plugin answers before then is not specified"),
    Behaviour("PJRT_Event_Error", "A ready event of work that succeeded has no error (a null error).",
              cases=("events/await_", "buffers/ready_event")),
    Behaviour("PJRT_Event_Error", "After PJRT_Event_Await, Error reports the very status Await reported, and so "
              "does every later Error call.", cases=("events/error_is_the_same_on_every_call",)),
    Behaviour("PJRT_Event_Error", "Each error Error or Await returns is a separate object the caller frees on its "
              "own.", untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Event_Await", "Await blocks until the event is ready, then returns its status: nothing for "
              "success, the error for a failure.",
              cases=("events/await_", "events/execution_error_reaches_every_event_and_output",
                     "events/error_is_the_same_on_every_call", "events/await_without_a_limit_waits_for_pending_work")),
    Behaviour("PJRT_Event_Await", "The Python binding's time limit ends only a wait on a pending event, with "
              "DEADLINE_EXCEEDED: a ready event returns at once even with a limit of 0 s, and the work goes on to "
              "complete.", cases=("events/await_with_a_time_limit_bounds_only_the_wait",)),
    Behaviour("PJRT_Event_OnReady", "The callback runs once the event is ready, with the event's status.",
              cases=("events/on_ready_fires_once", "events/error_is_the_same_on_every_call")),
    Behaviour("PJRT_Event_OnReady", "Every callback registered runs, even when one registered before it raised (a "
              "Python callback can).", cases=("events/every_on_ready_callback_runs",)),
    Behaviour("PJRT_Event_OnReady", "A callback runs with no lock of its event held: it may call the event "
              "(IsReady, Error, OnReady again) without a deadlock.",
              cases=("events/on_ready_callback_may_use_its_event",)),
    Behaviour("PJRT_Event_OnReady", "Something that is not a callback is refused at the call with "
              "INVALID_ARGUMENT, not left to fail on the thread that completes the event.",
              cases=("events/on_ready_refuses_what_it_cannot_call",)),
    Behaviour("PJRT_Event_OnReady", "By the time a callback runs the event is ready: inside it, PJRT_Event_IsReady "
              "is true and PJRT_Event_Error gives the status the callback got.",
              cases=("events/ready_when_on_ready_runs",)),
    Behaviour("PJRT_Event_OnReady", "The callback receives the error and owns it; the caller keeps owning user_arg.",
              untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Event_Create", "Creates an event the caller sets later (for PJRT calls that wait on work the "
              "caller does).", untestable=_NOT_BOUND, since_minor=89),
    Behaviour("PJRT_Event_Set", "Completes an event made by PJRT_Event_Create with a code and a message the plugin "
              "copies (the caller may free it on return).", untestable=_NOT_BOUND, since_minor=89),
    # -- client creation and the key-value callbacks ------------------------------------------
    Behaviour("PJRT_Client_Create", "Each call creates and initializes a new client of its own: distinct from "
              "earlier ones, working, and unaffected by another client's destruction.",
              cases=("client/create_makes_a_new_client",)),
    Behaviour("PJRT_Client_Create", "Create options are platform-specific extras; without any the plugin makes a "
              "client with its defaults.", cases=("client/create_makes_a_new_client",)),
    Behaviour("PJRT_Client_Create", "An option the plugin takes is honoured, whatever value of it is asked for: a "
              "cpu plugin that takes XLA's cpu_device_count makes a client of that many devices.",
              cases=("client/device_count_option",)),
    Behaviour("PJRT_Client_Create", "The key-value callbacks are optional: a client that does not need them (one "
              "process) is created with them as without them.", cases=("client/create_takes_key_value_callbacks",)),
    Behaviour("PJRT_Client_Create", "A client of several processes shares what it must with the others (its "
              "devices) through the key-value callbacks.", cases=("client/joins_a_job_through_the_store",)),
    Behaviour("PJRT_Client_Create", "The plugin keeps apart the keys of its own nodes (the caller separates only "
              "different plugins).", cases=("client/joins_a_job_through_the_store",)),
    Behaviour("PJRT_Client_Create", "The callbacks are thread-safe, a get blocks until its key is put (or its "
              "timeout passes), and a try-get answers NotFound at once.",
              untestable="an obligation of the framework, which provides the callbacks; a plugin only calls them"),
    Behaviour("PJRT_Client_Create", "The plugin copies the value a get callback returns and then calls its deleter; "
              "a put's value lives only for the call.", untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Client_Create", "An error a callback builds through PJRT_CallbackError keeps a copy of its "
              "message, which lives only for that call.", untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Client_Destroy", "Destroy shuts the client down: the work it has queued finishes or fails, its "
              "events fire once, and other clients of the plugin carry on.",
              cases=("lifetime/client_destroyed_with_queued_work", "client/create_makes_a_new_client")),
    Behaviour("PJRT_Client_Destroy", "Destroying a null client is allowed and does nothing.",
              untestable="the Python binding has no null client to pass"),
    # -- what the client reports ----------------------------------------------------------------
    Behaviour("PJRT_Client_PlatformName", "The platform name identifies the platform (cpu, gpu, tpu...).",
              cases=("client/platform_name", "topology/platform", "plugin/declared_platform")),
    Behaviour("PJRT_Client_PlatformName", "The name is owned by the client and lives as long as it: every call gives "
              "the same.", cases=("client/answers_stay_the_same",)),
    Behaviour("PJRT_Client_ProcessIndex", "The process index is 0 in a single-process setting.",
              cases=("client/process_index",)),
    Behaviour("PJRT_Client_PlatformVersion", "The platform version is human-readable version text of the platform.",
              cases=("client/platform_version",)),
    Behaviour("PJRT_Client_PlatformVersion", "The version text is owned by the client and lives as long as it: every "
              "call gives the same.", cases=("client/answers_stay_the_same",)),
    Behaviour("PJRT_Client_TopologyDescription", "The topology describes the client's runtime topology: its "
              "platform and its devices.", cases=("topology/platform", "topology/device_descriptions"),
              since_minor=36),
    Behaviour("PJRT_Client_TopologyDescription", "The topology is owned by the client and lives as long as it: "
              "every handle to it answers the same.",
              cases=("topology/answers_stay_the_same", "topology/serialized_form_is_a_stable_cache_key"),
              since_minor=36),
    Behaviour("PJRT_Client_TopologyDescription", "The caller must not destroy the client's topology.",
              untestable="an obligation of the caller", since_minor=36),
    Behaviour("PJRT_Client_Devices", "Devices lists every device the runtime sees, addressable or not, each once.",
              cases=("client/devices", "client/addressable_devices", "client/joins_a_job_through_the_store")),
    Behaviour("PJRT_Client_Devices", "The device list belongs to the client: the same devices in the same order on "
              "every call, and a caller's changes to the list it got change nothing.",
              cases=("client/answers_stay_the_same",)),
    Behaviour("PJRT_Client_AddressableDevices", "The addressable devices are those the client can issue commands "
              "to, among the client's devices.",
              cases=("client/addressable_devices", "devices/is_addressable", "execute/replicas",
                     "client/joins_a_job_through_the_store")),
    Behaviour("PJRT_Client_AddressableDevices", "In a single process every device is addressable.",
              cases=("client/single_process_addresses_everything",)),
    Behaviour("PJRT_Client_LookupDevice", "LookupDevice finds the device whose PJRT_DeviceDescription_Id is the "
              "given id, and fails (InvalidArgument) for an id no device has.",
              cases=("client/lookup_device", "client/lookup_device_negative_id", "client/lookup_device_out_of_range_id")),
    Behaviour("PJRT_Client_LookupDevice", "The device found is owned by the client: the very handle "
              "PJRT_Client_Devices lists, alive as long as the client.",
              cases=("client/lookups_give_the_listed_handles",)),
    Behaviour("PJRT_Client_LookupAddressableDevice", "LookupAddressableDevice finds the addressable device whose "
              "PJRT_Device_LocalHardwareId is the given id, and fails for an id no device has.",
              cases=("client/lookup_addressable_device", "errors/lookup_unknown_addressable_device")),
    Behaviour("PJRT_Client_LookupAddressableDevice", "The device found is owned by the client: the very handle it "
              "lists.", cases=("client/lookups_give_the_listed_handles",)),
    Behaviour("PJRT_Client_UpdateGlobalProcessInfo", "Tells the client the state of every process of the job, for "
              "its collectives.", untestable=_NOT_BOUND, since_minor=73),
    Behaviour("PJRT_Client_AddressableMemories", "The addressable memories are those the client can transfer data to "
              "and from directly: every memory of its addressable devices.",
              cases=("client/addressable_memories", "transfers/copy_to_memory")),
    Behaviour("PJRT_Client_AddressableMemories", "In a single process every memory is addressable.",
              cases=("client/single_process_addresses_everything",)),
    Behaviour("PJRT_Client_AddressableMemories", "The memory list belongs to the client: the same memories in the "
              "same order on every call.", cases=("client/answers_stay_the_same",)),
    Behaviour("PJRT_Client_DefaultDeviceAssignment", "The assignment gives num_replicas x num_partitions device ids, "
              "distinct devices of the client.", cases=("client/default_device_assignment",)),
    Behaviour("PJRT_Client_DefaultDeviceAssignment", "The caller passes, and keeps owning, an array of at least "
              "num_replicas x num_partitions ints that the plugin fills.",
              untestable="the Python binding returns the assignment as a tuple: there is no caller array, so no "
                         "short one to refuse"),
    # -- device descriptions ------------------------------------------------------------------
    Behaviour("PJRT_DeviceDescription_Id", "Device ids are unique among the devices of the platform, across hosts "
              "too.", cases=("devices/id", "client/devices", "topology/answers_stay_the_same",
                             "client/joins_a_job_through_the_store")),
    Behaviour("PJRT_DeviceDescription_Id", "A description may describe a device no client has, as a topology made "
              "without a client does, each with its own id.", cases=("topology/create_makes_a_new_topology",)),
    Behaviour("PJRT_DeviceDescription_ProcessIndex", "A device's process index is the process it is addressable "
              "from: the client's own for every addressable device.",
              cases=("devices/process_index", "client/single_process_addresses_everything",
                     "client/joins_a_job_through_the_store")),
    Behaviour("PJRT_DeviceDescription_Attributes", "Device attributes are named values, with name, value and type.",
              cases=("devices/description",)),
    Behaviour("PJRT_DeviceDescription_Attributes", "The attributes belong to the description (the caller gets a "
              "const array and no deleter): every call gives the same, and nothing a caller does to what it got "
              "changes them.", cases=("devices/attributes_are_the_callers",)),
    Behaviour("PJRT_DeviceDescription_Kind", "The kind is a vendor string that identifies the kind of device, not "
              "the device: devices alike in all else they report do not each have a kind of their own.",
              cases=("devices/description", "devices/kind_names_the_kind_not_the_device")),
    Behaviour("PJRT_DeviceDescription_Kind", "The kind is owned by the device and lives as long as it: every call "
              "gives the same.", cases=("devices/descriptions_and_memories_stay_the_same",)),
    Behaviour("PJRT_DeviceDescription_DebugString", "The debug string describes its device unambiguously: no two "
              "devices share one.", cases=("devices/debug_strings_tell_them_apart",)),
    Behaviour("PJRT_DeviceDescription_ToString", "ToString is a terse text for end users.",
              cases=("devices/description",)),
    # -- devices ----------------------------------------------------------------------------------
    Behaviour("PJRT_Device_GetDescription", "A device has a description, the same one on every call.",
              cases=("devices/description", "devices/descriptions_and_memories_stay_the_same")),
    Behaviour("PJRT_Device_IsAddressable", "IsAddressable says whether the client can issue commands to the device.",
              cases=("devices/is_addressable", "client/single_process_addresses_everything")),
    Behaviour("PJRT_Device_LocalHardwareId", "The local hardware id is an opaque id, not necessarily dense, that "
              "finds the device again through PJRT_Client_LookupAddressableDevice.",
              cases=("devices/local_hardware_id", "client/lookup_addressable_device")),
    Behaviour("PJRT_Device_LocalHardwareId", "An undefined local hardware id is -1.",
              untestable="whether a plugin's id is defined is its own choice; nothing outside tells an undefined one "
                         "from a defined one"),
    Behaviour("PJRT_Device_AddressableMemories", "A device lists the memories it can address, each of which lists "
              "the device back.", cases=("devices/memories", "memories/addressable_by_devices")),
    Behaviour("PJRT_Device_AddressableMemories", "The list lives as long as the device: the same memory handles in "
              "the same order on every call.", cases=("devices/descriptions_and_memories_stay_the_same",)),
    Behaviour("PJRT_Device_DefaultMemory", "The default memory is where the device keeps data by default: one of "
              "its memories, where a buffer put on the device lands.",
              cases=("devices/memories", "memories/default_memory", "buffers/device_and_memory")),
    Behaviour("PJRT_Device_DefaultMemory", "The default memory lives as long as the device: the same handle on every "
              "call.", cases=("devices/descriptions_and_memories_stay_the_same",)),
    Behaviour("PJRT_Device_MemoryStats", "Memory statistics report bytes_in_use; a plugin may instead answer "
              "UNIMPLEMENTED.", cases=("devices/memory_stats_follow_allocations",)),
    Behaviour("PJRT_Device_MemoryStats", "bytes_in_use is the number of bytes in use: it follows every allocation "
              "and free, those made from several threads at once included.",
              cases=("concurrency/bytes_in_use_after_concurrent_puts_and_deletes",)),
    Behaviour("PJRT_Device_MemoryStats", "Every other statistic is optional, each with its own is-set flag.",
              untestable="reporting a statistic or not is the plugin's choice (the binding reads an unset one as "
                         "None); no answer breaks it"),
    Behaviour("PJRT_Device_GetAttributes", "Device attributes are named values.", cases=("devices/attributes",),
              since_minor=92),
    Behaviour("PJRT_Device_GetAttributes", "Each call hands the caller attributes of its own, which it frees with "
              "the deleter the call returns: what a caller writes into them shows in no later call.",
              cases=("devices/attributes_are_the_callers",), since_minor=92),
    Behaviour("PJRT_Device_PoisonExecution", "Makes the outputs of the earliest unfinished execution of a launch id "
              "on the device carry the given error.", untestable=_NOT_BOUND, since_minor=85),
    Behaviour("PJRT_Device_CreateAsyncTrackingEvent", "Creates a tracking event the caller destroys.",
              untestable=_NOT_BOUND, since_minor=86),
    Behaviour("PJRT_AsyncTrackingEvent_Destroy", "Destroys a tracking event.", untestable=_NOT_BOUND, since_minor=86),
    # -- memories ---------------------------------------------------------------------------------
    Behaviour("PJRT_Memory_Id", "Memory ids are unique among memories of a kind.",
              cases=("memories/ids_unique_within_a_kind",)),
    Behaviour("PJRT_Memory_Kind", "The kind is a platform string that identifies the kind of memory.",
              cases=("memories/kind", "memories/kind_id")),
    Behaviour("PJRT_Memory_Kind", "The kind lives as long as the memory: every call gives the same.",
              cases=("devices/descriptions_and_memories_stay_the_same",)),
    Behaviour("PJRT_Memory_Kind_Id", "The kind id identifies the kind: the same for one kind, different for two.",
              cases=("memories/kind_id",), since_minor=48),
    Behaviour("PJRT_Memory_DebugString", "The debug string describes its memory unambiguously: no two memories "
              "share one.", cases=("devices/debug_strings_tell_them_apart",)),
    Behaviour("PJRT_Memory_ToString", "ToString is a terse text for end users.", cases=("memories/kind",)),
    Behaviour("PJRT_Memory_AddressableByDevices", "A memory lists the devices that can address it, each of which "
              "lists the memory back.", cases=("memories/addressable_by_devices", "memories/default_memory")),
    # -- topologies -------------------------------------------------------------------------------
    Behaviour("PJRT_TopologyDescription_Create", "Create makes a new topology of the plugin's platform, whose "
              "descriptions have their own ids, independent of any other topology.",
              cases=("topology/create_makes_a_new_topology",)),
    Behaviour("PJRT_TopologyDescription_Create", "Its options and topology name are platform-specific.",
              untestable="what the options mean is the platform's; the binding passes no topology name"),
    Behaviour("PJRT_TopologyDescription_Destroy", "Destroy frees that topology only: others go on answering.",
              cases=("topology/create_makes_a_new_topology",)),
    Behaviour("PJRT_TopologyDescription_Destroy", "Destroying a null topology is allowed and does nothing.",
              untestable="the Python binding has no null topology to pass"),
    Behaviour("PJRT_TopologyDescription_PlatformName", "The platform name identifies the platform, the one the "
              "plugin's clients report.", cases=("topology/platform", "topology/create_makes_a_new_topology")),
    Behaviour("PJRT_TopologyDescription_PlatformName", "The name is owned by the topology and lives as long as it.",
              cases=("topology/answers_stay_the_same",)),
    Behaviour("PJRT_TopologyDescription_PlatformVersion", "The version is human-readable text owned by the "
              "topology, the same on every call.", cases=("topology/platform", "topology/answers_stay_the_same")),
    Behaviour("PJRT_TopologyDescription_GetDeviceDescriptions", "The topology describes every device of it.",
              cases=("topology/device_descriptions",)),
    Behaviour("PJRT_TopologyDescription_GetDeviceDescriptions", "The descriptions may come in any order, but in the "
              "same order on every call within a process.", cases=("topology/answers_stay_the_same",)),
    Behaviour("PJRT_TopologyDescription_Serialize", "The serialized topology serves as a cache key: the same "
              "topology serializes to the same bytes.", cases=("topology/serialized_form_is_a_stable_cache_key",)),
    Behaviour("PJRT_TopologyDescription_Serialize", "The bytes live until the caller calls the deleter, exactly once.",
              untestable=_PYTHON_OWNS),
    Behaviour("PJRT_TopologyDescription_Deserialize", "Bytes from Serialize give back the topology serialized: "
              "the same platform name and version, attributes and devices, each described as before.",
              cases=("topology/serialize_round_trip", "topology/deserialize_gives_back_the_topology"),
              since_minor=75),
    Behaviour("PJRT_TopologyDescription_Attributes", "Topology attributes are platform-specific named values that "
              "live as long as the topology: the same on every call, whatever a caller does to what it got.",
              cases=("topology/answers_stay_the_same",)),
    Behaviour("PJRT_TopologyDescription_Fingerprint", "A fingerprint of the topology.", untestable=_NOT_BOUND,
              since_minor=101),
)
