"""Read an ELF shared object's dynamic symbols and needed libraries without loading it.

Loading a plugin runs its static initializers, which may abort or hang; reading the file does not.
The probe uses this to say whether a ``.so`` exports ``GetPjrtApi`` and which libraries it needs
before it ever calls ``dlopen``, and to pick the plugin out of a wheel folder with several ``.so``.
Only 64-bit little-endian ELF is read (every PJRT plugin wheel on PyPI is x86_64 or aarch64).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["ElfInfo", "NotElfError", "read_elf"]

_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_DT_NEEDED = 1
_DT_SONAME = 14
_SHN_UNDEF = 0


class NotElfError(ValueError):
    """The file is not a 64-bit little-endian ELF object."""


@dataclass(frozen=True, slots=True)
class ElfInfo:
    machine: int
    #: Defined (exported) dynamic symbols, without version suffixes.
    exports: frozenset[str]
    needed: tuple[str, ...]
    soname: str | None

    @property
    def machine_name(self) -> str:
        return {62: "x86_64", 183: "aarch64"}.get(self.machine, f"machine {self.machine}")

    def exports_pjrt(self) -> bool:
        return "GetPjrtApi" in self.exports


def _cstr(blob: bytes, offset: int) -> str:
    end = blob.find(b"\0", offset)
    return blob[offset:end if end >= 0 else len(blob)].decode("utf-8", errors="replace")


def read_elf(path: str) -> ElfInfo:
    """The exports and DT_NEEDED entries of ``path``; NotElfError if it is not ELF64 LE."""
    with open(path, "rb") as fh:
        ident = fh.read(64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF":
            raise NotElfError(f"{path} is not an ELF file")
        if ident[4] != 2 or ident[5] != 1:
            raise NotElfError(f"{path} is not a 64-bit little-endian ELF file")
        machine = struct.unpack_from("<H", ident, 18)[0]
        shoff = struct.unpack_from("<Q", ident, 40)[0]
        shentsize, shnum = struct.unpack_from("<HH", ident, 58)
        if shoff == 0 or shnum == 0 or shentsize < 64:
            raise NotElfError(f"{path} has no section headers")
        fh.seek(shoff)
        table = fh.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]

        def read(index: int) -> bytes:
            _name, _type, _flags, _addr, offset, size = sections[index][:6]
            fh.seek(offset)
            return fh.read(size)

        exports: set[str] = set()
        needed: list[str] = []
        soname = None
        for sec in sections:
            sh_type, link, entsize = sec[1], sec[6], sec[9]
            if sh_type == _SHT_DYNSYM and entsize >= 24:
                strtab = read(link)
                syms = read(sections.index(sec))
                for pos in range(0, len(syms) - entsize + 1, entsize):
                    name_off, _info, _other, shndx = struct.unpack_from("<IBBH", syms, pos)
                    if shndx != _SHN_UNDEF and name_off:
                        exports.add(_cstr(strtab, name_off).split("@")[0])
            elif sh_type == _SHT_DYNAMIC and entsize >= 16:
                strtab = read(link)
                dyn = read(sections.index(sec))
                for pos in range(0, len(dyn) - 15, entsize):
                    tag, value = struct.unpack_from("<qQ", dyn, pos)
                    if tag == _DT_NEEDED:
                        needed.append(_cstr(strtab, value))
                    elif tag == _DT_SONAME:
                        soname = _cstr(strtab, value)
                    elif tag == 0:
                        break
    return ElfInfo(machine, frozenset(exports), tuple(needed), soname)
