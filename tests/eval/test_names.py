"""Display names: tables and plots say ``student (SFT)``, ``teacher (bayes)``; the JSON keeps the agent string."""

from __future__ import annotations

from pathlib import Path

import orjson

from rhythm.eval.names import display_name, training_stage


def test_built_in_and_remote_agents() -> None:
    assert display_name("bayes") == "teacher (bayes)" and display_name("oracle") == "oracle (knows the person)"
    assert display_name("random") == "random" and display_name("heuristic") == "heuristic"
    assert display_name("openai:gpt-5.4") == "gpt-5.4 (openai)" and display_name("azure:my-dep") == "my-dep (azure)"
    assert display_name("model:Qwen/Qwen2.5-3B-Instruct") == "Qwen2.5-3B-Instruct (model)"


def test_a_model_folder_is_named_by_the_stage_that_wrote_it(tmp_path: Path) -> None:
    sft, grpo, fresh, other = (tmp_path / n for n in ("sft", "grpo", "grpo-from-base", "plain"))
    for folder in (sft, grpo, fresh, other):
        folder.mkdir()
    (sft / "sft_config.yaml").write_text("use_peft: true\n")
    (grpo / "grpo_config.yaml").write_text(f"adapter: {sft}\nmodel_name_or_path: null\n")
    (fresh / "grpo_config.yaml").write_text("adapter: null\nmodel_name_or_path: Qwen/Qwen2.5-3B-Instruct\n")
    assert [training_stage(f) for f in (sft, grpo, fresh, other)] == ["SFT", "SFT+GRPO", "GRPO", None]
    assert display_name(f"model:{sft}") == "student (SFT)" and display_name(f"model:{grpo}") == "student (SFT+GRPO)"
    assert display_name(f"model:{fresh}") == "student (GRPO)" and display_name(f"model:{other}") == "plain (model)"


def test_eval_writes_the_display_name_beside_the_agent_and_titles_its_table_with_it(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "eval_results_v2.json"
    code, _, err = run_cli("eval", "--agent", "bayes", "--condition", "discrete", "--episodes", "2", "--output", str(out), "--quiet")
    data = orjson.loads(out.read_bytes())
    assert code == 0 and (data["agent"], data["display_name"]) == ("bayes", "teacher (bayes)")
    assert "rhythm eval: teacher (bayes); rhythm-v1, grader v3" in err and "oracle (knows the person)" in err


def test_two_students_of_one_name_are_told_apart_in_the_tables() -> None:
    """Two SFT runs are both ``student (SFT)``: each table row says which, by the shortest end of its path."""
    from types import SimpleNamespace

    from rhythm.eval.tables import _names

    files = [SimpleNamespace(agent=f"model:runs/{run}/sft", name="student (SFT)") for run in ("a", "b")]
    name = _names([*files, SimpleNamespace(agent="bayes", name="teacher (bayes)")])
    assert [name(f.agent) for f in files] == ["student (SFT) (a/sft)", "student (SFT) (b/sft)"]
    assert name("bayes") == "teacher (bayes)" and name("random") == "random"  # a reference: named as always


def test_a_one_week_condition_says_it_has_no_interval() -> None:
    from rhythm.eval.evaluate import EvalConfig, evaluate
    from rhythm.eval.tables import score_table

    table = score_table([evaluate(EvalConfig(agent="bayes", condition="discrete", episodes=1, references=["random"]))])
    bayes, random = (next(line for line in table.splitlines() if line.startswith(f"| {n}")) for n in ("teacher", "random"))
    assert "[no CI: n=1]" in bayes and "[" not in random  # a reference: its means only, as always
