"""The explicit algorithm registry, filled by the `@register` decorator."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:   # base.py's algorithms import this module to register themselves
    from envad.training.algorithms.base import Algorithm

A = TypeVar("A", bound="type[Algorithm]")

REGISTRY: dict[str, type[Algorithm]] = {}


def register(cls: A) -> A:
    """Class decorator: add an Algorithm subclass under its `name`; duplicates are errors."""
    name = getattr(cls, "name", "")
    if not name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if name in REGISTRY:
        raise ValueError(f"algorithm {name!r} is already registered "
                         f"({REGISTRY[name].__qualname__})")
    REGISTRY[name] = cls
    return cls


def names() -> list[str]:
    """Registered algorithm names, in registration order."""
    return list(REGISTRY)


def get(name: str) -> type[Algorithm]:
    """The algorithm class registered as `name` (KeyError lists the known names)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown algorithm {name!r}; known: {', '.join(REGISTRY)}") from None
