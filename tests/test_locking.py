"""One writer per output: a second run on the same file stops at once (exit 2, one line) or waits."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from rhythm.locking import OutputLocked, lock_path, output_lock

RHYTHM = [sys.executable, "-m", "rhythm.cli.main"]


def _seeds(path: Path) -> list[int]:
    return [orjson.loads(line)["seed"] for line in path.read_bytes().splitlines()]


def test_second_holder_fails_at_once_and_names_the_output(tmp_path: Path) -> None:
    out = tmp_path / "data" / "t.jsonl"
    with output_lock(out) as held:
        assert held == lock_path(out) == tmp_path / "data" / ".t.jsonl.lock"
        # raised while this very thread still holds the lock: a second holder that waited would never return
        with pytest.raises(OutputLocked, match=r"t\.jsonl is being written by another rhythm run.*--wait-lock"):
            with output_lock(out):
                pass
        assert not out.exists()  # the loser touched nothing
    with output_lock(out):  # released: free again
        pass


def test_waiter_gets_the_lock_when_the_holder_ends(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    order: list[str] = []
    said: list[str] = []
    waiting = threading.Event()

    def say(line: str) -> None:  # said just before the waiter blocks on the held lock
        said.append(line)
        waiting.set()

    def waiter() -> None:
        with output_lock(out, wait=True, say=say):
            order.append("waiter")

    with output_lock(out):
        thread = threading.Thread(target=waiter)
        thread.start()
        while not waiting.wait(0.01) and thread.is_alive():  # until it waits (or ended without waiting)
            pass
        order.append("holder done")
    thread.join()
    assert order == ["holder done", "waiter"] and said and "waiting for the other run" in said[0]


def test_stdout_needs_no_lock(tmp_path: Path) -> None:
    with output_lock("-") as a, output_lock("-") as b, output_lock(None) as c:
        assert a is b is c is None


@pytest.mark.slow
@pytest.mark.parametrize("wait", [False, True])
def test_two_generate_runs_on_one_file_write_every_seed_once(tmp_path: Path, wait: bool) -> None:
    """The measured bug: two ``generate --resume`` on one file wrote 120 records for 60 seeds."""
    out = tmp_path / "t.jsonl"
    cmd = [*RHYTHM, "generate", "--seeds", "0-59", "--output", str(out), "--resume", "--quiet", "--set", "chunk=4"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.stat().st_size == 0):
        time.sleep(0.02)  # the first run holds the lock once it writes
    second = subprocess.run(cmd + (["--wait-lock"] if wait else []), capture_output=True, text=True, timeout=120)
    _, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    assert sorted(_seeds(out)) == list(range(60))  # every seed exactly once
    if wait:
        assert second.returncode == 0, second.stderr
        assert "waiting for the other run" in second.stderr and "0 episodes written, 60 already there" in second.stderr
    else:
        assert second.returncode == 2 and second.stdout == ""
        assert second.stderr.splitlines() == [
            f"rhythm: error: {out} is being written by another rhythm run (it holds {lock_path(out)}); "
            "wait for it to finish, or pass --wait-lock to wait for it"
        ]


def test_a_link_to_an_output_holds_the_outputs_own_lock(tmp_path: Path) -> None:
    """A run on a link to the file another run writes would append every missing week a second time."""
    out = tmp_path / "t.jsonl"
    out.write_bytes(b"")
    link = tmp_path / "link.jsonl"
    link.symlink_to(out)
    assert lock_path(link) == lock_path(out)
    with output_lock(out), pytest.raises(OutputLocked, match="link.jsonl is being written by another rhythm run"):
        with output_lock(link):
            pass


def test_relabel_holds_its_outputs_lock(run_cli, tmp_path: Path) -> None:
    """Two ``rhythm relabel`` on one output wrote every week twice: a second stops at once, the output untouched."""
    weeks = tmp_path / "w.jsonl"
    code, _, err = run_cli("generate", "--seeds", "0-1", "--output", str(weeks), "--quiet")
    assert code == 0, err
    out = tmp_path / "own.jsonl"
    with output_lock(out):
        code, stdout, err = run_cli("relabel", str(weeks), "-o", str(out), "--quiet")
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1 and "own.jsonl is being written" in err
    assert not out.exists()
    code, _, err = run_cli("relabel", str(weeks), "-o", str(out), "--quiet")  # once it is free
    assert code == 0 and len(out.read_bytes().splitlines()) == 2, err


def test_eval_holds_its_episodes_lock(run_cli, tmp_path: Path) -> None:
    """A second eval on the same output stops before deleting the first one's episodes."""
    results = tmp_path / "r.json"
    episodes = tmp_path / "r.episodes.jsonl"
    episodes.write_bytes(b"{}\n")
    with output_lock(episodes):
        code, out, err = run_cli("eval", "--agent", "random", "--condition", "ood", "--episodes", "2",
                                 "--output", str(results), "--quiet")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "r.episodes.jsonl is being written" in err
    assert episodes.read_bytes() == b"{}\n" and not results.exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no file can be made")
def test_a_place_no_lock_can_be_made_in_is_said_as_such_not_as_another_run() -> None:
    from rhythm.errors import RhythmError

    with pytest.raises(RhythmError, match=r"cannot write beside /proc/rhythm-test\.jsonl: .*\(/proc/\.rhythm-test\.jsonl\.lock\)") as err:
        with output_lock("/proc/rhythm-test.jsonl"):
            pass
    assert not isinstance(err.value, OutputLocked)
