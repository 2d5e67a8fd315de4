"""btlcore's Wireshark dissector (``btl.lua``, protocol ``btl``), shipped as package data.

Wireshark and tshark show a btlcore datagram as UDP ``Data`` until this file is loaded:
for one run with ``tshark -X lua_script:$(btl wireshark --path)``, or for good once copied
into the personal Lua plugin folder (``btl wireshark --install``, :func:`install`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: the dissector's file name (also its name in the plugin folder)
FILE_NAME = "btl.lua"


def path() -> Path:
    """Where the dissector is in this installation."""
    return Path(__file__).resolve().with_name(FILE_NAME)


def _ask_tshark() -> Path | None:
    """The personal Lua plugin folder as the installed tshark reports it (``tshark -G
    folders``), or None without a tshark that answers."""
    exe = shutil.which("tshark")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-G", "folders"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Personal Lua Plugins" and value.strip():
            return Path(value.strip())
    return None


def plugin_dir(ask_tshark: bool = True) -> Path:
    """The user's Wireshark Lua plugin folder: what tshark reports when it is installed
    (``Personal Lua Plugins``), else Wireshark's default for this system:
    ``%APPDATA%\\Wireshark\\plugins`` on Windows, ``~/.local/lib/wireshark/plugins``
    elsewhere (the folder of Wireshark 2.5 and later, built from the home folder; the older
    ``$XDG_CONFIG_HOME/wireshark/plugins`` still loads Lua files, but this one wins)."""
    if ask_tshark:
        found = _ask_tshark()
        if found is not None:
            return found
    if sys.platform == "win32" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "Wireshark" / "plugins"
    return Path.home() / ".local" / "lib" / "wireshark" / "plugins"


def install(dest: str | os.PathLike[str] | None = None) -> Path:
    """Copy the dissector into ``dest`` (a folder; default :func:`plugin_dir`), creating the
    folder if needed; returns the file written."""
    folder = Path(dest) if dest is not None else plugin_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / FILE_NAME
    shutil.copyfile(path(), target)
    return target
