"""Teacher-forced belief probe: the student's BELIEF at every step of the *teacher's* weeks.

    python -m rhythm.eval.teacher_forced runs/quickstart/sft data/heldout.jsonl

One forward pass per week over the teacher's conversation (protocol lines only, as the tiny student is
trained); at each ``S=``/``M=``/``W=`` position the student's most likely number is read off, so the
student states beliefs with the teacher's earlier beliefs in context. Prints the student's and the
teacher's belief MAE at steps 1, 4, 8, 16, 28 and the constant prior's.

It is a diagnostic, not the measure: a student that copies its last belief scores almost as well as
the teacher here (the teacher's belief moves little per step), and still never updates its own in free
play (``rhythm eval``, measured in docs/student.md). It needs a tokenizer with one token per number
(the tiny student's).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rhythm.env.profiles import belief_of, sample_profiles
from rhythm.errors import RhythmError
from rhythm.grader import PRIOR_MEAN
from rhythm.protocol import format_ending, parse_reply, record_conversation
from rhythm.records import read_episodes

STEPS = (1, 4, 8, 16, 28)


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
        replies = [format_ending(p.belief, p.action) for p in (parse_reply(s["response"]) for s in record["steps"])]
        messages = record_conversation(record, include_reply=True, replies=replies)
        ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids], device=model.device)).logits[0].float().cpu()
        at = [i for i, t in enumerate(ids) if t in markers]
        said = values[logits[at][:, value_ids].argmax(-1)].view(-1, 3).numpy()
        truth = belief_of(sample_profiles(record["condition"], record["split"], np.array([record["seed"]])))[0]
        student.append(np.abs(said - truth).mean(axis=1))
        teacher.append(np.abs(np.array([s["belief"] for s in record["steps"]]) - truth).mean(axis=1))
    return np.stack(student), np.stack(teacher)


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m rhythm.eval.teacher_forced MODEL_DIR TEACHER_EPISODES.jsonl", file=sys.stderr)
        return 2
    records = [r for _, r in read_episodes(args[1])]
    tokenizer = AutoTokenizer.from_pretrained(args[0])
    model = AutoModelForCausalLM.from_pretrained(args[0]).eval()
    student, teacher = teacher_forced_errors(model, tokenizer, records)

    prior = np.mean([np.abs(np.asarray(PRIOR_MEAN[r["condition"]]) - belief_of(sample_profiles(r["condition"], r["split"], np.array([r["seed"]])))[0]).mean()
                     for r in records])
    row = lambda e: " / ".join(f"{e.mean(axis=0)[s - 1]:.3f}" for s in STEPS)  # noqa: E731
    print(f"teacher-forced belief MAE at steps {'/'.join(map(str, STEPS))} over {len(records)} weeks (prior {prior:.3f}):")
    print(f"  student {row(student)}")
    print(f"  teacher {row(teacher)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
