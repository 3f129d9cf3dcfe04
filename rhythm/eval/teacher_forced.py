"""Teacher-forced belief probe: the student's BELIEF at every step of the *teacher's* weeks.

    rhythm analyze teacher-forced runs/quickstart/sft data/heldout.jsonl
    rhythm analyze teacher-forced runs/quickstart/sft EVAL_DIR/eval_results_v2.episodes.jsonl --filter --condition in-dist

One forward pass per week over the teacher's conversation (protocol lines only, as the tiny student is
trained); at each ``S=``/``M=``/``W=`` position the student's most likely number is read off, so the
student states beliefs with the teacher's earlier beliefs in context. Prints the student's and the
teacher's belief MAE at steps 1, 4, 8, 16, 28 and the constant prior's, then, per action, how often the
recorded agent chose it, how often it is the student's most likely action at that step, and how often
the student picks it when the recorded agent did (``--actions``, :func:`teacher_forced_actions`), and
whether the student can *see* the meters it acts on (``--meters``, :func:`meter_readout`): the share of
each current meter's variance a linear read-out of its last hidden state at the ``ACTION:`` position
explains, on weeks the read-out was not fitted on.

It is a diagnostic, not the measure: a student that copies its last belief scores almost as well as
the teacher here (the teacher's belief moves little per step), and still never updates its own in free
play (``rhythm eval``, measured in docs/student.md). It needs a tokenizer with one token per number
(the tiny student's).

``--filter`` asks the opposite question of any agent's weeks, e.g. the student's own free play: the bayes
teacher's particle filter is run on each week's own observations and actions (what *could* be inferred
from that week), and the student is probed with the filter's beliefs in context in place of the recorded
ones. A student whose recorded free-play belief is poor but who matches the filter here is copying its
last stated belief: it updates well from a good belief and never recovers from its own early errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rhythm.agents.filtering import filtered_weeks
from rhythm.env.constants import ACTIONS, CONDITIONS, EPISODE_STEPS, METER_ABBREV, N_METERS
from rhythm.env.render import METER_HEADER
from rhythm.errors import RhythmError
from rhythm.grader import belief_mae, prior_mae, week_truth
from rhythm.protocol import format_ending, parse_reply, record_conversation
from rhythm.records import file_list, read_episodes

STEPS = (1, 4, 8, 16, 28)


def _forced(model: Any, tokenizer: Any, record: dict[str, Any], hidden: bool = False) -> tuple[list[int], Any]:
    """The week's protocol-lines conversation as token ids, and the student's logits over it (one pass), or
    with ``hidden`` its last hidden state at every position instead."""
    import torch

    replies = [format_ending(p.belief, p.action) for p in (parse_reply(s["response"]) for s in record["steps"])]
    messages = record_conversation(record, include_reply=True, replies=replies)
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=hidden)
    return ids, (out.hidden_states[-1] if hidden else out.logits)[0].float().cpu()


def teacher_forced_actions(model: Any, tokenizer: Any, records: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """``(recorded, student)`` action indices per episode and step, each ``(episodes, 28)``: the action each
    week's reply names, and the student's most likely action at that position, among the ten names.

    A student that imitates well picks the recorded action; one whose action distribution is underfit
    picks only the common actions (greedy decoding never states a minority action it gives 10%).
    """
    import torch

    vocab = tokenizer.get_vocab()
    names = [" " + a for a in ACTIONS]
    if "\nACTION:" not in vocab or not all(n in vocab for n in names):
        raise RhythmError("the teacher-forced action probe needs one token per action name (the tiny student's tokenizer)")
    action_ids = torch.tensor([vocab[n] for n in names])
    index = {vocab[n]: i for i, n in enumerate(names)}
    marker = vocab["\nACTION:"]
    recorded, student = [], []
    for record in records:
        ids, logits = _forced(model, tokenizer, record)
        at = [i for i in range(len(ids) - 1) if ids[i] == marker]
        recorded.append([index[ids[i + 1]] for i in at])
        student.append(logits[at][:, action_ids].argmax(-1).tolist())
    return np.array(recorded, dtype=np.int64), np.array(student, dtype=np.int64)


def action_states(model: Any, tokenizer: Any, records: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """``(hidden, meters)``: the student's last hidden state where it is about to name each step's action, and
    the meters that step's observation showed, ``(episodes, 27, hidden)`` and ``(episodes, 27, 5)``.

    Step 1 is left out: its observation is laid out differently (``Start of the week.``), and its meters
    are the neutral start, not state the student has to track.
    """
    vocab = tokenizer.get_vocab()
    if "\nACTION:" not in vocab:
        raise RhythmError("the meter read-out needs one ACTION: marker token (the tiny student's tokenizer)")
    marker = vocab["\nACTION:"]
    hidden, meters = [], []
    for record in records:
        ids, states = _forced(model, tokenizer, record, hidden=True)
        at = [i for i, t in enumerate(ids) if t == marker][1:]
        hidden.append(states[at].numpy())
        meters.append([observed_meters(s["observation"]) for s in record["steps"][1:]])
    return np.stack(hidden), np.array(meters, dtype=np.float64)


def observed_meters(observation: str) -> list[float]:
    """The five meter values an observation shows (``Meters V C P S N: 0.71 0.72 ...``)."""
    values = observation.split(METER_HEADER, 1)[1].split()[:N_METERS]
    return [float(v) for v in values]


def linear_readout(x: np.ndarray, y: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """Predictions for the rows where ``fit`` is false of a least-squares linear map (with bias) from ``x`` to
    ``y``, fitted on the rows where it is true."""
    design = np.c_[x, np.ones(len(x))]
    coef = np.linalg.lstsq(design[fit], y[fit], rcond=None)[0]
    return design[~fit] @ coef


LOW_METER = 0.2
"""Meters below this are the crash-prone zone (crashes start at 0.10) where the read-out matters most."""


def fitted_weeks(weeks: int, fit_share: float = 0.7) -> int:
    """The weeks the meter read-out is fitted on, the first ``fit_share`` of them; the rest must hold at least one."""
    n_fit = int(round(weeks * fit_share))
    if n_fit < 1 or n_fit >= weeks:
        raise RhythmError(f"the meter read-out needs weeks on both sides of the fit: {weeks} weeks, fit share {fit_share}")
    return n_fit


def meter_readout(model: Any, tokenizer: Any, records: list[dict[str, Any]], fit_share: float = 0.7) -> tuple[np.ndarray, np.ndarray]:
    """How well each meter (V C P S N) reads linearly off the student's hidden state at its action decision:
    ``(r2, low_mae)``, the R^2 on held-out weeks (1: exactly, 0: no better than their mean) and the mean
    absolute error on held-out steps where that meter is below :data:`LOW_METER` (NaN if none). The read-out
    is fitted on the first ``fit_share`` of the weeks and scored on the rest, so one person's steps never
    sit on both sides. A meter the student cannot see here is one its actions cannot depend on."""
    n_fit = fitted_weeks(len(records), fit_share)
    hidden, meters = action_states(model, tokenizer, records)
    fit = np.repeat(np.arange(len(records)) < n_fit, hidden.shape[1])
    y = meters.reshape(-1, N_METERS)
    truth = y[~fit]
    error = np.abs(linear_readout(hidden.reshape(-1, hidden.shape[-1]), y, fit) - truth)
    total = ((truth - truth.mean(axis=0)) ** 2).sum(axis=0)
    r2 = 1.0 - (error**2).sum(axis=0) / np.where(total > 0, total, np.nan)
    low = truth < LOW_METER
    with np.errstate(invalid="ignore"):
        low_mae = (error * low).sum(axis=0) / np.where(low.any(axis=0), low.sum(axis=0), np.nan)
    return r2, low_mae


def check_stated(record: dict[str, Any], where: str) -> None:
    """The probe compares the student's belief with the one the week states at every step, read from its reply's
    ``BELIEF:`` line: a week where a step states none (a heuristic's, a student's parse failure) is refused, and so
    is a week cut short (the probe's table is step by step over whole weeks)."""
    if len(record["steps"]) != EPISODE_STEPS:
        raise RhythmError(f"{where}: a week of {len(record['steps'])} steps; the teacher-forced probe reads whole weeks "
                          f"of {EPISODE_STEPS}")
    for step in record["steps"]:
        if step.get("belief") is None or parse_reply(step.get("response", "")).belief is None:
            raise RhythmError(f"{where}: step {step['t']} states no belief; the teacher-forced probe reads weeks whose "
                              "every step states one (a teacher's, as rhythm generate writes them)")


def teacher_forced_errors(model: Any, tokenizer: Any, records: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """``(student, teacher)`` belief MAE per episode and step, each ``(episodes, 28)``."""
    import torch

    vocab = tokenizer.get_vocab()
    numbers = {f"{i / 100:.2f}": i / 100 for i in range(101)}
    if not all(n in vocab for n in numbers) or not all(m in vocab for m in ("BELIEF: S=", " M=", " W=")):
        raise RhythmError("the teacher-forced probe needs one token per number and per belief marker (the tiny student's tokenizer)")
    value_ids = torch.tensor([vocab[n] for n in numbers])
    values = torch.tensor(list(numbers.values()))
    markers = {vocab["BELIEF: S="], vocab[" M="], vocab[" W="]}
    student, teacher = [], []
    for record in records:
        ids, logits = _forced(model, tokenizer, record)
        at = [i for i, t in enumerate(ids) if t in markers]
        said = values[logits[at][:, value_ids].argmax(-1)].view(-1, 3).numpy()
        truth = week_truth(record)
        student.append(belief_mae(said, truth))
        teacher.append(belief_mae(np.array([s["belief"] for s in record["steps"]]), truth))
    return np.stack(student), np.stack(teacher)


def probe_report(model_dir: str, episodes: str, *, condition: str | None = None, filter_probe: bool = False,
                 actions: bool = False, meters: bool = False) -> Iterator[str]:
    """The lines ``rhythm analyze teacher-forced`` prints, one probe at a time: the student of ``model_dir``
    on the weeks of ``episodes`` (of ``condition`` only, if given); the filter's, the actions' and the
    meters' probes on request."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if condition is not None and condition not in CONDITIONS:
        raise RhythmError(f"unknown condition {condition!r}; expected one of {', '.join(CONDITIONS)}")
    found = [(where, r) for path in file_list(episodes) for where, r in read_episodes(path)
             if condition in (None, r["condition"])]
    if not found:
        raise RhythmError(f"no weeks in {episodes}" + (f" for condition {condition}" if condition else ""))
    for where, record in found:
        check_stated(record, where)
        week_truth(record, where)  # a week of another env version is another person: refused before the model loads
    records = [r for _, r in found]
    if meters:
        fitted_weeks(len(records))  # before the model loads and the other probes print
    if not Path(model_dir).expanduser().is_dir():
        raise RhythmError(f"model directory not found: {model_dir}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    except (OSError, ValueError, SafetensorError) as err:  # ValueError: a folder with no model; SafetensorError: cut short
        raise RhythmError(f"cannot load the model in {model_dir} ({str(err).splitlines()[0]})") from None

    prior = np.mean([prior_mae(r["condition"], week_truth(r)) for r in records])
    row = lambda e: " / ".join(f"{e.mean(axis=0)[s - 1]:.3f}" for s in STEPS)  # noqa: E731
    yield f"teacher-forced belief MAE at steps {'/'.join(map(str, STEPS))} over {len(records)} weeks (prior {prior:.3f}):"
    student, recorded = teacher_forced_errors(model, tokenizer, records)
    yield f"  student, the recorded beliefs in context  {row(student)}"
    yield f"  the recorded beliefs                      {row(recorded)}"
    if filter_probe:
        student, filtered = teacher_forced_errors(model, tokenizer, filtered_weeks(records))
        yield f"  student, the filter's beliefs in context  {row(student)}"
        yield f"  bayes filter on these weeks               {row(filtered)}"
    if actions:
        yield action_table(*teacher_forced_actions(model, tokenizer, records))
    if meters:
        r2, low_mae = meter_readout(model, tokenizer, records)
        yield ("meters read linearly off the student's state at ACTION: (held-out weeks; R^2, 1 = exactly;"
               f" error where the meter is below {LOW_METER})")
        yield "  " + "  ".join(f"{m} {a:.2f} / {b:.3f}" for m, a, b in zip(METER_ABBREV, r2, low_mae, strict=True))


def action_table(recorded: np.ndarray, student: np.ndarray) -> str:
    """Per action: the recorded agent's count, the student's count of picks and its recall of the recorded one."""
    lines = [f"teacher-forced actions: the student picks the recorded one at {np.mean(recorded == student):.3f} of steps",
             f"  {'action':12s} {'recorded':>8s} {'student':>8s} {'recall':>6s}"]
    for i, name in enumerate(ACTIONS):
        chosen = recorded == i
        if chosen.any() or (student == i).any():
            recall = f"{np.mean(student[chosen] == i):.2f}" if chosen.any() else "-"
            lines.append(f"  {name:12s} {int(chosen.sum()):8d} {int((student == i).sum()):8d} {recall:>6s}")
    return "\n".join(lines)
