"""Weight-space averages of fully trained students (experimental, nineteenth round of docs/grpo-ablation.md): a model soup of
two runs of one stage, or a student and the one it started from (WiSE-FT's interpolation).

    python benchmarks/average_weights.py OUT runs/a runs/b                # the mean of two students
    python benchmarks/average_weights.py OUT runs/a runs/b --weights 0.7,0.3

Each input is a model directory of the same architecture (``model.safetensors`` beside its config and tokenizer, what
``rhythm sft`` writes with ``use_peft: false``); OUT gets the weighted mean, tensor by tensor, in the first input's
dtypes, and a copy of the first input's other files, so ``rhythm eval --agent model:OUT`` plays it. The round found
neither average better than the stage it averages.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_or_exit  # noqa: E402

from rhythm.errors import RhythmError  # noqa: E402

WEIGHTS = "model.safetensors"


def average(out: Path, models: list[Path], weights: list[float]) -> None:
    """Write the ``weights``-weighted mean of ``models``' tensors to ``out`` (a model directory)."""
    from safetensors.torch import load_file, save_file

    if len(weights) != len(models) or abs(sum(weights) - 1.0) > 1e-6:
        raise RhythmError(f"{len(models)} models need {len(models)} weights summing to 1, got {weights}")
    for m in models:
        if not (m / WEIGHTS).is_file():
            raise RhythmError(f"no {WEIGHTS} in {m} (a fully trained student's directory)")
    tensors = [load_file(str(m / WEIGHTS)) for m in models]
    names = set(tensors[0])
    for m, t in zip(models[1:], tensors[1:], strict=True):
        if set(t) != names or any(t[k].shape != tensors[0][k].shape for k in names):
            raise RhythmError(f"{m} does not have {models[0]}'s tensors (another architecture)")
    mean = {k: sum(w * t[k].double() for w, t in zip(weights, tensors, strict=True)).to(tensors[0][k].dtype).contiguous()
            for k in names}
    out.mkdir(parents=True, exist_ok=True)
    for f in models[0].iterdir():
        if f.is_file() and f.name != WEIGHTS:
            shutil.copy(f, out / f.name)
    save_file(mean, str(out / WEIGHTS), metadata={"format": "pt"})
    print(f"{' + '.join(f'{w:g} x {m}' for w, m in zip(weights, models, strict=True))} -> {out}")


def run(a: argparse.Namespace) -> None:
    models = [Path(m) for m in a.models]
    weights = [float(w) for w in a.weights.split(",")] if a.weights else [1.0 / len(models)] * len(models)
    average(Path(a.out), models, weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output model directory")
    ap.add_argument("models", nargs="+", help="model directories to average (two or more)")
    ap.add_argument("--weights", default=None, help="comma-separated weights summing to 1 (default: equal)")
    run_or_exit("average_weights", run, ap.parse_args())


if __name__ == "__main__":
    main()
