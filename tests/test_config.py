"""load_config: defaults, then YAML, then CLI; strict about keys and types."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import pytest
from annotated_types import Ge
from hypothesis import given
from hypothesis import strategies as st

from rhythm.config import (
    Positive,
    Share,
    Unit,
    check_bounds,
    config_hash,
    load_config,
    parse_overrides,
    read_yaml,
    write_config,
)
from rhythm.errors import RhythmError


@dataclass(frozen=True)
class Inner:
    horizon: int = 8
    samples: int = 16


@dataclass(frozen=True)
class Outer:
    learning_rate: float = 1e-4
    name: str = "x"
    tags: list[str] = field(default_factory=list)
    limit: int | None = None
    inner: Inner = field(default_factory=Inner)


def test_layers_defaults_yaml_then_cli(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: 3.0e-4\nname: from-yaml\ninner:\n  horizon: 4\n")
    cfg = load_config(Outer, path, ["name=from-cli", "inner.samples=2", "tags=[a, b]"])
    assert cfg == Outer(3e-4, "from-cli", ["a", "b"], None, Inner(4, 2))
    assert load_config(Outer, path, {"name": None}).name == "from-yaml"  # None = not given


@dataclass(frozen=True)
class Stages:
    sft: dict = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=lambda: {"a": 1, "b": 2})
    limit: int | None = None


def test_a_dotted_key_sets_one_key_of_a_mapping_field(tmp_path: Path) -> None:
    """A quickstart stage's overrides are a mapping: ``--set sft.max_steps=2`` adds one key to what the file gives,
    ``sft={...}`` replaces it whole; a plain field still has no sub-keys."""
    path = tmp_path / "c.yaml"
    path.write_text("sft:\n  learning_rate: 0.001\n")
    cfg = load_config(Stages, path, ["sft.max_steps=2", "sft.jobs.flavor=cpu-basic", "sizes.b=5"])
    assert cfg.sft == {"learning_rate": 0.001, "max_steps": 2, "jobs.flavor": "cpu-basic"} and cfg.sizes == {"a": 1, "b": 5}
    assert load_config(Stages, path, ["sft={max_steps: 2}"]).sft == {"max_steps": 2}
    with pytest.raises(RhythmError, match="sizes.b="):
        load_config(Stages, path, ["sizes.b=x"])
    with pytest.raises(RhythmError, match="'limit' has no sub-keys"):
        load_config(Stages, path, ["limit.x=1"])


def test_key_null_on_the_command_line_sets_none(tmp_path: Path) -> None:
    """``--set limit=null`` overrides a value from the YAML, also merged with options not given."""
    from rhythm.cli.options import overrides

    path = tmp_path / "c.yaml"
    path.write_text("limit: 5\nname: from-yaml\n")
    assert load_config(Outer, path).limit == 5
    assert load_config(Outer, path, ["limit=null"]).limit is None
    cfg = load_config(Outer, path, overrides({"name": None, "learning_rate": 0.5}, ["limit=null"]))
    assert (cfg.limit, cfg.name, cfg.learning_rate) == (None, "from-yaml", 0.5)
    with pytest.raises(RhythmError, match="name=None is not a valid str"):
        load_config(Outer, path, ["name=null"])


def test_a_retired_key_says_where_it_went(tmp_path: Path) -> None:
    """A config written before a knob left the product is refused with where the knob went, not a list of keys."""
    from rhythm.train.sft import SFTRunConfig

    path = tmp_path / "old.yaml"
    path.write_text("filter_beliefs: true\n")
    with pytest.raises(RhythmError, match=r"old.yaml: 'filter_beliefs' is no longer a key of SFTRunConfig: .*own_weeks.py filter"):
        load_config(SFTRunConfig, path)
    with pytest.raises(RhythmError, match=r"'action_balance' is no longer a key.*commit 2630816"):
        load_config(SFTRunConfig, None, ["action_balance=0.5"])


def test_unknown_key_names_the_nearest(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("lerning_rate: 1\n")
    with pytest.raises(RhythmError, match=r"unknown key 'lerning_rate'.*did you mean 'learning_rate'"):
        load_config(Outer, path)
    with pytest.raises(RhythmError, match=r"unknown key 'inner.horizn' for Inner; did you mean 'inner.horizon'"):
        load_config(Outer, None, ["inner.horizn=3"])  # a section's key named as it is given


def test_wrong_types_and_bad_files_fail_loudly(tmp_path: Path) -> None:
    with pytest.raises(RhythmError, match="learning_rate"):
        load_config(Outer, None, ["learning_rate=fast"])
    with pytest.raises(RhythmError, match="not found"):
        load_config(Outer, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(RhythmError, match=r"bad.yaml:\d+: invalid YAML"):
        load_config(Outer, bad)
    with pytest.raises(RhythmError, match="key=value"):
        parse_overrides(["novalue"])


def test_a_dotted_key_keeps_the_dashes_of_a_mappings_own_keys() -> None:
    """``eval_episodes.in-dist=7`` sets the ``in-dist`` count: the dash of a field's name is read as ``_``, a
    mapping's own key is kept as typed (it became ``in_dist``, a fourth condition, refused under a name not typed)."""
    from rhythm.quickstart import QuickstartConfig

    cfg = load_config(QuickstartConfig, None, ["eval-episodes.in-dist=7", "eval_episodes.ood=5"])
    assert cfg.eval_episodes == {"in-dist": 7, "ood": 5, "discrete": 15}


def test_a_dash_override_is_stdin_not_a_yaml_list() -> None:
    """``--set data=-`` (the python -m entry's way to read stdin) is the text "-"; other values stay YAML."""
    assert parse_overrides(["data=-", "d= - ", "xs=[1, 2]", "e="]) == {"data": "-", "d": "-", "xs": [1, 2], "e": ""}


@pytest.mark.parametrize("typed, seeds", [("010", [10]), ("7", [7]), ("0-2", [0, 1, 2]), ("3,1", [3, 1])])
def test_set_seeds_plays_the_people_the_option_plays(run_cli, typed: str, seeds: list[int]) -> None:
    """``--set seeds=010`` is what ``--seeds 010`` is: YAML 1.1 read it as 8 (octal), ``1:5`` as 65, ``0x10`` as 16."""
    import orjson

    for how in (["--set", f"seeds={typed}"], ["--seeds", typed]):
        code, out, err = run_cli("generate", "-q", "-o", "-", "--set", "teacher=heuristic", *how)
        assert code == 0, err
        assert [orjson.loads(line)["seed"] for line in out.splitlines()] == seeds


@pytest.mark.parametrize("typed", ["1:5", "0x10", "1_0"])
def test_set_seeds_refuses_what_the_option_refuses(run_cli, typed: str) -> None:
    for how in (["--set", f"seeds={typed}"], ["--seeds", typed]):
        code, out, err = run_cli("generate", "-q", "-o", "-", *how)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_integers_are_decimal_and_other_yaml_11_numbers_stay_text(tmp_path: Path) -> None:
    """``010`` is 10 (YAML 1.1: 8); ``1:5``, ``0x10``, ``1_0`` stay the text typed; booleans and floats as before,
    inside a free-form mapping too; what ``yaml.safe_dump`` writes reads back the same."""
    import yaml

    from rhythm.config import plain_yaml

    assert parse_overrides(["a=yes", "b=010", "c=1e-3", "d=true", "e=0.5", "f=-3", "g=off", "h=0x10", "i=1:5"]) == {
        "a": True, "b": 10, "c": "1e-3", "d": True, "e": 0.5, "f": -3, "g": False, "h": "0x10", "i": "1:5"}
    assert parse_overrides(["x={enable_thinking: no, seed: 010}"]) == {"x": {"enable_thinking": False, "seed": 10}}
    config = tmp_path / "c.yaml"
    config.write_text("name: '010'\ninner:\n  horizon: 010\n")
    loaded = load_config(Outer, config)
    assert loaded.name == "010" and loaded.inner.horizon == 10
    written = {"a": "010", "b": "1_0", "c": "0x10", "d": "1e3", "e": "1:5", "f": 10, "g": 1e-3, "h": "yes", "i": True}
    assert plain_yaml(yaml.safe_dump(written)) == written


def test_a_key_given_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    """YAML itself keeps the last of two equal keys without a word; a config refuses it, at any depth."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: x\ninner:\n  horizon: 2\n  horizon: 3\n")
    with pytest.raises(RhythmError, match=r"^.*twice.yaml:4: invalid YAML \(key 'horizon' given twice\)$"):
        load_config(Outer, twice)
    merged = tmp_path / "merged.yaml"  # a YAML merge key may be overridden: that is not a repeat
    merged.write_text("base: &b {horizon: 2}\ninner:\n  <<: *b\n  horizon: 3\n")
    assert read_yaml(merged)["inner"] == {"horizon": 3}


def test_hash_is_stable_and_config_is_written(tmp_path: Path) -> None:
    a, b = Outer(), Outer()
    assert config_hash(a) == config_hash(b) and config_hash(a) != config_hash(Outer(name="y"))
    changed = Outer(name="y", inner=Inner(horizon=2))
    out = write_config(changed, tmp_path / "cfg.yaml", {"versions": {"x": "1"}})
    assert "_provenance" in out.read_text()
    assert load_config(Outer, out) == changed  # a written config reruns as-is


def test_shipped_configs_that_spell_out_defaults_match_them() -> None:
    """eval.yaml, generate.yaml and quickstart.yaml document their command's defaults: a value changed in
    the dataclass but not in the file (or the reverse) would make ``--config`` silently change the run."""
    from rhythm.eval.evaluate import EvalConfig
    from rhythm.quickstart import QuickstartConfig
    from rhythm.teacher.generate import GenerateConfig

    root = Path(__file__).resolve().parents[1] / "rhythm" / "configs"
    for name, cls in (("eval.yaml", EvalConfig), ("generate.yaml", GenerateConfig), ("quickstart.yaml", QuickstartConfig)):
        assert load_config(cls, root / name) == cls(), name


def test_shipped_configs_are_found_by_name_from_anywhere(tmp_path: Path, monkeypatch) -> None:
    """configs/NAME.yaml, NAME.yaml and NAME mean the config shipped in the package; a real file wins."""
    from rhythm.config import find_config, shipped_configs

    monkeypatch.chdir(tmp_path)
    assert "sft-tiny.yaml" in shipped_configs()
    shipped = find_config("configs/sft-tiny.yaml")
    assert shipped.parent.name == "configs" and shipped.parent.parent.name == "rhythm"
    assert find_config("sft-tiny") == find_config("sft-tiny.yaml") == shipped
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "sft-tiny.yaml").write_text("max_steps: 1\n")
    assert find_config("configs/sft-tiny.yaml") == Path("configs/sft-tiny.yaml")
    with pytest.raises(RhythmError, match="config file not found: other/sft-tiny.yaml"):
        find_config("other/sft-tiny.yaml")


def test_base_is_read_first_relative_to_the_including_file_and_chains(tmp_path: Path) -> None:
    """``base:`` applies the base's keys first (a nested section key by key), then the file's own; bases
    chain, each path relative to the file that names it; the command line still wins."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "root.yaml").write_text("learning_rate: 1.0e-3\nname: root\ninner:\n  horizon: 2\n  samples: 4\n")
    (tmp_path / "shared" / "mid.yaml").write_text("base: root.yaml\nname: mid\ntags: [m]\n")
    (tmp_path / "top.yaml").write_text("base: shared/mid.yaml\ninner:\n  samples: 9\n")
    assert load_config(Outer, tmp_path / "top.yaml") == Outer(1e-3, "mid", ["m"], None, Inner(2, 9))
    assert load_config(Outer, tmp_path / "top.yaml", ["inner.horizon=5"]).inner == Inner(5, 9)


def test_a_variants_mapping_goes_on_top_of_its_bases(tmp_path: Path) -> None:
    """``base: few.yaml`` then ``grpo: {learning_rate: ...}`` kept only that key, so the base's ``max_steps`` was
    silently lost: a variant's mapping adds to its base's, key by key; the command line still replaces one whole."""
    (tmp_path / "base.yaml").write_text("sft:\n  max_steps: 75\n  learning_rate: 0.001\nsizes:\n  a: 7\n")
    (tmp_path / "variant.yaml").write_text("base: base.yaml\nsft:\n  learning_rate: 0.0001\nsizes:\n  b: 9\n")
    cfg = load_config(Stages, tmp_path / "variant.yaml")
    assert cfg.sft == {"max_steps": 75, "learning_rate": 0.0001} and cfg.sizes == {"a": 7, "b": 9}
    assert load_config(Stages, tmp_path / "base.yaml").sizes == {"a": 7}  # a file over the defaults replaces
    assert load_config(Stages, tmp_path / "variant.yaml", ["sft={max_steps: 2}"]).sft == {"max_steps": 2}


def test_a_base_cycle_a_bad_base_and_an_unknown_key_in_a_base_fail_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("base: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(RhythmError, match=r"b.yaml: base: .*a.yaml makes a cycle \(.*a.yaml -> .*b.yaml -> .*a.yaml\)") as err:
        load_config(Outer, tmp_path / "a.yaml")
    assert "\n" not in str(err.value)
    (tmp_path / "self.yaml").write_text("base: self.yaml\n")
    with pytest.raises(RhythmError, match="makes a cycle"):
        load_config(Outer, tmp_path / "self.yaml")
    (tmp_path / "c.yaml").write_text("base: [a.yaml]\n")
    with pytest.raises(RhythmError, match="base must be the path of another config file"):
        load_config(Outer, tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(RhythmError, match="config file not found: missing.yaml"):
        load_config(Outer, tmp_path / "d.yaml")
    (tmp_path / "base.yaml").write_text("learning_rat: 1.0\n")
    (tmp_path / "e.yaml").write_text("base: base.yaml\n")
    with pytest.raises(RhythmError, match=r"base.yaml: unknown key 'learning_rat' for Outer; did you mean 'learning_rate'\?"):
        load_config(Outer, tmp_path / "e.yaml")


def test_shipped_variants_change_only_what_they_state() -> None:
    """Each shipped config with a ``base:`` resolves to its base with exactly the keys it states changed, and
    the resolved config (as written beside outputs) shows nested sections with their effective values."""
    import yaml

    from rhythm.config import config_dict, config_layers, find_config
    from rhythm.quickstart import QuickstartConfig
    from rhythm.train.grpo import GRPORunConfig
    from rhythm.train.sft import SFTRunConfig

    variants = {"sft-tiny-openings.yaml": SFTRunConfig, "sft-tiny-weeks.yaml": SFTRunConfig,
                "sft-small.yaml": SFTRunConfig, "sft-tiny-dagger.yaml": SFTRunConfig,
                "grpo-small.yaml": GRPORunConfig, "grpo-tiny-pairs.yaml": GRPORunConfig, "grpo-tiny-restore.yaml": GRPORunConfig,
                "quickstart-few.yaml": QuickstartConfig, "quickstart-dagger.yaml": QuickstartConfig,
                "quickstart-few-short.yaml": QuickstartConfig}
    for name, cls in variants.items():
        base = yaml.safe_load(find_config(name).read_text())["base"]
        own = config_layers(name)[-1][1]
        resolved, of_base = config_dict(load_config(cls, name)), config_dict(load_config(cls, base))
        assert {k for k in resolved if resolved[k] != of_base[k]} == set(own), name
    step = config_dict(load_config(GRPORunConfig, "grpo-tiny.yaml", ["step.every_k_steps=2"]))["step"]
    assert step["every_k_steps"] == 2 and step["strip_reasoning"] is True and step["gradient_accumulation_steps"] == 1


@dataclass(frozen=True)
class Bounded:
    share: Share = 0.1
    weight: Unit | None = None
    steps: Positive = 1
    inner: Inner = field(default_factory=Inner)


@dataclass(frozen=True)
class Sectioned:
    section: Bounded = field(default_factory=Bounded)


@given(share=st.floats(-2, 2, allow_nan=False), weight=st.one_of(st.none(), st.floats(-2, 2, allow_nan=False)),
       steps=st.integers(-3, 3))
def test_bounds_declared_in_a_field_type_are_checked_on_load_and_on_demand(share, weight, steps) -> None:
    """A value inside every declared bound loads; one outside is refused in one line that names the field (with
    its section) and the value, whether it came from the command line or a config built in code."""
    sets = [f"section.share={share}", f"section.weight={'null' if weight is None else weight}", f"section.steps={steps}"]
    inside = 0 <= share < 1 and (weight is None or 0 <= weight <= 1) and steps >= 1
    if inside:
        assert load_config(Sectioned, None, sets).section == Bounded(share, weight, steps)
        check_bounds(Sectioned(Bounded(share, weight, steps)))
        return
    first = ("share", share) if not 0 <= share < 1 else ("weight", weight) if weight is not None and not 0 <= weight <= 1 else ("steps", steps)
    for attempt in (lambda: load_config(Sectioned, None, sets), lambda: check_bounds(Sectioned(Bounded(share, weight, steps)))):
        with pytest.raises(RhythmError, match=rf"^section\.{first[0]}={first[1]!r}: input should be "):
            attempt()


@pytest.mark.parametrize("module, cls, config, apart", [
    ("rhythm.train.sft", "SFTRunConfig", "configs/sft.yaml", set()),
    ("rhythm.train.grpo.config", "GRPORunConfig", "configs/grpo.yaml", {"model_name_or_path"}),  # None: the adapter's base
])
def test_the_trainers_defaults_are_the_real_recipes_file(module, cls, config, apart):
    """``rhythm sft`` / ``rhythm grpo`` without ``--config`` (say ``--flavor a10g-large``) run the 3B recipe of the
    shipped file, as their docstrings say; a default that drifts from it would, e.g., drop every Qwen week."""
    import dataclasses
    import importlib

    klass = getattr(importlib.import_module(module), cls)
    defaults, shipped = dataclasses.asdict(klass()), dataclasses.asdict(load_config(klass, config))
    assert {k for k in defaults if defaults[k] != shipped[k]} == apart


def test_a_lone_number_is_text_where_a_field_takes_text(tmp_path: Path):
    """``seeds: 7`` in YAML or ``--set seeds=7`` is one seed, not a type error; a number field stays a number."""
    from rhythm.teacher.output import GenerateConfig

    assert load_config(GenerateConfig, None, ["seeds=7", "output=123"]).seeds == "7"
    path = tmp_path / "g.yaml"
    path.write_text("seeds: 7\n")
    assert load_config(GenerateConfig, path).seeds == "7"
    with pytest.raises(RhythmError, match="concurrency='x' is not a valid"):
        load_config(GenerateConfig, None, ["concurrency=x"])


def test_settings_are_compared_key_by_key_less_what_is_ignored(tmp_path: Path):
    """What a refused resume or a stale quickstart stage names: dotted keys, an ignored key and all under it left
    out, the first few changes and a count of the rest; a written config reads back as its settings."""
    from rhythm.config import flat_settings, read_recorded, settings_change, write_config

    tree = {"a": 1, "llm": {"base_url": "u", "extra": {"x": 1}, "model": "m"}, "empty": {}}
    assert flat_settings(tree) == {"a": 1, "llm.base_url": "u", "llm.extra.x": 1, "llm.model": "m"}
    assert flat_settings(tree, ignore=("llm.base_url", "llm.extra")) == {"a": 1, "llm.model": "m"}
    before, now = flat_settings(tree), flat_settings({"a": 2, "llm": {"model": "n", "extra": {"x": 1, "y": 2}}})
    assert settings_change(before, now) == "a: 1 -> 2; llm.base_url: u -> <unset>; llm.extra.y: <unset> -> 2; 1 more"
    assert settings_change(before, before) == ""
    write_config(Inner(), tmp_path / "c.yaml", {"config_hash": "h"})
    assert read_recorded(tmp_path / "c.yaml") == ({"horizon": 8, "samples": 16}, {"config_hash": "h"})
    assert read_recorded(tmp_path / "missing.yaml") is None


def test_a_date_is_text_where_a_field_takes_text(tmp_path: Path):
    """YAML reads ``2024-06-01`` as a date: a text field (azure's api_version) takes it as the ISO text typed."""
    from rhythm.teacher.output import GenerateConfig

    assert load_config(GenerateConfig, None, ["llm.api_version=2024-06-01"]).llm.api_version == "2024-06-01"
    path = tmp_path / "g.yaml"
    path.write_text("llm:\n  api_version: 2024-10-21\n")
    assert load_config(GenerateConfig, path).llm.api_version == "2024-10-21"


@dataclass(frozen=True)
class Rate:
    low: Annotated[float, Ge(0)]
    high: Annotated[float, Ge(0)]
    note: str | None = None


@dataclass(frozen=True)
class Rates:
    rates: dict[str, Rate] = field(default_factory=dict)


def test_each_entry_of_a_mapping_of_sections_is_checked_like_a_section(tmp_path: Path) -> None:
    """``rates: {NAME: Rate}``: a misspelt key of an entry is refused with the nearest valid name (pydantic would drop
    it in silence), a missing field and a bound broken are named with where they are, in a file as on the command line;
    an entry built in code is held to its bounds by check_bounds."""
    assert load_config(Rates, None, ["rates={a: {low: 1, high: 2}}"]).rates == {"a": Rate(1.0, 2.0)}
    with pytest.raises(RhythmError, match=r"unknown key 'hihg' in rates.a \(Rate\); did you mean 'high'\?"):
        load_config(Rates, None, ["rates={a: {low: 1, hihg: 2}}"])
    path = tmp_path / "r.yaml"
    path.write_text("rates:\n  a: {low: 1}\n")
    with pytest.raises(RhythmError, match=r"r.yaml: rates=.* \(a.high: Field required\)"):
        load_config(Rates, path)
    with pytest.raises(RhythmError, match=r"\(a.low: Input should be greater than or equal to 0\)"):
        load_config(Rates, None, ["rates={a: {low: -1, high: 2}}"])
    with pytest.raises(RhythmError, match=r"^x.rates.b.high=-2: input should be greater than or equal to 0$"):
        check_bounds(Rates({"a": Rate(0, 1), "b": Rate(1, -2)}), "x.")
