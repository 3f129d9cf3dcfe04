"""``rhythm plot``: three valid PNGs, and the series they draw come from the inputs."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml

from rhythm.env.constants import EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.eval.evaluate import EvalConfig, run_eval
from rhythm.eval.plots import (
    PUBLISHED_V2,
    PlotConfig,
    ScoreBar,
    belief_accuracy_figure,
    belief_curves,
    final_scores_figure,
    load_results,
    make_plots,
    score_bars,
    training_figure,
    training_series,
)
from rhythm.eval.results import EvalResults

SFT_LOG = [
    {"loss": 5.2, "grad_norm": 3.1, "learning_rate": 0.002, "epoch": 0.1, "step": 5, "stage": "sft"},
    {"eval_loss": 4.9, "eval_runtime": 1.0, "epoch": 0.1, "step": 5, "stage": "sft"},
    {"loss": 3.0, "grad_norm": 2.0, "learning_rate": 0.002, "epoch": 0.2, "step": 10, "stage": "sft"},
    {"loss": 1.5, "grad_norm": 1.0, "learning_rate": 0.002, "epoch": 0.3, "step": 15, "stage": "sft"},
    {"eval_loss": 1.7, "eval_runtime": 1.0, "epoch": 0.3, "step": 15, "stage": "sft"},
    {"train_runtime": 30.0, "train_loss": 3.2, "epoch": 0.3, "step": 15, "stage": "sft"},
]
GRPO_LOG = [
    {"loss": 0.01, "reward": 0.30, "reward_std": 0.10, "rewards/final_score/mean": 0.25, "rewards/format/mean": 0.05,
     "step": 1, "stage": "grpo"},
    {"loss": 0.02, "reward": 0.40, "reward_std": 0.08, "rewards/final_score/mean": 0.32, "rewards/format/mean": 0.08,
     "step": 2, "stage": "grpo"},
    {"loss": 0.00, "reward": 0.45, "reward_std": 0.05, "rewards/final_score/mean": 0.36, "rewards/format/mean": 0.09,
     "step": 3, "stage": "grpo"},
]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def write_log(directory: Path, entries: list[dict]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "training_log.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))
    return directory


@pytest.fixture(scope="module")
def bayes_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real eval of the bayes teacher (it states beliefs), with its episodes JSONL beside it."""
    out = tmp_path_factory.mktemp("eval") / "bayes" / "eval_results_v2.json"
    run_eval(EvalConfig(agent="bayes", episodes=3, output=str(out)))
    return out


@pytest.fixture(scope="module")
def heuristic_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "heuristic" / "eval_results_v2.json"
    run_eval(EvalConfig(agent="heuristic", episodes=3, condition="in-dist", output=str(out)))
    return out


@pytest.mark.slow  # > 3 s on 2 cores
def test_plot_cli_writes_three_valid_pngs(run_cli, bayes_results: Path, heuristic_results: Path, tmp_path: Path) -> None:
    sft = write_log(tmp_path / "sft", SFT_LOG)
    grpo = write_log(tmp_path / "grpo", GRPO_LOG)
    out = tmp_path / "plots"
    # several files after one --results, as the usage line reads
    code, stdout, err = run_cli("plot", "--results", str(bayes_results), str(heuristic_results),
                                "--log", str(sft), "--log", str(grpo), "--out", str(out))
    assert code == 0, err
    names = ["final_scores.png", "belief_accuracy.png", "training_loss.png"]
    assert stdout.split() == [str(out / n) for n in names]
    for name in names:
        w, h = png_size(out / name)
        assert 800 <= w <= 4000 and 500 <= h <= 3000, (name, w, h)
        assert (out / name).stat().st_size > 20_000  # drawn, not blank
    assert not list(out.glob("*.tmp"))


def test_only_what_was_given_is_drawn(run_cli, bayes_results: Path, tmp_path: Path) -> None:
    code, stdout, err = run_cli("plot", "--log", str(write_log(tmp_path / "sft", SFT_LOG)), "--out", str(tmp_path / "p"))
    assert code == 0, err
    assert stdout.split() == [str(tmp_path / "p" / "training_loss.png")]
    assert "no --results given" in err
    lonely = tmp_path / "copied" / "results.json"  # a results file without its episodes JSONL
    lonely.parent.mkdir()
    lonely.write_bytes(bayes_results.read_bytes())
    code, stdout, err = run_cli("plot", "--results", str(lonely), "--out", str(tmp_path / "q"))
    assert code == 0, err
    assert stdout.split() == [str(tmp_path / "q" / "final_scores.png")]
    assert "results.episodes.jsonl" in err and "no --log given" in err


def test_final_score_bars_come_from_the_results(bayes_results: Path, tmp_path: Path) -> None:
    res = load_results(bayes_results)
    bars = score_bars([(bayes_results, res)])
    ours = {(b.condition, b.grader): b for b in bars if b.kind == "agent"}
    for cond, entry in res.conditions.items():
        assert ours[(cond, "v3")].mean == entry.final_score.mean
        assert ours[(cond, "v3")].ci95 == tuple(entry.final_score.ci95)
        assert ours[(cond, "v2")].mean == entry.final_score_v2.mean
        refs = {(b.agent, b.grader): b for b in bars if b.kind == "reference" and b.condition == cond}
        oracle = "oracle (knows the person)"  # references are named for a reader too
        assert set(refs) == {(n, g) for n in ("random", "heuristic", oracle) for g in ("v2", "v3")}
        assert refs[(oracle, "v3")].mean == entry.references["oracle"].final_score
        assert refs[("random", "v2")].mean == entry.references["random"].final_score_v2
        assert all(b.ci95 is None for b in refs.values())
    published = {(b.agent, b.condition): b.mean for b in bars if b.kind == "published"}
    assert published[("random", "in-dist")] == 0.402 and published[("3B student, SFT+GRPO", "discrete")] == 0.520
    assert ("LLM teacher (gpt-5.4)", "discrete") not in published
    assert len(published) == sum(len(v) for v in PUBLISHED_V2.values()) == 14
    assert {b.grader for b in bars if b.kind == "published"} == {"v2"}
    # change an input, the bar follows
    changed = orjson.loads(bayes_results.read_bytes())
    changed["conditions"]["ood"]["final_score"] = {"mean": 0.123, "ci95": [0.1, 0.15]}
    again = score_bars([(bayes_results, EvalResults.model_validate(changed))])
    bar = next(b for b in again if b.kind == "agent" and b.condition == "ood" and b.grader == "v3")
    assert (bar.mean, bar.ci95) == (0.123, (0.1, 0.15))


def test_an_agent_evaluated_in_its_own_right_is_not_repeated_as_a_reference(bayes_results: Path, heuristic_results: Path) -> None:
    bars = score_bars([(bayes_results, load_results(bayes_results)), (heuristic_results, load_results(heuristic_results))])
    heur = [b for b in bars if b.agent == "heuristic" and b.condition == "in-dist" and b.grader == "v3"]
    assert [b.kind for b in heur] == ["agent"] and heur[0].ci95 is not None
    # where it was not evaluated in its own right (ood, discrete), it keeps its bar as bayes's reference
    others = [(b.condition, b.kind) for b in bars if b.agent == "heuristic" and b.grader == "v3" and b.condition != "in-dist"]
    assert sorted(others) == [("discrete", "reference"), ("ood", "reference")]


def test_the_figure_names_the_split_its_results_played() -> None:
    bars = [ScoreBar("bayes", "in-dist", grader, 0.6, (0.5, 0.7), "agent") for grader in ("v2", "v3")]
    assert "(eval split;" in final_scores_figure(bars)._suptitle.get_text()
    assert "(train split;" in final_scores_figure(bars, split="train")._suptitle.get_text()


def test_belief_curves_are_computed_from_the_episodes(bayes_results: Path, tmp_path: Path) -> None:
    from rhythm.env.profiles import belief_of, sample_profiles

    res = load_results(bayes_results)
    curves, notes = belief_curves([(bayes_results, res)])
    assert notes == [] and [c.condition for c in curves] == ["in-dist", "ood", "discrete"]
    episodes = [orjson.loads(line) for line in bayes_results.with_name("eval_results_v2.episodes.jsonl").read_bytes().splitlines()]
    for curve in curves:
        recs = [r for r in episodes if r["condition"] == curve.condition]
        assert curve.episodes == len(recs) == 3 and curve.mean.shape == (EPISODE_STEPS,)
        # by hand: step 5's MAE averaged over the episodes
        truths = belief_of(sample_profiles(curve.condition, "eval", np.array([r["seed"] for r in recs])))
        by_hand = np.mean([np.abs(np.array(r["steps"][5]["belief"]) - t).mean() for r, t in zip(recs, truths, strict=True)])
        assert curve.mean[5] == pytest.approx(by_hand, abs=1e-4)  # beliefs are stored to 4 decimals
        # the last step is what the grader scores, and the prior line is the report's prior
        entry = res.conditions[curve.condition]
        assert curve.mean[-1] == pytest.approx(entry.belief_mae.mean, abs=1e-4)
        assert curve.prior == pytest.approx(entry.belief_mae_prior, abs=1e-6)
        assert np.all(curve.low <= curve.mean + 1e-12) and np.all(curve.mean <= curve.high + 1e-12)
        assert (curve.stated == 3).all()
    # change one stated belief: the curve follows
    edited = tmp_path / "edited.json"
    edited.write_bytes(bayes_results.read_bytes())
    rec = dict(episodes[0])
    rec["steps"] = [dict(s) for s in rec["steps"]]
    rec["steps"][5]["belief"] = [1.0, 1.0, 1.0]
    rec["steps"][6]["belief"] = None  # and one step without a belief
    lines = [orjson.dumps(rec)] + [orjson.dumps(r) for r in episodes[1:]]
    edited.with_name("edited.episodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    moved, _ = belief_curves([(edited, res)])
    first = next(c for c in moved if c.condition == rec["condition"])
    before = next(c for c in curves if c.condition == rec["condition"])
    assert first.mean[5] != pytest.approx(before.mean[5])
    assert first.stated[6] == 2 and first.mean[7] == pytest.approx(before.mean[7])


def test_training_series_reads_trl_log_history(tmp_path: Path) -> None:
    sft = training_series(write_log(tmp_path / "sft", SFT_LOG))
    assert sft.label == "sft"
    assert sft.train_loss == ([5.0, 10.0, 15.0], [5.2, 3.0, 1.5])  # train_loss summary entry is not a point
    assert sft.eval_loss == ([5.0, 15.0], [4.9, 1.7])
    assert sft.reward == ([], [])
    grpo = training_series(write_log(tmp_path / "grpo", GRPO_LOG) / "training_log.jsonl")
    assert grpo.reward == ([1.0, 2.0, 3.0], [0.30, 0.40, 0.45]) and grpo.reward_std == [0.10, 0.08, 0.05]
    assert grpo.reward_funcs == {"final_score": ([1.0, 2.0, 3.0], [0.25, 0.32, 0.36]),
                                 "format": ([1.0, 2.0, 3.0], [0.05, 0.08, 0.09])}
    assert grpo.train_loss == ([], [])  # GRPO's policy loss is not an SFT loss
    # no stage: a reward makes it GRPO
    unlabeled = training_series(write_log(tmp_path / "old", [{k: v for k, v in e.items() if k != "stage"} for e in GRPO_LOG]))
    assert unlabeled.reward[1] == [0.30, 0.40, 0.45]


def test_a_loss_logged_once_is_drawn(tmp_path: Path) -> None:
    """A run of one or two steps logs its training loss once: a line through one point draws nothing, and the panel
    was empty beside its legend; the point is marked, as the validation loss's are."""
    from rhythm.eval.plots import training_figure

    folder = write_log(tmp_path / "short", [{"loss": 6.9, "step": 1, "stage": "sft"}])
    fig = training_figure([training_series(folder)])
    (line,) = fig.axes[0].get_lines()
    assert line.get_marker() == "o" and list(line.get_xdata()) == [1.0]
    two = training_series(write_log(tmp_path / "two", [{"loss": 6.9 / s, "step": s, "stage": "sft"} for s in (1, 2)]))
    assert training_figure([two]).axes[0].get_lines()[0].get_marker() in (None, "None", "")


def test_a_loss_that_stopped_being_a_number_is_said_not_dropped(tmp_path: Path) -> None:
    """A diverged run (its log holds NaN as null) would be drawn as a short, healthy curve: the plot says so."""
    log = [{"loss": 2.0 / step, "step": step, "stage": "sft"} for step in range(1, 6)]
    log += [{"loss": None, "step": step, "stage": "sft"} for step in range(6, 11)]
    log += [{"reward": float("nan"), "step": 1, "stage": "grpo"}]  # written as null
    folder = write_log(tmp_path / "diverged", log)
    series = training_series(folder)
    assert series.train_loss[0] == [1.0, 2.0, 3.0, 4.0, 5.0] and series.not_finite == {"loss": [6.0, 7.0, 8.0, 9.0, 10.0],
                                                                                        "reward": [1.0]}
    summary = make_plots(PlotConfig(logs=[str(folder)], out=str(tmp_path / "out"), dpi=40))
    assert ("training_loss.png: diverged's loss is not a finite number at 5 logged step(s) from step 6 on (a diverged "
            "run?); the curve leaves them out") in summary.notes


def test_a_figure_left_by_an_earlier_plot_in_the_folder_is_named(tmp_path: Path) -> None:
    """A plot into a folder that an earlier one drew other figures into says which are not its own."""
    out = tmp_path / "plots"
    log = write_log(tmp_path / "sft", SFT_LOG)
    first = make_plots(PlotConfig(logs=[str(log)], out=str(out), dpi=40))
    assert [p.name for p in first.written] == ["training_loss.png"] and not any("earlier" in n for n in first.notes)
    stale = out / "belief_accuracy.png"
    stale.write_bytes(b"drawn by an earlier plot")
    again = make_plots(PlotConfig(logs=[str(log)], out=str(out), dpi=40))
    assert f"{stale} is an earlier plot's: this one did not draw it" in again.notes and stale.exists()


@pytest.mark.parametrize(
    "setup, needle",
    [
        (lambda d: [], "nothing to plot"),
        (lambda d: ["--results", str(d / "missing.json")], "file not found"),
        (lambda d: ["--results", str(_write(d / "broken.json", b'{"agent": "x", '))], "not valid JSON"),
        (lambda d: ["--results", str(_write(d / "other.json", b'{"hello": 1}'))], "not a rhythm eval results file"),
        (lambda d: ["--log", str(d / "nolog")], "training log not found"),
        (lambda d: ["--log", str(_write(d / "bad" / "training_log.jsonl", b'{"loss": 1, "step": 1}\n{"loss": \n'))],
         "training_log.jsonl:2: not valid JSON"),
        (lambda d: ["--log", str(_write(d / "empty" / "training_log.jsonl", b'{"train_runtime": 3}\n'))], "no loss"),
    ],
)
def test_bad_plot_input_is_one_line_and_exit_2(run_cli, tmp_path: Path, setup, needle: str) -> None:
    code, _, err = run_cli("plot", *setup(tmp_path), "--out", str(tmp_path / "out"))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("rhythm: error:") and needle in lines[0], err
    assert not (tmp_path / "out").exists()  # nothing drawn from bad input


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.slow  # > 3 s on 2 cores
def test_make_plots_is_a_library_call(bayes_results: Path, tmp_path: Path) -> None:
    summary = make_plots(PlotConfig(results=[str(bayes_results)], out=str(tmp_path / "lib"), dpi=60))
    assert [p.name for p in summary.written] == ["final_scores.png", "belief_accuracy.png"]
    recorded = yaml.safe_load((tmp_path / "lib" / "plot_config.yaml").read_text())  # what they were drawn from
    assert recorded["results"] == [str(bayes_results)] and recorded["dpi"] == 60
    assert recorded["_provenance"]["written"] == ["final_scores.png", "belief_accuracy.png"]
    assert "versions" in recorded["_provenance"]
    small = png_size(summary.written[0])
    big = png_size(make_plots(PlotConfig(results=[str(bayes_results)], out=str(tmp_path / "big"), dpi=120)).written[0])
    assert big[0] == pytest.approx(2 * small[0], rel=0.05)
    with pytest.raises(RhythmError, match="dpi"):
        make_plots(PlotConfig(results=[str(bayes_results)], dpi=5))


def test_broken_episode_records_name_their_line(run_cli, bayes_results: Path, tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    results.write_bytes(bayes_results.read_bytes())
    lines = bayes_results.with_name("eval_results_v2.episodes.jsonl").read_bytes().splitlines()
    episodes = results.with_name("r.episodes.jsonl")
    episodes.write_bytes(lines[0] + b"\n" + lines[1][:50] + b"\n")
    code, _, err = run_cli("plot", "--results", str(results), "--out", str(tmp_path / "out"))
    assert code == 2 and f"{episodes}:2: not valid JSON" in err
    rec = orjson.loads(lines[0])
    rec["steps"][3]["belief"] = [0.5, 0.5]
    episodes.write_bytes(orjson.dumps(rec) + b"\n")
    code, _, err = run_cli("plot", "--results", str(results), "--out", str(tmp_path / "out"))
    assert code == 2 and f"{episodes}:1: step 3: belief" in err
    assert not (tmp_path / "out").exists()  # every input is read before anything is drawn


def test_belief_bands_use_the_reports_interval() -> None:
    """Each step's band in belief_accuracy.png is mean_ci's interval, the one belief_steps prints."""
    from rhythm.eval.belief_steps import belief_steps
    from rhythm.eval.plots import _curve
    from rhythm.eval.stats import mean_ci

    rng = np.random.default_rng(3)
    errors = rng.random((12, 28)) * 0.3
    errors[[1, 4], 5] = np.nan
    priors = np.full(12, 0.15)
    curve = _curve("a", "in-dist", errors, priors)
    for t in range(28):
        ci = mean_ci(errors[:, t])
        assert (curve.mean[t], curve.low[t], curve.high[t]) == (ci["mean"], *ci["ci95"])
    assert belief_steps(errors, priors, (1, 28)).last_ci == (curve.low[-1], curve.high[-1])


def _student_results(bayes_results: Path, folder: Path, stage_files: dict[str, str]) -> Path:
    """The bayes results as if a student in ``folder`` (holding ``stage_files``) had played them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in stage_files.items():
        (folder / name).write_text(text)
    data = orjson.loads(bayes_results.read_bytes())
    data["agent"] = f"model:{folder}"
    del data["display_name"]  # an older file: the name comes from the agent string
    out = folder.parent / f"eval-{folder.name}" / "eval_results_v2.json"
    out.parent.mkdir(parents=True)
    out.write_bytes(orjson.dumps(data))
    episodes = bayes_results.with_name("eval_results_v2.episodes.jsonl").read_bytes()
    out.with_name("eval_results_v2.episodes.jsonl").write_bytes(episodes)
    return out


def test_plots_name_agents_as_a_reader_would(bayes_results: Path, tmp_path: Path) -> None:
    runs = tmp_path / "some" / "long" / "runs"
    sft = _student_results(bayes_results, runs / "sft", {"sft_config.yaml": "use_peft: false\n"})
    grpo = _student_results(bayes_results, runs / "grpo", {"grpo_config.yaml": f"adapter: null\nmodel_name_or_path: {runs / 'sft'}\n"})
    files = [(p, load_results(p)) for p in (sft, grpo, bayes_results)]
    assert orjson.loads(bayes_results.read_bytes())["agent"] == "bayes"  # the JSON keeps the agent string
    names = {b.agent for b in score_bars(files) if b.kind != "published"}
    assert names == {"student (SFT)", "student (SFT+GRPO)", "teacher (bayes)", "random", "heuristic", "oracle (knows the person)"}
    curves, _ = belief_curves(files)
    assert {c.agent for c in curves} == {"student (SFT)", "student (SFT+GRPO)", "teacher (bayes)"}
    assert not any(str(runs) in b.agent for b in score_bars(files))


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _legend_boxes_clear_of_data_and_text(fig) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    texts = [t for t in (fig._suptitle, fig._supxlabel) if t is not None]
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax.xaxis.label, ax.yaxis.label]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not _overlaps(box, ax.get_window_extent(renderer)), f"legend on the data of {ax.get_title()!r}"
        for text in texts:
            if text.get_text():
                assert not _overlaps(box, text.get_window_extent(renderer)), f"legend over {text.get_text()!r}"


def test_legends_sit_outside_the_data_and_away_from_titles_and_labels(bayes_results: Path, heuristic_results: Path, tmp_path: Path) -> None:
    files = [(bayes_results, load_results(bayes_results)), (heuristic_results, load_results(heuristic_results))]
    _legend_boxes_clear_of_data_and_text(final_scores_figure(score_bars(files)))
    _legend_boxes_clear_of_data_and_text(belief_accuracy_figure(belief_curves(files)[0]))
    logs = [training_series(write_log(tmp_path / "sft", SFT_LOG)), training_series(write_log(tmp_path / "grpo", GRPO_LOG))]
    _legend_boxes_clear_of_data_and_text(training_figure(logs))


def test_the_training_plot_shows_whether_grpo_can_learn(tmp_path: Path) -> None:
    """Zero-spread groups, greedy-action changes, the greedy belief's change and the KL to the start get their own panel; a log
    without them (an older run) draws the reward alone."""
    from rhythm.eval.plots import LEARNING_KEYS, training_figure

    learning = [{**e, "groups_without_spread": z, "probe/kl": k, "probe/action_changed": a, "probe/belief_shift": b}
                for e, z, k, a, b in zip(GRPO_LOG, (0.5, 0.25, 0.0), (0.0, 0.01, 0.03), (0.0, 0.0625, 0.125), (0.0, 0.002, 0.01),
                                         strict=True)]
    s = training_series(write_log(tmp_path / "grpo", learning))
    assert s.learning == {"groups_without_spread": ([1.0, 2.0, 3.0], [0.5, 0.25, 0.0]), "probe/kl": ([1.0, 2.0, 3.0], [0.0, 0.01, 0.03]),
                          "probe/action_changed": ([1.0, 2.0, 3.0], [0.0, 0.0625, 0.125]),
                          "probe/belief_shift": ([1.0, 2.0, 3.0], [0.0, 0.002, 0.01])}
    fig = training_figure([s])
    assert [ax.get_title() for ax in fig.axes] == ["GRPO: reward", "GRPO: can it learn?", ""]
    legend = {t.get_text().split(": ", 1)[1].removesuffix(" (right axis)") for t in fig.axes[1].get_legend().get_texts()}
    assert legend == set(LEARNING_KEYS.values())
    kl_axis = fig.axes[2]  # the KL, a thousandth of the shares early on, on an axis of its own
    assert kl_axis.get_ylabel() == "KL (nats per reply token)"
    assert [list(line.get_ydata()) for line in kl_axis.get_lines()] == [[0.0, 0.01, 0.03]]
    old = training_figure([training_series(write_log(tmp_path / "old", GRPO_LOG))])
    assert [ax.get_title() for ax in old.axes] == ["GRPO: reward"]


def test_the_reward_of_each_step_is_read_from_the_reward_log_beside_the_training_log(tmp_path: Path) -> None:
    """TRL logs the reward as a mean over each logging window; the reward log beside it holds every scored reply,
    so the plot draws each step's own mean too."""
    folder = write_log(tmp_path / "grpo", GRPO_LOG)
    replies = [(1, 0.2), (1, 0.4), (2, 0.5), (2, 0.1), (2, 0.6), (3, 0.9)]
    (folder / "reward_log.jsonl").write_bytes(b"".join(orjson.dumps({"step": k, "reward": r}) + b"\n" for k, r in replies))
    s = training_series(folder)
    assert s.step_reward[0] == [1.0, 2.0, 3.0] and s.step_reward[1] == pytest.approx([0.3, 0.4, 0.9])
    labels = [line.get_label() for line in training_figure([s]).axes[0].get_lines()]
    assert "grpo: mean reward of each step" in labels
    assert training_series(write_log(tmp_path / "alone", GRPO_LOG)).step_reward == ([], [])


def test_curves_on_different_people_each_get_their_own_prior_line(bayes_results: Path, tmp_path: Path) -> None:
    """One dashed prior line says "same episodes" only when every curve is on the same people; otherwise each
    curve's own prior is drawn in its colour, the title says so, and the legend gives each curve's n."""
    other = tmp_path / "later" / "eval_results_v2.json"
    run_eval(EvalConfig(agent="bayes", condition="ood", seeds="3-6", references=[], output=str(other)), say=lambda m: None)
    results = [(bayes_results, load_results(bayes_results)), (other, load_results(other))]
    curves, _ = belief_curves(results)
    ood = [c for c in curves if c.condition == "ood"]
    assert len(ood) == 2 and ood[0].prior != ood[1].prior
    fig = belief_accuracy_figure(curves)
    ax = fig.axes[1]
    assert ax.get_title() == "ood  (n in the legend; different people)"
    labels = [line.get_label() for line in ax.get_lines()]
    assert sum(label.startswith("constant prior guess on ") for label in labels) == 2
    assert any("(n=3, " in label for label in labels) and any("(n=4, " in label for label in labels)
    same = belief_accuracy_figure(belief_curves(results[:1])[0])
    assert "constant prior guess (same episodes)" in [line.get_label() for line in same.axes[1].get_lines()]


def test_an_sft_run_that_continued_another_is_drawn_after_it(tmp_path: Path) -> None:
    from rhythm.eval.plots import continued

    first = write_log(tmp_path / "stage1", SFT_LOG)
    second = write_log(tmp_path / "stage2", SFT_LOG)
    (second / "sft_config.yaml").write_text(f"model_name_or_path: {first}\n")
    alone = write_log(tmp_path / "alone", SFT_LOG)
    series = continued([training_series(p) for p in (first, second, alone)], [str(first), str(second), str(alone)])
    assert series[1].label == "stage2 (from stage1)" and series[1].train_loss[0] == [20.0, 25.0, 30.0]
    assert series[1].eval_loss[0] == [20.0, 30.0]
    assert series[0].train_loss[0] == series[2].train_loss[0] == [5.0, 10.0, 15.0] and series[2].label == "alone"


def test_files_of_the_same_agent_are_each_told_apart() -> None:
    """The last of several files of one agent kept the bare name (the count was taken on the list being renamed)."""
    from types import SimpleNamespace

    from rhythm.eval.plots import _labels

    files = [("a/r.json", "bayes"), ("b/r.json", "bayes"), ("c/r.json", "bayes"), ("c/s.json", "bayes"), ("d/r.json", "x")]
    labels = _labels([(Path(p), SimpleNamespace(name=n)) for p, n in files])
    assert labels == ["bayes (a)", "bayes (b)", "bayes (c) #1", "bayes (c) #2", "x"]
    # two quickstart runs: their folders differ only above eval/sft
    runs = [("qs/q1/eval/sft/eval_results_v2.json", "student (SFT)"), ("qs/q2/eval/sft/eval_results_v2.json", "student (SFT)")]
    assert _labels([(Path(p), SimpleNamespace(name=n)) for p, n in runs]) == ["student (SFT) (q1/eval/sft)",
                                                                             "student (SFT) (q2/eval/sft)"]
