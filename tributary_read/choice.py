"""Choice: a closed set of string values (modes, protocols, trackings).

A ``str`` enum rather than bare strings, so a typo is an error where the value
enters and every value is spelled once. Members are ``str`` instances: they
compare, hash and JSON-encode exactly as their values do, so table.json,
consumer state and the CLI's JSON are byte-for-byte what plain strings gave.
(``enum.StrEnum`` would do, but Python 3.10 has none.)
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from tributary_read.errors import InvalidInputError


_C = TypeVar("_C", bound="Choice")


class Choice(str, enum.Enum):
    """Base of trib's string enums: ``str(x)`` and ``f"{x}"`` are the value, as with ``StrEnum``."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    __hash__ = str.__hash__

    @classmethod
    def values(cls) -> list[str]:
        """The values, in declaration order (click's ``Choice`` takes these)."""
        return [m.value for m in cls]

    @classmethod
    def parse(cls: type[_C], value: Any, what: str) -> _C:
        """``value`` as a member; an unknown one is an InvalidInputError naming the choices."""
        try:
            return cls(value)
        except ValueError:
            raise InvalidInputError(f"unknown {what} {value!r}; choose {', '.join(cls.values())}") from None
