"""Hub repos named from whoami: ``rhythm sft --flavor a10g-large`` works as typed, in an empty directory
after ``rhythm generate --seeds 0-29``, on a fake Hub with the real client."""

from __future__ import annotations

import orjson
import pytest

from .helpers import rhythm

DERIVED = "hub repos: model tester/rhythm-sft (default from whoami), data tester/rhythm-teacher (default from whoami)"


@pytest.mark.slow
def test_sft_flavor_as_typed_after_generate_uses_repos_from_whoami(hub, tmp_path):
    code, _, err = rhythm(hub, tmp_path, "generate", "--seeds", "0-29", "--quiet")
    assert code == 0, err
    code, out, err = rhythm(hub, tmp_path, "sft", "--flavor", "a10g-large")
    assert code == 0, err
    assert DERIVED in err and "the model lands in tester/rhythm-sft" in err
    assert hub.requests_to("/api/whoami-v2", "GET")
    (job_id, spec), = [(k, v["spec"]) for k, v in hub.jobs.items()]
    assert out.strip() == f"{job_id}\t{hub.url}/jobs/tester/{job_id}"
    assert hub.requests_to("/api/jobs/tester", "POST")
    env = spec["environment"]
    assert env["RHYTHM_OUTPUT_REPO"] == env["RHYTHM_JOB_REPO"] == "tester/rhythm-sft"
    assert env["RHYTHM_DATA_REPO"] == "tester/rhythm-teacher" and env["RHYTHM_DATA_FILES"] == "teacher_30ep.jsonl"
    data = hub.repo("tester/rhythm-teacher", "dataset")
    assert data.files["teacher_30ep.jsonl"] == (tmp_path / "data" / "teacher_30ep.jsonl").read_bytes()
    assert "rhythm_job/run.py" in hub.repo("tester/rhythm-sft").files


def test_dry_run_shows_the_derived_repos_and_sends_only_whoami(hub, tmp_path, teacher):
    (tmp_path / "t.jsonl").write_bytes(teacher.read_bytes())
    code, out, err = rhythm(hub, tmp_path, "sft", "--flavor", "a10g-large", "--data", "t.jsonl", "--dry-run")
    assert code == 0, err
    assert DERIVED in err and {(r.method, r.path) for r in hub.requests} == {("GET", "/api/whoami-v2")}
    spec = orjson.loads(out)
    assert spec["would_commit"]["repo"] == "tester/rhythm-sft" and spec["would_upload"]["data_repo"] == "tester/rhythm-teacher"
    assert spec["namespace"] == "tester"


def test_given_repos_are_kept_and_whoami_is_not_asked(hub, tmp_path, teacher):
    (tmp_path / "t.jsonl").write_bytes(teacher.read_bytes())
    code, out, err = rhythm(hub, tmp_path, "sft", "--flavor", "a10g-large", "--data", "t.jsonl", "--dry-run",
                            "--hub-model-id", "org/student", "--data-repo", "org/data")
    assert code == 0, err
    assert "hub repos: model org/student, data org/data" in err and hub.requests == []
    spec = orjson.loads(out)
    assert spec["would_commit"]["repo"] == "org/student" and spec["namespace"] == "org"


def test_grpo_flavor_defaults_its_adapter_to_the_sft_repo(hub, tmp_path, teacher):
    """... and a job is not planned while that adapter is not on the Hub (the paid job would fail loading it)."""
    from huggingface_hub import HfApi

    (tmp_path / "t.jsonl").write_bytes(teacher.read_bytes())
    code, out, err = rhythm(hub, tmp_path, "grpo", "--flavor", "a10g-large", "--data", "t.jsonl", "--dry-run")
    assert code == 2 and out == "" and err.strip().splitlines()[-1] == (
        "rhythm: error: adapter tester/rhythm-sft not found on the Hub (or not readable with this token): push the SFT "
        "run there first (rhythm sft --flavor ..., or --push-to-hub), or pass --adapter user/name")
    HfApi(endpoint=hub.url, token=hub.token).create_repo("tester/rhythm-sft", private=True)
    code, out, err = rhythm(hub, tmp_path, "grpo", "--flavor", "a10g-large", "--data", "t.jsonl", "--dry-run")
    assert code == 0, err
    assert ("hub repos: model tester/rhythm-grpo (default from whoami), data tester/rhythm-teacher (default from whoami), "
            "adapter tester/rhythm-sft (default from whoami)") in err
    assert orjson.loads(out)["environment"]["RHYTHM_OUTPUT_REPO"] == "tester/rhythm-grpo"


@pytest.mark.parametrize("token", [False, True])
def test_no_token_or_a_refused_one_is_one_line_exit_2(hub, tmp_path, token, teacher):
    (tmp_path / "t.jsonl").write_bytes(teacher.read_bytes())
    extra = {"HF_TOKEN": "hf_not_the_right_one"} if token else None
    code, out, err = rhythm(hub, tmp_path, "sft", "--flavor", "a10g-large", "--data", "t.jsonl", token=False, extra_env=extra)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--hub-model-id user/name" in err
    assert ("whoami) failed" in err) if token else ("set HF_TOKEN" in err and "YOU/rhythm-sft" in err)
    assert hub.jobs == {}


def test_without_a_token_a_grpo_job_names_the_repo_it_lacks(hub, tmp_path, teacher):
    """Its run and data repos given, a GRPO job still needs the adapter it starts from (YOU/rhythm-sft by default):
    the line names that one, not the repos already given."""
    (tmp_path / "t.jsonl").write_bytes(teacher.read_bytes())
    code, out, err = rhythm(hub, tmp_path, "grpo", "--flavor", "a10g-large", "--dry-run", "--hub-model-id", "me/x",
                            "--data-repo", "me/d", "--data", "t.jsonl", token=False)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "needs adapter: pass --adapter user/name" in err and "YOU/rhythm-sft" in err and "--hub-model-id" not in err
    assert hub.requests == []


def test_upload_without_repo_goes_to_the_users_teacher_repo(hub, tmp_path):
    from .helpers import write_episodes

    write_episodes(tmp_path / "t.jsonl", range(2))
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", "t.jsonl")
    assert code == 0, err
    assert "hub repos: data tester/rhythm-teacher (default from whoami)" in err
    assert hub.repo("tester/rhythm-teacher", "dataset").files["t.jsonl"] == (tmp_path / "t.jsonl").read_bytes()
    code, out, err = rhythm(hub, tmp_path, "upload", "--files", "t.jsonl", "--repo-type", "model")
    assert code == 2 and err.strip() == "rhythm: error: --repo user/name is required for a model upload"


@pytest.mark.parametrize("case", ["no-token", "refused-token", "read-only-token"])
def test_a_local_push_checks_the_token_before_training(hub, tmp_path, case, teacher):
    """``--push-to-hub`` with every repo named still asks whoami first: no token, a refused one or a read-only
    one is one line and exit 2 before the run starts (its data, here unreadable, is never read), not after
    hours of training."""
    (tmp_path / "t.jsonl").write_bytes(teacher.read_bytes())
    extra = {"HF_TOKEN": "hf_not_the_right_one"} if case == "refused-token" else None
    hub.role = "read" if case == "read-only-token" else "write"
    code, out, err = rhythm(hub, tmp_path, "sft", "--push-to-hub", "--hub-model-id", "tester/s", "--data", "t.jsonl",
                            "-o", "run", token=case != "no-token", extra_env=extra)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    needle = {"no-token": "push_to_hub needs a Hugging Face token", "refused-token": "whoami) failed",
              "read-only-token": "tester's token is read-only"}[case]
    assert needle in err and "drop --push-to-hub" in err
    assert [r.path for r in hub.requests] == ([] if case == "no-token" else ["/api/whoami-v2"])
    assert not (tmp_path / "run").exists()
