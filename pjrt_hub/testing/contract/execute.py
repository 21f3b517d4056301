"""The contract of the execute area of pjrt_c_api.h, behaviour by behaviour (see the package's doc).

Read from the 0.105 header (openxla/xla 0c79bedb) and, for the ``PJRT_ExecuteOptions`` fields
added after it, the history (0.108, 0.111, 0.112): ``PJRT_Client_Compile``, ``PJRT_Compile``,
every ``PJRT_Executable_*`` and ``PJRT_LoadedExecutable_*`` function, ``PJRT_ExecuteContext_*``,
and donation as the header speaks of it. Where the header grants a freedom ("may not be
implemented", "not guaranteed to be stable"), the entry says so, so that no case demands more.
"""

from __future__ import annotations

from . import Behaviour

#: Why an ownership sentence of C cannot be checked through the Python binding.
_PYTHON_OWNS = ("the binding returns Python objects (str, bytes, lists, dicts) that the interpreter frees; who "
                "frees C memory is the C bridge's affair, not something a case can watch")
_NOT_BOUND = "the Python binding (abi/binding.py) has no such {what}, so no case can reach it"

BEHAVIOURS: tuple[Behaviour, ...] = (
    # -- PJRT_Client_Compile ---------------------------------------------------------------------
    Behaviour("PJRT_Client_Compile", "Compiles a program of a known format with the given options into a loaded "
              "executable that computes that program.", cases=("compile/mlir_program", "execute/add_one_program")),
    Behaviour("PJRT_Client_Compile", "The program only has to live for the duration of the call: the plugin never "
              "reads the caller's code after Compile returns.", cases=("compile/program_read_only_during_compile",)),
    Behaviour("PJRT_Client_Compile", "The program's format string stays the caller's; the plugin does not take or "
              "free it.", untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Client_Compile", "The options are a serialized CompileOptionsProto; bytes that are not one "
              "are refused with INVALID_ARGUMENT.", cases=("compile/invalid_option",)),
    Behaviour("PJRT_Client_Compile", "Program formats are named (\"mlir\", \"hlo\", \"hlo_with_config\"); a format "
              "the plugin does not know is refused with INVALID_ARGUMENT.", cases=("compile/invalid_program_format",)),
    Behaviour("PJRT_Client_Compile", "The loaded executable returned is the caller's own: each call returns a new "
              "one, which only the caller's Delete or Destroy affects.", cases=("compile/delete_is_per_executable",)),
    Behaviour("PJRT_Client_Compile", "The binding takes the options as CompileOptions, as a serialized "
              "CompileOptionsProto or as None (the defaults); options of another type are refused with "
              "INVALID_ARGUMENT.", cases=("compile/compile_options_may_be_left_out",)),
    Behaviour("PJRT_Client_Compile", "Without a device assignment the executable runs on the client's default one "
              "(PJRT_Client_DefaultDeviceAssignment: num_replicas rows of num_partitions distinct devices), every "
              "device of the client included.", cases=("compile/device_assignment_and_counts_agree",)),
    Behaviour("PJRT_Client_Compile", "A device assignment whose shape is not num_replicas x num_partitions is "
              "refused with INVALID_ARGUMENT, or the executable takes the assignment's shape (XLA's CPU client "
              "does); either way NumReplicas, NumPartitions and the devices it runs on agree.",
              cases=("compile/device_assignment_and_counts_agree",)),
    Behaviour("PJRT_Client_Compile", "Whether the module's own mhlo.num_replicas / mhlo.num_partitions count, and "
              "what happens when they differ from the options, is not stated.",
              untestable="a freedom, not a duty: XLA's CPU client (API 0.81, 0.106, 0.115) takes the options' "
                         "counts and ignores the module's (a module of 2 replicas compiled with default options runs "
                         "on 1 device, with num_replicas=4 on 4), pjrt-hub's runtime takes the module's when the "
                         "options keep the default and refuses a contradiction; no case may demand either"),
    Behaviour("PJRT_Client_DefaultDeviceAssignment", "For more replicas x partitions than the client has devices, "
              "the answer is not stated.",
              untestable="a freedom, not a duty: XLA's CPU client answers DefaultDeviceAssignment(5, 1) on 4 devices "
                         "with ids 0..4 (API 0.81, 0.106, 0.115), pjrt-hub's runtime refuses with INVALID_ARGUMENT"),
    Behaviour("PJRT_Client_Compile", "Which device assignments the options may give is not stated: one device for "
              "two replicas may be refused or run.",
              untestable="a freedom, not a duty: XLA's CPU client accepts device_assignment ((0,), (0,)) and runs "
                         "both replicas on device 0 (API 0.81, 0.106, 0.115), so no case may demand a refusal"),

    # -- PJRT_Compile ----------------------------------------------------------------------------
    Behaviour("PJRT_Compile", "Compiles a program for a topology, without a client; the executable runs only once "
              "a compatible client has loaded it, on the devices its compile options assign.",
              cases=("compile/topology_compile_loads_and_runs",)),
    Behaviour("PJRT_Compile", "As for PJRT_Client_Compile, the program only has to live for the duration of the "
              "call.", cases=("compile/topology_compile_loads_and_runs",)),
    Behaviour("PJRT_Compile", "A client may be passed for performance-guided optimizations; it is optional.",
              untestable=_NOT_BOUND.format(what="argument (Api.compile takes no client)")),
    Behaviour("PJRT_Client_Load", "Loads an executable made by PJRT_Compile onto a client's devices.",
              untestable=_NOT_BOUND.format(what="call (the suite loads through Serialize and DeserializeAndLoad)"),
              since_minor=95),

    # -- PJRT_Executable_* -----------------------------------------------------------------------
    Behaviour("PJRT_Executable_Destroy", "Frees the PJRT_Executable handle only: a loaded executable it was "
              "obtained from keeps running.", cases=("compile/executable_destroy_leaves_loaded_executable",)),
    Behaviour("PJRT_Executable_Destroy", "Accepts a null executable.",
              untestable="a null handle cannot be passed to a method of the Python binding"),
    Behaviour("PJRT_Executable_Name", "Returns a string that identifies the executable, the same on every call "
              "and after a serialize round trip.",
              cases=("compile/mlir_program", "compile/executable_queries_are_stable",
                     "compile/serialize_round_trip_keeps_properties")),
    Behaviour("PJRT_Executable_Name", "The name is owned by the executable and lives as long as it.",
              untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Executable_NumReplicas", "Returns the number of replicas the executable was compiled for.",
              cases=("compile/mlir_program", "compile/replicated_executable_describes_its_devices",
                     "compile/serialize_round_trip_keeps_properties")),
    Behaviour("PJRT_Executable_NumPartitions", "Returns the number of partitions the executable was compiled for.",
              cases=("compile/mlir_program", "compile/replicated_executable_describes_its_devices",
                     "compile/serialize_round_trip_keeps_properties")),
    Behaviour("PJRT_Executable_NumOutputs", "Returns how many outputs each device's execution produces.",
              cases=("compile/num_outputs", "execute/outputs_are_what_the_executable_declares")),
    Behaviour("PJRT_Executable_SizeOfGeneratedCodeInBytes", "Reports the size of the generated code as a byte "
              "count (the header says nothing more).", cases=("compile/executable_queries_are_stable",)),
    Behaviour("PJRT_Executable_GetCostAnalysis", "Returns the executable's cost properties as named values, owned "
              "by the executable: what the caller does with its copy changes no later answer.",
              cases=("compile/executable_queries_are_stable",)),
    Behaviour("PJRT_Executable_GetCostAnalysis", "Which properties are reported is the platform's choice (e.g. "
              "operation counts, input and output sizes).",
              untestable="a freedom, not a duty: no property name may be required of a plugin"),
    Behaviour("PJRT_Executable_OutputMemoryKinds", "Returns one memory kind per output, the kind of memory that "
              "output is placed in.", cases=("execute/outputs_are_what_the_executable_declares",)),
    Behaviour("PJRT_Executable_OptimizedProgram", "Returns the optimized program's code, in a format the plugin "
              "names.", cases=("compile/executable_queries_are_stable",)),
    Behaviour("PJRT_Executable_OptimizedProgram", "The format says what the code is, as PJRT_Program defines the "
              "formats: \"mlir\" MLIR bytecode or text, \"hlo\" a serialized HloModuleProto, "
              "\"hlo_with_config\" a serialized HloModuleProtoWithConfig.",
              cases=("compile/executable_queries_are_stable",)),
    Behaviour("PJRT_Executable_OptimizedProgram", "Called with no code buffer, it reports the size needed; called "
              "again with a buffer at least that large, it fills it.",
              untestable="the two-call size protocol is the C bridge's; the binding returns the whole Program at "
                         "once"),
    Behaviour("PJRT_Executable_Serialize", "Returns a serialization of the executable that DeserializeAndLoad of the "
              "same plugin turns back into an executable that computes the same.",
              cases=("compile/serialize_round_trip", "compile/same_module_name")),
    Behaviour("PJRT_Executable_Serialize", "The serialized form is platform-specific and need not stay the same "
              "over time.", untestable="a freedom, not a duty: no case may compare serialized bytes across "
                                       "compiles or versions"),
    Behaviour("PJRT_Executable_Serialize", "The serialized bytes live until the caller calls the deleter it is "
              "given, exactly once.", untestable=_PYTHON_OWNS),
    Behaviour("PJRT_Executable_OutputElementTypes", "Returns the element type of each output.",
              cases=("compile/output_types_and_dimensions", "execute/outputs_are_what_the_executable_declares",
                     "compile/serialize_round_trip_keeps_properties"), since_minor=29),
    Behaviour("PJRT_Executable_OutputDimensions", "Returns the dimensions of each output, all outputs' lists "
              "concatenated with one length per output.",
              cases=("compile/output_types_and_dimensions", "execute/outputs_are_what_the_executable_declares",
                     "compile/serialize_round_trip_keeps_properties"), since_minor=29),
    Behaviour("PJRT_Executable_ParameterMemoryKinds", "Returns one memory kind per parameter.",
              untestable=_NOT_BOUND.format(what="call"), since_minor=102),
    Behaviour("PJRT_Executable_Fingerprint", "Executables compiled from identical inputs (program, options, "
              "compiler version) have the same fingerprint, and different programs different ones.",
              cases=("compile/fingerprint", "compile/same_module_name"), since_minor=35),
    Behaviour("PJRT_Executable_Fingerprint", "The options are an input whatever form they come in: one program "
              "compiled with CompileOptions and with the same options serialized has one fingerprint.",
              cases=("compile/fingerprint_ignores_how_options_are_passed",), since_minor=35),
    Behaviour("PJRT_Executable_Fingerprint", "The fingerprint is unique to the executable: one program compiled "
              "with options that make another executable (another replica count) has another fingerprint; the "
              "device assignment alone need not change it (XLA's does not).",
              cases=("compile/fingerprint_tells_replica_counts_apart",), since_minor=35),
    Behaviour("PJRT_Executable_Fingerprint", "An executable keeps its fingerprint through serialization: the "
              "deserialized executable is the same executable.",
              cases=("compile/serialize_round_trip_keeps_properties",), since_minor=35),
    Behaviour("PJRT_Executable_Fingerprint", "A platform may leave the fingerprint unimplemented.",
              cases=("compile/executable_queries_are_stable", "compile/serialize_round_trip_keeps_properties"),
              since_minor=35),
    Behaviour("PJRT_Executable_Fingerprint", "The fingerprint string is owned by the executable and lives as long "
              "as it.", untestable=_PYTHON_OWNS, since_minor=35),
    Behaviour("PJRT_Executable_GetCompiledMemoryStats", "Returns memory statistics (device and host: code, "
              "arguments, outputs, aliased, temporaries, peak) from which a caller estimates an execution's memory.",
              cases=("compile/compiled_memory_stats",), since_minor=40),
    Behaviour("PJRT_Executable_GetCompileOptions", "Returns the serialized CompileOptions the executable was "
              "compiled with.", untestable=_NOT_BOUND.format(what="call"), since_minor=87),
    Behaviour("PJRT_Executable_DeserializeAndLoad", "Turns bytes made by PJRT_Executable_Serialize back into a "
              "loaded executable that computes the same.", cases=("compile/serialize_round_trip",)),
    Behaviour("PJRT_Executable_DeserializeAndLoad", "The deserialized executable is the one serialized: same name, "
              "counts, output types and dimensions, fingerprint, and the devices it was compiled for.",
              cases=("compile/serialize_round_trip_keeps_properties",)),
    Behaviour("PJRT_Executable_DeserializeAndLoad", "Only bytes from the same platform and library version are "
              "accepted; anything else is refused with an error.",
              cases=("errors/deserialize_garbage", "errors/deserialize_truncated_executable")),
    Behaviour("PJRT_Executable_DeserializeAndLoad", "Serialized compile options given with the call override those "
              "stored in the executable.", untestable=_NOT_BOUND.format(what="argument"), since_minor=71),
    Behaviour("PJRT_Executable_DeserializeAndLoad", "Load options may be given with the call.",
              untestable=_NOT_BOUND.format(what="argument"), since_minor=111),

    # -- PJRT_LoadedExecutable_* -----------------------------------------------------------------
    Behaviour("PJRT_LoadedExecutable_Destroy", "Frees the handle and deletes the executable as Delete does; "
              "executions already started still finish, and their outputs stay the caller's.",
              cases=("compile/delete_lets_running_executions_finish",)),
    Behaviour("PJRT_LoadedExecutable_Destroy", "Accepts a null executable.",
              untestable="a null handle cannot be passed to a method of the Python binding"),
    Behaviour("PJRT_LoadedExecutable_GetExecutable", "Returns a PJRT_Executable describing the loaded program, which "
              "the caller frees with PJRT_Executable_Destroy without affecting the loaded executable.",
              cases=("compile/mlir_program", "compile/executable_destroy_leaves_loaded_executable")),
    Behaviour("PJRT_LoadedExecutable_AddressableDevices", "Returns the devices the executable runs on, in the "
              "order argument and output lists are given for them.",
              cases=("compile/mlir_program", "compile/replicated_executable_describes_its_devices",
                     "execute/replicas")),
    Behaviour("PJRT_LoadedExecutable_AddressableDeviceLogicalIds", "Returns the (replica, partition) of each device "
              "the executable runs on.", untestable=_NOT_BOUND.format(what="call"), since_minor=96),
    Behaviour("PJRT_LoadedExecutable_Delete", "Drops the executable; afterwards the handle serves only IsDeleted "
              "and Destroy, and Execute fails.", cases=("compile/executable_delete", "compile/execute_deleted")),
    Behaviour("PJRT_LoadedExecutable_Delete", "The runtime executable is freed only after its last execution "
              "completes: executions started before Delete finish with their results, a loop's too, running or "
              "queued.", cases=("compile/delete_lets_running_executions_finish", "compile/delete_lets_running_loops_finish")),
    Behaviour("PJRT_LoadedExecutable_IsDeleted", "True exactly when Delete was called on this executable.",
              cases=("compile/mlir_program", "compile/executable_delete", "compile/delete_is_per_executable")),
    Behaviour("PJRT_LoadedExecutable_Fingerprint", "Deprecated twin of PJRT_Executable_Fingerprint: the same "
              "fingerprint, where implemented.", cases=("compile/executable_queries_are_stable",)),
    Behaviour("PJRT_LoadedExecutable_GetDeviceAssignment", "Returns the device assignment the executable was "
              "compiled with, replicas by partitions.",
              cases=("compile/device_assignment", "compile/replicated_executable_describes_its_devices"),
              since_minor=79),
    Behaviour("PJRT_LoadedExecutable_GetDeviceAssignment", "The serialized assignment lives until the caller calls "
              "the deleter it is given, once.", untestable=_PYTHON_OWNS, since_minor=79),

    # -- PJRT_LoadedExecutable_Execute: arguments and outputs --------------------------------------
    Behaviour("PJRT_LoadedExecutable_Execute", "Runs the program on the executable's devices and computes its "
              "results from the arguments.", cases=("execute/add_one_program", "execute/several_outputs")),
    Behaviour("PJRT_LoadedExecutable_Execute", "Takes one argument list per device, each with one buffer per "
              "parameter; other counts are refused with INVALID_ARGUMENT.",
              cases=("errors/wrong_argument_count", "errors/execute_with_extra_argument_list", "execute/replicas",
                     "errors/argument_lists_are_checked")),
    Behaviour("PJRT_LoadedExecutable_Execute", "Each entry of an argument list is a buffer of the executable's "
              "client; anything else (None, a host array, another object) is refused with INVALID_ARGUMENT, with or "
              "without options.", cases=("errors/argument_lists_are_checked",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "Arguments of another element type or of a shape of another byte "
              "size, on another device, deleted or donated are refused, whatever their position in the list.",
              cases=("errors/wrong_argument_shape", "errors/execute_with_wrong_element_type",
                     "errors/execute_on_wrong_device", "errors/execute_with_deleted_argument",
                     "errors/execute_with_donated_argument", "errors/every_argument_is_checked")),
    Behaviour("PJRT_LoadedExecutable_Execute", "An argument of the parameter's element type and byte size but "
              "another shape (f32[2,3] for f32[3,2]) may be refused or read in the parameter's shape.",
              untestable="a freedom, not a duty: the header sets no rule for matching an argument to its "
                         "parameter, and XLA's CPU client compares byte sizes only (error E0102), so it runs such an "
                         "argument (API 0.81, 0.106, 0.115); a case may ask only that every position is checked "
                         "alike (errors/every_argument_is_checked)"),
    Behaviour("PJRT_LoadedExecutable_Execute", "Returns one output list per device, each with NumOutputs buffers "
              "of the declared types, dimensions and memory kinds, on that device.",
              cases=("execute/replicas", "execute/outputs_on_the_device",
                     "execute/outputs_are_what_the_executable_declares")),
    Behaviour("PJRT_LoadedExecutable_Execute", "Every output is a new buffer the caller owns and destroys: never an "
              "argument's handle or storage, never shared by two outputs or with the program's constants, and not "
              "reused by a later execution.",
              cases=("execute/outputs_do_not_alias_inputs", "execute/each_execution_has_outputs_of_its_own",
                     "concurrency/same_executable_from_threads")),
    Behaviour("PJRT_LoadedExecutable_Execute", "Executions of one executable that overlap in time (frameworks "
              "execute from several threads) each compute their results from their own arguments.",
              cases=("concurrency/concurrent_executions_keep_their_values_apart",
                     "concurrency/same_executable_from_threads")),
    Behaviour("PJRT_LoadedExecutable_Execute", "The options struct only has to live for the duration of the call.",
              untestable="ExecuteOptions is a frozen value in the binding: a caller cannot free or change it "
                         "after the call"),
    Behaviour("PJRT_LoadedExecutable_Execute", "An argument that carries an error (an error buffer, the output of "
              "a failed execution) makes the execution fail with that error, at the call or on its event and "
              "outputs.", cases=("events/failed_input_fails_the_execution",)),
    Behaviour("PJRT_Buffer_CopyToDevice", "A copy of the output of a failed execution carries that execution's "
              "error.", cases=("events/failed_input_fails_the_execution",)),

    # -- device_complete_events ------------------------------------------------------------------
    Behaviour("PJRT_LoadedExecutable_Execute", "device_complete_events has one event per device, and device i's "
              "event becomes ready once device i's execution is complete, its outputs then ready.",
              cases=("events/one_completion_event_per_device", "events/pending_execution", "events/await_")),
    Behaviour("PJRT_LoadedExecutable_Execute", "An error during the execution reaches its completion event and "
              "every output.", cases=("events/execution_error_reaches_every_event_and_output",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "When Execute itself returns an error, no completion event is "
              "returned.", untestable="in the binding a failed call raises and returns nothing, so there is no "
                                      "list to inspect"),
    Behaviour("PJRT_LoadedExecutable_Execute", "The caller destroys the completion events it is given.",
              untestable=_PYTHON_OWNS),

    # -- execute_device --------------------------------------------------------------------------
    Behaviour("PJRT_LoadedExecutable_Execute", "With execute_device set, the program runs on that device and its "
              "outputs are there.", cases=("execute/execute_device",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "With execute_device set, num_devices is 1: more argument lists are "
              "refused with INVALID_ARGUMENT.", cases=("errors/execute_device_with_two_argument_lists",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "execute_device must be an addressable device of the executable's "
              "client: a device of another client of the plugin is refused.",
              cases=("errors/execute_device_of_another_client",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "Launching a multi-device executable on one execute_device (or a "
              "one-device executable elsewhere) may be unsupported by a platform.",
              cases=("execute/execute_device",)),

    # -- PJRT_ExecuteOptions ---------------------------------------------------------------------
    Behaviour("PJRT_ExecuteOptions", "A non-zero launch_id marks the execution as part of a multi-device launch, "
              "which the runtime may use to detect launches made in different orders.",
              untestable="detecting the mismatch is optional and needs several hosts; a single process has no "
                         "launch order to get wrong"),
    Behaviour("PJRT_ExecuteOptions", "Inputs listed in non_donatable_input_indices are not donated, even where the "
              "program aliases them to an output.", cases=("buffers/non_donatable_input",), since_minor=39),
    Behaviour("PJRT_ExecuteOptions", "non_donatable_input_indices is how a caller passes one buffer more than once: "
              "with the donated parameter listed, the call runs and keeps the buffer.",
              cases=("buffers/non_donatable_lets_one_buffer_fill_two_arguments",), since_minor=39),
    Behaviour("PJRT_ExecuteOptions", "non_donatable_input_indices exempts the inputs it lists and no other: the "
              "program's other donated inputs are donated.",
              cases=("buffers/non_donatable_leaves_the_other_donations",), since_minor=39),
    Behaviour("PJRT_ExecuteOptions", "The caller keeps the list of non-donatable indices alive during the call.",
              untestable="the binding passes the indices as an immutable tuple", since_minor=39),
    Behaviour("PJRT_ExecuteOptions", "Send and receive callbacks, one list per device matched to the program's "
              "send and recv ops by channel id, are called during the execution and must outlive it.",
              untestable=_NOT_BOUND.format(what="field")),
    Behaviour("PJRT_SendCallback", "A send callback calls the chunk's deleter once it is done with the chunk, and "
              "reports failure through the callback error it is given.", untestable=_NOT_BOUND.format(what="callback")),
    Behaviour("PJRT_RecvCallback", "A receive callback takes ownership of the stream and destroys it when done.",
              untestable=_NOT_BOUND.format(what="callback")),
    Behaviour("PJRT_ExecuteOptions", "An execute context passes extra arguments to the execution; the caller keeps "
              "it valid for the execution's duration.", untestable=_NOT_BOUND.format(what="field"), since_minor=64),
    Behaviour("PJRT_ExecuteOptions", "call_location names the caller's source location; the plugin copies it if it "
              "keeps it, as it is valid only during the call.", untestable=_NOT_BOUND.format(what="field"),
              since_minor=76),
    Behaviour("PJRT_ExecuteOptions", "task_ids and incarnation_ids give each task's incarnation.",
              untestable=_NOT_BOUND.format(what="field"), since_minor=78),
    Behaviour("PJRT_ExecuteOptions", "multi_slice_config configures a launch over several slices.",
              untestable=_NOT_BOUND.format(what="field"), since_minor=97),
    Behaviour("PJRT_ExecuteOptions", "use_major_to_minor_data_layout_for_callbacks makes callbacks see arrays in "
              "major-to-minor order.", untestable=_NOT_BOUND.format(what="field"), since_minor=108),
    Behaviour("PJRT_ExecuteOptions", "HLO output callbacks, one for all replicas and partitions, receive the values "
              "of the program's output callbacks and must outlive the execution.",
              untestable=_NOT_BOUND.format(what="field"), since_minor=112),

    # -- PJRT_ExecuteContext ---------------------------------------------------------------------
    Behaviour("PJRT_ExecuteContext_Create", "Creates an execute context.", untestable=_NOT_BOUND.format(what="call"),
              since_minor=52),
    Behaviour("PJRT_ExecuteContext_Destroy", "Frees an execute context; accepts null.",
              untestable=_NOT_BOUND.format(what="call"), since_minor=52),

    # -- donation --------------------------------------------------------------------------------
    Behaviour("PJRT_LoadedExecutable_Execute", "An input the program aliases to an output (tf.aliasing_output) is "
              "donated: the execution consumes it, and it reports deleted afterwards.",
              cases=("buffers/donation", "jax/donation")),
    Behaviour("PJRT_LoadedExecutable_Execute", "A program that donates an input to one of several outputs computes "
              "every output, the aliased one and the others.", cases=("buffers/donation_into_one_of_several_outputs",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "An input aliased to an output of another element type is refused at "
              "compile with INVALID_ARGUMENT, or the program computes its result and never writes the output's bytes "
              "into an input it keeps.", cases=("buffers/donation_into_an_output_of_another_type",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "An execution holds its arguments only until it completes: one "
              "deleted after, during, or after a failed execution is released then.",
              cases=("buffers/deleting_an_argument_releases_it_once_executions_are_done",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "A donated buffer cannot be used again: later calls with it fail.",
              cases=("errors/execute_with_donated_argument",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "One buffer cannot be donated and also passed again in the same "
              "call.", cases=("errors/donate_same_buffer_twice",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "A buffer made with kImmutableZeroCopy may alias the caller's array "
              "but is never used for an aliased output: donating it leaves the array as it was.",
              cases=("buffers/donation_leaves_an_immutable_zero_copy_array_unwritten",)),
    Behaviour("PJRT_LoadedExecutable_Execute", "A buffer whose data is shared with another framework (an external "
              "reference) is not donated while the reference is held.",
              cases=("lifetime/external_reference_holds_off_donation",)),
)
