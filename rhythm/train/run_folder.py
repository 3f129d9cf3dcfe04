"""A training run's output folder over its life: claimed for a new run (an earlier one resumed, or set aside with
``overwrite_output_dir`` and deleted once the new run trains), its checkpoints found and checked before a resume, a run stopped after its last
checkpoint finished, and the folders a failed start created removed. ``rhythm sft`` and ``rhythm grpo`` share it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import orjson

from rhythm.config import config_dict, flat_settings, read_recorded, settings_change
from rhythm.errors import RhythmError
from rhythm.model.load import weights_digest
from rhythm.provenance import file_digest
from rhythm.records import file_list
from rhythm.train.jobs import resumes
from rhythm.train.processes import is_main_process, world_size

LOG_NAME = "training_log.jsonl"


def claim_output_dir(cfg: Any, stage: str) -> tuple[Path, str | None]:
    """``output_dir`` made ready for a run of ``stage``: the checkpoint to resume from (trained with these settings,
    not finished: :func:`check_resume`), or a folder that holds no earlier run (one that does needs resuming, or
    ``overwrite_output_dir``, which empties it of the last run's model, adapter and logs: none may pass for this
    run's). Returns ``(output_dir, resume)``."""
    resume = resume_path(cfg)
    out = Path(cfg.output_dir)
    aside = overwritten_path(out)
    if aside.exists() and is_main_process():  # the others may come after the first process set a run aside
        raise RhythmError(f"a run that overwrote {out} stopped before it trained, and the run it replaced is in {aside}: "
                          f"move that back into {out} (or delete it), then run again")
    if resume is not None:
        check_resume(cfg, stage, Path(resume))
    if resume is None and holds_run(out):
        if not cfg.overwrite_output_dir:
            raise RhythmError(f"{out} already holds a run; resume it (resume_from_checkpoint=latest), "
                              "pass overwrite_output_dir=true, or choose another output_dir")
        if is_main_process():  # under a launcher one process moves it (all at once raced each other's moves);
            aside.mkdir()  # the others write nothing there before the first step, which waits for this one
            _move_entries(out, aside)
    out.mkdir(parents=True, exist_ok=True)
    return out, resume


def overwritten_path(output_dir: str | Path) -> Path:
    """Where ``overwrite_output_dir`` keeps the run it replaces until the new one trains: ``.NAME.overwritten`` beside
    the folder. A run refused or failed before its first step puts it back (:func:`cleaned_on_failure`); one that
    begins training deletes it (:func:`train_or_finish`), so a refusal never loses the earlier run."""
    out = Path(output_dir).absolute()  # output_dir "." too: beside the folder, never inside it
    return out.parent / f".{out.name}.overwritten"


def put_back_overwritten(output_dir: str | Path) -> None:
    """The replaced run back in ``output_dir``, and what the refused run wrote there gone (first process only)."""
    aside = overwritten_path(output_dir)
    if aside.is_dir() and is_main_process():
        out = Path(output_dir)
        empty_folder(out)
        _move_entries(aside, out)
        aside.rmdir()


def _move_entries(source: Path, target: Path) -> None:
    """Every entry of ``source`` renamed into ``target`` (one filesystem: beside each other, nothing is copied)."""
    for entry in source.iterdir():
        entry.rename(target / entry.name)


def empty_folder(folder: Path, keep: Collection[str] = ()) -> None:
    """Delete everything in ``folder`` but the entries named in ``keep``."""
    for entry in folder.iterdir():
        if entry.name not in keep:
            remove(entry)


def remove(path: Path) -> None:
    """Delete a file, a link (not what it points to) or a folder with all it holds."""
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` holds a run (a checkpoint or a training log): what ``overwrite_output_dir`` empties."""
    return folder.is_dir() and (any(folder.glob("checkpoint-*")) or (folder / LOG_NAME).exists())


def data_paths(cfg: Any) -> list[str]:
    """The files of ``cfg.data`` (comma-separated; ``-`` is stdin)."""
    return file_list(str(cfg.data or ""))


def model_digests(cfg: Any) -> dict[str, str]:
    """The digests of a run's local model and adapter folders (:func:`rhythm.model.load.weights_digest`), recorded when
    it starts so a resume of the run moved with them knows them for the same (a Hub id or ``rhythm-tiny``: none)."""
    found = {key: weights_digest(str(getattr(cfg, key, None) or "")) for key in ("model_name_or_path", "adapter")}
    return {key: digest for key, digest in found.items() if digest is not None}


def data_digest(cfg: Any) -> str | None:
    """The digest of a run's data files (:func:`rhythm.provenance.file_digest`), recorded when it starts so a resume
    notices files changed in place; None for stdin."""
    paths = data_paths(cfg)
    if not paths or "-" in paths:
        return None
    return ",".join(file_digest(Path(p)) for p in paths)


RESUME_MAY_CHANGE = (
    "max_steps", "num_train_epochs", "resume_from_checkpoint", "overwrite_output_dir", "output_dir", "logging_steps",
    "eval_steps", "save_steps", "save_total_limit", "eval_on_start", "per_device_eval_batch_size", "log_replies",
    "probe_states", "report_to", "push_to_hub", "hub_model_id", "hub_private", "jobs", "dtype", "bf16",
    "attn_implementation", "gradient_checkpointing", "step.use_vllm", "step.vllm_mode", "step.vllm_gpu_memory_utilization",
)
"""Settings a resumed run may change: how long it trains, what it logs, evaluates and saves, where the result goes,
how this machine computes it. The rest (data, model, optimizer, batch, seed, rewards) decides what is trained, and a
resume that changes one would train a run that no config describes."""

PATH_SETTINGS = ("data", "model_name_or_path", "adapter")
"""Settings that name files: compared as the files they name, however the path is written."""


def check_resume(cfg: Any, stage: str, checkpoint: Path) -> None:
    """Refuse to resume a run that finished (its summary is at the checkpoint's step, and the run is not made
    longer), one whose ``STAGE_config.yaml`` records other settings than :data:`RESUME_MAY_CHANGE` allows (a setting
    that one side does not know, from another rhythm version, is not compared), one whose data files changed, or
    one started under another number of processes (a launcher's ``WORLD_SIZE``)."""
    run, at = checkpoint.parent, checkpoint_step(checkpoint)
    found = read_recorded(run / f"{stage}_config.yaml")
    settings, provenance = found if found is not None else ({}, {})
    summary = run / f"{stage}_summary.json"
    done = orjson.loads(summary.read_bytes()).get("global_step", -1) if summary.is_file() else -1
    length = ("max_steps", "num_train_epochs")
    longer = cfg.max_steps > at if cfg.max_steps > 0 else any(settings.get(k, getattr(cfg, k)) != getattr(cfg, k) for k in length)
    if done >= at and not longer:
        raise RhythmError(f"{checkpoint} is at step {at}, where the run finished; raise max_steps (or num_train_epochs) "
                          "to train on")
    if 0 < cfg.max_steps < at:  # the model is past this run's length: its config would name steps it did not take
        raise RhythmError(f"{checkpoint} is at step {at}, past max_steps={cfg.max_steps}; resume with max_steps >= {at}, "
                          "or start afresh in another output_dir")
    if found is None:
        return
    then_out, now_cfg = settings.get("output_dir"), config_dict(cfg)
    before, now = (_comparable(flat_settings(c, RESUME_MAY_CHANGE)) for c in (settings, now_cfg))
    models = provenance.get("model_digests") or {}
    for key in PATH_SETTINGS:  # a run moved with its inputs (a quickstart folder): their digests confirm them
        if key in before and key in now and before[key] != now[key]:
            moved = _from_run(settings.get(key), then_out) == _from_run(now_cfg.get(key), cfg.output_dir)
            if moved and (key == "data" or (models.get(key) is not None and models[key] == weights_digest(now_cfg[key]))):
                before[key] = now[key]
    differs = settings_change({k: v for k, v in before.items() if k in now}, {k: v for k, v in now.items() if k in before})
    recorded = provenance.get("data_digest")
    if not differs and recorded is not None and recorded != data_digest(cfg):
        differs = "the data files changed since the run started (their digest differs)"
    processes = (provenance.get("resolved") or {}).get("world_size")
    if not differs and processes is not None and processes != world_size():
        differs = (f"{processes} process(es), now {world_size()}: each optimizer step would take another batch, "
                   "and the data order would not resume where it stopped")
    if differs:
        raise RhythmError(f"{run} was trained with other settings ({differs}); resuming would train a run no config "
                          f"describes: resume with its {stage}_config.yaml's settings, or start afresh in another "
                          "output_dir")


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with each path of :data:`PATH_SETTINGS` that exists here resolved, each item stripped."""
    def same(item: str) -> str:
        path = Path(item).expanduser()
        return str(path.resolve()) if item != "-" and path.exists() else item

    return {k: ",".join(same(i.strip()) for i in str(v).split(",") if i.strip()) if k in PATH_SETTINGS and v else v
            for k, v in settings.items()}


def _from_run(value: Any, output_dir: Any) -> list[str] | None:
    """The files of a path setting as they lie from the run's ``output_dir`` (resolved where both exist here)."""
    if not value or not output_dir:
        return None
    out = Path(str(output_dir)).expanduser()
    where = []
    for item in file_list(str(value)):
        path = Path(item).expanduser()
        both = path.exists() and out.exists()
        where.append(os.path.relpath(path.resolve() if both else path, out.resolve() if both else out))
    return where


def planned_steps(trainer: Any) -> int:
    """The optimizer steps the trainer's run takes in all (``max_steps``, or its epochs' steps), as transformers
    counts them."""
    return trainer.set_initial_training_values(trainer.args, trainer.get_train_dataloader())[-1]


def train_or_finish(trainer: Any, resume: str | None) -> Any:
    """``trainer.train()``, resumed from ``resume``; a checkpoint already at the run's last step (a run stopped after
    its last checkpoint, before its final save) is loaded instead, since ``train()`` would take one step more. Returns
    what ``train()`` returns, or None when no step was trained. The run an ``overwrite_output_dir`` set aside goes once
    the first step is taken: a run that fails before (a setting refused inside ``train()``) puts it back. A checkpoint
    past the run's planned steps (a resume with fewer epochs) is refused: the config would name steps it did not take."""
    planned = planned_steps(trainer)
    if resume is not None and checkpoint_step(resume) > planned:
        raise RhythmError(f"{resume} is at step {checkpoint_step(resume)}, past the {planned} steps this run plans "
                          "(fewer num_train_epochs?); resume with its length, or start afresh in another output_dir")
    aside = overwritten_path(trainer.args.output_dir)
    if resume is None or checkpoint_step(resume) < planned:
        if aside.exists() and is_main_process():
            trainer.add_callback(_drop_when_trained(aside))
        result = trainer.train(resume_from_checkpoint=resume)
        if aside.exists() and is_main_process():  # trained (the callback's step was taken): the overwritten run goes
            remove(aside)
        return result
    from transformers import TrainerState

    trainer._load_from_checkpoint(resume)  # the weights, full or an adapter, as train() loads them
    trainer.state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
    trainer.state.is_local_process_zero = trainer.is_local_process_zero()  # the checkpoint's are rank 0's
    trainer.state.is_world_process_zero = trainer.is_world_process_zero()
    return None


def _drop_when_trained(aside: Path) -> Any:
    """A ``TrainerCallback`` deleting the run ``overwrite_output_dir`` set aside once the new run's first step is done."""
    from transformers import TrainerCallback

    class DropOverwritten(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if aside.exists():
                remove(aside)

    return DropOverwritten()


def resume_path(cfg: Any) -> str | None:
    """The checkpoint ``resume_from_checkpoint`` names (latest = the newest ``checkpoint-N``), or None."""
    value = cfg.resume_from_checkpoint
    if not resumes(cfg):
        return None
    if value is True or str(value).lower() in ("latest", "last", "true"):
        last = latest_checkpoint(Path(cfg.output_dir))
        if last is None:
            raise RhythmError(f"no finished checkpoint-N folder (one with trainer_state.json) in {cfg.output_dir} "
                              "to resume from")
        return str(last)
    path = Path(str(value))
    if not (path / "trainer_state.json").is_file():
        raise RhythmError(f"not a checkpoint folder (no trainer_state.json): {path}")
    return str(path)


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest ``checkpoint-N`` in ``folder`` that was written whole (its ``trainer_state.json``, written last, is
    there): a run killed while saving leaves a partial one, which resuming skips."""
    found = [(int(p.name.rpartition("-")[2]), p) for p in folder.glob("checkpoint-*")
             if p.is_dir() and p.name.rpartition("-")[2].isdigit() and (p / "trainer_state.json").is_file()]
    return max(found)[1] if found else None


def checkpoint_step(checkpoint: str | Path) -> int:
    """The optimizer step a checkpoint was saved at (its ``trainer_state.json``)."""
    return int(orjson.loads((Path(checkpoint) / "trainer_state.json").read_bytes()).get("global_step", 0))


def check_inputs_outside(output_dir: str, inputs: list[str | None]) -> None:
    """``overwrite_output_dir`` sets ``output_dir``'s run aside (:func:`holds_run`, :func:`overwritten_path`) before the
    run reads its model: an input inside it (the model trained on in place, data kept beside the run) would be gone
    when it is read, and deleted with it once the run trains, so it is refused."""
    if not holds_run(Path(output_dir)):
        return  # nothing is deleted
    out = Path(output_dir).expanduser().resolve()
    for name in inputs:
        path = Path(name or "").expanduser()
        if name and name != "-" and path.exists() and path.resolve().is_relative_to(out):
            raise RhythmError(f"overwrite_output_dir would delete {name}, an input of this run inside output_dir "
                              f"{output_dir}; write the run to another output_dir")


@contextlib.contextmanager
def cleaned_on_failure(output_dir: str | Path) -> Iterator[None]:
    """The folders a run creates for ``output_dir`` are removed again if it fails before writing into them (a bad
    model path leaves no empty output folder behind); anything written stays. A run that overwrote an earlier one
    and fails before it trains puts that run back (:func:`overwritten_path`)."""
    path = Path(output_dir).absolute()
    missing = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    earlier = overwritten_path(path).exists()  # an earlier run's set-aside: the refusal names it, the user decides
    try:
        yield
    except BaseException:
        if not earlier:
            put_back_overwritten(path)
        for folder in missing:
            try:
                folder.rmdir()
            except OSError:  # not empty, or gone
                break
        raise
