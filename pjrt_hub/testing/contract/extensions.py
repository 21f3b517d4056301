"""The contract of the extensions area of pjrt_c_api.h, behaviour by behaviour (see the package's doc).

Read off ``PJRT_Extension_Base`` in pjrt_c_api.h and the extension headers pjrt-hub has a protocol
for (``pjrt_c_api_{layouts,memory_descriptions,profiler,ffi,stream,raw_buffer}_extension.h`` and
the cross-host transfers header), at their newest stored versions; every other extension type of
``PJRT_Extension_Type`` gets one entry saying the binding has no protocol for it. In Python a
layout or a memory kind is a value (``MemoryLayout``, ``(kind, kind_id)``), so the C rules about
freeing what a call hands out are the C bridge's business (it reads each result at once and frees
it); what remains observable of them is that a returned value is the caller's own.
"""

from __future__ import annotations

from . import Behaviour

#: The per-extension cases: every method of the version offered, called on real objects.
_LAYOUTS = ("extensions/Layouts",)
_PY_VALUES = ("the binding hands out layouts as MemoryLayout values, which need no freeing; the C bridge "
              "calls the C function itself right after reading each layout it owns")
_NO_ARGS_CHAIN = ("no binding call takes an Args extension chain: the Python binding passes arguments, not "
                  "Args structs")
_NO_HANDLERS = ("the binding has no PJRT_ExecuteContext and no way to run a native custom-call handler, and "
                "no compiler pjrt-hub ships takes custom calls")
_NO_TWO_HOSTS = ("a cross-host transfer needs a receiving process on another host; the suite drives one "
                 "client in one process, and no plugin pjrt-hub runs offers the extension")


def _c_only(extension: str) -> Behaviour:
    return Behaviour(f"PJRT_Extension_Type_{extension}", f"A node of type {extension} carries that extension's functions and data, found by "
                             "its type in the chain.",
                     untestable=(f"pjrt-hub has no protocol for the {extension} extension: the binding sees only "
                                 "the node's type and struct_size (checked by abi/extension_struct_sizes)"))


BEHAVIOURS: tuple[Behaviour, ...] = (
    # -- the extension chain (pjrt_c_api.h) ------------------------------------------------------
    Behaviour("PJRT_Extension_Base", "Extensions hang off PJRT_Api.extension_start as a list linked by next, "
              "and a framework finds one by walking the list and matching the node's type.",
              cases=("extensions/declared_are_offered", "abi/extension_struct_sizes"), since_minor=31),
    Behaviour("PJRT_Extension_Base", "A node whose type names an extension has that extension's layout, so a "
              "caller that matched the type may call the functions it holds.",
              cases=(*_LAYOUTS, "extensions/MemoryDescriptions", "extensions/FFI", "extensions/Profiler",
                     "extensions/Stream", "extensions/RawBuffer", "extensions/CrossHostTransfers"), since_minor=31),
    Behaviour("PJRT_Extension_Base", "A node's struct_size, first in the node, says how much of the extension's "
              "struct it holds, so a caller reads no function pointer past it.",
              cases=("abi/extension_struct_sizes", *_LAYOUTS, "extensions/FFI"), since_minor=45),
    Behaviour("PJRT_Extension_Base", "The list ends with a NULL next, never looping back to a node.",
              untestable=("only a C plugin has a chain in memory, and a broken one is caught when the loader's "
                          "probe walks it (stopping at a loop, an unreadable node or a garbage type and "
                          "recording why), before any case runs; a Python plugin offers a mapping, which "
                          "cannot loop")),
    Behaviour("PJRT_Extension_Base", "Every Args struct carries an extension_start of its own, through which a "
              "caller passes per-call extensions (the Profiler node with a traceme_context_id).",
              untestable=_NO_ARGS_CHAIN),

    # -- Layouts (pjrt_c_api_layouts_extension.h) ------------------------------------------------
    Behaviour("PJRT_Layouts_Extension", "A plugin that offers Layouts tells frameworks they may send programs "
              "whose inputs and outputs carry mhlo.layout_mode attributes, which the layouts it reports reflect.",
              cases=("extensions/layout_mode_default_programs_run",), since_minor=51),
    Behaviour("PJRT_Layouts_Extension", "The extension is optional, and a framework must work without it.",
              untestable=("a rule for the framework, not the plugin: pjrt-hub's extension negotiation degrades "
                          "with a warning when an optional extension is absent (its unit tests check that)")),
    Behaviour("PJRT_Layouts_MemoryLayout_Destroy", "Frees a layout the caller owns; a NULL layout is allowed.",
              untestable=_PY_VALUES),
    Behaviour("PJRT_Layouts_MemoryLayout_Serialize", "Writes a layout out as bytes, from which the caller reads "
              "the layout (XLA's text form, like {1,0}, for plugins built on XLA).",
              cases=(*_LAYOUTS, "extensions/layouts_describe_memory", "extensions/default_layout_is_every_new_buffers"),
              since_minor=51),
    Behaviour("PJRT_Layouts_MemoryLayout_Serialize", "The serialized bytes live as long as the serialized_layout "
              "handed out with them, which the caller frees by calling serialized_layout_deleter exactly once.",
              untestable=("the C bridge copies the bytes and calls the deleter once inside the same call; the "
                          "binding hands out the parsed MemoryLayout, so nothing of the bytes' lifetime reaches "
                          "a case")),
    Behaviour("PJRT_Layouts_PJRT_Buffer_MemoryLayout", "Gives the layout in which the buffer's data sits on its "
              "device.", cases=(*_LAYOUTS, "extensions/layouts_describe_memory"), since_minor=51),
    Behaviour("PJRT_Layouts_PJRT_Buffer_MemoryLayout", "The layout returned is the caller's, to free with "
              "PJRT_Layouts_MemoryLayout_Destroy, so it stays readable and unchanged after the buffer is deleted.",
              cases=("extensions/buffer_layout_outlives_its_buffer",), since_minor=51),
    Behaviour("PJRT_Layouts_PJRT_Buffer_MemoryLayout", "Refuses with INVALID_ARGUMENT an object that is not a "
              "buffer of the plugin.", cases=("extensions/layouts_refuse_what_they_cannot_describe",)),
    Behaviour("PJRT_Layouts_PJRT_Client_GetDefaultLayout", "Gives the layout the client uses for an array of the "
              "given element type and dimensions unless told otherwise, which is the layout a new buffer of that "
              "type and shape gets, scalars and empty arrays included.",
              cases=("extensions/default_layout_is_every_new_buffers", "extensions/layouts_describe_memory"),
              since_minor=51),
    Behaviour("PJRT_Layouts_PJRT_Client_GetDefaultLayout", "The layout returned is the caller's, so asking twice "
              "gives two equal answers.", cases=("extensions/default_layout_is_every_new_buffers",),
              since_minor=51),
    Behaviour("PJRT_Layouts_PJRT_Client_GetDefaultLayout", "Refuses with INVALID_ARGUMENT what names no array: "
              "an object that is not the plugin's client, an element type that is no PJRT_Buffer_Type, a negative "
              "dimension.", cases=("extensions/layouts_refuse_what_they_cannot_describe",)),
    Behaviour("PJRT_Layouts_PJRT_Topology_GetDefaultLayout", "Gives the default layout of an array of the given "
              "element type and dimensions for a topology, without a client.",
              untestable=("the LayoutsExtension protocol has no such method (the C bridge and the CPU runtime "
                          "answer it as topology_default_layout, outside the protocol a case may rely on)")),
    Behaviour("PJRT_Layouts_PJRT_Executable_GetOutputLayouts", "Gives one layout per output of the executable, "
              "in output order, each the layout of the buffer an execution returns there.",
              cases=(*_LAYOUTS, "extensions/layouts_describe_memory",
                     "extensions/executable_layouts_are_their_own_and_stay"), since_minor=81),
    Behaviour("PJRT_Layouts_PJRT_Executable_GetOutputLayouts", "The layouts are a property of the compiled "
              "program: the same for a loaded executable and its PJRT_Executable, for the program compiled again "
              "and for the executable deserialized from its serialized form, and not shared with another program "
              "of the same module name.", cases=("extensions/executable_layouts_are_their_own_and_stay",),
              since_minor=81),
    Behaviour("PJRT_Layouts_PJRT_Executable_GetOutputLayouts", "The layouts handed out belong to the executable "
              "and live as long as it; the caller does not free them.",
              untestable=("the binding hands out MemoryLayout values, which cannot dangle; the C bridge reads the "
                          "executable's layouts at once while it holds the executable, and never frees them")),
    Behaviour("PJRT_Layouts_PJRT_Executable_GetOutputLayouts", "Refuses with INVALID_ARGUMENT an object that is "
              "not an executable of the plugin.", cases=("extensions/layouts_refuse_what_they_cannot_describe",)),
    Behaviour("PJRT_Layouts_PJRT_Executable_GetParameterLayouts", "Gives one layout per parameter of the "
              "executable, in parameter order, the default layout of its type and shape when the program asks for "
              "no other, the same through recompilation, loading and serialization.",
              cases=(*_LAYOUTS, "extensions/executable_layouts_are_their_own_and_stay",
                     "extensions/layout_mode_default_programs_run"), since_minor=93),
    Behaviour("PJRT_Layouts_PJRT_Executable_GetParameterLayouts", "Refuses with INVALID_ARGUMENT an object that "
              "is not an executable of the plugin.", cases=("extensions/layouts_refuse_what_they_cannot_describe",)),

    # -- MemoryDescriptions (pjrt_c_api_memory_descriptions_extension.h) --------------------------
    Behaviour("PJRT_DeviceDescription_MemoryDescriptions", "Lists every kind of memory the described device has, "
              "from a device description alone, so that ahead-of-time compilation can name non-default memories.",
              cases=("extensions/MemoryDescriptions", "extensions/memory_descriptions_match_memories",
                     "extensions/memory_descriptions_name_each_kind_once"), since_minor=59),
    Behaviour("PJRT_DeviceDescription_MemoryDescriptions", "The list has no promised order (newer headers mark "
              "the default memory by its index), so a caller may rely on no order but the default's mark.",
              cases=("extensions/MemoryDescriptions", "extensions/memory_descriptions_match_memories"),
              since_minor=59),
    Behaviour("PJRT_DeviceDescription_MemoryDescriptions", "Each memory of the device appears once, and the same "
              "list comes back each time the description is asked.",
              cases=("extensions/memory_descriptions_name_each_kind_once",), since_minor=59),
    Behaviour("PJRT_DeviceDescription_MemoryDescriptions", "Refuses with INVALID_ARGUMENT an object that is not a "
              "device description of the plugin (a device, the client).",
              cases=("extensions/memory_descriptions_refuse_other_objects",)),
    Behaviour("PJRT_MemoryDescription_Kind", "Gives the memory's kind as a platform-specific string and an int id "
              "that together single out that kind among the platform's kinds: one id per kind and one kind per id, "
              "on every device and in the topology's descriptions alike.",
              cases=("extensions/memory_descriptions_name_each_kind_once", "extensions/memory_descriptions_match_memories",
                     "memories/kind_id"), since_minor=59),
    Behaviour("PJRT_MemoryDescription_Kind", "The kind string lives as long as the memory description.",
              untestable=("the binding hands out the kind as a Python str, copied by the C bridge while the "
                          "description is held; no lifetime of it reaches a case")),

    # -- Profiler (pjrt_c_api_profiler_extension.h) ------------------------------------------------
    Behaviour("PJRT_Profiler_Extension", "The node points at the plugin's profiler function table "
              "(PLUGIN_Profiler_Api), which may be NULL when the node is passed as an Args extension.",
              untestable=("the C bridge does not wrap the Profiler node and the PLUGIN_Profiler_Api table lies "
                          "outside the PJRT binding; the ProfilerExtension protocol (start/stop) is where-offered "
                          "only, checked by extensions/Profiler, and no plugin pjrt-hub runs offers it")),
    Behaviour("PJRT_Profiler_Extension", "traceme_context_id has a meaning only in a node passed as an Args "
              "extension, where it ties the call to the caller's trace.", untestable=_NO_ARGS_CHAIN),

    # -- Stream (pjrt_c_api_stream_extension.h) ----------------------------------------------------
    Behaviour("PJRT_Get_Stream_For_External_Ready_Events", "Gives a platform-specific handle of the device's "
              "stream on which externally managed buffers are tracked until ready.",
              untestable=("the handle means something only to the platform's own runtime (a CUDA stream); the "
                          "C bridge does not wrap the Stream node and no host-memory plugin has streams")),
    Behaviour("PJRT_Wait_Until_Buffer_Ready_On_Stream", "Makes the given stream wait until the buffer is ready.",
              untestable=("the wait is ordered on a device stream, which nothing on the host observes; the C "
                          "bridge does not wrap the Stream node")),

    # -- FFI (pjrt_c_api_ffi_extension.h) ----------------------------------------------------------
    Behaviour("PJRT_FFI_TypeID_Register", "Given a type id of 0, registers the type name and hands back a new id "
              "unique to it.", cases=("extensions/FFI",), since_minor=53),
    Behaviour("PJRT_FFI_TypeID_Register", "Given a non-zero type id, checks that it is the id registered before "
              "under that name.",
              untestable="the FfiExtension protocol's type_id_register takes only the name, never an id to check"),
    Behaviour("PJRT_FFI_UserData_Add", "Adds user data, under a type id, to an execute context, for the FFI "
              "handlers of the executions that use it.", untestable=_NO_HANDLERS),
    Behaviour("PJRT_FFI_UserData", "The deleter is optional (NULL allowed) and runs when the execute context is "
              "destroyed.", untestable=_NO_HANDLERS),
    Behaviour("PJRT_FFI_Register_Handler", "Registers a handler for a custom-call target on a platform, untyped "
              "(api_version 0) or typed XLA FFI (api_version 1), with traits such as command-buffer compatibility.",
              untestable=_NO_HANDLERS),

    # -- RawBuffer (pjrt_c_api_raw_buffer_extension.h) ---------------------------------------------
    Behaviour("PJRT_RawBuffer_CreateRawAliasOfBuffer", "Makes a raw buffer that aliases the memory of a "
              "PJRT_Buffer, so that raw reads and writes see and change the buffer's data.",
              untestable=("no plugin pjrt-hub runs offers RawBuffer (XLA's CPU plugins do not either) and the C "
                          "bridge does not wrap the node, so no case has a raw buffer whose aliasing it could "
                          "compare with a correct one")),
    Behaviour("PJRT_RawBuffer_Destroy", "Frees the raw buffer handle.",
              untestable="the RawBufferExtension protocol has no destroy: a raw buffer is a Python object"),
    Behaviour("PJRT_RawBuffer_GetOnDeviceSizeInBytes", "Gives the bytes the buffer's storage takes on the device.",
              untestable="the RawBufferExtension protocol has no such method"),
    Behaviour("PJRT_RawBuffer_GetMemorySpace", "Gives the memory the raw buffer lies in.",
              untestable="the RawBufferExtension protocol has no such method"),
    Behaviour("PJRT_RawBuffer_GetHostPointer", "Gives the base address of the storage where the host can see it.",
              untestable="the RawBufferExtension protocol has no such method"),
    Behaviour("PJRT_RawBuffer_CopyRawHostToDevice", "Copies transfer_size bytes from host memory into the raw "
              "buffer at offset, complete when the returned event is ready.",
              untestable=("no plugin pjrt-hub runs offers RawBuffer and the C bridge does not wrap the node; "
                          "where a plugin offers it, extensions/RawBuffer checks only that its methods exist")),
    Behaviour("PJRT_RawBuffer_CopyRawDeviceToHost", "Copies transfer_size bytes of the raw buffer from offset "
              "into host memory, complete when the returned event is ready.",
              untestable=("no plugin pjrt-hub runs offers RawBuffer and the C bridge does not wrap the node; "
                          "where a plugin offers it, extensions/RawBuffer checks only that its methods exist")),
    Behaviour("PJRT_Client_DefineBuffer", "Makes a PJRT_Buffer of a given shape and layout over a raw buffer, "
              "defined once the given device events fire.",
              untestable="the RawBufferExtension protocol has no such method"),

    # -- CrossHostTransfers (pjrt_c_api_cross_host_transfers_extension.h) --------------------------
    Behaviour("PJRT_Transfers_PJRT_Client_MakeCrossHostReceiveBuffers", "Makes buffers of the given shapes on a "
              "device to receive into, and hands their serialized descriptors to the notifier for the sender.",
              untestable=_NO_TWO_HOSTS),
    Behaviour("PJRT_Transfers_PJRT_Buffer_CopyToRemoteDevice", "Sends a buffer to a remote receive buffer named "
              "by its descriptor; the plugin frees the event it is given, the descriptor lives until that event "
              "is set, and on_done reports whether the sends were enqueued.", untestable=_NO_TWO_HOSTS),
    Behaviour("PJRT_Transfers_PJRT_Client_CrossHostSendBuffers", "Sends each buffer to a global device id under a "
              "transfer key, with one send event per buffer.",
              untestable="the CrossHostTransfersExtension protocol has no such method (version 2 of the extension)"),
    Behaviour("PJRT_Transfers_PJRT_Client_CrossHostReceiveBuffers", "Makes one receive buffer per shape, from a "
              "source global device id under a transfer key.",
              untestable="the CrossHostTransfersExtension protocol has no such method (version 2 of the extension)"),

    # -- extension types the binding has no protocol for -------------------------------------------
    _c_only("Gpu_Custom_Call"),
    _c_only("Custom_Partitioner"),
    _c_only("Triton"),
    _c_only("PhaseCompile"),
    _c_only("Example"),
    _c_only("Unknown"),
    _c_only("ExecutableMetadata"),
    _c_only("Callback"),
    _c_only("HostAllocator"),
    _c_only("TpuTopology"),
    _c_only("TpuExecutable"),
    _c_only("Megascale"),
    _c_only("Shardings"),
    _c_only("AbiVersion"),
    _c_only("Collectives"),
    _c_only("MultiSlice"),
    _c_only("HostMemoryAllocator"),
    _c_only("XlaTransform"),
    _c_only("ExecuteChain"),
)
