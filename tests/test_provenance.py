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


def test_a_recorded_command_keeps_no_password_or_secret_of_a_url(tmp_path: Path) -> None:
    """A recorded command travels with what it made (an uploaded dataset's sidecar): a URL's password and its
    secret-looking query values are masked, whether the URL is an argument or a ``--set`` value; the rest is kept."""
    (tmp_path / "probe.py").write_text(PRINT)
    said = _run(["probe.py", "--base-url", "http://proxyuser:S3CRETpass@127.0.0.1:9/v1", "--set",
                 "llm.endpoint=https://x.example/v1?api-key=ABCDEF123&region=eu", "--set", "data=a.jsonl"], tmp_path)
    assert "S3CRET" not in said and "ABCDEF" not in said and "proxyuser" not in said
    for arg in ("--set=llm.base_url=http://u:S3CRET@h/v1", "llm={provider: openai, base_url: 'http://u:S3CRET@h/v1'}"):
        assert "S3CRET" not in _run(["probe.py", arg], tmp_path)
    assert said == ("python probe.py --base-url 'http://***@127.0.0.1:9/v1' --set "
                    "'llm.endpoint=https://x.example/v1?api-key=%2A%2A%2A&region=eu' --set data=a.jsonl")
