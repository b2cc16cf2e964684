"""Built-in data (digits, folders, specs) and the cue variants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from similarity_plugins.datasets import (
    ImageTensors,
    PatchPattern,
    PixelShortcut,
    ShortcutRandomised,
    ShortcutRemoved,
    UnseenCue,
    cifar10,
    digits,
    digits_data,
    image_folder,
    make_variant,
    parse_data_spec,
    tensors_of,
)
from similarity_plugins.networks.data import Data, load_all
from tests.helpers.datasets import NoTensors
from tests.helpers.tolerance import FLOAT32_PATHS


@pytest.fixture(scope="module")
def train():
    return digits("train")


@pytest.fixture(scope="module")
def test_split():
    return digits("test")


# ---------------------------------------------------------------- digits


def test_digits_shapes_range_and_sizes(train, test_split):
    x, y = train.tensors
    assert x.shape == (1347, 1, 32, 32) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and set(y.tolist()) == set(range(10))
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0 and float(x.max()) > 0.99
    assert len(test_split) == 450 and len(digits(None)) == 1797
    xi, yi = train[3]
    assert xi.shape == (1, 32, 32) and int(yi) == int(y[3])


def test_digits_split_is_stratified_disjoint_and_deterministic(train, test_split):
    from sklearn.datasets import load_digits

    raw = load_digits()
    all_counts = np.bincount(raw.target)
    test_counts = test_split.y.bincount(minlength=10).numpy()
    assert np.all(np.abs(test_counts - 0.25 * all_counts) <= 1)
    # train and test are disjoint and together cover all images (compare at native 8x8 size)
    tr8, te8 = digits("train", size=8), digits("test", size=8)
    keys = {tuple(v.flatten().tolist()) + (int(label),) for v, label in zip(torch.cat([tr8.x, te8.x]), torch.cat([tr8.y, te8.y]))}
    raw_keys = {tuple((im / 16.0).astype(np.float32).flatten().tolist()) + (int(label),)
                for im, label in zip(raw.images, raw.target)}
    assert keys == raw_keys
    assert torch.equal(digits("train").x, train.x)
    assert not torch.equal(digits("train", seed=1).y, train.y)


def test_digits_native_size_and_upsampling():
    from sklearn.datasets import load_digits

    raw = load_digits()
    x8 = digits(None, size=8).x
    assert torch.allclose(x8[:, 0], torch.as_tensor(raw.images / 16.0, dtype=torch.float32), **FLOAT32_PATHS)
    x16 = digits(None, size=16).x
    assert x16.shape == (1797, 1, 16, 16)
    # bilinear upsampling keeps the mean intensity roughly
    assert abs(float(x16.mean()) - float(x8.mean())) < 0.02


def test_digits_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        digits("val")
    with pytest.raises(ValueError, match="size"):
        digits("train", size=0)
    with pytest.raises(ValueError, match="test_fraction"):
        digits("train", test_fraction=1.5)


def test_digits_data_and_load_all():
    data = digits_data(size=16)
    assert isinstance(data, Data) and len(data.train) == 1347 and len(data.test) == 450
    x, y = load_all(data.test)
    assert x.shape == (450, 1, 16, 16) and torch.equal(y, data.test.y)


# ---------------------------------------------------------------- folders and specs


def test_parse_data_spec_forms():
    d = parse_data_spec("digits")
    assert d.train.x.shape[1:] == (1, 32, 32)
    assert parse_data_spec("digits:16").test.x.shape[1:] == (1, 16, 16)
    assert parse_data_spec("digits", size=12).test.x.shape[1:] == (1, 12, 12)
    assert parse_data_spec(" DIGITS:8 ").test.x.shape[1:] == (1, 8, 8)


@pytest.mark.parametrize("spec", ["mnist", "imagenet:/data", "", "cifar10", "folder:"])
def test_parse_data_spec_unknown_or_incomplete(spec):
    with pytest.raises(ValueError, match="digits"):
        parse_data_spec(spec)


def test_parse_data_spec_bad_digits_size():
    with pytest.raises(ValueError, match="digits:16"):
        parse_data_spec("digits:big")


def test_cifar10_missing_gives_instructions(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        parse_data_spec(f"cifar10:{tmp_path}")
    msg = str(err.value)
    assert "CIFAR-10 not found under" in msg and "download=True" in msg and f"cifar10:{tmp_path}" in msg
    with pytest.raises(ValueError, match="split"):
        cifar10(tmp_path, "val")


def _make_folder(root, size=(10, 12)):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for cls in ("cat", "dog"):
            folder = root / split / cls
            folder.mkdir(parents=True)
            for i in range(2):
                arr = rng.integers(0, 255, size=(*size, 3), dtype=np.uint8)
                Image.fromarray(arr).save(folder / f"{i}.png")


def test_image_folder_roundtrip(tmp_path):
    _make_folder(tmp_path)
    ds = image_folder(tmp_path, "train", size=8)
    assert len(ds) == 4 and ds.classes == ["cat", "dog"] and ds.num_classes == 2
    x, y = ds[3]
    assert x.shape == (3, 8, 8) and 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and y == 1
    data = parse_data_spec(f"folder:{tmp_path}")
    assert len(data.test) == 4 and data.test[0][0].shape == (3, 10, 12)


def test_image_folder_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="ImageFolder layout"):
        image_folder(tmp_path, "train")
    with pytest.raises(FileNotFoundError, match="ImageFolder layout"):
        parse_data_spec(f"folder:{tmp_path / 'nope'}")


# ---------------------------------------------------------------- PixelShortcut


def test_pattern_geometry_is_disjoint_per_class():
    for layout in ("edges", "grid"):
        p = PatchPattern(32, 32, 10, layout=layout)
        assert p.patch == 4 and p.masks.shape == (10, 32, 32)
        assert torch.all(p.masks.sum((1, 2)) == 16)
        assert int(p.masks.sum(0).max()) == 1  # no two classes share a pixel
    edges = PatchPattern(32, 32, 10)
    cols = edges.masks.any(1)  # (K, W)
    assert cols[:, 4:28].sum() == 0  # edges layout stays clear of the centre columns
    assert PatchPattern(8, 8, 10).patch == 1
    with pytest.raises(ValueError, match="patch"):
        PatchPattern(32, 32, 10, patch=9)
    with pytest.raises(ValueError, match="layout"):
        PatchPattern(32, 32, 10, layout="spiral")


def test_pixel_shortcut_pattern_follows_label(train):
    v = PixelShortcut(train)
    x, y = v.tensors
    assert torch.equal(y, train.y) and v.stamped.all() and not v.swapped.any()
    for i in range(0, len(v), 97):
        mask = v.pattern_for(int(y[i]))
        assert torch.all(x[i, :, mask] == 1.0)
        assert torch.equal(x[i, :, ~mask], train.x[i, :, ~mask])  # nothing else changes


def test_pixel_shortcut_fraction(train):
    v = PixelShortcut(train, fraction=0.3, seed=4)
    assert int(v.stamped.sum()) == round(0.3 * len(train))
    x = v.x
    clean = ~v.stamped
    assert torch.equal(x[clean], train.x[clean])
    stamped = torch.nonzero(v.stamped).flatten()[:20]
    for i in stamped.tolist():
        assert torch.all(x[i, :, v.pattern_for(int(train.y[i]))] == 1.0)


def test_pixel_shortcut_swap(train):
    v = PixelShortcut(train, swap_fraction=0.5, seed=2)
    n_swap = round(0.5 * len(train))
    assert int(v.swapped.sum()) == n_swap and v.stamped.all()
    src = v.source_index
    assert torch.all(train.y[src[v.swapped]] != train.y[v.swapped])  # images of OTHER classes
    assert torch.equal(src[~v.swapped], torch.nonzero(~v.swapped).flatten())
    x, y = v.tensors
    assert torch.equal(y, train.y)  # labels never change
    expected = v.pattern.stamp(train.x[src], train.y)
    assert torch.equal(x, expected)  # the pattern follows the label, on the swapped-in image


def test_pixel_shortcut_deterministic_and_seeded(train):
    a = PixelShortcut(train, fraction=0.5, swap_fraction=0.2, seed=7)
    b = PixelShortcut(train, fraction=0.5, swap_fraction=0.2, seed=7)
    c = PixelShortcut(train, fraction=0.5, swap_fraction=0.2, seed=8)
    assert torch.equal(a.x, b.x) and torch.equal(a.source_index, b.source_index)
    assert not torch.equal(a.x, c.x)


def test_pixel_shortcut_bad_fractions(train):
    with pytest.raises(ValueError, match="swap_fraction"):
        PixelShortcut(train, fraction=0.3, swap_fraction=0.5)
    with pytest.raises(ValueError, match="fraction"):
        PixelShortcut(train, fraction=1.2)
    with pytest.raises(ValueError, match="num_classes"):
        PixelShortcut(train, num_classes=5)


def test_per_sample_path_matches_tensor_path(train):
    small = ImageTensors(train.x[:60], train.y[:60], 10)
    for make in (
        lambda d: PixelShortcut(d, swap_fraction=0.5, seed=3),
        lambda d: ShortcutRandomised(d, seed=3),
        lambda d: UnseenCue(d, fraction=0.5, seed=3),
        lambda d: ShortcutRemoved(PixelShortcut(d)),
    ):
        fast, slow = make(small), make(NoTensors(small))
        assert slow.tensors is None and tensors_of(slow) is None
        xs, ys = load_all(slow)
        xf, yf = fast.tensors
        assert torch.equal(xs, xf) and torch.equal(ys, yf)
        assert torch.equal(fast[5][0], xf[5])


# ---------------------------------------------------------------- removed / randomised


def test_shortcut_removed_gives_clean_images(train):
    v = PixelShortcut(train, swap_fraction=0.5)
    r = ShortcutRemoved(v)
    assert torch.equal(r.x, train.x) and torch.equal(r.y, train.y)
    assert torch.equal(ShortcutRemoved(train).x, train.x)
    assert not torch.equal(v.x, train.x)


def test_shortcut_randomised_stamps_a_wrong_class(train):
    v = PixelShortcut(train, swap_fraction=0.5)
    r = ShortcutRandomised(v, seed=1)
    assert r.pattern is v.pattern
    assert torch.all(r.stamped_labels != r.labels) and torch.equal(r.y, train.y)
    assert len(set(r.stamped_labels.tolist())) == 10
    expected = v.pattern.stamp(train.x, r.stamped_labels)
    assert torch.equal(r.x, expected)
    for i in range(0, len(r), 131):
        assert torch.all(r.x[i, :, r.pattern_for(int(r.stamped_labels[i]))] == 1.0)
    # wrong classes are spread out roughly uniformly over the other 9 classes
    shift = (r.stamped_labels - r.labels) % 10
    counts = shift.bincount(minlength=10)[1:].float()
    assert counts.min() > 0.5 * counts.mean()
    assert torch.equal(ShortcutRandomised(v, seed=1).x, r.x) and not torch.equal(ShortcutRandomised(v, seed=2).x, r.x)


def test_shortcut_randomised_on_plain_dataset_uses_default_geometry(train):
    r = ShortcutRandomised(train, seed=0)
    p = PixelShortcut(train)
    assert torch.equal(r.pattern.masks, p.pattern.masks)


# ---------------------------------------------------------------- UnseenCue


def test_unseen_cue_frame_codes_label(train):
    u = UnseenCue(train, strength=0.5)
    x = u.x
    frame = u.mask
    assert frame[0].all() and frame[:, 0].all() and not frame[2:30, 2:30].any()
    for i in range(0, len(u), 101):
        lab = int(train.y[i])
        assert torch.allclose(x[i, :, frame], torch.full_like(x[i, :, frame], 0.5 * (lab + 1) / 10))
        assert torch.equal(x[i, :, ~frame], train.x[i, :, ~frame])
        assert torch.allclose(u.cue_for(lab)[:, frame], x[i, :, frame])
    values = {round(float(u.cue_for(k)[0, 0, 0]), 4) for k in range(10)}
    assert len(values) == 10  # every class has its own level
    # a kind of cue different from PixelShortcut: it never uses the shortcut's value 1.0 at strength < 1
    assert float(x[:, :, frame].max()) <= 0.5 + 1e-6


def test_unseen_cue_fraction_seed_and_colour():
    rng = torch.Generator().manual_seed(0)
    rgb = ImageTensors(torch.rand(50, 3, 16, 16, generator=rng), torch.arange(50) % 5, 5)
    a = UnseenCue(rgb, strength=0.8, fraction=0.4, seed=1)
    assert int(a.has_cue.sum()) == 20
    assert torch.equal(a.x[~a.has_cue], rgb.x[~a.has_cue])
    b = UnseenCue(rgb, strength=0.8, fraction=0.4, seed=2)
    assert torch.equal(a.colours, b.colours) and not torch.equal(a.has_cue, b.has_cue)  # look independent of seed
    assert a.colours.shape == (5, 3) and float(a.colours.max()) <= 0.8
    with pytest.raises(ValueError, match="strength"):
        UnseenCue(rgb, strength=0.0)


# ---------------------------------------------------------------- make_variant and composition


def test_make_variant_names(train):
    assert isinstance(make_variant("pixel-shortcut", train, swap_fraction=0.5), PixelShortcut)
    assert isinstance(make_variant("shortcut-removed", train), ShortcutRemoved)
    assert isinstance(make_variant("shortcut-randomised", train, seed=1), ShortcutRandomised)
    assert isinstance(make_variant("shortcut_randomized", train), ShortcutRandomised)
    assert isinstance(make_variant("unseen-cue", train, strength=0.3), UnseenCue)
    with pytest.raises(ValueError, match="pixel-shortcut"):
        make_variant("blur", train)


def test_variants_compose(train):
    both = UnseenCue(PixelShortcut(train), strength=0.3)
    x = both.x
    i = 10
    # the frame overwrites the edge squares where they overlap; elsewhere the square survives
    sq = both.base.pattern_for(int(train.y[i])) & ~both.mask
    assert torch.all(x[i, :, sq] == 1.0)
    assert torch.allclose(x[i, :, both.mask], both.cue_for(int(train.y[i]))[:, both.mask])


def test_random_mark_carries_no_label_information():
    from similarity_plugins.datasets import RandomMark, digits, make_variant

    base = digits("train", size=32)
    ds = make_variant("random-mark", base, seed=3)
    assert isinstance(ds, RandomMark) and len(ds) == len(base)
    x, y = ds.tensors
    clean_x, _ = base.tensors
    for i in range(20):
        k = int(ds.stamped_labels[i])
        mask = ds.pattern_for(k)
        assert torch.all(x[i, 0][mask] == 1.0)
        assert torch.equal(x[i, 0][~mask], clean_x[i, 0][~mask])
    # the stamped class is independent of the label: about 1/10 of the marks match it
    match = float((ds.stamped_labels == y).float().mean())
    assert 0.04 < match < 0.17
    assert torch.equal(RandomMark(base, seed=3).stamped_labels, ds.stamped_labels)
