"""load_config: defaults, then YAML, then CLI; strict about keys and types."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rhythm.config import config_hash, load_config, parse_overrides, write_config
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


def test_unknown_key_names_the_nearest(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("lerning_rate: 1\n")
    with pytest.raises(RhythmError, match=r"unknown key 'lerning_rate'.*did you mean 'learning_rate'"):
        load_config(Outer, path)
    with pytest.raises(RhythmError, match="did you mean 'horizon'"):
        load_config(Outer, None, ["inner.horizn=3"])


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
