"""LLM teacher throughput: ``rhythm generate --teacher openai`` against a loopback OpenAI-compatible
server that answers every request after 200 ms, 6 episodes x 28 steps at concurrency 3.

The ideal is 6 x 28 x 0.2 s / 3 = 11.2 s (every request waiting only on the server); the target is
to finish within 1.25x of it (14.0 s), timed from the call of ``generate_llm`` (client import and
setup included) to the last line written. The real ``openai`` client does the requests.

Run: ``python benchmarks/bench_llm_teacher.py`` (``--check`` exits 1 on a missed target).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _common import bench_args, report  # noqa: E402

EPISODES, STEPS, CONCURRENCY, LATENCY = 6, 28, 3, 0.2


def main() -> None:
    args = bench_args(__doc__)
    for name in ("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        os.environ.pop(name, None)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    os.environ["OPENAI_API_KEY"] = "bench-key"

    from rhythm.model.llm_client import LLMConfig
    from rhythm.teacher.generate import GenerateConfig
    from rhythm.teacher.llm_generate import generate_llm
    from tests.fake_openai import FakeOpenAI

    ideal = EPISODES * STEPS * LATENCY / CONCURRENCY
    with FakeOpenAI(api_key="bench-key", latency=LATENCY) as server, tempfile.TemporaryDirectory() as tmp:
        cfg = GenerateConfig(
            teacher="openai", seeds=f"0-{EPISODES - 1}", concurrency=CONCURRENCY, output=str(Path(tmp) / "t.jsonl"),
            llm=LLMConfig(model="bench", base_url=server.base_url),
        )
        start = time.perf_counter()
        summary = generate_llm(cfg, list(range(EPISODES)))
        wall = time.perf_counter() - start
        lines = (Path(tmp) / "t.jsonl").read_bytes().count(b"\n")
    assert summary.episodes == EPISODES and lines == EPISODES and summary.steps == EPISODES * STEPS
    results = {
        "episodes": EPISODES,
        "steps_per_episode": STEPS,
        "concurrency": CONCURRENCY,
        "server_latency_s": LATENCY,
        "requests_seen": len(server.seen),
        "max_in_flight": server.max_in_flight,
        "ideal_s": round(ideal, 2),
        "wall_s": round(wall, 2),
        "wall_over_ideal": round(wall / ideal, 3),
        "ideal_over_wall": round(ideal / wall, 3),
        "within_1_25x": wall <= 1.25 * ideal,
    }
    report("llm_teacher", results, {"ideal_over_wall": 0.8}, check=args.check)


if __name__ == "__main__":
    main()
