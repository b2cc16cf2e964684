"""The sweep figure keeps its panels readable at page width: rows of at most two panels."""

from __future__ import annotations

import io

import pytest

from similarity_plugins.host.results import Report, SimilarityResult

PIL = pytest.importorskip("PIL.Image")


def _sweep(shift: float) -> Report:
    return Report([SimilarityResult(metric, 0.5 + shift * i, {}, 0.0, None, layer)
                   for metric in ("cka-linear", "iri-slm") for i, layer in enumerate(["block1", "block2", "block3"])],
                  {})


@pytest.mark.parametrize("panels, rows, cols", [(1, 1, 1), (3, 2, 2)])
def test_sweep_panels_fill_rows_of_two(panels, rows, cols):
    from similarity_plugins.apps.plots import sweep_figure

    image = PIL.open(io.BytesIO(sweep_figure({f"pair {i}": _sweep(0.1 * i) for i in range(panels)}, title="t")))
    width, height = image.size
    assert width == pytest.approx(5.2 * cols * 120, rel=0.02)
    assert height == pytest.approx(4.2 * rows * 120, rel=0.02)
