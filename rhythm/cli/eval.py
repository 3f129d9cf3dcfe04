"""``rhythm eval``: evaluate an agent on the eval split beside random, heuristic and oracle."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.options import ConditionOpt, ConfigOpt, QuietOpt, SeedsOpt, SetOpt, WaitLockOpt, overrides
from rhythm.errors import RhythmError


def eval_command(
    agent: Annotated[
        Optional[str],
        typer.Option("--agent", help="random | heuristic | planner | bayes | oracle | model:PATH | openai:MODEL | azure:DEPLOYMENT | an installed rhythm.agents entry point"),
    ] = None,
    condition: ConditionOpt = None,
    episodes: Annotated[Optional[int], typer.Option("--episodes", help="Episodes per condition (default 100/50/15).")] = None,
    seeds: SeedsOpt = None,
    split: Annotated[Optional[str], typer.Option("--split", help="eval (default; the final table) or train (tune on train seeds the SFT data did not use).")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="OpenAI-compatible endpoint for openai:MODEL agents, e.g. a vLLM server's http://localhost:8000/v1.")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", help="Requests in flight per step (openai:/azure: agents).")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Episodes per batched generate (model agents).")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Results JSON (episodes JSONL goes beside it).")] = None,
    grader: Annotated[Optional[str], typer.Option("--grader", help="Headline grader, v3 (default) or v2: the score win rates and the normalised score use (both scores are always reported).")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
    wait_lock: WaitLockOpt = False,
    resume: Annotated[bool, typer.Option("--resume", help="Go on from the weeks a killed run with the same settings left in <episodes>.partial.")] = False,
) -> None:
    """Evaluate an agent on in-dist, ood and discrete (eval split), with 95% CIs and paired win rates.

    \b
    Examples:
      rhythm eval --condition ood      # heuristic -> eval_results_v2.json
      rhythm eval --agent model:runs/sft-tiny --condition all -o runs/eval/eval_results_v2.json
      rhythm eval --agent openai:gpt-4o-mini -o runs/eval-4o/eval_results_v2.json --resume   # after a crash or Ctrl-C
    """
    from rhythm.cli.report import print_eval_table
    from rhythm.cli.ui import err_console, progress_bars
    from rhythm.config import NULL, load_config
    from rhythm.eval.evaluate import EvalConfig, run_eval, validate

    if episodes is not None and seeds is not None:
        raise RhythmError("give --episodes (seeds 0..N-1) or --seeds, not both")
    given = {"agent": agent, "condition": condition, "episodes": episodes, "seeds": seeds, "output": output, "grader": grader,
             "split": split, "llm.base_url": base_url, "llm.concurrency": concurrency}
    if batch_size is not None:
        given["model.batch_size"] = batch_size
    chosen = overrides(given, set_)
    if episodes is not None or seeds is not None:  # the command line wins over a config's (or --set's) other one
        chosen["seeds" if episodes is not None else "episodes"] = NULL
    cfg = load_config(EvalConfig, config, chosen)
    validate(cfg)
    with progress_bars(disable=quiet) as bars:
        results, path, ep_path = run_eval(cfg, progress_factory=bars, wait_lock=wait_lock, resume=resume,
                                           say=err_console.print)
    print_eval_table(results)
    err_console.print(f"wrote {path} and {ep_path}")
