"""C++ names as people read them: libstdc++'s own demangler (``__cxa_demangle``) through ctypes, standard library
only (``doctor.py`` carries this module; Python 3.9). Where no libstdc++ can be loaded, the mangled name stays."""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def _demangler() -> Any:  # a ctypes foreign function, or None
    try:  # by soname: find_library would run ldconfig
        function = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_int),
    ]
    return function


@functools.cache
def _free() -> Any:  # a ctypes foreign function
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    return free


def demangle(symbol: str) -> str:
    """The demangled name, or ``symbol`` itself when it is not a C++ name (or no demangler is at hand)."""
    function = _demangler()
    if function is None or not symbol.startswith("_Z"):
        return symbol
    status = ctypes.c_int()
    pointer = function(symbol.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not pointer:
        return symbol
    try:
        return ctypes.string_at(pointer).decode(errors="replace")
    finally:
        _free()(pointer)


def can_demangle() -> bool:
    return _demangler() is not None
