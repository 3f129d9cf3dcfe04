"""Tests run offline, in isolated temp dirs, with every client variable cleared.

Servers for the ``openai`` and ``huggingface_hub`` clients run on 127.0.0.1 inside the tests; nothing
here reaches the network. RHYTHM_CACHE points every test at a temp folder that the session's xdist
workers share, so the tiny student is built once per session (by whichever worker needs it first).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: on a loaded 2-core machine (CI's, beside the other xdist worker) an example that takes
# 200 ms once fails a property test that holds (seen: the config bounds test, under load, passing alone).
settings.register_profile("rhythm", deadline=None)
settings.load_profile("rhythm")

_CLEARED = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_ENDPOINT",
    "AZURE_OPENAI_AD_TOKEN",
    "OPENAI_API_VERSION",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_ENDPOINT",
)


def pytest_configure(config: pytest.Config) -> None:
    for name in _CLEARED:
        os.environ.pop(name, None)
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    os.environ["no_proxy"] = "127.0.0.1,localhost"
    os.environ.setdefault("HF_HUB_OFFLINE", "0")
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def rhythm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's cache dir, shared by its workers (never the user's ~/.cache/rhythm)."""
    from tests.shared import shared_dir

    path = Path(os.environ.get("RHYTHM_TEST_CACHE") or shared_dir(tmp_path_factory) / "rhythm-cache")
    path.mkdir(parents=True, exist_ok=True)
    os.environ["RHYTHM_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def tiny_student(rhythm_cache: Path) -> Path:
    """Path of the tiny offline student (tokenizer + random Qwen2 model), built once per session."""
    from rhythm.agents.tiny import tiny_student_path
    from tests.shared import locked

    with locked(rhythm_cache):
        return tiny_student_path()


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """Run ``rhythm ARGS...`` in-process; returns (exit_code, stdout, stderr)."""
    from rhythm.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["rhythm", *args])
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run
