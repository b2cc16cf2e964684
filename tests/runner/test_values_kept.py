"""Values that mean what they say: masked arrays refused naming the mask (or taken when nothing is masked), and
an honest permutation cost model (small N with huge K, memory for huge K, K near N!, null_std for K = 1)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.stats import permutation as perm


def _xy(n: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)), rng.standard_normal((n, 3))


def test_a_masked_array_is_refused_naming_the_mask():
    x, y = _xy()
    masked = np.ma.masked_array(x, mask=np.zeros_like(x, bool))
    masked.mask[3, 1] = True
    with pytest.raises(ValueError, match=r"x is a masked array with 1 masked entries \(in 1 rows\).*x.mask"):
        sp.score(masked, y, "cka-linear")
    with pytest.raises(ValueError, match="masked array"):
        sp.functional.cka(masked, y)


def test_a_masked_array_with_nothing_masked_scores_as_its_data():
    x, y = _xy()
    plain = sp.score(x, y, "cka-linear")[0].score
    assert sp.score(np.ma.masked_array(x), y, "cka-linear")[0].score == plain


def _cost_warnings(k: int, work: float, n: int | None, available: float | None = None) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        perm.check_cost(k, work, "test", 0.0, available, n)
    return [str(w.message) for w in caught if issubclass(w.category, perm.PermutationCostWarning)]


def test_small_n_with_a_huge_k_warns():
    # K = 3e6 at N = 10: 3 n^2 gathers per permutation looked cheap, but drawing each permutation costs too,
    # and K is most of the 10! = 3628800 distinct permutations
    (text,) = _cost_warnings(3_000_000, 3.0 * 10 * 10 * perm.GATHER_COST, 10)
    assert "10! = 3628800" in text and "repeat" in text
    assert float(3_000_000) * perm.PERMUTATION_COST > 1e11  # the drawing alone is counted (about 18 s measured)


def test_more_permutations_than_exist_are_noted():
    (text,) = _cost_warnings(1000, 10.0, 5)
    assert "more permutations than exist" in text and "5! = 120" in text
    assert _cost_warnings(1000, 10.0, 30) == []


def test_a_huge_k_is_bounded_by_memory():
    (text,) = _cost_warnings(10**9, 1.0, 1000, available=2**30)
    assert "null values" in text and "memory available" in text


def test_null_std_of_one_permutation_is_nan_not_zero():
    details = perm.summarise(0.5, torch.tensor([0.3]), "similarity")
    assert math.isnan(details["null_std"]) and details["permutations"] == 1


def test_documented_constants_match_the_code():
    from tests.helpers.repo import ROOT

    text = (ROOT / "docs" / "significance.md").read_text()
    def short(value: float) -> str:  # 1e13 as the docs write it, not Python's 1e+13
        mantissa, exponent = f"{value:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"

    assert f"GATHER_COST = {perm.GATHER_COST:g}`" in text and f"WORK_BOUND = {short(perm.WORK_BOUND)}`" in text
    assert f"PERMUTATION_COST = {short(perm.PERMUTATION_COST)}`" in text and f"NULL_BYTES = {perm.NULL_BYTES:g}`" in text


def test_a_torch_masked_tensor_is_refused_naming_the_mask_or_taken_when_nothing_is_masked():
    masked_tensor = pytest.importorskip("torch.masked").masked_tensor
    x, y = _xy()
    keep = torch.ones(x.shape, dtype=torch.bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.masked is a prototype and says so
        whole = masked_tensor(torch.tensor(x), keep)
        keep[0, 0] = False
        holed = masked_tensor(torch.tensor(x), keep)
    assert sp.score(whole, y, "cka-linear")[0].score == sp.score(x, y, "cka-linear")[0].score
    with pytest.raises(ValueError, match="MaskedTensor with 1 masked entries"):
        sp.score(holed, y, "cka-linear")
