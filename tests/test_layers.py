"""The layer contract of ``pyproject.toml`` (``[tool.importlinter]``) holds: every layer imports only from
the layers below it, with no ignored imports; it is STYLE item 2's layering, one row per layer, no
package split across rows, and no package-level cycle (imports inside functions included). CI also runs
``lint-imports`` itself."""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

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


STYLE_LAYERS = [["cli"], ["quickstart"], ["teacher", "eval", "train"], ["agents"], ["model"],
                ["protocol", "grader", "config", "records", "provenance", "locking", "seeds", "workers", "errors"], ["env"]]
"""STYLE item 2, top to bottom: cli, pipeline, stages, agents, model, core, env."""


def test_one_row_per_layer_and_no_package_split_across_rows() -> None:
    rows = [[m.strip() for m in layer.replace("|", ":").split(":")] for layer in _contract()["layers"]]
    assert all(m.count(".") == 1 for row in rows for m in row), "a row names part of a package"
    assert [[m.removeprefix("rhythm.") for m in row] for row in rows] == STYLE_LAYERS


def _unit(module: str) -> str:
    """The package (or top-level module) of ``rhythm`` that ``module`` belongs to."""
    return module.split(".")[1] if module.count(".") else module


def _imports_between_units() -> dict[str, set[str]]:
    """Every ``rhythm`` import, at any depth in a file (inside functions too), as unit -> units it imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in (ROOT / "rhythm").rglob("*.py"):
        unit = _unit(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[unit].update(_unit(n) for n in names if n.startswith("rhythm.") and _unit(n) != unit)
    return graph


def test_no_package_level_cycle() -> None:
    graph = _imports_between_units()

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert not [(a, b) for a in list(graph) for b in graph[a] if a in reaches(b)]
    assert graph["model"] <= {m for row in STYLE_LAYERS[5:] for m in row}  # the model layer plays no agent


def test_lint_imports_keeps_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    cli = pytest.importorskip("importlinter.cli")
    monkeypatch.chdir(ROOT)
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0
