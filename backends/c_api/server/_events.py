"""PJRT_Plugin_* and PJRT_Event_*: initialization, attributes, and events the caller waits on or is called back by."""

from __future__ import annotations

import ctypes

from pjrt_hub.abi import ErrorCode, Event, InvalidArgument, PjrtError

from pjrt_hub.backends.cpu_runtime import CpuEvent

from ._base import _Base, _on_ready_function


class _PluginEventSlots(_Base):
    """The plugin and event functions of :class:`~.ServedApi`."""

    # -- plugin --------------------------------------------------------------------------------

    def _Plugin_Initialize(self, address: int) -> None:
        self._args(address, "PJRT_Plugin_Initialize_Args")
        api = self.api
        with self._api_lock:
            if not self._initialized:
                api.plugin_initialize()
                self._initialized = True

    def _Plugin_Attributes(self, address: int) -> None:
        args = self._args(address, "PJRT_Plugin_Attributes_Args")
        values = self._strings.get("plugin attributes")
        if values is None:
            values = self._named_values(self.api.plugin_attributes(), "PJRT_Plugin_Attributes")
            self._strings["plugin attributes"] = values
        args.attributes = values.address or None
        if self._covers(args, "PJRT_Plugin_Attributes_Args", "num_attributes"):
            args.num_attributes = values.count

    # -- events --------------------------------------------------------------------------------

    def _event(self, handle: int, what: str) -> Event:
        return self._handles.get(handle, "event", what)

    def _Event_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Destroy_Args")
        if args.event and args.event == self._ready_event:
            return  # handed out to every caller that asks; it lives as long as the server
        self._created_events.discard(args.event)
        event = self._handles.drop(args.event, "event", "PJRT_Event_Destroy")
        if event is not None:
            event.destroy()

    def _Event_IsReady(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_IsReady_Args")
        args.is_ready = bool(self._event(args.event, "PJRT_Event_IsReady").is_ready())

    def _Event_Error(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Error_Args")
        error = self._event(args.event, "PJRT_Event_Error").error()
        if error is not None:
            raise error

    def _Event_Await(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Await_Args")
        self._event(args.event, "PJRT_Event_Await").await_()

    def _Event_OnReady(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_OnReady_Args")
        event = self._event(args.event, "PJRT_Event_OnReady")
        if not args.callback:
            raise InvalidArgument("PJRT_Event_OnReady: the callback is NULL")
        callback = _on_ready_function(args.callback)
        user_arg = args.user_arg
        make_error = self._make_error

        def fire(error: PjrtError | None) -> None:
            callback(make_error(error, "PJRT_Event_OnReady") if error is not None else None, user_arg)

        event.on_ready(fire)

    def _Event_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Create_Args")
        # The host runtime's event is the settable latch PJRT_Event_Create asks for.
        args.event = self._handles.new("event", CpuEvent())
        self._created_events.add(args.event)

    def _Event_Set(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Set_Args")
        event = self._event(args.event, "PJRT_Event_Set")
        if args.event not in self._created_events:
            raise InvalidArgument("PJRT_Event_Set: only events made by PJRT_Event_Create can be set")
        error = None
        if args.error_code != ErrorCode.OK:
            message = ctypes.string_at(args.error_message, args.error_message_size).decode("utf-8", "replace") \
                if args.error_message else ""
            from pjrt_hub.abi import error_for_code

            error = error_for_code(args.error_code, message)
        assert isinstance(event, CpuEvent)  # PJRT_Event_Create made it
        event.set(error)
