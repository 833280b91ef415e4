"""PEP 562 lazy attributes for a package face: names resolved on first use, so an import stays cheap."""

from __future__ import annotations

import importlib
import sys


def lazy_getattr(package: str, names: dict[str, str]):
    """A module ``__getattr__`` (PEP 562) that imports ``names[name]`` (a submodule of
    ``package``) on first use and keeps the value in the package, so the next
    lookup is a plain attribute. Shared by this package and ``tributary_read.spark``."""

    def __getattr__(name: str):
        mod = names.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{mod}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
