"""The layer contract of ``pyproject.toml`` (``[tool.importlinter]``) holds: every layer imports only from
the layers below it, with no ignored imports. CI also runs ``lint-imports`` itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]


def _contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    return contract


def test_the_layer_contract_has_no_ignores() -> None:
    contract = _contract()
    assert contract["type"] == "layers"
    assert not contract.get("ignore_imports")


def test_every_module_sits_in_a_layer() -> None:
    layers = [m.strip() for layer in _contract()["layers"] for m in layer.replace("|", ":").split(":")]
    modules = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "rhythm").rglob("*.py")]
    unplaced = [m for m in modules if not m.endswith("__init__") and not any(m == la or m.startswith(la + ".") for la in layers)]
    assert not unplaced


def _imports(path: Path) -> list[str]:
    nodes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import | ast.ImportFrom)]
    return [alias.name if isinstance(n, ast.Import) else f"{n.module}" for n in nodes for alias in n.names]


def test_package_inits_import_nothing_but_the_env() -> None:
    """``rhythm`` and ``rhythm.agents`` are in no layer, so they must not import anything of ours; ``rhythm``
    imports the bottom layer ``rhythm.env`` alone (it registers the Gymnasium ids), which imports nothing above."""
    assert _imports(ROOT / "rhythm" / "__init__.py") == ["rhythm.env"]
    assert _imports(ROOT / "rhythm" / "agents" / "__init__.py") == []


def test_lint_imports_keeps_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    cli = pytest.importorskip("importlinter.cli")
    monkeypatch.chdir(ROOT)
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0
