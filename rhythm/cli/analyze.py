"""``rhythm analyze``: the analysis tools over what ``rhythm eval`` and ``rhythm generate`` wrote (paired
differences, belief over the week, the docs' tables, the teacher-forced probe). Each command reads its
files, calls the library function of :mod:`rhythm.eval` and prints the result to stdout."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.ui import err_console
from rhythm.errors import RhythmError

analyze_app = typer.Typer(
    help="Analyse episodes and results: paired differences, what agents did, belief over the week, tables, the teacher-forced probe.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

EpisodesArg = Annotated[str, typer.Argument(metavar="EPISODES", show_default=False,
                                            help="Episodes JSONL (rhythm eval's *.episodes.jsonl or teacher data); join several with commas.")]


@analyze_app.command("paired")
def paired_command(
    first: EpisodesArg,
    second: Annotated[str, typer.Argument(metavar="SECOND", help="Episodes JSONL of the second agent, on the same people.", show_default=False)],
    metric: Annotated[str, typer.Option("--metric", help="final_score | behaviour_score | belief_score (the final "
                                                         "score's parts: 0.8 and 0.2 of it) | belief_mae | crashes | "
                                                         "crashes:M (M one of V, C, P, S, N): what is paired; for "
                                                         "belief_mae and crashes less is a win.")] = "final_score",
    target: Annotated[Optional[str], typer.Option("--target", metavar="THIRD", show_default=False,
                                                  help="Episodes JSONL of a third agent on the same people: also print "
                                                       "the share of the distance from first to it that second closes, "
                                                       "with its 95% CI.")] = None,
) -> None:
    """Second minus first, paired by person: mean final score difference per condition, 95% CI, wins.

    \b
    Examples:
      rhythm analyze paired runs/quickstart/eval/sft/eval_results_v2.episodes.jsonl runs/quickstart/eval/grpo/eval_results_v2.episodes.jsonl
      rhythm analyze paired A.episodes.jsonl B.episodes.jsonl --metric crashes:S    # serenity crashes a week
      rhythm analyze paired A.episodes.jsonl B.episodes.jsonl --metric belief_mae   # the last belief's error
      rhythm analyze paired FEW_SFT.episodes.jsonl REFINED.episodes.jsonl --target FULL_SFT.episodes.jsonl
    """
    from rhythm.eval.paired import (
        distance_shares,
        lower_is_better,
        paired_differences,
        paired_table,
        read_sides,
        unpaired_note,
    )

    sides = read_sides([first, second, *([target] if target else [])], metric)
    shares = distance_shares(*sides) if target else None
    print(paired_table(paired_differences(*sides[:2], lower_better=lower_is_better(metric)), shares))
    notes = [unpaired_note(*sides[:2])]  # the differences pair the first two sides; the share needs all three
    if target:
        both, three = (len(set.intersection(*(set(side) for side in group))) for group in (sides[:2], sides))
        if three < both:
            notes.append(f"the share of the target's distance is over the {three} people all three played "
                         f"(the differences: {both})")
    for note in filter(None, notes):
        err_console.print(note, markup=False, highlight=False)


@analyze_app.command("behaviour")
def behaviour_command(
    episodes: Annotated[list[str], typer.Argument(metavar="EPISODES...", show_default=False,
                                                  help="Episodes JSONL files, one per agent (join several with commas).")],
) -> None:
    """What each agent did, per condition: crashes a week, behaviour score, last belief MAE and reach, action shares (%).

    \b
    Examples:
      rhythm analyze behaviour runs/quickstart/eval/sft/eval_results_v2.episodes.jsonl runs/quickstart/eval/grpo/eval_results_v2.episodes.jsonl
    """
    from rhythm.eval.behaviour import behaviour_of

    print(behaviour_of(episodes))


@analyze_app.command("belief-steps")
def belief_steps_command(
    episodes: EpisodesArg,
    steps: Annotated[Optional[str], typer.Option("--steps", help="1-based steps, ascending (default 1,4,8,16,28).")] = None,
) -> None:
    """Belief MAE at chosen steps of the week, the last step's CI, and the last step over the prior's.

    \b
    Examples:
      rhythm analyze belief-steps runs/quickstart/eval/grpo/in-dist/eval_results_v2.episodes.jsonl --steps 1,28
    """
    from rhythm.eval.belief_steps import DEFAULT_STEPS, belief_steps_of, belief_steps_table

    try:
        chosen = DEFAULT_STEPS if steps is None else tuple(int(s) for s in steps.split(","))
    except ValueError:
        raise RhythmError(f"--steps must be comma-separated integers, got {steps!r}") from None
    print(belief_steps_table(belief_steps_of(episodes, chosen)))


@analyze_app.command("tables")
def tables_command(
    results: Annotated[Optional[list[str]], typer.Argument(metavar="RESULTS...", help="eval_results_v2.json files.", show_default=False)] = None,
) -> None:
    """Markdown tables of final scores and belief error from eval results (the docs' tables).

    \b
    Examples:
      rhythm analyze tables results/bayes/eval_results_v2.json results/oracle/eval_results_v2.json
    """
    from rhythm.eval.tables import results_tables

    print(results_tables(list(results or [])))


@analyze_app.command("teacher-forced")
def teacher_forced_command(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="The tiny student's directory.", show_default=False)],
    episodes: EpisodesArg,
    filter_probe: Annotated[bool, typer.Option("--filter", help="Also probe with the bayes filter's beliefs in context.")] = False,
    condition: Annotated[Optional[str], typer.Option("--condition", help="Only the weeks of this condition.")] = None,
    actions: Annotated[bool, typer.Option("--actions", help="Also the student's action choices against the recorded ones.")] = False,
    meters: Annotated[bool, typer.Option("--meters", help="Also how well each meter reads off the student's state at its action.")] = False,
) -> None:
    """The student's BELIEF at every step of recorded weeks, read off one forward pass per week.

    \b
    Examples:
      rhythm analyze teacher-forced runs/quickstart/sft runs/quickstart/data/teacher.jsonl --actions
    """
    from rhythm.eval.teacher_forced import probe_report

    for line in probe_report(model, episodes, condition=condition, filter_probe=filter_probe, actions=actions, meters=meters):
        print(line, flush=True)
