"""Hugging Face Hub: upload teacher data (with a dataset card) or a trained student (with a model card).

    rhythm upload --files data/teacher_30ep.jsonl --repo me/rhythm-teacher               # dataset + card
    rhythm upload --files runs/sft --repo me/rhythm-student --repo-type model --private   # an SFT run

One plain commit per upload: the repo is created if needed, every file goes up, and ``README.md`` is
written from the files themselves: for episode JSONL, the schema and env versions, teacher, conditions,
splits, seeds, counts, scores and API cost (``usage.cost_usd``; "unknown", or "at least", when some weeks' cost is
not known: an unknown cost is never counted as 0); for an SFT run folder, the base model,
the data and the losses. A dataset card covers every episode file the repo holds after the commit, not
only this upload's: the earlier ones are read back through the client's download cache, and the card's
``data_files`` lists each of them by name (a glob would also take in JSONL that is not episodes, which
``datasets.load_dataset`` cannot load beside them). The commit names the revision the card was computed
on, so an upload that raced another one fails instead of writing a card that misses its files.

A 429 or 5xx (the Hub busy for a moment) is tried again, up to :data:`HUB_ATTEMPTS` times, waiting what its
``Retry-After`` says. A directory is uploaded as its contents at the repo root (``checkpoint-*`` folders and
hidden files skipped), into a model repo only: a folder is refused for a dataset (its card covers the episode
files named, each checked); a file goes
to the root under its own name, with its ``<file>.config.yaml`` sidecar (written by ``rhythm generate``)
when there is one. The token comes from ``HF_TOKEN`` or ``hf auth login``; the endpoint from
``HF_ENDPOINT``.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import orjson
import yaml

from rhythm.errors import RhythmError
from rhythm.records import read_episodes, sidecar_path
from rhythm.seeds import format_seeds

T = TypeVar("T")

REPO_TYPES = ("dataset", "model")
JOB_DIR = "rhythm_job"
"""Where a Hugging Face Jobs submission commits its script, config and source in the run's model repo."""
SKIP_DIRS = ("checkpoint-",)
SKIP_NAMES = ("training_args.bin",)


@dataclass
class UploadResult:
    repo_id: str
    repo_type: str
    repo_url: str
    commit_url: str
    commit_oid: str
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the uploader should know about what went up (an adapter whose base only this machine has)."""


def require_token() -> str:
    """The user's Hub token (``HF_TOKEN`` or the saved login), or a clear error."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise RhythmError("no Hugging Face token; set HF_TOKEN or run `hf auth login`")
    return token


def check_repo_id(repo_id: str | None, what: str = "--repo") -> str:
    """``repo_id`` as ``user/name`` and a name the Hub takes (its client's own rule), before anything is sent or
    trained: a push refused for its name would come after the training."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not repo_id or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise RhythmError(f"{what} must look like user/name, got {repo_id!r}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise RhythmError(f"{what} {repo_id!r} is not a name the Hub takes ({' '.join(str(err).split())})") from None
    return repo_id


def _network_errors() -> tuple[type[Exception], ...]:
    """The transport errors of the HTTP library the Hub client runs on (httpx2 under huggingface_hub 2,
    httpx under 1): the Hub could not be reached or dropped the connection. Read from the modules
    already imported, so nothing is imported for it."""
    return tuple(mod.TransportError for mod in (sys.modules.get("httpx2"), sys.modules.get("httpx"))
                 if mod is not None and hasattr(mod, "TransportError"))


def hub_errors() -> tuple[type[Exception], ...]:
    """What the Hub client raises when the Hub refuses a request or cannot be reached."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    return (HfHubHTTPError, OfflineModeIsEnabled, *_network_errors())


def hub_error_line(err: Exception) -> str:
    """One line for an error of the Hub client: status, reason and the Hub's own message (the client's
    text spreads them over several lines, and for some statuses its first line holds neither)."""
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    if status is None:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        said = lines[0] if lines else type(err).__name__
        if isinstance(err, _network_errors()):
            from huggingface_hub import constants

            return f"no answer from the Hub at {constants.ENDPOINT} ({said}); check the network (and HF_ENDPOINT, if set)"
        return said
    said = " ".join(str(getattr(err, "server_message", None) or "").split())
    line = f"{status} {getattr(response, 'reason_phrase', '')}".strip() + (f": {said}" if said else "")
    if status in (401, 403):
        return f"{line}; check the token (HF_TOKEN or `hf auth login`) and its write access"
    if status == 429 or status >= 500:
        return f"{line}; try again later"
    return line


def _hub_error(err: Exception, what: str) -> RhythmError:
    return RhythmError(f"{what} failed: {hub_error_line(err)}")


HUB_ATTEMPTS = 4
"""Tries of a Hub request that a busy Hub refused (429, 5xx) before the refusal is the answer."""
RETRY_AFTER_CAP = 60.0
"""The longest ``Retry-After`` (seconds) waited for; a longer one is the answer at once."""


def retrying(call: Callable[[], T], *, attempts: int = HUB_ATTEMPTS, sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, tried again after a 429 or 5xx (the Hub busy for a moment) up to ``attempts`` times, waiting what
    its ``Retry-After`` says or 0.5, 1, 2... seconds. Any other error, or the last refusal, is raised as it is. A
    retried commit is safe: its ``parent_commit`` (where one is given) refuses to land twice."""
    from huggingface_hub.errors import HfHubHTTPError

    for attempt in range(attempts):
        try:
            return call()
        except HfHubHTTPError as err:
            response = getattr(err, "response", None)
            status = getattr(response, "status_code", None) or 0
            wait = _retry_after(response) if status == 429 else None
            if attempt + 1 >= attempts or not (status == 429 or status >= 500) or (wait or 0) > RETRY_AFTER_CAP:
                raise
            sleep(wait if wait is not None else 0.5 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _retry_after(response: Any) -> float | None:
    """A response's ``Retry-After`` in seconds (None when absent or a date)."""
    try:
        return max(0.0, float(response.headers.get("retry-after")))
    except (AttributeError, TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------- episode statistics


def episode_stats(paths: Sequence[str | Path]) -> dict[str, Any]:
    """What a dataset card says about episode JSONL files (read and validated line by line)."""
    count: Counter[str] = Counter()
    schema, env_versions, agents, conditions, splits = set(), set(), Counter(), Counter(), Counter()
    seeds: dict[tuple[str, str], list[int]] = {}
    finals, finals_v2, maes = [], [], []
    usage: Counter[str] = Counter()
    cost, cost_unknown = 0.0, 0
    created = []
    for path in paths:
        for _where, rec in read_episodes(str(path)):
            count["episodes"] += 1
            count["steps"] += len(rec["steps"])
            count["parse_failures"] += sum(1 for s in rec["steps"] if s.get("parse_ok") is False)
            schema.add(rec["schema"])
            env_versions.add(rec["env_version"])
            agent = rec["agent"] + (f" ({rec['model']})" if rec.get("model") else "")
            agents[agent] += 1
            conditions[rec["condition"]] += 1
            splits[rec["split"]] += 1
            seeds.setdefault((rec["condition"], rec["split"]), []).append(int(rec["seed"]))
            score = rec.get("score") or {}
            for key, bucket in (("final_score", finals), ("final_score_v2", finals_v2), ("belief_mae", maes)):
                v = score.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    bucket.append(float(v))
            for key, v in (rec.get("usage") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    usage[key] += v
            known = episode_cost(rec.get("usage") or {})
            cost_unknown += known is None
            cost += known or 0.0
            if rec.get("created_at"):
                created.append(str(rec["created_at"]))

    def mean(xs: list[float]) -> float | None:
        return round(sum(xs) / len(xs), 4) if xs else None

    return {
        "episodes": count["episodes"],
        "steps": count["steps"],
        "parse_failures": count["parse_failures"],
        "schema": sorted(schema),
        "env_version": sorted(env_versions),
        "agents": dict(agents),
        "conditions": dict(conditions),
        "splits": dict(splits),
        "seeds": {f"{c}/{s}": format_seeds(v) for (c, s), v in sorted(seeds.items())},
        "mean_final_score": mean(finals),
        "mean_final_score_v2": mean(finals_v2),
        "mean_belief_mae": mean(maes),
        "valued": {"mean_final_score": len(finals), "mean_final_score_v2": len(finals_v2), "mean_belief_mae": len(maes)},
        "cost_usd": round(cost, 4),
        "cost_unknown": cost_unknown,
        "prompt_tokens": int(usage.get("prompt_tokens", 0)),
        "completion_tokens": int(usage.get("completion_tokens", 0)),
        "created": [min(created), max(created)] if created else None,
    }


def episode_cost(usage: dict[str, Any]) -> float | None:
    """An episode's API cost from its ``usage``: ``cost_usd`` when it is a number; 0 for an episode that sent no
    request (no ``cost_usd``, no tokens: a CPU teacher); None when it is unknown (no price for the model, or replies
    without usage), which the card never counts as 0."""
    cost = usage.get("cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost):
        return float(cost)
    sent = any(usage.get(key) for key in ("prompt_tokens", "completion_tokens", "requests", "usage_missing"))
    return None if "cost_usd" in usage or sent else 0.0


def cost_text(cost_usd: float, unknown: int, episodes: int) -> str:
    """A card's cost: the dollars when every week's cost is known, "unknown" when none is, else a lower bound
    that says how many weeks it leaves out."""
    if not unknown:
        return f"${cost_usd:.2f}"
    if unknown >= episodes:
        return "unknown"
    return f"at least ${cost_usd:.2f} ({unknown} {'week' if unknown == 1 else 'weeks'} without a known cost)"


def _front_matter(meta: dict[str, Any]) -> str:
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _card(kind: str, meta: dict[str, Any], body: str) -> str:
    """A Hub card as ``huggingface_hub`` builds and checks it (``DatasetCard`` / ``ModelCard``: its
    metadata parsed and validated), written with the metadata in the order given."""
    from huggingface_hub import DatasetCard, ModelCard

    return (DatasetCard if kind == "dataset" else ModelCard)(_front_matter(meta) + body).content


def dataset_card(repo_id: str, files: dict[str, dict[str, Any]], others: Sequence[str] = ()) -> str:
    """README.md of a teacher-data repo: ``files`` maps each episode JSONL name in the repo to its
    :func:`episode_stats`; ``others`` are JSONL files in the repo that are not episodes (left out of the data)."""
    total = episode_stats_merge(list(files.values()))
    meta = {
        "tags": ["rhythm", "algorithm-distillation", "meta-rl", "agent-trajectories"],
        "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": sorted(files)}]}],
    }
    rows = "\n".join(
        f"| `{name}` | {s['episodes']} | {s['steps']} | {', '.join(s['agents'])} | {', '.join(s['conditions'])} | "
        f"{', '.join(s['splits'])} | {'; '.join(f'{k}: {v}' for k, v in s['seeds'].items())} | "
        f"{_fmt(s['mean_final_score'])} | {_fmt(s['mean_final_score_v2'])} | "
        f"{cost_text(s['cost_usd'], s.get('cost_unknown', 0), s['episodes'])} |"
        for name, s in sorted(files.items())
    )
    return _card("dataset", meta, f"""
# {repo_id.split('/')[-1]}

Teacher episodes of the `rhythm` benchmark: an agent manages one simulated week
(28 steps) of a person whose personality is hidden, and must infer it from how the person responds.
Each line of a JSONL file is one episode: every step's observation text, the teacher's reply
(reasoning ending with `BELIEF:` and `ACTION:` lines), the parsed belief and action, reward and meters,
then the episode's grades and API usage. `rhythm sft --data FILE` turns them into chat examples.

| | |
|---|---|
| record schema | {', '.join(map(str, total['schema']))} |
| env_version | {', '.join(total['env_version'])} |
| teacher | {', '.join(f'{a} ({n} episodes)' for a, n in total['agents'].items())} |
| conditions | {', '.join(f'{c} ({n})' for c, n in total['conditions'].items())} |
| split | {', '.join(f'{c} ({n})' for c, n in total['splits'].items())} |
| seeds | {'; '.join(f'{k}: {v}' for k, v in total['seeds'].items())} |
| episodes / steps | {total['episodes']} / {total['steps']} |
| parse failures (steps) | {total['parse_failures']} |
| mean final score (v3 / v2) | {_fmt(total['mean_final_score'])} / {_fmt(total['mean_final_score_v2'])} |
| mean belief MAE | {_fmt(total['mean_belief_mae'])} |
| cost | {cost_text(total['cost_usd'], total['cost_unknown'], total['episodes'])} ({total['prompt_tokens']} prompt + {total['completion_tokens']} completion tokens) |
| created | {' .. '.join(total['created']) if total['created'] else '-'} |

## Files

| file | episodes | steps | teacher | conditions | split | seeds | final v3 | final v2 | cost |
|---|---|---|---|---|---|---|---|---|---|
{rows}

{_others_line(others)}Train-split seeds never overlap the eval split: the profile is drawn from (condition, split, seed), so
`rhythm eval` meets different people. Scores are those of the grader in the record's env_version.
""")


def _others_line(others: Sequence[str]) -> str:
    if not others:
        return ""
    return f"Not part of the data (JSONL that is not episodes): {', '.join(f'`{n}`' for n in sorted(others))}.\n\n"


def landed_commit(api: Any, repo_id: str, repo_type: str, message: str, parent: str | None) -> Any:
    """Our commit, when a retried one was refused (412) because the first try had landed after all (its answer lost to
    a 5xx): the head is a commit of this message on ``parent``. None when it is another's."""
    if parent is None:
        return None
    commits = api.list_repo_commits(repo_id, repo_type=repo_type)
    if len(commits) < 2 or commits[0].title != message or commits[1].commit_id != parent:
        return None
    sha = commits[0].commit_id
    where = f"{api.endpoint}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"
    return SimpleNamespace(commit_url=f"{where}/commit/{sha}", oid=sha)


RUN_FILES = re.compile(
    r"^(adapter_config\.json|adapter_model\..*|config\.json|generation_config\.json|model[-.\w]*\.safetensors"
    r"|model\.safetensors\.index\.json|pytorch_model[-.\w]*\.bin|pytorch_model\.bin\.index\.json|training_args\.bin"
    r"|tokenizer[-.\w]*|special_tokens_map\.json|chat_template\.jinja|vocab\.json|merges\.txt|added_tokens\.json"
    r"|\w+_(config\.yaml|summary\.json|report\.json)|training_log\.jsonl|reward_log\.jsonl|\w+_rollouts\.jsonl)$")
"""A trained model's files and a rhythm run's records, at the top of a model repo: what a push replaces."""


def earlier_model_files(api: Any, repo_id: str, kept: set[str]) -> tuple[str | None, list[str]]:
    """A model repo's head commit and the files of an earlier model or run there (:data:`RUN_FILES`) that an upload
    of a trained model does not bring: a LoRA adapter's files beside new full weights would load as the old adapter.
    Anything else (a card, a licence, eval results, the job folder) is left as it is."""
    info = api.model_info(repo_id)
    stale = [s.rfilename for s in info.siblings or [] if s.rfilename not in kept and RUN_FILES.match(s.rfilename)]
    return info.sha, sorted(stale)


def earlier_episode_files(api: Any, repo_id: str, replaced: set[str]) -> tuple[str | None, dict[str, dict[str, Any]], list[str]]:
    """What a dataset repo already holds, for a card that covers it all: its head commit, the
    :func:`episode_stats` of each JSONL file this upload does not replace (downloaded through the client's
    cache, read as rhythm reads episodes), and the JSONL files that are not episodes."""
    info = api.dataset_info(repo_id)
    stats: dict[str, dict[str, Any]] = {}
    others: list[str] = []
    for sibling in info.siblings or []:
        name = sibling.rfilename
        if not name.endswith(".jsonl") or name in replaced:
            continue
        local = api.hf_hub_download(repo_id, name, repo_type="dataset", revision=info.sha)
        try:
            stats[name] = episode_stats([local])
        except RhythmError:  # an errors file, another tool's JSONL: not loadable beside the episodes
            others.append(name)
    return info.sha, stats, others


def episode_stats_merge(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over several files' :func:`episode_stats` (means weighted by episodes)."""
    out: dict[str, Any] = {"episodes": 0, "steps": 0, "parse_failures": 0, "schema": set(), "env_version": set(),
                           "agents": Counter(), "conditions": Counter(), "splits": Counter(), "seeds": {},
                           "cost_usd": 0.0, "cost_unknown": 0, "prompt_tokens": 0, "completion_tokens": 0, "created": None}
    weighted: dict[str, list[tuple[float, int]]] = {"mean_final_score": [], "mean_final_score_v2": [], "mean_belief_mae": []}
    for s in stats:
        for k in ("episodes", "steps", "parse_failures", "cost_usd", "prompt_tokens", "completion_tokens"):
            out[k] += s[k]
        out["cost_unknown"] += s.get("cost_unknown", 0)
        out["schema"].update(s["schema"])
        out["env_version"].update(s["env_version"])
        for k in ("agents", "conditions", "splits"):
            out[k].update(s[k])
        for k, v in s["seeds"].items():
            out["seeds"][k] = v if k not in out["seeds"] else f"{out['seeds'][k]},{v}"
        for k in weighted:
            if s[k] is not None:  # weighed by the weeks that have the value (a week may state no belief)
                weighted[k].append((s[k], s.get("valued", {}).get(k, s["episodes"])))
        if s["created"]:
            lo, hi = s["created"]
            out["created"] = [min(lo, out["created"][0]), max(hi, out["created"][1])] if out["created"] else [lo, hi]
    for k, pairs in weighted.items():
        n = sum(w for _, w in pairs)
        out[k] = round(sum(v * w for v, w in pairs) / n, 4) if n else None
    out["schema"], out["env_version"] = sorted(out["schema"]), sorted(out["env_version"])
    out["agents"], out["conditions"], out["splits"] = dict(out["agents"]), dict(out["conditions"]), dict(out["splits"])
    out["cost_usd"] = round(out["cost_usd"], 4)
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def model_card(repo_id: str, folder: str | Path) -> str | None:
    """README.md of a trained student, from an SFT or GRPO run folder (None when the folder is neither); it
    replaces the card TRL writes, which cannot name a local base model."""
    folder = Path(folder)
    for stage in ("grpo", "sft"):
        summary_path, config_path = folder / f"{stage}_summary.json", folder / f"{stage}_config.yaml"
        if summary_path.is_file() and config_path.is_file():
            break
    else:
        return None
    summary = orjson.loads(summary_path.read_bytes())
    config = yaml.safe_load(config_path.read_text()) or {}
    adapter = (folder / "adapter_config.json").is_file() or (stage == "sft" and bool(summary.get("adapter")))
    base = str(summary.get("base") or "") if stage == "grpo" else str(config.get("model_name_or_path", ""))
    meta: dict[str, Any] = {"library_name": "peft" if adapter else "transformers",
                            "tags": ["rhythm", "trl", stage, "lora" if adapter else "full-finetune"]}
    if base.count("/") == 1 and not Path(base).exists():
        meta["base_model"] = base
    load = (
        f"from peft import AutoPeftModelForCausalLM\nmodel = AutoPeftModelForCausalLM.from_pretrained(\"{repo_id}\")"
        if adapter
        else f"from transformers import AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained(\"{repo_id}\")"
    )
    if stage == "sft":
        data = summary.get("data") or {}
        how = (f"A student distilled from rhythm teacher episodes with TRL `SFTTrainer`{' and a LoRA adapter' if adapter else ''}:\n"
               "it reads the observation text and replies with "
               + ("the `BELIEF:` and `ACTION:` lines alone (trained with `strip_reasoning`)." if config.get("strip_reasoning")
                  else "reasoning that ends in `BELIEF:` and `ACTION:` lines."))
        rows = (f"| data | {', '.join(f'`{Path(f).name}`' for f in data.get('files', []))}: {data.get('train_examples')} train / "
                f"{data.get('validation_examples')} validation examples ({data.get('train_episodes')} / "
                f"{data.get('validation_episodes')} episodes) |\n"
                f"| steps / epochs | {summary.get('global_step')} / {_fmt(summary.get('epochs'))} |\n"
                f"| train loss (first -> last) | {_fmt(summary.get('train_loss_first'))} -> {_fmt(summary.get('train_loss_last'))} |\n"
                f"| validation loss (first -> last) | {_fmt(summary.get('eval_loss_first'))} -> {_fmt(summary.get('eval_loss_last'))} |")
        files = "`training_log.jsonl` the loss per step, `data_report.json` what was dropped from the data and why"
    else:
        how = ("A rhythm student refined with TRL `GRPOTrainer` on rewards from the benchmark's environment "
               f"(`{summary.get('mode')}` mode; docs/grpo.md).")
        rows = (f"| steps | {summary.get('global_step')} |\n"
                f"| reward (first -> last logged) | {_fmt(summary.get('reward_first'))} -> {_fmt(summary.get('reward_last'))} |")
        files = "`training_log.jsonl` the reward and the can-it-learn figures per step, `reward_log.jsonl` every scored reply"
    return _card("model", meta, f"""
# {repo_id.split('/')[-1]}

{how}

| | |
|---|---|
| base model | `{base}` |
{rows}

`{stage}_config.yaml` is the effective config (with package versions), {files}.

```python
{load}
```

Evaluate it with `rhythm eval --agent model:{repo_id}`.
""")


# ------------------------------------------------------------------------------------------- upload


def upload_pairs(files: Sequence[str | Path]) -> tuple[list[tuple[Path, str]], list[Path]]:
    """(local path, path in repo) pairs, and the JSONL files among them; a missing file is one line."""
    pairs: list[tuple[Path, str]] = []
    jsonl: list[Path] = []
    for f in files:
        path = Path(f)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                rel = child.relative_to(path)
                if (not child.is_file() or any(part.startswith(SKIP_DIRS) for part in rel.parts) or child.name in SKIP_NAMES
                        or any(part.startswith(".") for part in rel.parts)):  # a stage stamp, a lock: this machine's
                    continue
                pairs.append((child, rel.as_posix()))
        elif path.is_file():
            pairs.append((path, path.name))
            if path.suffix == ".jsonl":
                jsonl.append(path)
                sidecar = sidecar_path(path)
                if sidecar.is_file():
                    pairs.append((sidecar, sidecar.name))
        else:
            raise RhythmError(f"file not found: {path}")
    seen: dict[str, Path] = {}
    for local, remote in pairs:
        if remote in seen and seen[remote] != local:
            raise RhythmError(f"two files would both land at {remote!r} in the repo: {seen[remote]} and {local}")
        seen[remote] = local
    return pairs, jsonl


def upload(
    files: Sequence[str | Path],
    repo_id: str,
    *,
    repo_type: str = "dataset",
    private: bool = False,
    card: bool = True,
    commit_message: str | None = None,
) -> UploadResult:
    """Create ``repo_id`` if needed and upload ``files`` (and a card) in one commit."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    check_repo_id(repo_id)
    if repo_type not in REPO_TYPES:
        raise RhythmError(f"--repo-type must be dataset or model, got {repo_type!r}")
    if not files:
        raise RhythmError("nothing to upload; pass --files FILE...")
    pairs, jsonl = upload_pairs(files)
    folders = [Path(f) for f in files if Path(f).is_dir()]
    if repo_type == "dataset":
        for folder in folders:
            if holds_model(folder):
                raise RhythmError(f"{folder} holds a trained model (a training run's folder); upload it to a model "
                                  "repo: --repo-type model")
            # its files would go up unread: the card (and its data_files) covers the episode files named, and a broken
            # one must fail here, not on the Hub
            raise RhythmError(f"{folder} is a folder; a dataset repo takes episode files: name them "
                              f"(--files {folder}/*.jsonl), or upload the folder to a model repo (--repo-type model)")
    notes = [note for folder in folders if (note := local_base_note(folder))]
    readme: str | None = None
    read = read_episode_files(jsonl) if card and repo_type == "dataset" else {}  # bad data fails here
    new_stats = {p.name: stats for p, stats in read.items()}
    if card and repo_type == "model":
        readme = next((c for c in (model_card(repo_id, d) for d in folders) if c), None)
    token = require_token()
    api = HfApi(token=token)
    parent = None
    try:
        repo_url = retrying(lambda: api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True))
        if new_stats:
            parent, earlier, others = retrying(lambda: earlier_episode_files(api, repo_id, {remote for _, remote in pairs}))
            readme = dataset_card(repo_id, {**earlier, **new_stats}, others)
        stale: list[str] = []
        if repo_type == "model" and any(holds_model(folder) for folder in folders):
            parent, stale = retrying(lambda: earlier_model_files(api, repo_id, {remote for _, remote in pairs}))
            if stale:
                notes.append(f"removed from {repo_id} what this model does not have: {', '.join(stale[:6])}"
                             + (f" and {len(stale) - 6} more" if len(stale) > 6 else ""))
        ops: list[Any] = [CommitOperationAdd(path_in_repo=remote, path_or_fileobj=str(local))
                          for local, remote in pairs if not (readme and remote == "README.md")]
        ops += [CommitOperationDelete(path_in_repo=path) for path in stale]
        if readme:
            ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme.encode()))
        message = commit_message or f"rhythm upload: {', '.join(sorted({r for _, r in pairs}))[:200]}"
        sent: list[int] = []

        def commit() -> Any:
            sent.append(1)
            return api.create_commit(repo_id, ops, repo_type=repo_type, parent_commit=parent, commit_message=message)

        try:
            info = retrying(commit)
        except hub_errors() as err:
            status = getattr(getattr(err, "response", None), "status_code", None)
            info = landed_commit(api, repo_id, repo_type, message, parent) if status == 412 and len(sent) > 1 else None
            if info is None:
                raise
    except hub_errors() as err:
        raise _hub_error(err, f"upload to {repo_id}") from None
    return UploadResult(repo_id, repo_type, str(repo_url), str(info.commit_url), str(info.oid),
                        [op.path_in_repo for op in ops if isinstance(op, CommitOperationAdd)], notes)


def read_episode_files(paths: Sequence[Path]) -> dict[Path, dict[str, Any]]:
    """The :func:`episode_stats` of each episode file a dataset upload carries; a broken one, or one without
    episodes (its card would say 0 / 0), is one line before anything is sent."""
    read = {Path(p): episode_stats([p]) for p in paths}
    empty = [str(p) for p, stats in read.items() if not stats["episodes"]]
    if empty:
        raise RhythmError(f"{', '.join(empty)}: no episodes; a dataset card describes episode files that hold some")
    return read


MODEL_FILES = ("config.json", "adapter_config.json")
"""Files that make a folder a trained model's (full weights, a LoRA adapter)."""


def holds_model(folder: Path) -> bool:
    """Whether ``folder`` holds a trained model (:data:`MODEL_FILES`) or a training run's summary."""
    return any((folder / name).is_file() for name in MODEL_FILES) or any(folder.glob("*_summary.json"))


def local_base_note(folder: Path) -> str | None:
    """A line when ``folder`` is a LoRA adapter whose base is a path on this machine: uploaded, it loads only where
    that path exists (None otherwise)."""
    try:
        base = orjson.loads((folder / "adapter_config.json").read_bytes()).get("base_model_name_or_path")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    if not base or not Path(str(base)).expanduser().exists():
        return None
    return (f"note: the adapter in {folder} names its base as the local path {base}, which only this machine has; "
            f"push the base too (rhythm upload --files {base} --repo USER/base --repo-type model) and name it in "
            "adapter_config.json's base_model_name_or_path")


def push_folder(folder: str | Path, repo_id: str, *, private: bool = True, commit_message: str | None = None,
                say: Callable[[str], None] | None = None) -> str:
    """Upload a training output folder (no checkpoints) with its model card; returns the repo URL. ``say`` hears
    the upload's notes."""
    result = upload([folder], repo_id, repo_type="model", private=private, commit_message=commit_message)
    for note in result.notes:
        (say or (lambda msg: None))(note)
    return result.repo_url
