"""``score(x, y)``: arrays in, the ``compare`` report out; and the ``score`` command on .npy/.npz/.pt files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.cli import main
from similarity_plugins.runner.score import drawn_split
from tests.helpers.metrics import returning


class _Rows:
    """Reports which rows (column 0 holds the row number) it read from each split; fits on train."""

    needs = ("train", "test")
    activations_only = True
    kind = "similarity"
    options = {"shift": 0.0}

    @sp.hookimpl
    def similarity(self, front, end, layer, context, options):
        train, test = context.activations(front, layer.front, "train"), context.activations(end, layer.end, "test")
        return {"score": float(test[:, 0].mean()) + options["shift"],
                "details": {"train_rows": train[:, 0].long().tolist(), "test_rows": test[:, 0].long().tolist(),
                            "dtype": str(train.dtype), "width": int(test.shape[1])}}


class _Described(_Rows):
    """Describes its own use of the splits in details["split"]."""

    @sp.hookimpl
    def similarity(self, front, end, layer, context, options):
        result = _Rows.similarity(self, front, end, layer, context, options)
        result["details"]["split"] = "fitted on train, scored on test"
        return result


class _TestRows:
    """Reads the test split only."""

    needs = ("test",)
    activations_only = True
    kind = "distance"

    @sp.hookimpl
    def similarity(self, front, end, layer, context):
        x, y = context.activations(front, layer.front, "test"), context.activations(end, layer.end, "test")
        return {"score": float((x - y).abs().max()), "details": {"test_rows": x[:, 0].long().tolist()}}


class _Sneaky:
    """Reads the train split without declaring it."""

    activations_only = True

    @sp.hookimpl
    def similarity(self, front, layer, context):
        return float(context.activations(front, layer.front, "train").sum())


class _Raises:
    activations_only = True

    @sp.hookimpl
    def similarity(self):
        raise RuntimeError("boom")


class _Models:
    """Needs the models (no activations_only)."""

    @sp.hookimpl
    def similarity(self):
        return 1.0


@pytest.fixture
def registered(fresh_manager):
    for name, plugin in {"rows": _Rows, "described": _Described, "test-rows": _TestRows, "sneaky": _Sneaky, "raises": _Raises,
                         "models": _Models}.items():
        sp.register_metric(plugin, name)
    return fresh_manager


def _indexed(n: int = 50, width: int = 4, seed: int = 0) -> np.ndarray:
    """(n, width) float64 whose column 0 is the row number."""
    x = np.random.default_rng(seed).normal(size=(n, width))
    x[:, 0] = np.arange(n)
    return x


def _independent_split(n: int, seed: int) -> tuple[list[int], list[int]]:
    """The documented rule, written out: the first max(1, round(n/5)) of a seeded randperm are the test rows."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    k = max(1, round(n / 5))
    return sorted(perm[k:]), sorted(perm[:k])


@pytest.mark.parametrize("n, seed", [(50, 0), (50, 7), (2, 0), (3, 1)])
def test_a_train_metric_uses_the_documented_seeded_split(registered, n, seed):
    x = _indexed(n)
    report = sp.score(x, x, metrics="rows,test-rows", seed=seed)
    train, test = _independent_split(n, seed)
    rows = report["rows"]
    assert rows.ok and rows.details["train_rows"] == train and rows.details["test_rows"] == test
    assert rows.details["split"] == (f"drawn: seeded 80/20 permutation of the rows (seed {seed}): "
                                     f"{len(train)} train / {len(test)} test rows")
    assert not set(train) & set(test) and len(train) + len(test) == n
    other = report["test-rows"]  # no train split needed: every row, no split note
    assert other.details["test_rows"] == list(range(n)) and "split" not in other.details


def test_a_metrics_own_split_text_is_kept_before_the_note(registered):
    report = sp.score(_indexed(10), _indexed(10), metrics="described")
    assert report["described"].details["split"] == ("fitted on train, scored on test; drawn: seeded 80/20 permutation "
                                                    "of the rows (seed 0): 8 train / 2 test rows")


def test_the_drawn_split_differs_between_seeds():
    assert drawn_split(100, 0)["test"].tolist() != drawn_split(100, 1)["test"].tolist()
    assert drawn_split(100, 3)["test"].tolist() == drawn_split(100, 3)["test"].tolist()


def test_a_given_split_decides_the_rows_of_every_metric(registered):
    x = _indexed(30)
    split = {"train": np.arange(5, 30), "test": torch.tensor([0, 2, 4])}
    report = sp.score(x, x, metrics=["rows", "test-rows"], split=split)
    assert report["rows"].details["train_rows"] == list(range(5, 30)) and report["rows"].details["test_rows"] == [0, 2, 4]
    assert report["rows"].details["split"] == "given: 25 train / 3 test rows"
    assert report["test-rows"].details["test_rows"] == [0, 2, 4]
    assert report["test-rows"].details["split"] == "given: 3 test rows"
    assert report.meta["split"] == "given"
    only_test = sp.score(x, x, metrics="rows,test-rows", split={"test": [1, 2]})
    assert "split has no 'train'" in only_test["rows"].error and only_test["test-rows"].ok


def test_overlapping_train_and_test_rows_carry_a_warning(registered):
    x = _indexed(10)
    report = sp.score(x, x, metrics="rows", split={"train": range(8), "test": range(6, 10)})
    assert report["rows"].ok and report["rows"].details["warnings"] == ["train and test share 2 rows"]
    assert "*" in str(report)


def test_default_selection_is_every_activations_only_metric(registered):
    x = _indexed(20)
    report = sp.score(x, x + 1.0)
    expected = [n for n in sp.list_metrics() if sp.metric_info(n).activations_only]
    assert report.metrics == expected and "models" not in expected and "stitch-slm" not in expected
    assert {"rows", "described", "test-rows", "sneaky", "raises"} <= set(expected)
    assert report["raises"].error == "RuntimeError: boom" and report["test-rows"].score == pytest.approx(1.0)
    assert "sneaky" in report.metrics and "declare needs = ('train', 'test')" in report["sneaky"].error


def test_a_metric_that_needs_models_gets_an_error_row(registered):
    report = sp.score(_indexed(10), _indexed(10), metrics=["models", "stitch-slm", "test-rows"])
    for name in ("models", "stitch-slm"):
        assert report[name].score is None and f"{name} needs the models" in report[name].error
        assert "similarity_plugins.compare(" in report[name].error
    assert report["test-rows"].ok


def test_the_report_is_compares_report(registered):
    x = _indexed(20)
    report = sp.score(x, x * 2, metrics="rows,test-rows", options={"rows": {"shift": 1.5}})
    assert isinstance(report, sp.Report) and report.layers == ["x->y"]
    assert report["rows"].score == pytest.approx(2 * np.mean(_independent_split(20, 0)[1]) + 1.5)  # y's test rows
    payload = json.loads(report.to_json())
    assert payload["meta"]["x"] == [20, 4] and payload["meta"]["kinds"] == {"rows": "similarity", "test-rows": "distance"}
    assert payload["results"][0]["details"]["split"].startswith("drawn")
    header = report.to_csv().splitlines()[0].split(",")
    assert header[:5] == ["metric", "layer", "score", "seconds", "error"] and "split" in header
    assert "test-rows (distance)" in str(report)
    pd = pytest.importorskip("pandas")
    frame = report.to_pandas()
    assert isinstance(frame, pd.DataFrame) and list(frame["metric"]) == ["rows", "test-rows"]


def test_options_and_metrics_are_checked_as_in_compare(registered):
    x = _indexed(10)
    with pytest.raises(sp.UnknownOption, match="shfit"):
        sp.score(x, x, metrics="rows", options={"shfit": 1})
    with pytest.raises(sp.UnknownMetric, match="did you mean 'rows'"):
        sp.score(x, x, metrics="rowz")


def test_arrays_are_flattened_and_keep_float64(registered):
    x = np.random.default_rng(0).normal(size=(12, 2, 3, 2))
    x[:, 0, 0, 0] = np.arange(12)
    report = sp.score(x, torch.tensor(x), metrics="rows")
    assert report["rows"].details["width"] == 12 and report["rows"].details["dtype"] == "torch.float64"
    ints = sp.score(np.arange(24).reshape(12, 2), np.ones((12, 3), dtype=np.int32), metrics="rows")
    assert ints["rows"].details["dtype"] == "torch.float64"
    half = sp.score(torch.ones(12, 2, dtype=torch.float16), torch.ones(12, 2), metrics="test-rows")
    assert half["test-rows"].ok and half.meta["dtype"] == ["torch.float32", "torch.float32"]


def test_cka_through_score_equals_functional_cka():
    if not sp.metric_info("cka-linear").activations_only:
        pytest.fail("the CKA plugins declare activations_only = True")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 3, 4)), rng.normal(size=(40, 6))
    y[:, :3] += x.reshape(40, -1)[:, :3]
    report = sp.score(x, y, metrics="cka-*", options={"cka-rbf": {"threshold": 0.5}})
    flat = x.reshape(40, -1)
    assert report["cka-linear"].score == pytest.approx(sp.functional.cka(flat, y), abs=1e-12)
    assert report["cka-debiased"].score == pytest.approx(sp.functional.cka(flat, y, debiased=True), abs=1e-12)
    assert report["cka-rbf"].score == pytest.approx(sp.functional.cka(flat, y, kernel="rbf", threshold=0.5), abs=1e-12)
    assert report["cka-linear"].details["n"] == 40 and "split" not in report["cka-linear"].details


def test_score_leaves_the_global_rngs_as_they_were(registered):
    before = torch.random.get_rng_state(), np.random.get_state()[1].copy()
    sp.score(_indexed(10), _indexed(10), metrics="rows", seed=3)
    assert torch.equal(torch.random.get_rng_state(), before[0]) and np.array_equal(np.random.get_state()[1], before[1])


def test_a_plugin_that_reseeds_leaves_the_callers_random_streams_going_on(registered):
    import random

    class Reseeds:
        activations_only = True

        @sp.hookimpl
        def similarity(self):
            torch.manual_seed(1234), np.random.seed(1234), random.seed(1234)
            return 0.5

    sp.register_metric(Reseeds, "reseeds")
    draws = []
    for metrics in (["rows"], ["reseeds", "rows"]):
        torch.manual_seed(5), np.random.seed(5), random.seed(5)
        sp.score(_indexed(10), _indexed(10), metrics=metrics)
        draws.append((torch.rand(1).item(), np.random.rand(), random.random()))
    assert draws[0] == draws[1]


@pytest.mark.parametrize("x, y, error, message", [
    (np.ones((10, 3)), np.ones((9, 3)), ValueError, "same rows (samples): x has 10, y has 9"),
    (np.ones(10), np.ones((10, 3)), ValueError, "x has shape (10,)"),
    (np.ones((10, 3)), np.ones((10, 0)), ValueError, "y has shape (10, 0): no features"),
    (np.ones((1, 3)), np.ones((1, 3)), ValueError, "at least 2 rows"),
    (np.where(np.eye(10, 3) > 0, np.nan, 1.0), np.ones((10, 3)), ValueError, "x has non-finite values (NaN or inf) in 3 of "
                                                                              "its 10 rows (the first: row 0)"),
    (np.ones((10, 3)), np.full((10, 3), np.inf), ValueError, "y has non-finite values"),
    (np.ones((10, 3), dtype=complex), np.ones((10, 3)), TypeError, "x must hold real numbers"),
    (np.array([["a", "b"]] * 3), np.ones((3, 3)), TypeError, "x must hold real numbers"),
    (torch.ones(10, 3, dtype=torch.complex64), torch.ones(10, 3), TypeError, "x must hold real numbers"),
])
def test_bad_arrays_are_refused_naming_the_array(registered, x, y, error, message):
    with pytest.raises(error) as caught:
        sp.score(x, y, metrics="test-rows")
    assert message in str(caught.value)


@pytest.mark.parametrize("split, error, message", [
    ([0, 1], TypeError, "split must be a dict"),
    ({"train": [0, 1]}, ValueError, "test required"),
    ({"test": [0], "valid": [1]}, ValueError, "keys 'train' and 'test'"),
    ({"test": np.ones(10, dtype=bool)}, TypeError, "boolean mask"),
    ({"test": [0.0, 1.0]}, TypeError, "integer row indices"),
    ({"test": [[0, 1]]}, TypeError, "1-D array"),
    ({"test": []}, ValueError, "is empty"),
    ({"test": [0, 10]}, ValueError, "outside [0, 10)"),
    ({"test": [-1, 2]}, ValueError, "outside [0, 10)"),
    ({"test": [1, 1]}, ValueError, "repeats row indices"),
])
def test_bad_splits_are_refused(registered, split, error, message):
    with pytest.raises(error) as caught:
        sp.score(_indexed(10), _indexed(10), metrics="rows", split=split)
    assert message in str(caught.value)


# -- the command -----------------------------------------------------------------------------------


def test_cli_score_reads_npy_npz_and_pt(registered, tmp_path, capsys):
    x = _indexed(20)
    np.save(tmp_path / "a.npy", x)
    np.savez(tmp_path / "b.npz", acts=x + 1.0, other=x)
    torch.save({"acts": torch.tensor(x)}, tmp_path / "c.pt")
    torch.save(torch.tensor(x), tmp_path / "d.pt")
    out, csv = tmp_path / "r.json", tmp_path / "r.csv"
    code = main(["score", str(tmp_path / "a.npy"), f"{tmp_path / 'b.npz'}:acts", "--metrics", "test-rows,rows",
                 "--option", "rows.shift=2", "--seed", "4", "--out", str(out), "--csv", str(csv)])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    scores = {r["metric"]: r["score"] for r in report["results"]}
    assert scores["test-rows"] == pytest.approx(1.0)
    assert scores["rows"] == pytest.approx(np.mean(_independent_split(20, 4)[1]) + 2 + 1.0)
    assert csv.read_text().startswith("metric,layer,score") and "x->y" in capsys.readouterr().out
    for spec in (f"{tmp_path / 'c.pt'}:acts", str(tmp_path / "d.pt"), f"{tmp_path / 'c.pt'}"):
        assert main(["score", str(tmp_path / "a.npy"), spec, "--metrics", "test-rows"]) == 0
        assert "0.0000" in capsys.readouterr().out


def test_cli_score_exits_1_when_a_row_has_an_error(registered, tmp_path, capsys):
    np.save(tmp_path / "a.npy", _indexed(10))
    assert main(["score", str(tmp_path / "a.npy"), str(tmp_path / "a.npy"), "--metrics", "test-rows,models"]) == 1
    assert "models needs the models" in capsys.readouterr().out


def _bad_files(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((4, 2)))
    np.savez(tmp_path / "two.npz", p=np.ones((4, 2)), q=np.ones((4, 2)))
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    (tmp_path / "junk.pt").write_bytes(b"not a tensor")
    (tmp_path / "a.txt").write_text("1 2\n")
    (tmp_path / "folder.npy").mkdir()
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object))
    return {
        "missing.npy": "no such file: {p}",
        "junk.npy": "cannot read {p}",
        "junk.pt": "cannot read {p}",
        "a.txt": "cannot read {p}: expected a .npy, .npz, .pt or .pth file",
        "folder.npy": "cannot read {p}",
        "objects.npy": "cannot read {p}",
        "two.npz": "{p} holds 2 arrays (p, q); name one as {p}:KEY",
        "two.npz:r": "{p} has no array 'r'",
        "a.npy:k": "no such file: {p}:k",
    }


def test_cli_score_names_a_missing_or_unreadable_file_and_exits_2(registered, tmp_path, capsys):
    for spec, message in _bad_files(tmp_path).items():
        path = str(tmp_path / spec.split(":")[0])
        code = main(["score", str(tmp_path / "a.npy"), str(tmp_path / spec), "--metrics", "test-rows"])
        err = capsys.readouterr().err
        assert code == 2 and message.format(p=path) in err, (spec, err)
        assert "Traceback" not in err


def test_a_pt_file_cannot_run_code(registered, tmp_path, capsys):
    import pickle

    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps(Boom(), protocol=2))
    np.save(tmp_path / "a.npy", np.ones((4, 2)))
    assert main(["score", str(tmp_path / "a.npy"), str(tmp_path / "evil.pt"), "--metrics", "test-rows"]) == 2
    captured = capsys.readouterr()
    assert "pwned" not in captured.out and f"cannot read {tmp_path / 'evil.pt'}" in captured.err


def test_return_forms_and_broken_plugins_give_rows_as_in_compare(registered):
    sp.register_metric(returning(float("inf")), "inf")
    sp.register_metric(returning(None), "nothing")
    registered.load_reference("broken", "no_such_module_here:Plugin", "broken-dist")
    report = sp.score(_indexed(6), _indexed(6), metrics="inf,nothing,broken,test-rows")
    assert report["inf"].details["warnings"] == ["score is inf"]
    assert report["nothing"].error.startswith("TypeError: the plugin returned None")
    assert "broken-dist failed to load: ModuleNotFoundError" in report["broken"].error
    assert report["test-rows"].ok


@pytest.mark.gpu
def test_score_on_cuda_tensors_keeps_the_device_and_the_cuda_rng(registered):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.from_numpy(_indexed(40)).cuda()
    before = torch.cuda.get_rng_state()
    report = sp.score(x, 2 * x, metrics="rows,test-rows,cka-linear")
    cpu = sp.score(x.cpu(), 2 * x.cpu(), metrics="rows,test-rows,cka-linear")
    assert report.meta["device"].startswith("cuda") and torch.equal(torch.cuda.get_rng_state(), before)
    for name in ("rows", "test-rows", "cka-linear"):
        assert report[name].ok and report[name].score == pytest.approx(cpu[name].score, rel=1e-12, abs=1e-12)
    assert report["rows"].details["train_rows"] == cpu["rows"].details["train_rows"]


def test_all_rows_are_read_as_a_private_copy(registered):
    from similarity_plugins.runner.score import ArrayContext

    x = torch.randn(8, 3)
    side = object()
    ctx = ArrayContext({side: x}, {"test": torch.arange(8), "train": torch.tensor([1, 3])}, seed=0,
                       device=x.device, options=None)
    rows = ctx.activations(side, "x", "test")
    assert rows.data_ptr() != x.data_ptr() and torch.equal(rows, x)  # a metric that writes into it changes not x
    assert torch.equal(ctx.activations(side, "x", "train"), x[[1, 3]])
    with pytest.raises(TypeError, match="needs the models"):
        ctx.outputs(side)


def test_the_users_arrays_are_left_as_they_were():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((60, 3, 4)), rng.standard_normal((60, 7)).astype(np.float32)
    x0, y0 = x.copy(), y.copy()
    report = sp.score(x, y)  # every activations-only metric installed, on float64 and float32 inputs
    assert len(report) >= 3 and np.array_equal(x, x0) and np.array_equal(y, y0)
    tx = torch.tensor(x)
    sp.score(tx, torch.tensor(y))
    assert torch.equal(tx, torch.tensor(x0))
