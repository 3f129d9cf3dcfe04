"""``rhythm sft --flavor``: the Hugging Face Jobs submission, checked on a fake Hub with the real client,
and the job's own script run here as the job would run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata

import orjson
import pytest

from ..fakehub import FakeHub
from .helpers import REPO, rhythm, write_episodes

JOB = ["sft", "--config", str(REPO / "rhythm" / "configs" / "sft.yaml"), "--flavor", "a10g-large",
       "--set", "hub_model_id=tester/rhythm-sft", "--set", "jobs.data_repo=tester/rhythm-teacher"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    path = tmp_path_factory.mktemp("jobdata") / "teacher.jsonl"
    write_episodes(path, range(4))
    return path


def pep723(script: str) -> dict:
    """The PEP 723 metadata block, parsed as the PEP's reference implementation does."""
    import tomllib

    m = re.search(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$", script)
    assert m and m.group("type") == "script"
    content = "".join(line[2:] if line.startswith("# ") else line[1:] for line in m.group("content").splitlines(keepends=True))
    return tomllib.loads(content)


def no_token_anywhere(hub: FakeHub, *texts: str) -> None:
    for text in texts:
        assert hub.token not in text


def test_flavor_submits_a_job_with_flavor_secret_and_env(hub, tmp_path, teacher):
    code, out, err = rhythm(hub, tmp_path, *JOB, "--set", "hub_private=false", "--data", str(teacher))
    assert code == 0, err
    (job_id, spec), = [(k, v["spec"]) for k, v in hub.jobs.items()]
    assert out.strip() == f"{job_id}\t{hub.url}/jobs/tester/{job_id}"
    assert hub.requests_to("/api/jobs/tester", "POST")[0].headers["authorization"] == f"Bearer {hub.token}"
    # the hardware, the image, the time limit
    assert spec["flavor"] == "a10g-large" and spec["dockerImage"].startswith("ghcr.io/astral-sh/uv")
    assert spec["timeoutSeconds"] == 3 * 3600
    # the token travels only as a secret
    assert spec["secrets"] == {"HF_TOKEN": hub.token}
    env = spec["environment"]
    no_token_anywhere(hub, orjson.dumps(env).decode(), " ".join(spec["command"]), orjson.dumps(spec.get("labels")).decode(), out, err)
    assert env["RHYTHM_DATA_REPO"] == "tester/rhythm-teacher" and env["RHYTHM_DATA_FILES"] == "teacher.jsonl"
    assert env["RHYTHM_OUTPUT_REPO"] == env["RHYTHM_JOB_REPO"] == "tester/rhythm-sft"
    # the data went to the data repo first, with its card
    data_repo = hub.repo("tester/rhythm-teacher", "dataset")
    assert data_repo.files["teacher.jsonl"] == teacher.read_bytes() and "README.md" in data_repo.files
    assert env["RHYTHM_DATA_REVISION"] == data_repo.head
    assert data_repo.private and not hub.repo("tester/rhythm-sft").private  # hub_private=false is the model's alone
    # the script was committed to the run repo and the job runs it by URL, pinned to that commit
    run_repo = hub.repo("tester/rhythm-sft")
    revision = env["RHYTHM_JOB_REVISION"]
    assert revision == run_repo.head and run_repo.commits[-1]["summary"].startswith("rhythm sft")
    assert spec["command"] == ["uv", "run", f"{hub.url}/tester/rhythm-sft/resolve/{revision}/rhythm_job/run.py"]
    assert "volumes" not in spec
    script = run_repo.files["rhythm_job/run.py"].decode()
    deps = pep723(script)["dependencies"]
    installed = {f"{name}=={metadata.version(name).split('+')[0]}" for name in ("trl", "peft", "transformers", "torch", "huggingface_hub")}
    assert installed <= set(deps)  # pinned to what is installed here, whatever that is
    config = run_repo.files["rhythm_job/config.yaml"].decode()
    assert "model_name_or_path: Qwen/Qwen2.5-3B-Instruct" in config and "data: teacher.jsonl" in config
    assert "rhythm_job/src/rhythm/train/sft.py" in run_repo.files
    no_token_anywhere(hub, *(c.decode(errors="ignore") for c in run_repo.files.values()))


@pytest.mark.parametrize("status, message, advice", [
    (500, "Internal Error", "; try again later"),
    (403, "Jobs are not available for this account", "; check the token (HF_TOKEN or `hf auth login`) and its write access"),
])
def test_a_refused_job_submission_is_one_line_and_keeps_what_was_uploaded(hub, tmp_path, teacher, status, message, advice):
    hub.fail("/api/jobs/tester", status, message, method="POST")
    code, out, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher))
    lines = err.strip().splitlines()
    assert code == 2 and out == "", err
    assert lines[-1].startswith(f"rhythm: error: submitting the sft job failed: {status} ") and message in lines[-1]
    assert lines[-1].endswith(advice)  # and says what to do next
    assert all(not line.startswith("rhythm: error:") for line in lines[:-1])  # the lines before say what was done
    assert not hub.jobs
    # what went up before the refusal stays: the data and the job's script, ready for a retry
    assert hub.repo("tester/rhythm-teacher", "dataset").files["teacher.jsonl"] == teacher.read_bytes()
    assert "rhythm_job/run.py" in hub.repo("tester/rhythm-sft").files
    no_token_anywhere(hub, out, err)


def test_a_hub_that_drops_the_job_submission_is_one_line_and_keeps_what_was_uploaded(hub, tmp_path, teacher):
    hub.drop("/api/jobs/tester", method="POST")
    code, out, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher))
    lines = err.strip().splitlines()
    assert code == 2 and out == "", err
    assert lines[-1].startswith(f"rhythm: error: submitting the sft job failed: no answer from the Hub at {hub.url} (")
    assert all(not line.startswith("rhythm: error:") for line in lines[:-1])
    assert not hub.jobs and len(hub.requests_to("/api/jobs/tester", "POST")) >= 1
    assert hub.repo("tester/rhythm-teacher", "dataset").files["teacher.jsonl"] == teacher.read_bytes()
    assert "rhythm_job/run.py" in hub.repo("tester/rhythm-sft").files
    no_token_anywhere(hub, out, err)


def test_private_run_repo_is_mounted_not_fetched(hub, tmp_path, teacher):
    code, out, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher), "--set", "jobs.timeout=90m")
    assert code == 0, err
    (spec,) = [v["spec"] for v in hub.jobs.values()]
    revision = spec["environment"]["RHYTHM_JOB_REVISION"]
    assert hub.repo("tester/rhythm-sft").private and hub.repo("tester/rhythm-teacher", "dataset").private
    assert spec["volumes"] == [{"type": "model", "source": "tester/rhythm-sft", "mountPath": "/rhythm-run",
                                "revision": revision, "readOnly": True}]
    assert spec["command"] == ["uv", "run", "/rhythm-run/rhythm_job/run.py"]
    assert spec["environment"]["RHYTHM_JOB_DIR"] == "/rhythm-run/rhythm_job"
    assert spec["timeoutSeconds"] == 90 * 60 and spec["secrets"] == {"HF_TOKEN": hub.token}


def test_dry_run_prints_the_spec_and_sends_nothing(hub, tmp_path, teacher):
    code, out, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher), "--dry-run")
    assert code == 0, err
    assert hub.requests == []
    spec = orjson.loads(out)
    assert spec["flavor"] == "a10g-large" and spec["secrets"] == {"HF_TOKEN": "***"}
    assert spec["environment"]["RHYTHM_DATA_FILES"] == "teacher.jsonl"
    assert spec["would_upload"]["files"] == [str(teacher)] and spec["would_commit"]["repo"] == "tester/rhythm-sft"
    no_token_anywhere(hub, out, err)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hub-model-id", "rhythm-sft"], "hub_model_id (the run's model repo) must look like user/name, got 'rhythm-sft'"),
        (["--data-repo", "a/b/c"], "data_repo must look like user/name, got 'a/b/c'"),
        (["--data-repo", "tester/my data"], "data_repo 'tester/my data' is not a name the Hub takes"),
        (["--hub-model-id", "tester/my..student"], "'tester/my..student' is not a name the Hub takes"),
        (["--flavor", "a10g-huge"], "unknown flavor 'a10g-huge'"),
        (["--data", "-"], "a job cannot read stdin"),
        (["--set", "jobs.timeout=abc"], "jobs.timeout must be a positive number of seconds, or one with an s, m, h or d "
                                        "suffix (3h, 90m), got 'abc'"),
        (["--data", "/nowhere/teacher_typo.jsonl"], "file not found: /nowhere/teacher_typo.jsonl"),
    ],
)
def test_flavor_bad_input_exits_2(hub, tmp_path, teacher, args, message):
    code, out, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher), *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err
    assert hub.requests == []


def test_the_dry_run_refuses_what_the_submission_refuses(hub, tmp_path, teacher):
    """No token, or data that would not upload (a broken line, no episodes): the dry run printed a job spec and exit
    0 where the submission then stopped with one line."""
    broken, empty = tmp_path / "broken.jsonl", tmp_path / "empty.jsonl"
    broken.write_bytes(teacher.read_bytes().splitlines()[0] + b"\n{oops\n")
    empty.write_bytes(b"")
    named = ["--hub-model-id", "tester/m", "--data-repo", "tester/d"]
    for dry in (["--dry-run"], []):
        code, out, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher), *named, *dry, token=False)
        assert code == 2 and out == "" and "no Hugging Face token" in err, err
        for data, needle in ((broken, "broken.jsonl:2: not valid JSON"), (empty, "empty.jsonl: no episodes")):
            code, out, err = rhythm(hub, tmp_path, *JOB, "--data", str(data), *named, *dry)
            assert code == 2 and out == "" and needle in err, err
    assert not hub.requests_to("/commit")


def test_two_data_files_of_one_name_are_refused_by_the_dry_run_as_by_the_submission(hub, tmp_path, teacher):
    """Uploaded by their names, both would land at one path in the data repo: the dry run printed a job reading one
    file twice, which the submission then refused."""
    other = tmp_path / "b" / teacher.name
    other.parent.mkdir()
    other.write_bytes(teacher.read_bytes())
    for dry in (["--dry-run"], []):
        code, out, err = rhythm(hub, tmp_path, *JOB, "--data", f"{teacher},{other}", *dry)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert f"two files would both land at '{teacher.name}' in the repo" in err
    assert hub.requests == []


def test_a_data_file_neither_here_nor_in_the_data_repo_is_refused_before_anything_is_sent(hub, tmp_path, teacher):
    """A relative path that is no file here names a file in the data repo; one that is not there either used to
    start a paid job that failed reading it. Checked before any upload, commit or job, and by a dry run."""
    code, out, err = rhythm(hub, tmp_path, *JOB, "--data", f"{teacher},teacher_typo.jsonl")
    assert code == 2 and out == "", err
    assert err.strip().splitlines()[-1] == ("rhythm: error: file not found: teacher_typo.jsonl (neither here nor in the "
                                            "dataset repo tester/rhythm-teacher)")
    assert not hub.jobs and not [r for r in hub.requests if r.method in ("POST", "PUT")]
    code, out, err = rhythm(hub, tmp_path, *JOB, "--data", "teacher_typo.jsonl", "--dry-run")  # a dry run checks too
    assert code == 2 and out == "" and "file not found: teacher_typo.jsonl (neither here" in err
    assert not [r for r in hub.requests if r.method in ("POST", "PUT")]
    code, _, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher))  # uploads teacher.jsonl, submits a job
    assert code == 0, err
    code, _, err = rhythm(hub, tmp_path, *JOB, "--data", "teacher.jsonl")  # no such file here: the repo's
    assert code == 0, err
    assert [v["spec"]["environment"]["RHYTHM_DATA_FILES"] for v in hub.jobs.values()] == ["teacher.jsonl"] * 2


@pytest.mark.slow
def test_job_script_trains_and_pushes_to_the_hub(hub, tmp_path, teacher, tiny_student, rhythm_cache):
    """Run the committed run.py as the job would (fetching its code and data from the Hub by itself)."""
    code, _, err = rhythm(hub, tmp_path, *JOB, "--data", str(teacher), "--set", "hub_private=false",
                          "--set", "model_name_or_path=rhythm-tiny", "--max-steps", "2", "--set", "eval_steps=2",
                          "--set", "per_device_train_batch_size=2", "--set", "bf16=false", "--set", "val_fraction=0",
                          "--set", "gradient_checkpointing=false")
    assert code == 0, err
    (spec,) = [v["spec"] for v in hub.jobs.values()]
    script = tmp_path / "run.py"
    script.write_bytes(hub.repo("tester/rhythm-sft").files["rhythm_job/run.py"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(hub.env(tmp_path / "job-home", token=False), **spec["environment"], **spec["secrets"])
    env.update(RHYTHM_CACHE=str(rhythm_cache), RHYTHM_OUTPUT_DIR=str(tmp_path / "out"), RHYTHM_NUM_PROCESSES="1",
               PYTHONPATH="")
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_token_anywhere(hub, proc.stdout, proc.stderr)
    files = hub.repo("tester/rhythm-sft").files
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "training_log.jsonl",
                 "sft_config.yaml", "sft_summary.json", "README.md", "rhythm_job/run.py"):
        assert name in files, name
    assert not any(name.startswith("checkpoint-") for name in files)
    summary = orjson.loads(files["sft_summary.json"])
    assert summary["global_step"] == 2 and summary["data"]["files"][0].endswith("teacher.jsonl")
    # it ran the stage module with the committed config (the source beside it comes first on PYTHONPATH)
    assert re.search(r"rhythm job: \S+ -m rhythm\.train\.sft --config \S+/rhythm_job/config\.yaml --set data=", proc.stderr)
    assert [line for line in files["training_log.jsonl"].splitlines() if b'"stage":"sft"' in line]


@pytest.mark.parametrize("args, needle", [
    (["sft", "--model", "./localbase"], "a job cannot read the local model ./localbase; push it to the Hub"),
    (["grpo", "--model", "./local", "--set", "adapter=null"], "a job cannot read the local model ./local; push it to the Hub"),
    (["sft", "--resume"], "--resume continues from the checkpoints of a local output_dir, which a job cannot read"),
    (["grpo", "--resume", "--set", "adapter=me/rhythm-sft"], "--resume continues from the checkpoints"),
], ids=["sft-local-model", "grpo-local-model", "sft-resume", "grpo-resume"])
def test_a_job_refuses_what_only_this_machine_has(hub, tmp_path, run_cli, args, needle):
    """A local base model would fail on the paid machine, and --resume has no checkpoints there: both are
    refused at submission (dry run too), one line, exit 2, before any request."""
    data = tmp_path / "t.jsonl"
    data.write_text("{}\n")
    job = [*args, "--flavor", "a10g-large", "--data", str(data), "--hub-model-id", "org/student", "--data-repo", "org/data"]
    code, out, err = run_cli(*job, "--dry-run")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err
    code, out, err = rhythm(hub, tmp_path, *job)  # submitted for real: nothing uploaded, committed or launched
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err
    assert hub.requests == [] and not hub.jobs


def test_a_grpo_run_whose_prompts_are_its_rollout_seeds_goes_to_jobs_without_data(hub, tmp_path):
    """Branch, pairs and restore modes take their prompts from rollout_seeds: a job asked for data they do not use
    (and a data file given to pass would have added the teacher's states to the prompts)."""
    code, out, err = rhythm(hub, tmp_path, "grpo", "--config", "grpo-tiny-branch", "--model", "tester/tiny-sft",
                            "--flavor", "a10g-large", "--set", "hub_model_id=tester/rhythm-grpo",
                            "--set", "jobs.data_repo=tester/rhythm-teacher", "--dry-run")
    assert code == 0, err
    spec = orjson.loads(out)
    assert spec["environment"]["RHYTHM_DATA_FILES"] == "" and spec["would_upload"]["files"] == []
    assert hub.requests == []
    assert "hub repos: model tester/rhythm-grpo, data tester/rhythm-teacher\n" in err  # no "adapter None": a full model
