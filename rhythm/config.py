"""Typed configs: dataclass defaults, then a YAML file, then ``key=value`` overrides, strictly.

``load_config(cls, path, overrides)`` rejects an unknown key with the nearest valid name, coerces
values to the field's type (so ``lr=3e-4`` from the CLI becomes a float) and fails loudly on a value
of the wrong type. Nested dataclass fields take nested YAML mappings or dotted keys
(``planner.horizon=6``). The resolved config goes into every output it produced
(:func:`config_dict`, :func:`config_hash`).

A YAML file may start from another: ``base: sft-tiny.yaml`` (a path relative to the including file, or a
shipped config's name) is read first and the file's own keys are applied on top, section by section (a mapping
field, such as the quickstart's stage overrides, key by key: ``--set grpo={...}`` still replaces one whole), so a
variant states only what it changes. Bases chain; a cycle is refused.

The recipe's configs ship inside the package (``rhythm/configs/*.yaml``, read with
:mod:`importlib.resources`): wherever a config path is accepted, a path that does not exist but names
a shipped config (``sft-tiny``, ``sft-tiny.yaml`` or ``configs/sft-tiny.yaml``) means that one, so
``rhythm sft --config configs/sft-tiny.yaml`` works from any directory and from a non-editable install.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import hashlib
import re
import types
import typing
from collections.abc import Hashable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union

import orjson
import yaml
from annotated_types import Ge, Interval
from pydantic import TypeAdapter, ValidationError

from rhythm.errors import RhythmError

T = TypeVar("T")

# Bounds a config field declares in its type, checked by :func:`check_bounds` (pydantic reads them).
Positive = Annotated[int, Ge(1)]
NonNegative = Annotated[float, Ge(0)]
Unit = Annotated[float, Interval(ge=0, le=1)]
Share = Annotated[float, Interval(ge=0, lt=1)]


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _suggest(key: str, valid: Iterable[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f"; did you mean {prefix + close[0]!r}?" if close else f"; valid keys: {', '.join(sorted(valid))}"


def _apply(cls: type, base: dict[str, Any], values: Mapping[str, Any], where: str, prefix: str = "",
           merge: bool = False) -> dict[str, Any]:
    """Merge ``values`` into the field dict ``base`` of dataclass ``cls`` with validation (``prefix``: the section
    ``cls`` is, ``branch.``, so a message names a key as it was given)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = _hints(cls)
    out = dict(base)
    for raw_key, value in values.items():
        head, _, rest = str(raw_key).partition(".")
        head = head.replace("-", "_")  # a field's name only: a mapping field's own keys (eval_episodes.in-dist) stay
        if head not in fields:
            if head in getattr(cls, "RETIRED", {}):  # a knob that left the product says where it went
                raise RhythmError(f"{where}: {raw_key!r} is no longer a key of {cls.__name__}: {cls.RETIRED[head]}")
            moved = [f"{name}.{head}" for name in fields if dataclasses.is_dataclass(hints[name])
                     and head in {f.name for f in dataclasses.fields(hints[name])}]  # a key that lives in a section
            suggestion = f"; did you mean {moved[0]!r}?" if moved else _suggest(head, fields, prefix)
            raise RhythmError(f"{where}: unknown key {prefix + str(raw_key)!r} for {cls.__name__}{suggestion}")
        hint = hints[head]
        if dataclasses.is_dataclass(hint):
            sub = out[head]
            sub_base = {f.name: getattr(sub, f.name) for f in dataclasses.fields(hint)}
            update = {rest: value} if rest else value
            if not isinstance(update, Mapping):
                raise RhythmError(f"{where}: {head!r} takes a mapping of {hint.__name__} fields, got {value!r}")
            out[head] = hint(**_apply(hint, sub_base, update, where, f"{prefix}{head}.", merge))
            continue
        if (typing.get_origin(hint) or hint) is dict and (rest or (merge and isinstance(value, Mapping))):
            # a mapping field (a stage's overrides): a dotted key sets one key of it; in a file over its base the keys
            # given go on top of the base's, so a variant states only what it changes (elsewhere a mapping replaces)
            value = {**(out.get(head) or {}), **({rest: value} if rest else value)}
        elif rest:
            raise RhythmError(f"{where}: {head!r} has no sub-keys (got {raw_key!r})")
        if _takes_text(hint):
            value = _as_text(value)
        _check_entries(hint, value, raw_key, where)
        try:
            out[head] = TypeAdapter(hint).validate_python(value)
        except ValidationError as err:
            expected = getattr(hint, "__name__", str(hint))
            first = err.errors()[0]
            at = ".".join(str(part) for part in first["loc"])
            raise RhythmError(f"{where}: {raw_key}={value!r} is not a valid {expected} "
                              f"({at + ': ' if at else ''}{first['msg']})") from None
    return out


def _as_text(value: Any) -> Any:
    """A value YAML read as a number or a date, as the text that was typed, for a field of text: ``seeds: 7``
    (a lone seed), ``api_version: 2024-06-01`` (a date to YAML); anything else as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, datetime.date):  # a datetime is a date too
        return value.isoformat()
    return value


def _check_entries(hint: Any, value: Any, raw_key: str, where: str) -> None:
    """The keys of each entry of a mapping field whose values are dataclasses (``prices: {NAME: Price}``):
    pydantic drops a key such a value does not have, so a misspelt one would vanish in silence. An unknown
    key is refused with the nearest valid name, as :func:`_apply` refuses one of a section."""
    args = typing.get_args(hint) if typing.get_origin(hint) is dict else ()
    item = args[-1] if args else None
    if not (isinstance(item, type) and dataclasses.is_dataclass(item) and isinstance(value, Mapping)):
        return
    names = [f.name for f in dataclasses.fields(item)]
    for name, entry in value.items():
        unknown = [key for key in entry if key not in names] if isinstance(entry, Mapping) else []
        if unknown:
            raise RhythmError(f"{where}: unknown key {unknown[0]!r} in {raw_key}.{name} "
                              f"({item.__name__}){_suggest(str(unknown[0]), names)}")


def _takes_text(hint: Any) -> bool:
    """A field of text that takes no number (``seeds: str``, ``output: str | None``)."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    return str in args and not any(a in (int, float) for a in args)


class _Null:
    """An override that sets a field to None (``key=null``), unlike a mapping's None (not given)."""

    def __repr__(self) -> str:
        return "null"


NULL = _Null()


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """``["lr=3e-4", "name=x"]`` -> dict; values are parsed as YAML scalars (numbers, bools, lists).
    ``key=null`` gives :data:`NULL`, so it survives being merged with options that were not given."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise RhythmError(f"override {pair!r} is not key=value")
        try:  # "-" is stdin (data=-), not YAML's list of one null
            value = raw.strip() if raw.strip() in ("", "-") else plain_yaml(raw)
        except yaml.YAMLError:
            value = raw
        out[key.strip()] = NULL if value is None else value
    return out


def shipped_configs() -> list[str]:
    """Names of the configs shipped with the package (``rhythm/configs/*.yaml``)."""
    return sorted(f.name for f in resources.files("rhythm").joinpath("configs").iterdir() if f.name.endswith(".yaml"))


def find_config(path: str | Path) -> Path:
    """``path`` when it is a file; else the shipped config it names (see the module docstring)."""
    p = Path(path)
    if p.is_file():
        return p
    name = p.name if p.suffix in (".yaml", ".yml") else p.name + ".yaml"
    if p.parent in (Path("."), Path("configs")):
        shipped = resources.files("rhythm").joinpath("configs", name)
        if shipped.is_file():
            return Path(str(shipped))
    raise RhythmError(f"config file not found: {path} (shipped configs: {', '.join(shipped_configs())})")


class PlainNumbersLoader(yaml.SafeLoader):
    """PyYAML's safe loader with decimal integers only: YAML 1.1 reads ``010`` as 8 (octal), ``1:5`` as 65
    (base 60), ``0x10`` as 16 and ``1_0`` as 10, so ``--set seeds=010`` played seed 8 where ``--seeds 010`` plays 10.
    ``010`` is 10 here; the others stay the text that was typed, which the field then reads as it reads the option.
    Booleans and floats are YAML 1.1's, as before (what ``yaml.safe_dump`` writes reads back the same)."""


PlainNumbersLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:int"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
PlainNumbersLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))


def _decimal_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    return int(loader.construct_scalar(node))


PlainNumbersLoader.add_constructor("tag:yaml.org,2002:int", _decimal_int)


def plain_yaml(text: str) -> Any:
    """``text`` read as YAML with :class:`PlainNumbersLoader`'s numbers (a ``--set`` value, a config file)."""
    return yaml.load(text, Loader=PlainNumbersLoader)  # noqa: S506 (a safe loader)


class UniqueKeyLoader(PlainNumbersLoader):
    """:class:`PlainNumbersLoader`, refusing a key given twice in one mapping (where YAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = find_config(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader) or {}  # noqa: S506 (a safe loader)
    except UnicodeDecodeError as err:
        raise RhythmError(f"{path}: not UTF-8 text (byte {err.start}); a config is a YAML file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise RhythmError(f"{path}{line}: invalid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(data, dict):
        raise RhythmError(f"{path}: expected a mapping of config keys at the top level")
    return data


def config_layers(path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """The YAML at ``path`` and its chain of ``base:`` files, as ``(file, keys)`` from the deepest base up."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    file = find_config(path)
    while True:
        if any(file.resolve() == seen.resolve() for seen, _ in chain):
            names = " -> ".join(str(p) for p, _ in chain)
            raise RhythmError(f"{chain[-1][0]}: base: {file} makes a cycle ({names} -> {file})")
        data = read_yaml(file)
        data.pop("_provenance", None)  # written by write_config beside outputs; not a setting
        base = data.pop("base", None)
        chain.append((file, data))
        if base is None:
            return chain[::-1]
        if not isinstance(base, str) or not base.strip():
            raise RhythmError(f"{file}: base must be the path of another config file, got {base!r}")
        beside = file.parent / base
        file = beside if beside.is_file() else find_config(base)


def load_config(
    cls: type[T],
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
) -> T:
    """Defaults of ``cls``, updated by the YAML at ``path`` (after its ``base:`` chain), then by ``overrides``
    (CLI wins).

    ``overrides`` is a mapping (None values are skipped: options the user did not give; :data:`NULL`
    sets a field to None) or a list of ``key=value`` strings (``key=null`` sets None).
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    defaults = cls()
    values = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(cls)}
    for layer, (file, data) in enumerate(config_layers(path) if path is not None else []):
        values = _apply(cls, values, data, str(file), merge=layer > 0)  # a variant's mappings go on its base's
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            overrides = parse_overrides(overrides)
        given = {k: None if v is NULL else v for k, v in overrides.items() if v is not None}
        values = _apply(cls, values, given, "command line")
    try:
        config = cls(**values)
    except (TypeError, ValueError) as err:
        raise RhythmError(f"invalid {cls.__name__}: {err}") from None
    check_bounds(config)
    return config


def check_bounds(config: Any, prefix: str = "") -> None:
    """The bounds ``config``'s fields declare in their types (``Positive``, ``Unit``, ``Annotated[float, Gt(0)]``),
    sections and mappings of sections included: a :class:`RhythmError` names the first field outside them."""
    hints = typing.get_type_hints(type(config), include_extras=True)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            check_bounds(value, f"{prefix}{f.name}.")
        elif isinstance(value, Mapping) and any(dataclasses.is_dataclass(v) for v in value.values()):
            for key, entry in value.items():  # a mapping of sections (prices: {NAME: Price})
                if dataclasses.is_dataclass(entry):
                    check_bounds(entry, f"{prefix}{f.name}.{key}.")
        elif _bounded(hints[f.name]):
            try:
                TypeAdapter(hints[f.name]).validate_python(value)
            except ValidationError as err:
                raise RhythmError(f"{prefix}{f.name}={value!r}: {err.errors()[0]['msg'].lower()}") from None


def _bounded(hint: Any) -> bool:
    return typing.get_origin(hint) is Annotated or any(_bounded(a) for a in typing.get_args(hint))


def config_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON-able data (nested dataclasses become mappings)."""
    return orjson.loads(orjson.dumps(dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config))


def config_hash(config: Any, ignore: Iterable[str] = ()) -> str:
    """A short, stable hash of the effective config (sorted keys), recorded in every output; ``ignore``: dotted keys
    left out (settings that do not change what is made: where it goes, how many workers)."""
    data = config_dict(config)
    for key in ignore:
        *path, last = key.split(".")
        section = data
        for part in path:
            section = section.get(part, {}) if isinstance(section, dict) else {}
        if isinstance(section, dict):
            section.pop(last, None)
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def flat_settings(tree: Mapping[str, Any], ignore: Iterable[str] = (), prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"section.key": value}``, less the dotted keys ``ignore`` names (and what lies under
    them), so two runs' settings can be compared key by key (:func:`settings_change`)."""
    ignore = tuple(ignore)
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if any(name == k or name.startswith(k + ".") for k in ignore):
            continue
        if isinstance(value, Mapping):  # an empty section adds no key
            out.update(flat_settings(value, ignore, f"{name}."))
        else:
            out[name] = value
    return out


def settings_change(before: Mapping[str, Any], now: Mapping[str, Any], shown: int = 3) -> str:
    """The settings that differ between two :func:`flat_settings`, as ``k: 1 -> 2; sec.b: x -> y`` (the first
    ``shown`` in key order, then how many more); empty when none does."""
    unset = "<unset>"
    keys = sorted(k for k in {*before, *now} if before.get(k, unset) != now.get(k, unset))
    parts = [f"{k}: {before.get(k, unset)} -> {now.get(k, unset)}" for k in keys[:shown]]
    more = f"; {len(keys) - shown} more" if len(keys) > shown else ""
    return "; ".join(parts) + more


def read_recorded(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A config :func:`write_config` wrote, as ``(settings, provenance)``; None when there is none to read."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    provenance = data.pop("_provenance", None)
    return data, provenance if isinstance(provenance, dict) else {}


def change_since(path: str | Path, seen: Iterable[Any], now: Mapping[str, Any], ignore: Iterable[str] = (),
                 provenance_keys: Iterable[str] = ()) -> str:
    """The settings of config ``now`` that differ from those written at ``path`` by the run that made the outputs
    of hash ``seen`` (:func:`settings_change`, less ``ignore``; ``provenance_keys``: entries of its provenance
    compared as settings too). Empty when that file is missing or records another run, so a refusal that quotes
    it still stands on the hashes alone."""
    found = read_recorded(path)
    if found is None or found[1].get("config_hash") not in set(seen):
        return ""
    settings, provenance = found
    before = {**settings, **{key: provenance.get(key) for key in provenance_keys}}
    return settings_change(flat_settings(before, ignore), flat_settings(now, ignore))


def write_config(config: Any, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
    """Write the resolved config as YAML beside an output (with optional provenance)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = config_dict(config)
    if extra:
        data = {**data, "_provenance": dict(extra)}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
