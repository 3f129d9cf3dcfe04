"""``--help-config``: every field of the SFT and GRPO configs, with its type, default and help, at the command line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from rhythm.cli.config_help import config_fields, field_docs
from rhythm.quickstart import DaggerStage, QuickstartConfig
from rhythm.train.grpo import GRPORunConfig
from rhythm.train.sft import SFTRunConfig


@pytest.mark.parametrize("cls", [SFTRunConfig, GRPORunConfig, QuickstartConfig, DaggerStage])
def test_every_field_has_help_text(cls) -> None:
    fields = config_fields(cls)
    assert [name for name, *_ in fields] == [f.name for f in dataclasses.fields(cls)]
    assert [name for name, _, _, help_text in fields if not help_text.strip()] == []


def test_a_subclass_docstring_wins_and_a_field_without_one_has_none() -> None:
    @dataclasses.dataclass
    class Base:
        a: int = 1
        """Base's a."""
        b: int = 2

    @dataclasses.dataclass
    class Child(Base):
        a: int = 3
        """Child's a."""

    assert field_docs(Child) == {"a": "Child's a."}


@pytest.mark.parametrize("command, cls", [("sft", SFTRunConfig), ("grpo", GRPORunConfig), ("quickstart", QuickstartConfig)])
def test_help_config_lists_every_field_with_type_default_and_help(run_cli, command, cls) -> None:
    code, out, err = run_cli(command, "--help-config")
    assert code == 0 and err == ""
    example = out.splitlines()[1].removeprefix("(an option such as ").split()[0]  # one the command has
    assert example in run_cli(command, "--help")[1]
    listed = [line.split(":", 1)[0] for line in out.splitlines() if line and not line.startswith(" ") and " = " in line]
    assert listed == [f.name for f in dataclasses.fields(cls)]
    if cls is GRPORunConfig:
        assert "num_generations: int (>= 2) = 8\n    Replies sampled per prompt" in out  # the bound the type declares
        assert "temperature: float (> 0) = 1.0\n" in out
        assert "reward_weights: list[float] | None = [0.2, 0.25, 1.0]\n" in out
    elif cls is SFTRunConfig:
        assert "val_fraction: float (>= 0, < 1) = 0.1\n" in out and "echo_loss: float (>= 0, <= 1) | None = null\n" in out
        assert "\n    jobs.flavor: str | None = null\n        Run on Hugging Face Jobs" in out  # a section's fields, dotted
    else:
        assert "\n    dagger.copies: int (>= 1) = 1\n        Times the relabelled weeks" in out


def test_help_config_imports_no_torch() -> None:
    code = ("import sys\nfrom rhythm.cli.main import main\ntry:\n    main(['grpo', '--help-config'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "num_generations: int (>= 2) = 8" in done.stdout and done.stderr.split() == ["False", "False"]
