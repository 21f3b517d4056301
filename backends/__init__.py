"""Backends: each registers through discovery like any third-party plugin; the host never imports one by name."""
