"""Agents of one's own: registered in-process, or installed as a ``rhythm.agents`` entry point and then named on
the command line like a built-in (``rhythm eval --agent steady:NAP``), in worker processes too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rhythm.agents import registry
from rhythm.agents.baselines import HeuristicAgent
from rhythm.agents.teachers import BayesAgent
from rhythm.env.constants import ACTIONS
from rhythm.errors import RhythmError
from rhythm.eval.evaluate import EvalConfig, run_eval

PLUGIN = '''
import os

from rhythm.agents.base import Decision
from rhythm.env.constants import ACTIONS
from rhythm.protocol import format_ending


class SteadyAgent:
    """One action all week, and the prior's mean as its belief."""

    def __init__(self, action):
        self.name = f"steady:{action}"
        self.action = ACTIONS.index(action)

    def reset(self, episodes):
        pass

    def act(self, obs):
        belief = (0.5, 0.5, 0.5)
        said = f"Played in process {os.getpid()}.\\n" + format_ending(belief, self.action)  # which process played it
        return [Decision(self.action, belief, said) for _ in obs.prompts]


def make(argument, options):
    return SteadyAgent(argument or "SLEEP")


def not_an_agent(argument, options):
    return object()
'''

ENTRY_POINTS = """[rhythm.agents]
steady = steady_agents:make
broken = steady_agents_missing:make
notagent = steady_agents:not_an_agent
bayes = steady_agents:make
"""


@pytest.fixture
def plugin_path(tmp_path: Path) -> Path:
    """A folder holding an installed package's files: its module and its dist-info with the entry points."""
    root = tmp_path / "site"
    info = root / "steady_agents-0.1.dist-info"
    info.mkdir(parents=True)
    (root / "steady_agents.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: steady-agents\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


@pytest.fixture
def installed(plugin_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(plugin_path))
    return plugin_path


def test_a_name_two_installed_packages_claim_is_refused_not_guessed(installed: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    info = other / "rival_agents-0.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rival-agents\nVersion: 0.2\n")
    (info / "entry_points.txt").write_text("[rhythm.agents]\nsteady = rival_agents:make\n")
    monkeypatch.syspath_prepend(str(other))
    monkeypatch.syspath_prepend(str(installed))  # the same package on the path twice is still one claim
    with pytest.raises(RhythmError) as err:
        registry.make_agent("steady")
    assert "'steady' is named by more than one installed package" in str(err.value)
    assert "steady_agents:make" in str(err.value) and "rival_agents:make" in str(err.value)
    assert registry.agent_kinds().count("steady") == 1
    assert isinstance(registry.make_agent("bayes"), BayesAgent)


def rhythm_cli(args: list[str], plugin_path: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``rhythm ARGS`` with the plugin installed; the result's ``args`` end with the command's process id."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_path), os.environ.get("PYTHONPATH", "")])}
    with subprocess.Popen([sys.executable, "-m", "rhythm.cli.main", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess([*args, proc.pid], proc.returncode, out, err)


def test_an_installed_agent_is_found_by_its_entry_point_and_gets_its_argument(installed: Path) -> None:
    assert {"steady", "broken", "notagent"} <= set(registry.agent_kinds())
    agent = registry.make_agent("Steady:NAP")
    assert agent.name == "steady:NAP" and agent.action == ACTIONS.index("NAP")


def test_a_built_in_name_always_means_the_built_in_agent(installed: Path) -> None:
    assert isinstance(registry.make_agent("bayes"), BayesAgent)
    assert registry.agent_kinds().count("bayes") == 1


@pytest.mark.parametrize(("spec", "says"), [
    ("broken", "cannot load 'steady_agents_missing:make' (ModuleNotFoundError"),
    ("notagent", "is not an agent: it has no name, reset, act"),
    ("nobody", "unknown agent 'nobody'; expected one of"),
])
def test_a_plugin_that_cannot_serve_is_one_clear_error(installed: Path, spec: str, says: str) -> None:
    with pytest.raises(RhythmError) as err:
        registry.make_agent(spec)
    assert says in str(err.value)


def test_register_adds_an_agent_in_process_under_a_case_blind_name(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("Cautious")(lambda argument, options: HeuristicAgent())
    results, _, episodes = run_eval(EvalConfig(agent="cautious", condition="in-dist", episodes=3, references=["random"],
                                               output=str(tmp_path / "eval.json")))
    lines = episodes.read_bytes().splitlines()
    assert len(lines) == 3 and {orjson.loads(line)["agent"] for line in lines} == {"heuristic"}
    assert results.agent == "cautious"


@pytest.mark.slow
def test_the_command_line_plays_an_installed_agent_in_eval_and_in_generate_workers(plugin_path: Path,
                                                                                    tmp_path: Path) -> None:
    done = rhythm_cli(["eval", "--agent", "steady:NAP", "--condition", "in-dist", "--episodes", "4",
                       "--set", "references=[random]", "--output", "eval.json"], plugin_path, tmp_path)
    assert done.returncode == 0, done.stderr
    results = orjson.loads((tmp_path / "eval.json").read_bytes())
    counts = results["conditions"]["in-dist"]["action_counts"]
    assert results["agent"] == "steady:NAP" and {a: n for a, n in counts.items() if n} == {"NAP": 4 * 28}

    # three chunks of two weeks over two worker processes, each of which finds the agent by its entry point
    played = rhythm_cli(["generate", "--teacher", "steady:LEISURE", "--seeds", "0-5", "--concurrency", "2",
                         "--set", "chunk=2", "--output", "-"], plugin_path, tmp_path)
    assert played.returncode == 0, played.stderr
    weeks = [orjson.loads(line) for line in played.stdout.splitlines()]
    assert sorted(w["seed"] for w in weeks) == list(range(6))
    assert {s["action"] for w in weeks for s in w["steps"]} == {"LEISURE"}
    players = {s["response"].split("\n", 1)[0] for w in weeks for s in w["steps"]}
    assert players and f"Played in process {played.args[-1]}." not in players  # not the command's own process

    broken = rhythm_cli(["eval", "--agent", "broken", "--episodes", "1"], plugin_path, tmp_path)
    assert broken.returncode == 2
    assert broken.stderr.strip().splitlines()[-1].startswith("rhythm: error: agent 'broken': cannot load")


def readme_example(marker: str) -> str:
    """The python block after ``<!-- example: MARKER -->`` in the README."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    after = text.split(f"<!-- example: {marker} -->", 1)[1]
    return after.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_the_readme_own_agent_example_runs_and_is_graded_beside_the_references(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(readme_example("own-agent"), "README.md", "exec"), scope)
    condition = scope["results"].conditions["in-dist"]
    assert condition.episodes == 20 and set(condition.references) == {"random", "heuristic"}
    low, high = condition.final_score.ci95
    assert 0.0 <= low <= condition.final_score.mean <= high <= 1.0
    played = {a for a, n in condition.action_counts.items() if n}
    assert {"SLEEP", "DEEP_WORK"} <= played <= {"SLEEP", "NAP", "MEDITATE", "DEEP_WORK"}
    assert sum(condition.action_counts.values()) == 20 * 28
    assert (tmp_path / "rwl.json").is_file() and scope["episodes_path"].is_file()


@pytest.mark.parametrize("belief", [(0.5,), (float("inf"), 0.5, 0.5), (0.2, 1.3, 0.5), ("a", "b", "c")])
def test_an_agent_that_states_a_malformed_belief_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                    belief: tuple) -> None:
    """A plugin's belief of the wrong shape was graded by numpy broadcasting and written where no reader takes it
    back; one that is not finite was stored as null. Either is refused, naming the agent and the step."""
    from rhythm.agents.base import Decision

    class Broken(HeuristicAgent):
        name = "broken"

        def act(self, obs):
            return [Decision(d.action, belief, d.text) for d in super().act(obs)]

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("broken")(lambda argument, options: Broken())
    with pytest.raises(RhythmError, match=r"agent 'broken' stated the belief .* at step 0: a belief is 3 numbers"):
        run_eval(EvalConfig(agent="broken", condition="in-dist", episodes=2, references=[],
                            output=str(tmp_path / "eval.json")))
