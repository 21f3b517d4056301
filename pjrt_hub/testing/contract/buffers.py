"""The contract of the buffers area of pjrt_c_api.h, behaviour by behaviour (see the package's doc).

Read from the 0.105 header (openxla/xla 0c79bedb): ``PJRT_Client_BufferFromHostBuffer`` with its
host buffer semantics, the other ways a client makes buffers, every ``PJRT_Buffer_*`` function and
``PJRT_CopyToDeviceStream_*``. A function the Python binding (abi/binding.py) does not expose has
one entry saying so; what its comment states can be checked once the binding has the call.
"""

from __future__ import annotations

from . import Behaviour

#: Why the ownership sentences cannot be checked: the binding has no handles to leak or free twice.
_HANDLES = ("the binding's objects are Python objects the garbage collector frees; who must call the C Destroy "
            "functions is the C bridge's concern, invisible through the binding")
#: Why the pointer-lifetime sentences cannot be checked.
_COPIED_OUT = "the binding returns a Python tuple copied out of the plugin's array, so how long that array lives is invisible"


def _absent(function: str, says: str, minor: int = 0) -> Behaviour:
    return Behaviour(function, says, untestable=f"the Python binding (abi/binding.py) has no call for {function}",
                     since_minor=minor)


BEHAVIOURS: tuple[Behaviour, ...] = (
    # -- PJRT_Client_BufferFromHostBuffer and PJRT_HostBufferSemantics ----------------------------
    Behaviour("PJRT_Client_BufferFromHostBuffer", "Copies a host array to the device, the copy finishing "
              "asynchronously; the buffer then holds the array's values.",
              cases=("buffers/round_trip_*", "transfers/strided_host_arrays")),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "The buffer's element type is the type the data is given as.",
              cases=("buffers/round_trip_*", "transfers/put_keeps_the_element_type_given")),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "The buffer's dimensions are the dimensions the data is given "
              "with (none for a scalar, a zero kept for an empty array).",
              cases=("buffers/round_trip_*", "transfers/strided_host_arrays")),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "byte_strides (one per dimension, negative ones allowed) say "
              "where each element of the host data sits; without them the data is dense, major-to-minor.",
              cases=("transfers/strided_host_arrays",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "Each call makes a buffer of its own, even for host memory it "
              "has transferred before; the caller owns it.",
              cases=("transfers/each_transfer_makes_a_new_buffer",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "The caller owns the returned buffer and done_with_host_buffer "
              "event and frees them with PJRT_Buffer_Destroy and PJRT_Event_Destroy.", untestable=_HANDLES),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "The buffer goes to the device given.",
              cases=("buffers/device_and_memory",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "Without a memory the buffer goes to the device (its default "
              "memory); with one, to that memory.",
              cases=("buffers/device_and_memory", "transfers/placed_in_the_memory_asked_for"), since_minor=32),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "Given a device and a memory that device addresses, the buffer is "
              "in that memory on that device; a memory the plugin does not put host data in may be refused, the "
              "device's default memory never.", cases=("transfers/put_with_a_device_and_its_own_memory",),
              since_minor=32),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "Given a device and a memory that device does not address, the "
              "memory decides: the buffer is in that memory, on a device that addresses it (or the call fails).",
              cases=("transfers/put_with_another_devices_memory",), since_minor=32),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "Without a device_layout the buffer is stored dense, with its "
              "dimensions major-to-minor.", cases=("transfers/default_device_layout_is_dense_row_major",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "With a device_layout (tiled or strided, kept alive by the caller "
              "for the call) the buffer is stored in that layout.",
              untestable="the binding's buffer_from_host_buffer takes no device_layout"),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "done_with_host_buffer fires once the plugin no longer reads the "
              "host data; from then on the caller may change or free it without changing the buffer.",
              cases=("transfers/immutable_until_transfer_completes", "transfers/zero_copy_holds_the_host_array")),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "A host_buffer_semantics that is none of "
              "PJRT_HostBufferSemantics' values is refused with INVALID_ARGUMENT: no transfer is made on a guess of "
              "what the caller promised.", cases=("transfers/unknown_host_buffer_semantics_refused",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "Arrays of any size are copied whole: a large one (16 MiB) comes "
              "back to the host, and from its copies, with every element.",
              cases=("transfers/large_arrays_move_whole",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "kImmutableOnlyDuringCall: the plugin keeps no reference to the "
              "host data once the call returns, so the caller may change it at once.",
              cases=("transfers/immutable_only_during_call",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "kImmutableUntilTransferCompletes: the plugin may read the host "
              "data until the transfer completes, which done_with_host_buffer signals.",
              cases=("transfers/immutable_until_transfer_completes",)),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "kImmutableZeroCopy: the buffer may alias the host data for its "
              "whole life, and done_with_host_buffer fires when the buffer is freed.",
              cases=("transfers/zero_copy_holds_the_host_array",), since_minor=47),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "The zero-copy semantics: done_with_host_buffer fires only once no "
              "work reads the host data any more; a delete while a queued execution reads it, or a donation whose "
              "output took it over, does not hand the memory back early.",
              cases=("lifetime/lent_memory_stays_lent_while_queued_work_reads_it",
                     "lifetime/donated_lent_memory_goes_back_with_its_output"), since_minor=47),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "kImmutableZeroCopy: the plugin never writes the aliased host "
              "data, not even as the storage of an output the buffer was donated to.",
              cases=("transfers/immutable_zero_copy_is_never_written",), since_minor=48),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "kMutableZeroCopy: the buffer may alias the host data and the "
              "plugin may write it (as an aliased output); done_with_host_buffer fires when the buffer is freed.",
              cases=("transfers/zero_copy_holds_the_host_array",), since_minor=48),
    Behaviour("PJRT_Client_BufferFromHostBuffer", "kMutableZeroCopy on a platform other than the CPU acts as "
              "kImmutableUntilTransferCompletes (done_with_host_buffer may fire at once, the array is then free).",
              cases=("transfers/zero_copy_holds_the_host_array",), since_minor=48),

    # -- other ways to make buffers ------------------------------------------------------------------
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "Makes a buffer that views memory someone else owns, "
              "without copying it: the view shows what the memory holds.",
              cases=("transfers/view_aliases_and_calls_its_deleter_once",), since_minor=33),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "on_delete_callback runs once the buffer is done with the "
              "memory, with the memory's pointer and the caller's argument.",
              cases=("transfers/view_aliases_and_calls_its_deleter_once", "buffers/destroy_releases_like_delete"),
              since_minor=33),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "on_delete_callback runs only once no work uses the memory: not "
              "at a delete while a queued execution reads the view, not at a donation whose output took the memory "
              "over; and then once.", cases=("lifetime/lent_memory_stays_lent_while_queued_work_reads_it",
                                              "lifetime/donated_lent_memory_goes_back_with_its_output"),
              since_minor=33),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "Memory whose elements are not dense (a strided producer) is "
              "refused, or viewed in a layout that describes it: no view presents memory with gaps as dense.",
              cases=("transfers/view_of_a_strided_producer",), since_minor=33),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "on_delete_callback is optional: a view may be made without "
              "one.", cases=("buffers/destroy_releases_like_delete",), since_minor=33),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "The plugin may write the viewed memory, for instance when "
              "the view is donated to an execution.",
              untestable="a permission: writing the viewed memory or not both conform, so no outcome can fail"),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "Not every platform has to offer views (it may answer "
              "UNIMPLEMENTED).", cases=("transfers/view_aliases_and_calls_its_deleter_once",), since_minor=33),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "The view lives in the memory given; the device (deprecated) "
              "is ignored when a memory is given.",
              untestable="the binding's create_view_of_device_buffer takes a device, no memory", since_minor=66),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "The view's layout is the layout given for the memory.",
              untestable="the binding takes the layout from the DLPack producer; it has no layout argument"),
    Behaviour("PJRT_Client_CreateViewOfDeviceBuffer", "Given a stream, the plugin appends to it an event that marks "
              "when the view is ready to use (meant for DLPack on GPUs).",
              untestable="the binding's create_view_of_device_buffer takes no stream"),
    Behaviour("PJRT_Client_CreateUninitializedBuffer", "Makes a buffer of the dimensions and element type asked "
              "for, its contents undefined.", cases=("buffers/create_uninitialized", "buffers/uninitialized_*"),
              since_minor=68),
    Behaviour("PJRT_Client_CreateUninitializedBuffer", "Without a memory the buffer goes to the device given; with "
              "one, to that memory.", cases=("transfers/placed_in_the_memory_asked_for",), since_minor=68),
    Behaviour("PJRT_Client_CreateUninitializedBuffer", "Given a device and a memory that device does not address, "
              "the memory decides: the buffer is in that memory, on a device that addresses it (or the call fails).",
              cases=("transfers/create_uninitialized_with_another_devices_memory",), since_minor=68),
    Behaviour("PJRT_Client_CreateUninitializedBuffer", "With a shape_layout the buffer is stored in that layout.",
              untestable="the binding's create_uninitialized_buffer takes no layout", since_minor=68),
    Behaviour("PJRT_Client_CreateUninitializedBuffer", "The caller owns the buffer and frees it with "
              "PJRT_Buffer_Destroy.", untestable=_HANDLES, since_minor=68),
    _absent("PJRT_Client_CreateErrorBuffer", "Makes a buffer of a given shape that holds an error instead of "
            "memory; an execution given it fails with that error.", 82),
    _absent("PJRT_Client_CreateAliasBuffer", "Makes a buffer whose storage another buffer will later provide, "
            "with the callback that provides it.", 77),
    _absent("PJRT_Client_FulfillAliasBuffer", "Provides an alias buffer's storage (or an error) through its "
            "callback.", 77),
    _absent("PJRT_Client_CreateBuffersForAsyncHostToDevice", "Makes a transfer manager for buffers of given "
            "shapes in a memory, to be filled from the host piece by piece.", 60),
    _absent("PJRT_AsyncHostToDeviceTransferManager_Destroy", "Frees a transfer manager (null allowed).", 60),
    _absent("PJRT_AsyncHostToDeviceTransferManager_TransferData", "Copies bytes at an offset into one of the "
            "manager's buffers; its event fires when the host data is free.", 60),
    _absent("PJRT_AsyncHostToDeviceTransferManager_TransferLiteral", "Copies a host array of a given shape into "
            "one of the manager's buffers.", 83),
    _absent("PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer", "Hands out one of the manager's buffers.", 62),
    _absent("PJRT_AsyncHostToDeviceTransferManager_Device", "The device of the manager's buffers.", 62),
    _absent("PJRT_AsyncHostToDeviceTransferManager_BufferCount", "How many buffers the manager fills.", 62),
    _absent("PJRT_AsyncHostToDeviceTransferManager_BufferSize", "The on-device size of one of the manager's "
            "buffers.", 62),
    _absent("PJRT_AsyncHostToDeviceTransferManager_SetBufferError", "Puts an error in one of the manager's "
            "buffers instead of data.", 62),
    _absent("PJRT_AsyncHostToDeviceTransferManager_AddMetadata", "Attaches named values to the transfer.", 62),
    _absent("PJRT_Client_DmaMap", "Registers host memory for direct transfers.", 67),
    _absent("PJRT_Client_DmaUnmap", "Unregisters host memory registered with PJRT_Client_DmaMap.", 67),

    # -- PJRT_Buffer_* ---------------------------------------------------------------------------------
    Behaviour("PJRT_Buffer_Destroy", "Deletes the buffer as PJRT_Buffer_Delete would (the memory is let go) and "
              "frees the handle.",
              cases=("buffers/destroy_releases_like_delete", "transfers/view_aliases_and_calls_its_deleter_once")),
    Behaviour("PJRT_Buffer_Destroy", "The buffer may be null.",
              untestable="the binding has no null buffer: destroy is a method of a live object"),
    Behaviour("PJRT_Buffer_ElementType", "Returns the element type of the buffer's array.",
              cases=("buffers/round_trip_*", "buffers/uninitialized_*", "transfers/copies_keep_type_and_dimensions")),
    Behaviour("PJRT_Buffer_Dimensions", "Returns the buffer's shape, the size of each dimension.",
              cases=("buffers/dimensions", "buffers/round_trip_*", "buffers/uninitialized_*",
                     "transfers/copies_keep_type_and_dimensions")),
    Behaviour("PJRT_Buffer_Dimensions", "The returned array lives as long as the buffer.", untestable=_COPIED_OUT),
    Behaviour("PJRT_Buffer_UnpaddedDimensions", "Returns the dimensions without padding: the same as "
              "PJRT_Buffer_Dimensions, except that a dynamic dimension may be smaller.",
              cases=("buffers/dimensions",)),
    Behaviour("PJRT_Buffer_UnpaddedDimensions", "The returned array lives as long as the buffer.",
              untestable=_COPIED_OUT),
    Behaviour("PJRT_Buffer_DynamicDimensionIndices", "Returns the indices of the dynamic dimensions, none when every "
              "dimension is static.", cases=("buffers/dimensions",)),
    Behaviour("PJRT_Buffer_DynamicDimensionIndices", "The returned array lives as long as the buffer.",
              untestable=_COPIED_OUT),
    _absent("PJRT_Buffer_GetMemoryLayout", "Returns the layout of the buffer's data (deprecated at 0.54 for the "
            "Layouts extension, whose buffer layout extensions/layouts_describe_memory checks)."),
    Behaviour("PJRT_Buffer_ToHostBuffer", "Copies the buffer's values into a host array, the copy finishing "
              "asynchronously.", cases=("buffers/to_host_into_array", "buffers/round_trip_*")),
    Behaviour("PJRT_Buffer_ToHostBuffer", "The host array is the caller's own memory, not the buffer's: changing "
              "it changes neither the buffer nor later copies.", cases=("buffers/to_host_array_is_the_callers",)),
    Behaviour("PJRT_Buffer_ToHostBuffer", "Its event fires when the copy is complete: the host array then holds "
              "the buffer's final values.", cases=("events/pending_execution",
                                                    "events/await_without_a_limit_waits_for_pending_work")),
    Behaviour("PJRT_Buffer_ToHostBuffer", "Of a buffer whose computation fails after the call, the copy's event "
              "carries that failure (or the call fails); it never fires without an error over an unwritten array.",
              cases=("events/to_host_of_a_pending_buffer_that_fails",)),
    Behaviour("PJRT_Buffer_ToHostBuffer", "A destination array (the binding's dst) must have the buffer's shape and "
              "element type and be writable; another shape of as many elements, another type of the same width, or "
              "a read-only array is refused with INVALID_ARGUMENT and left unwritten.",
              cases=("buffers/to_host_destination_must_fit",)),
    Behaviour("PJRT_Buffer_ToHostBuffer", "Without a host_layout the copy has the buffer's layout; with one (kept "
              "alive by the caller for the call), that layout.",
              untestable="the binding's to_host_buffer takes no host_layout"),
    Behaviour("PJRT_Buffer_ToHostBuffer", "With a null dst the call only reports the size a destination needs.",
              untestable="the binding has no size query: to_host_buffer without dst allocates the array"),
    Behaviour("PJRT_Buffer_ToHostBuffer", "A destination smaller than the size needed is refused.",
              cases=("errors/wrong_destination",)),
    _absent("PJRT_Buffer_CopyRawToHost", "Copies bytes at an offset of the buffer's storage to the host.", 56),
    _absent("PJRT_Buffer_CopyRawFromHost", "Copies host bytes to an offset of the buffer's storage; offset plus "
            "size may not pass its on-device size.", 105),
    _absent("PJRT_Buffer_CopyRawToHostFuture", "As PJRT_Buffer_CopyRawToHost, with the destination given later "
            "through a callback.", 84),
    Behaviour("PJRT_Buffer_OnDeviceSizeInBytes", "Returns the bytes the buffer's storage takes on the device (at "
              "least its elements' size).", cases=("buffers/on_device_size", "buffers/uninitialized_*")),
    Behaviour("PJRT_Buffer_Delete", "Drops the buffer's memory but keeps the handle, which then reports deleted.",
              cases=("buffers/is_deleted",)),
    Behaviour("PJRT_Buffer_Delete", "After a delete the buffer serves only PJRT_Buffer_IsDeleted and "
              "PJRT_Buffer_Destroy: every call that needs its data fails.",
              cases=("buffers/use_after_delete", "buffers/deleted_buffer_gives_no_data", "errors/read_deleted_buffer",
                     "errors/copy_deleted_buffer", "errors/reference_deleted_buffer",
                     "errors/execute_with_deleted_argument")),
    Behaviour("PJRT_Buffer_Delete", "The memory is freed only once the asynchronous work using the buffer has "
              "finished.", cases=("lifetime/delete_waits_for_work_in_flight",
                                  "lifetime/lent_memory_stays_lent_while_queued_work_reads_it")),
    Behaviour("PJRT_Buffer_Delete", "Deleting a buffer already deleted, or donated to an execution, succeeds and "
              "changes nothing (the buffer stays deleted; Destroy still works).",
              cases=("buffers/delete_after_donation_or_delete_does_nothing",)),
    Behaviour("PJRT_Buffer_IsDeleted", "True once PJRT_Buffer_Delete was called (or the buffer was donated), false "
              "before.", cases=("buffers/is_deleted", "buffers/donation", "buffers/non_donatable_input")),
    Behaviour("PJRT_Buffer_CopyToDevice", "Copies the buffer to another device of the same client: a new buffer "
              "there, with the same element type, dimensions and values.",
              cases=("transfers/copy_to_device", "transfers/copies_keep_type_and_dimensions")),
    Behaviour("PJRT_Buffer_CopyToDevice", "The copy is a buffer of its own, in storage of its own: unaffected when "
              "the source is donated or deleted.",
              cases=("transfers/copy_to_device_is_independent", "transfers/copies_have_storage_of_their_own")),
    Behaviour("PJRT_Buffer_CopyToDevice", "A copy to the device the buffer is already on is an error (XLA's newer "
              "clients make a new buffer instead; both are accepted).",
              cases=("transfers/copy_to_its_own_place_fails_or_is_a_new_buffer",)),
    Behaviour("PJRT_Buffer_CopyToDevice", "A copy of a buffer still being computed is ready no sooner than its "
              "source and holds the source's final values.", cases=("transfers/copy_of_a_pending_buffer",)),
    Behaviour("PJRT_Buffer_CopyToDevice", "A copy of a buffer that holds an error holds that error: it fails at "
              "the call, or on the copy's ready event and reads.",
              cases=("events/failed_buffer_error_reaches_its_copies",)),
    Behaviour("PJRT_Buffer_CopyToDevice", "The caller owns the copy and frees it with PJRT_Buffer_Destroy.",
              untestable=_HANDLES),
    Behaviour("PJRT_Buffer_CopyToMemory", "Copies the buffer to a memory of the same client: a new buffer in that "
              "memory, with the same element type, dimensions and values.",
              cases=("transfers/copy_to_memory", "transfers/copies_keep_type_and_dimensions"), since_minor=32),
    Behaviour("PJRT_Buffer_CopyToMemory", "The copy is a buffer of its own, in storage of its own: unaffected when "
              "the source is donated or deleted.",
              cases=("transfers/copy_to_memory_is_independent", "transfers/copies_have_storage_of_their_own"),
              since_minor=32),
    Behaviour("PJRT_Buffer_CopyToMemory", "Any memory of the client may be asked for, another device's included: "
              "the copy is in that memory, on a device that addresses it (or the call fails).",
              cases=("transfers/copy_to_another_devices_memory",), since_minor=32),
    Behaviour("PJRT_Buffer_CopyToMemory", "A copy to the memory the buffer is already in is an error (XLA's newer "
              "clients make a new buffer instead; both are accepted).",
              cases=("transfers/copy_to_its_own_place_fails_or_is_a_new_buffer",), since_minor=32),
    Behaviour("PJRT_Buffer_CopyToMemory", "A copy of a buffer still being computed is ready no sooner than its "
              "source and holds the source's final values.", cases=("transfers/copy_of_a_pending_buffer",),
              since_minor=32),
    Behaviour("PJRT_Buffer_CopyToMemory", "A copy of a buffer that holds an error holds that error: it fails at "
              "the call, or on the copy's ready event and reads.",
              cases=("events/failed_buffer_error_reaches_its_copies",), since_minor=32),
    Behaviour("PJRT_Buffer_CopyToMemory", "The caller owns the copy and frees it with PJRT_Buffer_Destroy.",
              untestable=_HANDLES, since_minor=32),
    _absent("PJRT_Buffer_Bitcast", "Makes a buffer of another element type, dimensions and layout over the same "
            "data (a default layout, not the source's, when none is given).", 98),
    Behaviour("PJRT_Buffer_IsOnCpu", "Says whether the buffer is in host memory, where its data can be read "
              "directly.", cases=("transfers/dlpack_export_aliases", "lifetime/external_reference_holds_off_deletion",
                                  "transfers/default_device_layout_is_dense_row_major")),
    Behaviour("PJRT_Buffer_Device", "Returns the device the buffer is stored on.",
              cases=("buffers/device_and_memory", "transfers/copy_to_device", "execute/outputs_on_the_device")),
    Behaviour("PJRT_Buffer_Memory", "Returns the memory the buffer is stored in.",
              cases=("buffers/device_and_memory", "transfers/copy_to_memory", "transfers/placed_in_the_memory_asked_for")),
    Behaviour("PJRT_Buffer_ReadyEvent", "Returns an event that fires when the buffer's data is ready, or with the "
              "error that kept it from being made.",
              cases=("buffers/ready_event", "events/pending_execution",
                     "events/execution_error_reaches_every_event_and_output",
                     "events/failed_buffer_error_reaches_its_copies")),
    Behaviour("PJRT_Buffer_ReadyEvent", "Of a buffer already deleted or donated, the event reports an error at "
              "once.", cases=("errors/ready_event_of_deleted_buffer", "buffers/ready_event_across_delete_and_donation")),
    Behaviour("PJRT_Buffer_ReadyEvent", "An event taken before PJRT_Buffer_Delete does not turn into an error when "
              "the buffer is deleted.", cases=("buffers/ready_event_across_delete_and_donation",)),
    Behaviour("PJRT_Buffer_ReadyEvent", "The caller owns the event and frees it with PJRT_Event_Destroy.",
              untestable=_HANDLES),
    Behaviour("PJRT_Buffer_UnsafePointer", "Returns an address of the buffer's data, often (not always) the "
              "device address.", cases=("transfers/dlpack_export_aliases",
                                        "transfers/default_device_layout_is_dense_row_major")),
    Behaviour("PJRT_Buffer_IncreaseExternalReferenceCount", "Counts one more framework sharing the raw data: while "
              "the count is above zero the plugin does not free the data.",
              cases=("lifetime/external_reference_holds_off_deletion",
                     "lifetime/external_reference_holds_off_donation")),
    Behaviour("PJRT_Buffer_IncreaseExternalReferenceCount", "While the count is above zero the plugin does not "
              "move the data either (no compaction).", cases=("lifetime/external_reference_pins_the_memory",)),
    Behaviour("PJRT_Buffer_IncreaseExternalReferenceCount", "Data exported through DLPack is shared with another "
              "framework (the header's example): while a consumer holds it, the plugin neither donates nor frees it.",
              cases=("lifetime/dlpack_consumer_holds_off_donation",)),
    Behaviour("PJRT_Buffer_IncreaseExternalReferenceCount", "Each call adds one reference, which one "
              "PJRT_Buffer_DecreaseExternalReferenceCount takes back.", cases=("buffers/external_reference_count",)),
    Behaviour("PJRT_Buffer_DecreaseExternalReferenceCount", "Takes back one reference; once none is left the "
              "buffer may be deleted or donated again.",
              cases=("buffers/external_reference_count", "lifetime/external_reference_holds_off_donation",
                     "lifetime/external_reference_holds_off_deletion")),
    Behaviour("PJRT_Buffer_DecreaseExternalReferenceCount", "Fails when the count is zero (no increase came "
              "first).", cases=("buffers/decrease_reference_count_returns_error",)),
    Behaviour("PJRT_Buffer_OpaqueDeviceMemoryDataPointer", "Returns the pointer to the buffer's device memory.",
              cases=("buffers/opaque_device_memory_data_pointer", "lifetime/external_reference_pins_the_memory")),
    Behaviour("PJRT_Buffer_OpaqueDeviceMemoryDataPointer", "The pointer stays valid while the external reference "
              "count is above zero.", cases=("lifetime/external_reference_pins_the_memory",)),
    Behaviour("PJRT_Buffer_OpaqueDeviceMemoryDataPointer", "Without an external reference the pointer may become "
              "invalid at any time.",
              untestable="a permission: a pointer that stays valid conforms as well, so no outcome can fail"),
    Behaviour("PJRT_Buffer_IncreaseExternalReferenceCount", "A DLPack export (Buffer.__dlpack__, pjrt-hub's "
              "producer of buffers in host memory) never lets the consumer change the buffer: shared memory is "
              "read-only to a DLPack 1.0 consumer, a writable export is a copy.",
              cases=("transfers/dlpack_consumer_cannot_change_the_buffer",)),
    Behaviour("PJRT_Buffer_IncreaseExternalReferenceCount", "Buffer.__dlpack__ answers as an array API producer in "
              "host memory: no arguments (a pre-1.0 consumer) export; dl_device (kDLCPU, 0) is accepted, another "
              "device and any stream but None (or -1) are refused with BufferError.",
              cases=("transfers/dlpack_export_arguments",)),
    _absent("PJRT_Buffer_DonateWithControlDependency", "Hands out a buffer that takes over the source's storage once "
            "a dependency the caller signals through a callback is met.", 88),

    # -- what buffers do to their neighbours: donation, memory statistics, the binding's time limit ------
    Behaviour("PJRT_LoadedExecutable_Execute", "Donating a buffer that a queued execution still reads (refused, or "
              "accepted) never lets the donating execution write over it before that reader ran.",
              cases=("lifetime/donation_waits_for_queued_readers",)),
    Behaviour("PJRT_Device_MemoryStats", "num_allocs, where reported, grows by at least one for each buffer made on "
              "the device; largest_alloc_size, the largest single allocation seen, is at least the largest buffer's "
              "size.", cases=("devices/memory_stats_count_allocations",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "The Python binding's ExecuteOptions.timeout of a negative number of "
              "seconds is refused (INVALID_ARGUMENT) or already past (DEADLINE_EXCEEDED) by a plugin that stops "
              "executions; only None means no limit.",
              cases=("execute/negative_execute_timeout_is_no_missing_limit",)),

    # -- PJRT_CopyToDeviceStream_* (a recv callback's stream) ----------------------------------------------
    _absent("PJRT_CopyToDeviceStream_Destroy", "Frees a stream (null allowed)."),
    _absent("PJRT_CopyToDeviceStream_AddChunk", "Takes ownership of a chunk and starts its transfer; the event "
            "fails if the chunk passes the total bytes, the stream is complete, or the chunk is not a multiple of "
            "the granule size."),
    _absent("PJRT_CopyToDeviceStream_TotalBytes", "The bytes the stream expects in all."),
    _absent("PJRT_CopyToDeviceStream_GranuleSize", "The size every chunk must be a multiple of."),
    _absent("PJRT_CopyToDeviceStream_CurrentBytes", "The bytes transferred or buffered so far."),
)
