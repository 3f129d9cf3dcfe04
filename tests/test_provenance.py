"""The command an output records is the one that ran, as it was typed, so it can be run again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PRINT = "from rhythm.provenance import command_line\nprint(command_line())\n"


def _run(args: list[str], cwd: Path) -> str:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_a_script_a_module_and_quoting(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PRINT)
    assert _run(["probe.py", "--set", "data=a b.jsonl"], tmp_path) == "python probe.py --set 'data=a b.jsonl'"
    assert _run(["-m", "probe", "--config", "x.yaml"], tmp_path) == "python -m probe --config x.yaml"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__main__.py").write_text(PRINT)
    assert _run(["-m", "pkg", "-q"], tmp_path) == "python -m pkg -q"
