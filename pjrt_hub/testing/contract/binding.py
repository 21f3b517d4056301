"""What pjrt-hub's Python binding (abi/binding.py) promises beyond pjrt_c_api.h, behaviour by
behaviour: the calls and options a Python plugin implements that the C API has no counterpart
for, read from the binding's docstrings (see the package's doc).

The C API cannot stop an execution nor bound a wait; the binding adds both
(``ExecuteOptions.timeout``, ``LoadedExecutable.cancel``, ``Event.await_(timeout)``) and says
what a plugin that cannot stop executions does instead. Where the binding only gives a C
function a Python type, the header's entry (in the other areas) says what the values mean; the
entries here name the type or the freedom the binding leaves.
"""

from __future__ import annotations

from . import Behaviour

#: The plugins that cannot stop executions, as the binding names them.
_C_BRIDGE = "the C bridge (and any plugin whose cancel says Unimplemented)"

BEHAVIOURS: tuple[Behaviour, ...] = (
    # -- ExecuteOptions.timeout ------------------------------------------------------------------
    Behaviour("ExecuteOptions.timeout", "An execution that finishes within its limit gives its results as without "
              "one, whatever limits other executions have (a later limit may pass earlier).",
              cases=("execute/timeout_bounds_an_execution",)),
    Behaviour("ExecuteOptions.timeout", "Once the limit (seconds from the Execute call) passes, a plugin that can "
              "stop the execution stops it: its completion events and its outputs carry DEADLINE_EXCEEDED.",
              cases=("execute/timeout_bounds_an_execution", "execute/timeout_already_past")),
    Behaviour("ExecuteOptions.timeout", "After an execution stopped by its limit the client stays usable: the same "
              "executable runs again to its results.", cases=("execute/timeout_bounds_an_execution",)),
    Behaviour("ExecuteOptions.timeout", "A limit of 0 s has passed when the execution starts: accepted, and an "
              "execution that cannot finish at once ends with DEADLINE_EXCEEDED; a negative limit is never taken as "
              "no limit.", cases=("execute/timeout_already_past",)),
    Behaviour("ExecuteOptions.timeout", f"A plugin that cannot stop an execution ({_C_BRIDGE}) accepts the field and "
              "leaves the execution running to its results.",
              cases=("execute/timeout_bounds_an_execution", "execute/timeout_already_past")),
    Behaviour("ExecuteOptions.timeout", "Inputs donated to an execution stopped by its limit are gone, as after any "
              "failed execution.",
              untestable="no program the suite can make both donates an input and runs long enough to be stopped "
                         "(the slow loop's state is not aliased to its input); the donation cases check a failed "
                         "execution's donated inputs"),
    Behaviour("ExecuteOptions.timeout", "None (the default) sets no limit.",
              cases=("execute/cancel_stops_running_and_queued_executions", "events/await_with_a_time_limit")),

    # -- LoadedExecutable.cancel -----------------------------------------------------------------
    Behaviour("LoadedExecutable.cancel", "Harmless on an executable with nothing running: it returns, and later "
              "executions run to their results.", cases=("execute/cancel_stops_running_and_queued_executions",)),
    Behaviour("LoadedExecutable.cancel", "Stops every unfinished execution of the executable: a running one at a "
              "point where the plugin can stop it, a queued one before it starts; their completion events and "
              "outputs carry CANCELLED.", cases=("execute/cancel_stops_running_and_queued_executions",)),
    Behaviour("LoadedExecutable.cancel", "An execution over several devices is unfinished until every device is "
              "done: cancel stops the devices still running it.",
              cases=("execute/cancel_reaches_every_device_of_an_execution",)),
    Behaviour("LoadedExecutable.cancel", "Only the executions unfinished at the call are stopped: executions started "
              "afterwards run as if it never happened, and the client stays usable.",
              cases=("execute/cancel_stops_running_and_queued_executions",)),
    Behaviour("LoadedExecutable.cancel", "Returns at once, without waiting for the executions to stop.",
              untestable="a stop at the next loop iteration takes microseconds, so no case can tell a cancel that "
                         "waited for it from one that did not; the cases bound the call and the stop together"),
    Behaviour("LoadedExecutable.cancel", f"A plugin that cannot stop executions ({_C_BRIDGE}) raises UNIMPLEMENTED "
              "rather than ignoring the call.",
              cases=("execute/cancel_stops_running_and_queued_executions", "execute/timeout_bounds_an_execution")),

    # -- Event.await_(timeout) -------------------------------------------------------------------
    Behaviour("Event.await_", "With a bound, a wait for a pending event raises DEADLINE_EXCEEDED once the bound has "
              "passed (at once for 0 or a negative bound).", cases=("events/await_with_a_time_limit",)),
    Behaviour("Event.await_", "A bound that runs out ends the wait, not the work: the event stays pending and later "
              "completes with the work's own outcome.", cases=("events/await_with_a_time_limit",)),
    Behaviour("Event.await_", "On a ready event the bound does not matter: the wait returns at once with the event's "
              "outcome.", cases=("events/await_with_a_time_limit",)),

    # -- types the binding gives C functions -----------------------------------------------------
    Behaviour("Executable.get_compiled_memory_stats", "Returns a CompiledMemoryStats, the binding's mirror of the "
              "Args struct's byte counts.", cases=("compile/compiled_memory_stats",), since_minor=40),
    Behaviour("Executable.get_compiled_memory_stats", "How the counts relate (peak_memory_in_bytes, "
              "total_size_in_bytes against the argument, output, alias and temporary sizes) is not stated.",
              untestable="a freedom, not a duty: neither the binding nor the header (\"mirrors "
                         "xla::CompiledMemoryStats\", an estimate for the caller) gives a formula, and an unreported "
                         "count is 0 in the binding's defaults",
              since_minor=40),
    Behaviour("Executable.get_cost_analysis", "Returns the cost properties as a dict of named values (str keys; "
              "string, int, int list, float or bool values).", cases=("compile/executable_queries_are_stable",)),
    Behaviour("Executable.get_cost_analysis", "What the figures are (operation counts, bytes accessed) and how they "
              "grow with the program is the plugin's estimate.",
              untestable="a freedom, not a duty: neither the binding nor the header fixes a property or a value, so "
                         "no figure (a dot's flops, a bigger program's total) may be demanded of a plugin"),
    Behaviour("Executable.size_of_generated_code_in_bytes", "Returns the size as an int byte count >= 0.",
              cases=("compile/executable_queries_are_stable",)),
    Behaviour("Client.lookup_device", "An unknown global id is refused with INVALID_ARGUMENT \"No matching device "
              "found for device_id N\", naming the id (the one error text the binding fixes).",
              cases=("client/lookup_device_negative_id", "client/lookup_device_out_of_range_id")),
    Behaviour("PjrtError", "Errors are told apart by their code (their type); the text of a message is the plugin's "
              "own, except where a docstring quotes it.",
              untestable="a freedom, not a duty: no case may read an error's text beyond the quoted ones (the "
                         "mutants that change only a message survive by design)"),
)
