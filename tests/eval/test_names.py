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
