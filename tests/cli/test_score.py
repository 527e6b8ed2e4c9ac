"""``lavo-zoo score METRIC --pred P --ref R [--out FILE] [--json]``: every evaluator that reads files, checked
against an independent computation (scikit-learn, Informer's formulas, the per-file scores, ROUGE-1.5.5's golden
values through the evaluator), eval's results JSON schema, the old spellings as hidden aliases, and the refusals
(missing files exit 2, bad contents exit 1, each naming the file and row)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from lavo_zoo.cli import main
from lavo_zoo.evaluators import build_evaluator
from lavo_zoo.evaluators.chamfer import score_clouds
from lavo_zoo.formats.pcd import write_pcd
from tests.recipes.tts.helpers import tone

ROUGE_PAIRS = [json.loads(line) for line in
               (Path(__file__).resolve().parents[1] / "evaluators" / "fixtures" / "rouge_pairs.jsonl")
               .read_text().splitlines()]
from tests.helpers import score_summaries


def _score(*args: str) -> tuple[int, dict | None]:
    """Exit code and the results JSON of one `lavo-zoo score` call (written with --out)."""
    out = Path(args[args.index("--out") + 1]) if "--out" in args else None
    code = main(["score", *args])
    return code, json.loads(out.read_text()) if code == 0 and out is not None else None


def _values(results: dict) -> dict[str, float]:
    return {k: v["value"] for k, v in results["metrics"].items()}


def _informer_metrics(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    return {"mse": np.mean((pred - true) ** 2), "mae": np.mean(np.abs(pred - true)),
            "rmse": np.sqrt(np.mean((pred - true) ** 2)), "mape": np.mean(np.abs((pred - true) / true)),
            "mspe": np.mean(np.square((pred - true) / true))}


def test_forecast_reads_npy_and_csv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    true = rng.normal(3, 1, (5, 4, 2))
    pred = true + rng.normal(0, 0.3, true.shape)
    np.save(tmp_path / "p.npy", pred)
    np.save(tmp_path / "t.npy", true)
    code, res = _score("forecast", "--pred", str(tmp_path / "p.npy"), "--ref", str(tmp_path / "t.npy"),
                       "--out", str(tmp_path / "s.json"))
    assert code == 0 and res["num_samples"] == 5 and res["metric"] == "forecast"
    assert res["command"] == (f"lavo-zoo score forecast --pred {tmp_path / 'p.npy'} --ref {tmp_path / 't.npy'} "
                              f"--out {tmp_path / 's.json'}")
    for name, value in _informer_metrics(pred, true).items():
        assert res["metrics"][name]["value"] == pytest.approx(value, rel=1e-12)
        assert res["metrics"][name]["higher_is_better"] is False
    for name, arr in (("p.csv", pred[:, 0]), ("t.csv", true[:, 0])):
        (tmp_path / name).write_text("date,a,b\n" + "".join(f"2020-01-0{i + 1},{float(x)!r},{float(y)!r}\n"
                                                            for i, (x, y) in enumerate(arr)))
    capsys.readouterr()
    assert main(["score", "forecast", "--pred", str(tmp_path / "p.csv"), "--ref", str(tmp_path / "t.csv"),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["metrics"]["mse"]["value"] == pytest.approx(_informer_metrics(pred[:, 0], true[:, 0])["mse"])
    assert main(["score", "forecast", "--pred", str(tmp_path / "p.npy"), "--ref", str(tmp_path / "t.csv")]) == 1
    assert "must match" in capsys.readouterr().err


@pytest.mark.parametrize("bad, where", [("nan", "line 3"), ("inf", "line 3")])
def test_forecast_refuses_non_finite_values_naming_file_and_row(tmp_path, capsys, bad, where):
    (tmp_path / "p.csv").write_text(f"a\n1.0\n{bad}\n")
    (tmp_path / "t.csv").write_text("a\n1.0\n2.0\n")
    assert main(["score", "forecast", "--pred", str(tmp_path / "p.csv"), "--ref", str(tmp_path / "t.csv")]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path / "p.csv") in err and where in err
    np.save(tmp_path / "p.npy", np.array([[1.0, 2.0], [np.inf, 0.0]]))
    np.save(tmp_path / "t.npy", np.ones((2, 2)))
    assert main(["score", "forecast", "--pred", str(tmp_path / "p.npy"), "--ref", str(tmp_path / "t.npy")]) == 1
    assert "sample 2" in capsys.readouterr().err


def test_accuracy_on_files_matches_scikit_learn(tmp_path, capsys):
    """Text ids and .npy scores: accuracy and confusion matrix as scikit-learn's; malformed, mismatched and NaN
    inputs refused naming the file."""
    from sklearn.metrics import accuracy_score, confusion_matrix

    rng = np.random.default_rng(0)
    true, scores = rng.integers(0, 4, 200), rng.normal(size=(200, 4))
    pred = scores.argmax(-1)
    (tmp_path / "true.txt").write_text("\n".join(map(str, true)) + "\n")
    np.save(tmp_path / "scores.npy", scores)
    (tmp_path / "pred.txt").write_text("\n".join(map(str, pred)) + "\n\n")
    for pred_file in ("pred.txt", "scores.npy"):
        code, res = _score("accuracy", "--pred", str(tmp_path / pred_file), "--ref", str(tmp_path / "true.txt"),
                           "--out", str(tmp_path / f"{pred_file}.json"))
        assert code == 0
        assert res["metrics"]["accuracy"]["value"] == pytest.approx(accuracy_score(true, pred))
        assert res["details"]["confusion_matrix"] == confusion_matrix(true, pred).tolist()
    (tmp_path / "short.txt").write_text("1\n2\n")
    (tmp_path / "bad.txt").write_text("1\ncat\n")
    assert main(["score", "accuracy", "--pred", str(tmp_path / "short.txt"), "--ref", str(tmp_path / "true.txt")]) == 1
    assert main(["score", "accuracy", "--pred", str(tmp_path / "bad.txt"), "--ref", str(tmp_path / "true.txt")]) == 1
    assert "bad.txt, line 2" in capsys.readouterr().err
    scores[7, 2] = np.nan
    np.save(tmp_path / "nan.npy", scores)
    assert main(["score", "accuracy", "--pred", str(tmp_path / "nan.npy"), "--ref", str(tmp_path / "true.txt")]) == 1
    assert "nan.npy, row 8" in capsys.readouterr().err


def test_rouge_files_and_pairs(tmp_path, capsys):
    hyp, ref, pairs = tmp_path / "hyp.txt", tmp_path / "ref.tgt", tmp_path / "pairs.jsonl"
    hyp.write_text("".join(r["hypothesis"] + "\n" for r in ROUGE_PAIRS))
    ref.write_text("".join("– " + r["reference"] + "\n" for r in ROUGE_PAIRS))  # Multi-News target lines
    pairs.write_text("".join(json.dumps(r) + "\n" for r in ROUGE_PAIRS))
    expected = score_summaries([r["hypothesis"] for r in ROUGE_PAIRS], [r["reference"] for r in ROUGE_PAIRS])
    code, res = _score("rouge", "--pred", str(hyp), "--ref", str(ref), "--out", str(tmp_path / "r.json"))
    assert code == 0 and res["num_samples"] == len(ROUGE_PAIRS)
    assert _values(res) == pytest.approx(expected)
    code, res = _score("rouge", "--pred", str(pairs), "--out", str(tmp_path / "p.json"))  # eval's summaries file
    assert code == 0 and _values(res) == pytest.approx(expected)


def test_rouge_refusals(tmp_path, capsys):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("one\ntwo\n")
    ref.write_text("one\n")
    assert main(["score", "rouge", "--pred", str(hyp), "--ref", str(ref)]) == 1
    assert "2 lines" in capsys.readouterr().err
    assert main(["score", "rouge", "--pred", str(hyp)]) == 2
    assert "--ref" in capsys.readouterr().err
    ref.write_bytes(b"fine\n\xff\xfe bad\n")
    assert main(["score", "rouge", "--pred", str(hyp), "--ref", str(ref)]) == 1
    assert f"{ref}, line 2: not UTF-8" in capsys.readouterr().err
    bad = tmp_path / "pairs.jsonl"
    bad.write_text('{"hypothesis": "a"}\n')
    assert main(["score", "rouge", "--pred", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "line 1" in err and "reference" in err


def test_chamfer_files_and_folders(tmp_path):
    rng = np.random.default_rng(0)
    pred, gt = tmp_path / "pred", tmp_path / "gt"
    clouds = {}
    for rel in ("chair/a.pcd", "chair/b.pcd", "lamp/c.pcd"):
        g = rng.uniform(-0.5, 0.5, (300, 3)).astype(np.float32)
        p = (g + rng.normal(0, 0.01, g.shape)).astype(np.float32)
        write_pcd(gt / rel, g, "binary")
        write_pcd(pred / rel, p, "ascii")
        clouds[rel] = score_clouds(torch.from_numpy(p), torch.from_numpy(g))
    code, res = _score("chamfer", "--pred", str(pred / "chair/a.pcd"), "--ref", str(gt / "chair/a.pcd"),
                       "--out", str(tmp_path / "one.json"))
    assert code == 0 and res["metrics"]["cd_l1"]["value"] == pytest.approx(clouds["chair/a.pcd"]["cd_l1"])
    code, res = _score("chamfer", "--pred", str(pred), "--ref", str(gt), "--out", str(tmp_path / "all.json"))
    chair = np.mean([clouds["chair/a.pcd"]["fscore"], clouds["chair/b.pcd"]["fscore"]])
    assert res["details"]["categories"]["chair"]["fscore"] == pytest.approx(chair)
    assert res["metrics"]["fscore"]["value"] == pytest.approx((chair + clouds["lamp/c.pcd"]["fscore"]) / 2)
    assert res["details"]["files"]["lamp/c.pcd"] == pytest.approx(clouds["lamp/c.pcd"])


@pytest.mark.parametrize("remove", ["gt/lamp/c.pcd", "pred/lamp/c.pcd"])
def test_chamfer_refuses_incomplete_sets(tmp_path, capsys, remove):
    for rel in ("chair/a.pcd", "lamp/c.pcd"):
        cloud = np.random.default_rng(1).uniform(-0.5, 0.5, (50, 3)).astype(np.float32)
        write_pcd(tmp_path / "gt" / rel, cloud, "binary")
        write_pcd(tmp_path / "pred" / rel, cloud, "binary")
    (tmp_path / remove).unlink()
    assert main(["score", "chamfer", "--pred", str(tmp_path / "pred"), "--ref", str(tmp_path / "gt")]) == 1
    assert "lamp/c.pcd" in capsys.readouterr().err


def test_mcd_pairs_files_by_name_and_refuses_unpaired_ones(tmp_path, capsys):
    for folder in ("ref", "syn"):
        (tmp_path / folder).mkdir()
    for i, name in enumerate(("a", "b")):
        sf.write(str(tmp_path / "ref" / f"{name}.wav"), tone(0.6, freq=200 + 50 * i), 22_050)
    sf.write(str(tmp_path / "syn" / "a.wav"), tone(0.6, freq=200), 22_050)  # identical to ref/a
    sf.write(str(tmp_path / "syn" / "b.wav"), tone(0.7, freq=330), 22_050)
    code, res = _score("mcd", "--pred", str(tmp_path / "syn"), "--ref", str(tmp_path / "ref"),
                       "--out", str(tmp_path / "m.json"))
    assert code == 0 and res["num_samples"] == 2 and res["details"]["sample_rate"] == 22_050
    ev = build_evaluator("mcd")
    ev.update([sf.read(str(tmp_path / "syn" / "b.wav"), dtype="float32")[0]],
              [sf.read(str(tmp_path / "ref" / "b.wav"), dtype="float32")[0]])
    only_b = ev.mcd[0]  # pair a costs nothing; its frames count in the denominator
    assert res["metrics"]["mcd"]["value"] == pytest.approx(only_b.cost / (only_b.syn_frames + 1 + 0.6 * 22_050 // 275),
                                                           rel=1e-6)
    sf.write(str(tmp_path / "syn" / "extra.wav"), tone(0.3), 22_050)
    assert main(["score", "mcd", "--pred", str(tmp_path / "syn"), "--ref", str(tmp_path / "ref")]) == 1
    assert "extra.wav" in capsys.readouterr().err


def test_old_spellings_are_hidden_aliases(tmp_path):
    np.save(tmp_path / "p.npy", np.ones((3, 2)))
    np.save(tmp_path / "t.npy", np.full((3, 2), 2.0))
    code, res = _score("forecast", "--pred", str(tmp_path / "p.npy"), "--true", str(tmp_path / "t.npy"),
                       "--out", str(tmp_path / "a.json"))
    assert code == 0 and res["metrics"]["mae"]["value"] == pytest.approx(1.0)
    from click.testing import CliRunner

    from lavo_zoo.cli import cli
    text = CliRunner().invoke(cli, ["score", "--help"]).output
    options = text[text.index("Options:"):text.index("Metrics")]
    assert "--pred" in options and not any(old in options for old in ("--true", "--gt", "--hyp", "--syn", "--pairs"))
    for metric in ("forecast", "accuracy", "rouge", "chamfer", "mcd"):  # the help lists what each metric reads
        assert f"\n  {metric}" in text


def test_missing_input_is_a_usage_error_and_out_is_never_replaced(tmp_path, capsys):
    np.save(tmp_path / "t.npy", np.ones(3))
    assert main(["score", "forecast", "--pred", str(tmp_path / "absent.npy"), "--ref", str(tmp_path / "t.npy")]) == 2
    assert "absent.npy" in capsys.readouterr().err
    out = tmp_path / "s.json"
    out.write_text("mine")
    assert main(["score", "forecast", "--pred", str(tmp_path / "t.npy"), "--ref", str(tmp_path / "t.npy"),
                 "--out", str(out)]) == 2
    assert out.read_text() == "mine"
    # --overwrite replaces an earlier results JSON, never a file of another kind
    assert main(["score", "forecast", "--pred", str(tmp_path / "t.npy"), "--ref", str(tmp_path / "t.npy"),
                 "--out", str(out), "--overwrite"]) == 2
    assert "is not a results JSON" in capsys.readouterr().err and out.read_text() == "mine"
    out.unlink()
    for extra in ([], ["--overwrite"]):
        assert main(["score", "forecast", "--pred", str(tmp_path / "t.npy"), "--ref", str(tmp_path / "t.npy"),
                     "--out", str(out), *extra]) == 0
        assert json.loads(out.read_text())["metrics"]["mse"]["value"] == 0.0


def test_a_pipe_is_read_as_a_file(tmp_path):
    """`--ref <(cat ref.txt)` names a pipe, not a regular file: it is read like one."""
    import os

    (tmp_path / "hyp.txt").write_text("the cat sat\n")
    read_end, write_end = os.pipe()
    os.write(write_end, b"the cat sat\n")
    os.close(write_end)
    try:
        code, res = _score("rouge", "--pred", str(tmp_path / "hyp.txt"), "--ref", f"/dev/fd/{read_end}",
                           "--out", str(tmp_path / "r.json"))
    finally:
        os.close(read_end)
    assert code == 0 and res["metrics"]["rouge1"]["value"] == pytest.approx(100.0)


def test_accuracy_on_a_one_class_reference_says_so(tmp_path, capsys):
    (tmp_path / "pred.txt").write_text("1\n1\n1\n")
    (tmp_path / "true.txt").write_text("1\n1\n1\n")
    assert main(["score", "accuracy", "--pred", str(tmp_path / "pred.txt"), "--ref", str(tmp_path / "true.txt")]) == 0
    out = capsys.readouterr().out
    assert "1" in out and "note: every one of the 3 examples is of class 1" in out


def test_an_empty_cloud_and_nan_audio_are_refused_naming_the_file(tmp_path, capsys):
    write_pcd(tmp_path / "empty.pcd", np.zeros((0, 3), np.float32), "binary")
    write_pcd(tmp_path / "gt.pcd", np.ones((5, 3), np.float32), "binary")
    assert main(["score", "chamfer", "--pred", str(tmp_path / "empty.pcd"), "--ref", str(tmp_path / "gt.pcd")]) == 1
    assert "empty.pcd: the cloud has no points" in capsys.readouterr().err
    for folder in ("syn", "ref"):
        (tmp_path / folder).mkdir()
        sf.write(str(tmp_path / folder / "a.wav"), tone(0.3), 22_050, subtype="FLOAT")
    wave = tone(0.3)
    wave[100] = np.nan
    sf.write(str(tmp_path / "syn" / "a.wav"), wave, 22_050, subtype="FLOAT")
    assert main(["score", "mcd", "--pred", str(tmp_path / "syn"), "--ref", str(tmp_path / "ref")]) == 1
    assert "a.wav, sample 101" in capsys.readouterr().err


def _forecast_csvs(tmp_path: Path) -> tuple:
    """(a truth CSV of date, a, b over six hours, a forecast [6, 2], the truth [6, 2], the dates)."""
    import pandas as pd

    rng = np.random.default_rng(1)
    true = rng.normal(3, 1, (6, 2))
    pred = true + rng.normal(0, 0.3, true.shape)
    dates = pd.date_range("2020-01-01", periods=6, freq="h")
    pd.DataFrame({"date": dates, "a": true[:, 0], "b": true[:, 1]}).to_csv(tmp_path / "truth.csv", index=False)
    return tmp_path / "truth.csv", pred, true, dates


def test_forecast_csvs_are_paired_by_column_name_and_by_date(tmp_path, capsys):
    import pandas as pd

    truth, pred, true, dates = _forecast_csvs(tmp_path)
    expected = _informer_metrics(pred, true)
    layouts = {  # the same forecast, written in other column orders, row orders and with fewer rows
        "swapped.csv": pd.DataFrame({"date": dates, "b": pred[:, 1], "a": pred[:, 0]}),
        "reversed.csv": pd.DataFrame({"date": dates[::-1], "a": pred[::-1, 0], "b": pred[::-1, 1]}),
        "no-date.csv": pd.DataFrame({"a": pred[:, 0], "b": pred[:, 1]}),
    }
    for name, frame in layouts.items():
        frame.to_csv(tmp_path / name, index=False)
        code, res = _score("forecast", "--pred", str(tmp_path / name), "--ref", str(truth), "--out",
                           str(tmp_path / f"{name}.json"))
        assert code == 0 and _values(res) == pytest.approx(expected, rel=1e-12), name
        assert res["details"]["columns"] == (["b", "a"] if name == "swapped.csv" else ["a", "b"])
        assert res["details"]["paired_by"] == ("row" if name == "no-date.csv" else "date")
    # the last three hours of one column, against the whole truth: its rows and column are picked by date and name
    pd.DataFrame({"date": dates[3:], "b": pred[3:, 1]}).to_csv(tmp_path / "tail.csv", index=False)
    code, res = _score("forecast", "--pred", str(tmp_path / "tail.csv"), "--ref", str(truth), "--out",
                       str(tmp_path / "tail.json"))
    assert code == 0 and _values(res) == pytest.approx(_informer_metrics(pred[3:, 1:], true[3:, 1:]), rel=1e-12)


@pytest.mark.parametrize("layout,message", [
    ("shifted", "the date 2020-01-01 06:00:00 on line 5 is not in --ref"),
    ("renamed", "has the column\\(s\\) x, y that --ref .* has not"),
    ("savetxt", "the first line holds numbers .* not column names"),
    ("index", "column 1 has no name \\(an index written by pandas"),
    ("repeated", "the column name 'a' appears more than once"),
    ("header-only", "has a header but no rows"),
    ("spaces.txt", "reads .npy arrays and .csv tables, not .txt files"),
])
def test_forecast_files_of_other_layouts_are_refused(tmp_path, capsys, layout, message):
    import pandas as pd

    truth, pred, _, dates = _forecast_csvs(tmp_path)
    path = tmp_path / (layout if layout.endswith(".txt") else f"{layout}.csv")
    if layout == "shifted":
        shifted = pd.DataFrame({"date": dates + pd.Timedelta(hours=3), "a": pred[:, 0], "b": pred[:, 1]})
        shifted.to_csv(path, index=False)
    elif layout == "renamed":
        pd.DataFrame({"x": pred[:, 0], "y": pred[:, 1]}).to_csv(path, index=False)
    elif layout == "savetxt":
        np.savetxt(path, pred, delimiter=",")  # no header line: its first row would be read as column names
    elif layout == "index":
        pd.DataFrame({"a": pred[:, 0], "b": pred[:, 1]}).to_csv(path)
    elif layout == "repeated":
        path.write_text("a,a\n1,2\n")
    elif layout == "header-only":
        path.write_text("date,a,b\n")
    else:
        np.savetxt(path, pred)
    assert main(["score", "forecast", "--pred", str(path), "--ref", str(truth)]) in (1, 2)
    assert re.search(message, capsys.readouterr().err), layout


@pytest.mark.parametrize("array,message", [(np.zeros((0, 2)), "holds no values"), (np.float64(3), "a single number"),
                                           (np.array([True, False]), "holds bool values"),
                                           (np.array([1 + 2j]), "holds complex128 values")])
def test_forecast_npy_files_must_hold_real_numbers(tmp_path, capsys, array, message):
    np.save(tmp_path / "x.npy", array)
    assert main(["score", "forecast", "--pred", str(tmp_path / "x.npy"), "--ref", str(tmp_path / "x.npy")]) == 1
    assert message in capsys.readouterr().err


def test_rouge_refuses_json_lines_given_as_text(tmp_path, capsys):
    pairs, ref = tmp_path / "eval.jsonl", tmp_path / "ref.txt"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in ROUGE_PAIRS))
    ref.write_text("".join(r["reference"] + "\n" for r in ROUGE_PAIRS))
    (tmp_path / "eval.txt").write_text(pairs.read_text())  # the same JSON under a text file's name
    for pred, other in ((pairs, ref), (tmp_path / "eval.txt", ref), (ref, pairs)):
        assert main(["score", "rouge", "--pred", str(pred), "--ref", str(other)]) == 2
        assert "holds JSON, not one summary per line" in capsys.readouterr().err


@pytest.mark.parametrize("ids,message", [("0\n1000000000\n", "line 2: class id 1000000000 is out of range"),
                                         ("0\n99999999999999999999\n", "line 2: class id 9999"),
                                         ("0\n-1\n", "line 2: class id -1 is out of range")])
def test_accuracy_refuses_class_ids_out_of_range_naming_the_line(tmp_path, capsys, ids, message):
    (tmp_path / "pred.txt").write_text(ids)
    (tmp_path / "true.txt").write_text("0\n1\n")
    assert main(["score", "accuracy", "--pred", str(tmp_path / "pred.txt"), "--ref", str(tmp_path / "true.txt")]) == 1
    assert message in capsys.readouterr().err
    np.save(tmp_path / "bool.npy", np.array([True, False]))
    assert main(["score", "accuracy", "--pred", str(tmp_path / "bool.npy"), "--ref", str(tmp_path / "true.txt")]) == 1
    assert "got bool values" in capsys.readouterr().err


def test_mcd_refuses_a_wav_shorter_than_one_frame(tmp_path, capsys):
    for folder, seconds in (("syn", 0.002), ("ref", 0.5)):
        (tmp_path / folder).mkdir()
        sf.write(str(tmp_path / folder / "a.wav"), tone(seconds), 22_050)
    assert main(["score", "mcd", "--pred", str(tmp_path / "syn"), "--ref", str(tmp_path / "ref")]) == 1
    assert "holds 44 samples, less than half an analysis window" in capsys.readouterr().err


def test_formats_are_told_by_content_not_by_the_files_name(tmp_path, capsys):
    """JSON lines in a .txt, from a pipe or from standard input ('-') are read as JSON lines; a .npy array named
    .txt is an array; a recall split given as the predictions is refused (it scored 1.0: the split against itself)."""
    import subprocess
    import sys
    import threading

    from tests.helpers import RUNNER

    pairs = "".join(json.dumps(p) + "\n" for p in ROUGE_PAIRS[:4])
    expected = score_summaries([p["hypothesis"] for p in ROUGE_PAIRS[:4]], [p["reference"] for p in ROUGE_PAIRS[:4]])
    (tmp_path / "pairs.txt").write_text(pairs)
    code, results = _score("rouge", "--pred", str(tmp_path / "pairs.txt"), "--out", str(tmp_path / "a.json"))
    assert code == 0 and _values(results) == pytest.approx(expected)
    read, write = os.pipe()  # a pipe (its name has no suffix), read once
    threading.Thread(target=lambda: (os.write(write, pairs.encode()), os.close(write))).start()
    code, results = _score("rouge", "--pred", f"/dev/fd/{read}", "--out", str(tmp_path / "b.json"))
    os.close(read)
    assert code == 0 and _values(results) == pytest.approx(expected)
    run = subprocess.run([sys.executable, RUNNER, "score", "rouge", "--pred", "-", "--json"], input=pairs,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert _values(json.loads(run.stdout)) == pytest.approx(expected)

    np.save(tmp_path / "ids.npy", np.array([0, 2, 1, 1]))
    (tmp_path / "ids.txt").write_bytes((tmp_path / "ids.npy").read_bytes())
    (tmp_path / "true.txt").write_text("0\n2\n1\n0\n")
    code, results = _score("accuracy", "--pred", str(tmp_path / "ids.txt"), "--ref", str(tmp_path / "true.txt"),
                           "--out", str(tmp_path / "c.json"))
    assert code == 0 and results["metrics"]["accuracy"]["value"] == 0.75

    data = tmp_path / "recall"
    assert main(["data", "recall", "--out", str(data), "--size", "4"]) == 0
    split = data / "test.jsonl"
    answers = tmp_path / "answers.txt"  # JSON lines under another name: the model's answers, all right
    answers.write_text("".join(json.dumps({"queries": json.loads(line)["queries"],
                                           "answers": json.loads(line)["answers"]}) + "\n"
                               for line in split.read_text().splitlines()))
    code, results = _score("accuracy", "--pred", str(answers), "--ref", str(split), "--out", str(tmp_path / "d.json"))
    assert code == 0 and results["metrics"]["accuracy"]["value"] == 1.0 and "accuracy@mqar" in results["metrics"]
    capsys.readouterr()
    assert main(["score", "accuracy", "--pred", str(split), "--ref", str(split)]) == 2
    assert f"--pred {split}, line 1 is an example of a recall split" in capsys.readouterr().err


def test_forecast_files_are_told_by_content(tmp_path):
    """A .npy array or a CSV table under another name is read as what it holds (Informer's metrics either way)."""
    import pandas as pd

    truth, pred, true, dates = _forecast_csvs(tmp_path)
    expected = _informer_metrics(pred, true)
    pd.DataFrame({"date": dates, "a": pred[:, 0], "b": pred[:, 1]}).to_csv(tmp_path / "table.txt", index=False)
    np.save(tmp_path / "array.npy", pred)
    (tmp_path / "array.dat").write_bytes((tmp_path / "array.npy").read_bytes())
    np.save(tmp_path / "true.npy", true)
    (tmp_path / "true.bin").write_bytes((tmp_path / "true.npy").read_bytes())
    for args in (["--pred", str(tmp_path / "table.txt"), "--ref", str(truth)],
                 ["--pred", str(tmp_path / "array.dat"), "--ref", str(tmp_path / "true.bin")]):
        code, results = _score("forecast", *args, "--out", str(tmp_path / "r.json"), "--overwrite")
        assert code == 0 and _values(results) == pytest.approx(expected, rel=1e-12), args
