"""``rhythm upload`` and ``rhythm sft --flavor`` against a fake Hub on 127.0.0.1, with the real client.

The CLI runs in a subprocess: ``huggingface_hub`` reads ``HF_ENDPOINT`` once, at import.
"""

from __future__ import annotations

import orjson
import pytest
import yaml

from tests.fakehub import FakeHub

from .helpers import rhythm, write_episodes


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    path = tmp_path_factory.mktemp("hubdata") / "teacher_6ep.jsonl"
    records = write_episodes(path, range(6))
    (path.parent / (path.name + ".config.yaml")).write_text("teacher: bayes\nseeds: 0-5\n")
    return path, records


def test_upload_lands_files_and_dataset_card(hub, tmp_path, teacher):
    path, records = teacher
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", str(path), "--repo", "tester/rhythm-teacher")
    assert code == 0, err
    repo = hub.repo("tester/rhythm-teacher", "dataset")
    assert not repo.private
    assert repo.files["teacher_6ep.jsonl"] == path.read_bytes()
    assert repo.files["teacher_6ep.jsonl.config.yaml"] == b"teacher: bayes\nseeds: 0-5\n"
    assert len(repo.commits) == 1  # one plain commit
    card = repo.files["README.md"].decode()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["configs"][0]["data_files"][0]["path"] == ["teacher_6ep.jsonl"]
    mean = sum(r["score"]["final_score"] for r in records) / 6
    for fact in ("| record schema | 2 |", "| env_version | rhythm-v1 |", "| teacher | bayes (6 episodes) |",
                 "| conditions | in-dist (6) |", "| split | train (6) |", "| seeds | in-dist/train: 0-5 |",
                 "| episodes / steps | 6 / 168 |", f"{mean:.3f}", "| cost | $0.00"):
        assert fact in card, fact
    assert out.strip().split("\t")[0].endswith("/datasets/tester/rhythm-teacher")
    auth = {r.headers.get("authorization") for r in hub.requests}
    assert auth == {f"Bearer {hub.token}"}


@pytest.mark.slow  # > 3 s on 2 cores
def test_upload_again_to_an_existing_private_repo(hub, tmp_path, teacher):
    path, records = teacher
    other = tmp_path / "api_teacher.jsonl"
    rec = orjson.loads(orjson.dumps(records[0]))
    rec.update(agent="openai", model="gpt-5.4", seed=40, usage={"cost_usd": 0.125, "prompt_tokens": 900, "completion_tokens": 100})
    other.write_bytes(orjson.dumps(rec) + b"\n")
    assert rhythm(hub, tmp_path, "upload", "--files", str(path), "--repo", "tester/t", "--private")[0] == 0
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(path), str(other), "--repo", "tester/t")
    assert code == 0, err
    repo = hub.repo("tester/t", "dataset")
    assert repo.private and len(repo.commits) == 2 and repo.files["api_teacher.jsonl"] == other.read_bytes()
    card = repo.files["README.md"].decode()
    assert "openai (gpt-5.4) (1 episodes)" in card and "| cost | $0.12 (900 prompt + 100 completion tokens) |" in card
    assert "in-dist/train: 0-5,40" in card


def test_upload_model_folder_skips_checkpoints_and_writes_model_card(hub, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-10").mkdir(parents=True)
    (run / "checkpoint-10" / "optimizer.pt").write_bytes(b"x" * 100)
    (run / "adapter_model.safetensors").write_bytes(b"weights")
    (run / "README.md").write_text("peft's generic card")
    (run / "sft_config.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-3B-Instruct\n")
    (run / "sft_summary.json").write_bytes(orjson.dumps({
        "adapter": True, "global_step": 160, "epochs": 3.0, "train_loss_first": 1.9, "train_loss_last": 0.41,
        "eval_loss_first": 1.8, "eval_loss_last": 0.52, "data": {"files": ["data/teacher_30ep.jsonl"], "train_examples": 756,
        "validation_examples": 84, "train_episodes": 27, "validation_episodes": 3}}))
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(run), "--repo", "tester/student", "--repo-type", "model")
    assert code == 0, err
    files = hub.repo("tester/student", "model").files
    assert set(files) == {".gitattributes", "adapter_model.safetensors", "README.md", "sft_config.yaml", "sft_summary.json"}
    card = files["README.md"].decode()
    assert "base_model: Qwen/Qwen2.5-3B-Instruct" in card and "library_name: peft" in card
    assert "| validation loss (first -> last) | 1.800 -> 0.520 |" in card and "AutoPeftModelForCausalLM" in card


def test_a_run_folder_goes_to_a_model_repo_without_this_machines_files(hub, tmp_path):
    """A training run's folder uploaded as a dataset (the default repo type) put its weights in a dataset repo; its
    hidden files (the quickstart's stage stamp) went up too; an adapter on a local base loads nowhere else, unsaid."""
    run, base = tmp_path / "run", tmp_path / "base"
    for folder in (run, base):
        folder.mkdir()
    (run / "adapter_config.json").write_text(orjson.dumps({"base_model_name_or_path": str(base)}).decode())
    (run / "adapter_model.safetensors").write_bytes(b"weights")
    (run / ".rhythm_stage.json").write_text("{}")
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", str(run), "--repo", "tester/student")
    assert code == 2 and out == "" and f"{run} holds a trained model (a training run's folder)" in err
    assert "--repo-type model" in err and not hub.requests_to("/commit")
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(run), "--repo", "tester/student", "--repo-type", "model")
    assert code == 0, err
    assert ".rhythm_stage.json" not in hub.repo("tester/student", "model").files
    assert f"names its base as the local path {base}, which only this machine has" in " ".join(err.split())


def test_a_commit_that_landed_behind_a_lost_answer_is_the_upload_not_a_failure(tmp_path, teacher):
    """The Hub applies the commit, then a proxy answers 504: the retry is refused (412, the parent moved on) because
    the first try landed. That was reported as a failed upload raced by another; it is this upload, done once."""
    class LateAnswer(FakeHub):
        lost = 1

        def _commit(self, req, repo):
            answer = super()._commit(req, repo)
            if self.lost and answer[0] == 200:
                self.lost -= 1
                return self._json(504, {"error": "Gateway Timeout"})
            return answer

    with LateAnswer() as hub:
        code, out, err = rhythm(hub, tmp_path, "upload", "--files", str(teacher[0]), "--repo", "tester/data")
        assert code == 0, err
        repo = hub.repo("tester/data", "dataset")
        assert [c["summary"] for c in repo.commits] == [f"rhythm upload: {teacher[0].name}, {teacher[0].name}.config.yaml"]
        assert repo.head in out and teacher[0].name in repo.files
        # a 412 on the first try is another's commit: still refused
        hub.fail("/commit/", 412, "A commit has happened since. Please refresh and try again.", "POST", times=1)
        code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(teacher[0]), "--repo", "tester/data")
        assert code == 2 and "412" in err


def test_a_model_pushed_over_another_kind_leaves_none_of_the_old_ones_files(hub, tmp_path):
    """A LoRA run, then a full fine-tune, to one repo (both default to YOU/rhythm-sft): the old adapter's files stayed
    beside the new weights, and the repo loaded as the old adapter. The job folder a submission committed stays."""
    lora, full = tmp_path / "lora", tmp_path / "full"
    for folder in (lora, full):
        folder.mkdir()
    (lora / "adapter_config.json").write_text('{"base_model_name_or_path": "Qwen/Qwen2.5-3B-Instruct"}')
    (lora / "adapter_model.safetensors").write_bytes(b"lora weights")
    (lora / "training_log.jsonl").write_text('{"step": 1}\n')
    (full / "config.json").write_text('{"model_type": "qwen2"}')
    (full / "model.safetensors").write_bytes(b"full weights")
    (full / "training_log.jsonl").write_text('{"step": 2}\n')
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(lora), "--repo", "tester/student", "--repo-type", "model")
    assert code == 0, err
    repo = hub.repo("tester/student", "model")
    repo.files["rhythm_job/run.py"] = b"print('the job')"  # what a Jobs submission commits beside the run
    repo.files["eval_results.json"] = b"{}"  # and what the user put there: neither is the old model's
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(full), "--repo", "tester/student", "--repo-type", "model")
    assert code == 0, err
    files = set(hub.repo("tester/student", "model").files)
    assert not files & {"adapter_config.json", "adapter_model.safetensors"}
    assert {"config.json", "model.safetensors", "training_log.jsonl", "rhythm_job/run.py", "eval_results.json"} <= files
    assert "removed from tester/student what this model does not have: adapter_config.json, adapter_model.safetensors" \
        in " ".join(err.split())


@pytest.mark.parametrize("status, headers", [(429, {"Retry-After": "1"}), (503, {})], ids=["429-retry-after", "503"])
def test_a_hub_busy_for_a_moment_is_tried_again(hub, tmp_path, teacher, status, headers):
    hub.fail("/commit/", status, "busy", method="POST", times=1, headers=headers)
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(teacher[0]), "--repo", "tester/rhythm-teacher")
    assert code == 0, err
    assert len(hub.requests_to("/commit/", "POST")) == 2
    assert teacher[0].name in hub.repo("tester/rhythm-teacher", "dataset").files


@pytest.mark.parametrize(
    "args, message",
    [
        (["--files", "missing.jsonl", "--repo", "tester/x"], "file not found: missing.jsonl"),
        (["--files", "{teacher}", "--repo", "not-a-repo-id"], "--repo must look like user/name"),
        (["--files", "{teacher}", "--repo", "tester/bad name"], "--repo 'tester/bad name' is not a name the Hub takes"),
        (["--files", "{teacher}", "--repo", "tester/x", "--repo-type", "space"], "--repo-type must be dataset or model"),
        (["--files", "{broken}", "--repo", "tester/x"], "broken.jsonl:2: not valid JSON"),
        (["--files", "{folder}", "--repo", "tester/x"], "is a folder; a dataset repo takes episode files: name them"),
        (["--files", "{empty}", "--repo", "tester/x"], "empty.jsonl: no episodes"),
    ],
)
def test_upload_bad_input_exits_2_with_one_line(hub, tmp_path, teacher, args, message):
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(teacher[0].read_bytes().splitlines()[0] + b"\n{oops\n")
    (tmp_path / "weeks").mkdir()
    (tmp_path / "weeks" / "t.jsonl").write_bytes(teacher[0].read_bytes())
    (tmp_path / "empty.jsonl").write_bytes(b"")
    args = [a.format(teacher=teacher[0], broken=broken, folder=tmp_path / "weeks", empty=tmp_path / "empty.jsonl") for a in args]
    code, out, err = rhythm(hub, tmp_path, "upload", *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not hub.requests_to("/commit")


def test_upload_without_token_says_how_to_log_in(hub, tmp_path, teacher):
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(teacher[0]), "--repo", "tester/x", token=False)
    assert code == 2 and "no Hugging Face token" in err and len(err.strip().splitlines()) == 1


CHECK_TOKEN = "; check the token (HF_TOKEN or `hf auth login`) and its write access"
LATER = "; try again later"


@pytest.mark.parametrize(
    "route, status, message, advice",
    [
        ("/commit/", 500, "Internal Error - We're working hard to fix this as soon as possible!", LATER),
        ("/commit/", 429, "You have been rate-limited; retry later", LATER),
        ("/api/repos/create", 403, "You don't have the rights to create a dataset under the namespace", CHECK_TOKEN),
    ],
    ids=["commit-500", "commit-429", "create-403"],
)
def test_upload_refused_by_the_hub_is_one_line_and_lands_nothing(hub, tmp_path, teacher, route, status, message, advice):
    path, _ = teacher
    before = path.read_bytes()
    hub.fail(route, status, message, method="POST")
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", str(path), "--repo", "tester/rhythm-teacher")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"rhythm: error: upload to tester/rhythm-teacher failed: {status} ") and message in lines[0]
    assert lines[0].endswith(advice)  # and says what to do next
    assert ("dataset", "tester/rhythm-teacher") not in hub.repos or not hub.repo("tester/rhythm-teacher", "dataset").commits
    if status != 403:  # a busy Hub is asked again, then its refusal is the answer
        assert len(hub.requests_to(route, "POST")) == 4
    assert path.read_bytes() == before  # the local file is untouched
    assert hub.token not in err


def test_upload_with_a_refused_token_is_one_line(hub, tmp_path, teacher):
    wrong = "hf_wrong_token_9876543210"
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", str(teacher[0]), "--repo", "tester/x",
                            extra_env={"HF_TOKEN": wrong})
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("rhythm: error: upload to tester/x failed: 401 ") and wrong not in err
    assert lines[0].endswith(CHECK_TOKEN)
    assert not hub.repos and not hub.requests_to("/commit")


def test_upload_when_the_hub_does_not_answer_is_one_line(hub, tmp_path, teacher):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    path, _ = teacher
    before = path.read_bytes()
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", str(path), "--repo", "tester/x",
                            extra_env={"HF_ENDPOINT": endpoint})
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"rhythm: error: upload to tester/x failed: no answer from the Hub at {endpoint} (")
    assert lines[0].endswith("; check the network (and HF_ENDPOINT, if set)")
    assert path.read_bytes() == before and hub.token not in err


def test_a_missing_file_is_named_before_the_hub_is_asked_for_a_default_repo(hub, tmp_path):
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", "missing.jsonl", token=False)
    assert code == 2 and out == "" and err.strip() == "rhythm: error: file not found: missing.jsonl"
    assert not hub.requests_to("/api/whoami-v2")


@pytest.mark.parametrize("repo", [["--repo", "tester/x"], []], ids=["named", "from-whoami"])
def test_upload_in_offline_mode_is_one_line(hub, tmp_path, teacher, repo):
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", str(teacher[0]), *repo, extra_env={"HF_HUB_OFFLINE": "1"})
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert "offline mode is enabled" in lines[0] and ("upload to tester/x failed" if repo else "or pass --repo user/name") in lines[0]
    assert not hub.repos


def test_each_upload_card_covers_every_episode_file_the_repo_holds(hub, tmp_path, teacher):
    """A second upload to the same dataset repo writes a card over every episode file there (data_files lists
    them by name, the stats are over all), and names a JSONL that is not episodes instead of loading it."""
    path, records = teacher
    stray = tmp_path / "notes.jsonl"
    stray.write_text('{"note": 1}\n')
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(path), str(stray), "--repo", "tester/t", "--no-card")
    assert code == 0, err
    more = tmp_path / "more.jsonl"
    more.write_bytes(b"".join(orjson.dumps({**r, "seed": 40 + i}) + b"\n" for i, r in enumerate(records[:2])))
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(more), "--repo", "tester/t")
    assert code == 0, err
    repo = hub.repo("tester/t", "dataset")
    card = repo.files["README.md"].decode()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["configs"][0]["data_files"][0]["path"] == ["more.jsonl", "teacher_6ep.jsonl"]
    for fact in ("| episodes / steps | 8 / 224 |", "| seeds | in-dist/train: 0-5,40-41 |", "| `more.jsonl` | 2 |",
                 "| `teacher_6ep.jsonl` | 6 |", "Not part of the data (JSONL that is not episodes): `notes.jsonl`."):
        assert fact in card, fact
    (commit,) = [r for r in hub.requests_to("/commit/", "POST")][-1:]
    assert orjson.loads(commit.body.splitlines()[0])["value"]["parentCommit"] == repo.commits[-2]["sha"]
