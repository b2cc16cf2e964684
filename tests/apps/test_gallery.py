"""The IRI gallery: seeds next to their IRIs, captions read from the IRISet."""

from __future__ import annotations

import pytest
import torch

from similarity_plugins import Data, compare
from similarity_plugins.apps.gallery import gallery_captions, iris_of_sweep, plot_iris
from similarity_plugins.cli import main
from similarity_plugins.datasets import digits_data
from similarity_plugins.iri import generate_iris
from similarity_plugins.networks.context import Context
from tests.helpers.models import tiny_cnn


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@pytest.fixture(scope="module")
def seeds_and_iris():
    torch.manual_seed(0)
    seeds = torch.rand(6, 1, 16, 16)
    model = tiny_cnn()
    layer = "block1"
    iris = generate_iris(model, layer, seeds, steps=30, tol=0.05, progress="never", backend="torch")
    return seeds, iris


def test_captions_are_the_iriset_numbers(seeds_and_iris):
    _, iris = seeds_and_iris
    captions = gallery_captions(iris, 4)
    assert len(captions) == 4
    for i, caption in enumerate(captions):
        assert caption == f"err {float(iris.rel_error[i]):.3f}\ndist {float(iris.seed_distance[i]):.3f}"
    assert len(gallery_captions(iris, 100)) == len(iris)


def test_plot_iris_writes_a_png_with_a_row_per_layer(tmp_path, seeds_and_iris):
    seeds, iris = seeds_and_iris
    one = plot_iris(iris, seeds, tmp_path / "one.png", count=4)
    two = plot_iris({"a": iris, "b": iris}, seeds, tmp_path / "sub" / "two.png", count=4)
    (w1, h1), (w2, h2) = _png_size(tmp_path / "one.png"), _png_size(tmp_path / "sub" / "two.png")
    assert one.endswith("one.png") and two.endswith("two.png")
    assert w1 == w2 and h2 > 1.3 * h1  # three rows (seeds, a, b) against two
    assert not list(tmp_path.glob("*.tmp*"))
    with pytest.raises(ValueError, match="shape"):
        plot_iris(iris, torch.rand(6, 1, 8, 8), tmp_path / "bad.png")
    with pytest.raises(ValueError, match="at least one"):
        plot_iris({}, seeds, tmp_path / "bad.png")


def test_iris_of_sweep_reuses_the_compare_iris(tmp_path):
    data = digits_data(size=32)
    model = tiny_cnn(in_channels=1).eval()
    layer = "block1"
    options = {"iri_max_seeds": 5, "iri_steps": 10, "epochs": 1, "max_train": 64}
    context = Context(Data(train=data.train, test=data.test))
    compare(model, model, layer, context.data, "iri-hlm", options=options, context=context)
    before = len(context.memo)
    sets, seeds = iris_of_sweep(context, model, [layer], options)
    assert len(context.memo) == before  # memoised: no new IRIs
    assert seeds.shape == (5, 1, 32, 32) and len(sets[layer]) == 5
    plot_iris(sets, seeds, tmp_path / "g.png")
    assert _png_size(tmp_path / "g.png")[0] > 0


def test_iris_command_writes_a_gallery(tmp_path, capsys):
    gallery = tmp_path / "gallery.png"
    code = main(["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--max-seeds", "5",
                 "--steps", "5", "--out", str(tmp_path / "i.npz"), "--gallery", str(gallery), "--no-progress"])
    assert code == 0 and f"wrote {gallery}" in capsys.readouterr().out
    assert _png_size(gallery)[0] > 200
