"""``rhythm sft --help-config`` / ``rhythm grpo --help-config``: every field of a stage's config with its
type, default and help, read from the dataclass itself (the string literal under each field), so the
listing cannot drift from the code."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import shutil
import textwrap
import types
import typing
from typing import Any

import yaml


def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass and its dataclass bases (a subclass's text wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _type_name(hint: Any) -> str:
    """``str | None``, ``bool | 'auto'``, ``list[str]``: a type as the YAML user reads it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:  # a declared bound (rhythm.config.check_bounds): int (>= 1), float (>= 0, < 1)
        ops = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
        bounds = [f"{sym} {getattr(m, k)}" for m in hint.__metadata__ for k, sym in ops.items() if getattr(m, k, None) is not None]
        return f"{_type_name(args[0])} ({', '.join(bounds)})" if bounds else _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    if hint is type(None):
        return "None"
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _yaml(value: Any) -> str:
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def config_fields(cls: type, defaults: Any = None) -> list[tuple[str, str, str, str]]:
    """``(name, type, default as YAML, help)`` for every field of a config dataclass, in order; ``defaults``: the
    instance whose values are the defaults (a section's, as its parent's default builds it), else the class's."""
    hints, docs = typing.get_type_hints(cls, include_extras=True), field_docs(cls)
    return [(f.name, _type_name(hints[f.name]), _yaml(_default(f) if defaults is None else getattr(defaults, f.name)),
             docs.get(f.name, "")) for f in dataclasses.fields(cls)]


def describe_config(cls: type, command: str) -> str:
    """The text ``--help-config`` prints."""
    width = min(shutil.get_terminal_size((100, 20)).columns, 120)
    lines = [f"{command}: the fields of {cls.__name__}, the keys of a --config YAML file and of --set key=value",
             f"(an option such as {'--out' if 'quickstart' in command else '--max-steps'} wins over both).", ""]
    lines += _field_lines(cls, "", width)
    return "\n".join(lines)


def _field_lines(cls: type, indent: str, width: int, prefix: str = "", defaults: Any = None) -> list[str]:
    """Each field as ``name: type = default`` over its help; a section's fields follow it, indented, as the
    dotted keys ``--set`` takes, with the defaults its parent gives it (grpo's ``jobs.timeout`` is not sft's)."""
    hints, lines = typing.get_type_hints(cls), []
    defaults = cls() if defaults is None else defaults
    for name, type_name, default, help_text in config_fields(cls, defaults):
        lines.append(f"{indent}{prefix}{name}: {type_name} = {default}")
        lines += textwrap.wrap(" ".join(help_text.split()), width - len(indent) - 4, initial_indent=indent + "    ",
                               subsequent_indent=indent + "    ")
        if dataclasses.is_dataclass(hints[name]):
            lines += _field_lines(hints[name], indent + "    ", width, f"{prefix}{name}.", getattr(defaults, name))
    return lines
