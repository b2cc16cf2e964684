"""Tests for ``optimizer="auto"`` (generate_iris's default) and the leaky ReLU surrogate gradient of L-BFGS."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from similarity_plugins.iri import RunOptions, Settings, generate_iris, optimize_iris
from similarity_plugins.iri.presets import COMPRESSION, LBFGS_MAX_BYTES, LBFGS_MIN_RELUS, PRESETS, Structure, choose_preset
from similarity_plugins.iri.relu import straight_through_relu, surrogate_slopes, trace_front
from tests.helpers.iri import ResidualBlock, digit_tensors16, fit_adam
from tests.helpers.repo import load_repo_module
from tests.helpers.tolerance import FLOAT32_PATHS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Scaled(nn.Module):
    """``relu(2 * x)`` through a (possibly in-place) ReLU module, so the ReLU's input is not a leaf."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.relu = nn.ReLU(inplace=inplace)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(2.0 * x)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("slope", [0.1, 1.0])
def test_surrogate_slope_keeps_values_and_sets_the_gradient_below_zero(inplace, slope):
    torch.manual_seed(0)
    model = _Scaled(inplace)
    x = torch.randn(4, 50)
    xr = x.clone().requires_grad_(True)
    with straight_through_relu(model, {("relu", 1): slope}) as reset:
        reset()
        out = model(xr)
        (grad,) = torch.autograd.grad(out.sum(), xr)
    assert torch.equal(out.detach(), torch.relu(2.0 * x))          # forward value exact
    want = torch.where(x > 0, torch.tensor(2.0), torch.tensor(2.0 * slope))
    assert torch.allclose(grad, want, **FLOAT32_PATHS)
    assert "forward" not in model.relu.__dict__ and not model.relu._forward_hooks   # restored


def test_trace_counts_relus_after_the_last_maxpool():
    conv = lambda: nn.Conv2d(2, 2, 3, padding=1)  # noqa: E731
    x = torch.rand(1, 2, 8, 8)
    cases = {
        2: nn.Sequential(conv(), nn.ReLU(), nn.MaxPool2d(2), conv(), nn.ReLU(), conv(), nn.ReLU()),
        3: nn.Sequential(conv(), nn.ReLU(), conv(), nn.ReLU(), conv(), nn.ReLU()),    # no pool: every ReLU
        0: nn.Sequential(conv(), nn.ReLU(), nn.MaxPool2d(2)),
    }
    for want, model in cases.items():
        trace = trace_front(model, model, x)
        assert trace.relus_after_last_maxpool == want, (want, trace.events)


def test_lbfgs_rule_deep_compressive_and_fits_in_memory():
    n, c = LBFGS_MIN_RELUS, COMPRESSION
    deep = dict(relu_calls=2 * n, relus_after_last_maxpool=n)
    assert choose_preset(Structure(**deep)) == "lbfgs"                                  # sizes unknown
    assert choose_preset(Structure(relu_calls=3, relus_after_last_maxpool=3)) == "adam"              # shallow
    assert choose_preset(Structure(**deep, input_values=3072, output_values=1024)) == "lbfgs"   # ResNet layer3
    assert choose_preset(Structure(**deep, input_values=3072, output_values=2048)) == "resnet"  # layer2: 1.5x
    assert choose_preset(Structure(**deep, input_values=100 * c, output_values=100)) == "lbfgs"  # the boundary
    assert choose_preset(Structure(**deep, input_values=100 * c - 1, output_values=100)) == "resnet"
    big = Structure(**deep, input_values=3072, output_values=512, history_bytes=LBFGS_MAX_BYTES + 1)
    assert choose_preset(big) == "resnet-compressive"                                   # pairs would not fit
    assert choose_preset(Structure(**deep, history_bytes=LBFGS_MAX_BYTES + 1)) == "resnet"   # sizes unknown
    # an explicit optimiser picks that optimiser's preset for the structure
    small = Structure(**deep, input_values=3072, output_values=512)
    assert choose_preset(small, "adam") == "resnet-compressive" and choose_preset(small, "lbfgs") == "lbfgs"
    assert choose_preset(Structure(relu_calls=2), "lbfgs") == "lbfgs" and choose_preset(Structure(relu_calls=2), "adam") == "adam"
    assert {p["optimizer"] for p in PRESETS.values()} == {"adam", "lbfgs"}


def test_surrogate_slopes_from_a_trace():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3), nn.ReLU())
    trace = trace_front(model, model, torch.rand(1, 3))
    assert surrogate_slopes(trace, "last", 0.1) == {("1", 1): 0.1, ("3", 1): 0.1, ("5", 1): 1.0}
    assert surrogate_slopes(trace, "none", 0.0) == {}
    assert surrogate_slopes(trace, "last", 0.0) == {("5", 1): 1.0}


@pytest.fixture(scope="module")
def tiny_resnet() -> tuple[nn.Module, torch.Tensor]:
    """A residual CNN (stem + 3 blocks: 7 ReLU calls, no max-pool) trained 3 epochs on 32x32 digits; 16 seeds."""
    torch.manual_seed(0)
    x, y = digit_tensors16()
    x = nn.functional.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False).clamp(0, 1)
    w = 8
    model = nn.Sequential(nn.Conv2d(1, w, 4, stride=4, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                          *[ResidualBlock(w) for _ in range(3)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, 10))
    return fit_adam(model, x, y), x[-16:].clone()


@pytest.mark.slow  # trains a residual donor and runs two optimizers at a deep cut
def test_auto_picks_lbfgs_with_leak_at_a_deep_residual_cut_and_it_wins(tiny_resnet):
    model, seeds = tiny_resnet
    before = {k: v.clone() for k, v in model.state_dict().items()}
    auto = generate_iris(model, "5", seeds, steps=300, progress="never")
    assert auto.settings["optimizer"] == "lbfgs" and auto.settings["relu_leak"] == 0.1
    assert auto.settings["preset"] == "lbfgs"
    no_leak = generate_iris(model, "5", seeds, steps=300, progress="never", optimizer="lbfgs", tuning={"relu_leak": 0.0})
    adam = generate_iris(model, "5", seeds, steps=300, progress="never", tuning={"preset": "adam"})
    assert adam.settings["relu_leak"] == 0.0 and adam.settings["optimizer"] == "adam"
    # the leak and the per-sample L-BFGS each have to pay: auto's median error clearly below both
    med = lambda s: float(s.rel_error.median())  # noqa: E731
    assert med(auto) < 0.85 * med(no_leak) and med(auto) < 0.7 * med(adam), (med(auto), med(no_leak), med(adam))
    assert float(auto.seed_distance.mean()) > 0.25      # far from the seeds, as Adam's
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert all(not m.training for m in model.modules())


def test_auto_picks_adam_where_a_maxpool_ends_the_front(trained):
    model, seeds = trained
    iris = generate_iris(model, "2", seeds[:4], steps=20, progress="never")
    assert iris.settings["optimizer"] == "adam" and iris.settings["relu_leak"] == 0.0
    same = generate_iris(model, "2", seeds[:4], steps=20, progress="never", optimizer="adam")
    assert torch.equal(iris.inputs, same.inputs)          # auto = the optimiser it picked, bit for bit
    named = generate_iris(model, "2", seeds[:4], steps=20, progress="never", tuning={"preset": iris.settings["preset"]})
    assert torch.equal(iris.inputs, named.inputs)         # ... and = its preset asked for by name
    with pytest.raises(ValueError, match="apply only to optimizer lbfgs"):
        generate_iris(model, "2", seeds[:4], steps=20, progress="never", tuning={"history": 10})   # no silent switch


def test_auto_errors_name_the_fix(trained):
    model, seeds = trained
    with pytest.raises(ValueError, match="generate_iris"):
        optimize_iris(lambda x: x, seeds[:2], Settings.of("auto"), RunOptions(progress="never"))
    with pytest.raises(ValueError, match=r"relu_leak must be a number in \[0, 1\)"):
        generate_iris(model, "2", seeds[:2], steps=5, progress="never", tuning={"relu_leak": 1.5})
    with pytest.raises(ValueError, match="did you mean 'relu_leak'"):
        generate_iris(model, "2", seeds[:2], steps=5, progress="never", tuning={"relu_leek": 0.1})
    with pytest.raises(ValueError, match="did you mean 'resnet'"):
        generate_iris(model, "2", seeds[:2], steps=5, progress="never", tuning={"preset": "resnt"})
    with pytest.raises(ValueError, match="runs optimizer 'adam', not 'lbfgs'"):
        generate_iris(model, "2", seeds[:2], steps=5, progress="never", optimizer="lbfgs", tuning={"preset": "resnet"})
    with pytest.raises(TypeError, match="tuning value; pass tuning"):
        generate_iris(model, "2", seeds[:2], steps=5, progress="never", lr=0.1)
    with pytest.raises(TypeError, match="must be a dict"):
        generate_iris(model, "2", seeds[:2], steps=5, progress="never", tuning="resnet")
    with pytest.raises(ValueError, match="option optimizer must be one of lbfgs, adam, auto .*got 'lbgfs'; did you mean 'lbfgs'"):
        generate_iris(model, "2", seeds[:2], steps=5, progress="never", optimizer="lbgfs")


def test_relu_leak_is_part_of_the_cache_key(trained, tmp_path):
    model, seeds = trained
    common = dict(steps=5, progress="never", optimizer="lbfgs", cache_dir=tmp_path)
    a = generate_iris(model, "2", seeds[:2], **common)
    b = generate_iris(model, "2", seeds[:2], tuning={"relu_leak": 0.0}, **common)
    assert a.key != b.key


def test_plugins_and_cli_expose_auto_and_relu_leak():
    from similarity_plugins import metric_info
    from similarity_plugins.cli.main import build_parser

    options = metric_info("iri-slm").options
    assert options["iri_optimizer"] == "auto" and options["iri_tuning"] is None
    assert len([k for k in options if k.startswith("iri_")]) <= 12
    args = build_parser().parse_args(["iris", "--model", "m", "--layer", "l", "--data", "d", "--out", "o.npz"])
    assert args.optimizer == "auto"


def test_folded_front_is_the_same_function_and_leaves_the_model_alone(tiny_resnet):
    from similarity_plugins.iri.front import folded_front
    from similarity_plugins.networks.split import SplitNetwork

    model, seeds = tiny_resnet
    before = {k: v.clone() for k, v in model.state_dict().items()}
    split = SplitNetwork(model, "5")
    folded = folded_front(split.front_graph)
    assert folded is not None
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules()
                   if any(n.op == "call_module" and folded.get_submodule(n.target) is m for n in folded.graph.nodes))
    with torch.no_grad():
        ref = split.front(seeds)
        out = folded(seeds)
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert all(not p.requires_grad for p in folded.parameters())
    # no BatchNorm to fold -> None (the front runs as it is)
    plain = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Conv2d(2, 2, 3)).eval()
    assert folded_front(SplitNetwork(plain, "2").front_graph) is None


def test_fold_bn_option_is_validated_recorded_and_keyed(tiny_resnet, tmp_path):
    model, seeds = tiny_resnet
    on = generate_iris(model, "5", seeds[:2], steps=5, progress="never", cache_dir=tmp_path)
    assert on.settings["fold_bn"] is True and on.stats["bn_folded"] is True
    off = generate_iris(model, "5", seeds[:2], steps=5, progress="never", tuning={"fold_bn": False}, cache_dir=tmp_path)
    assert off.settings["fold_bn"] is False and off.stats["bn_folded"] is False and off.key != on.key
    with pytest.raises(ValueError, match="fold_bn must be True or False"):
        generate_iris(model, "5", seeds[:2], steps=5, progress="never", tuning={"fold_bn": "yes"})
    # the folded front reports true errors: they match the model's own front to rounding
    from similarity_plugins.networks.split import SplitNetwork

    with torch.no_grad():
        split = SplitNetwork(model, "5")
        t, a = split.front(seeds[:2]).flatten(1), split.front(on.inputs).flatten(1)
    true = (a - t).norm(dim=1) / t.norm(dim=1)
    assert torch.allclose(true.double(), on.rel_error, rtol=1e-3, atol=1e-5)


def test_history_bytes_counts_the_working_batch_not_the_whole_set():
    from similarity_plugins.iri.generate import _history_bytes

    seeds = torch.rand(300, 3, 32, 32)
    assert _history_bytes(seeds, 128) == 2 * 30 * 3 * 32 * 32 * 128 * 4       # 128 slots of float32
    assert _history_bytes(seeds[:4].double(), 128) == 2 * 30 * 3 * 32 * 32 * 4 * 8


def test_deep_maxpool_fronts_get_a_vgg_preset_by_compression():
    from similarity_plugins.iri.presets import DEEP_POOLED_RELUS, STRONG_COMPRESSION

    n, c = DEEP_POOLED_RELUS, STRONG_COMPRESSION
    pool = dict(relu_calls=n, ends_at_maxpool=True)
    assert choose_preset(Structure(**pool, input_values=3072, output_values=2048)) == "vgg-deep-pool"   # features.33
    assert choose_preset(Structure(**pool, input_values=3072, output_values=512)) == "vgg-last-pool"    # features.43
    assert choose_preset(Structure(**pool, input_values=100 * c, output_values=100)) == "vgg-last-pool"
    assert choose_preset(Structure(**pool, input_values=100 * c - 1, output_values=100)) == "vgg-deep-pool"
    assert choose_preset(Structure(**pool)) == "vgg-deep-pool"                                      # sizes unknown
    assert choose_preset(Structure(relu_calls=n - 1, ends_at_maxpool=True, input_values=3072, output_values=512)) == "adam"
    nobn = Structure(**pool, input_values=3072, output_values=512, batchnorm=False)
    assert choose_preset(nobn) == "vgg-last-pool-nobn" and PRESETS["vgg-last-pool-nobn"]["lr"] == 0.05
    torch.manual_seed(0)
    layers = []
    for i in range(n):
        layers += [nn.Conv2d(1 if i == 0 else 4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()]
    seeds = torch.rand(2, 1, 16, 16)
    for size, name in ((2, "vgg-deep-pool"), (4, "vgg-last-pool")):   # 4x8x8 = 256 values (as the input), 4x4x4
        vgg_like = nn.Sequential(*layers, nn.MaxPool2d(size)).eval()
        iris = generate_iris(vgg_like, str(3 * n), seeds, steps=5, progress="never")
        s, want = iris.settings, PRESETS[name]
        assert s["preset"] == name and iris.stats["bn_folded"]
        assert all(s[k] == v for k, v in want.items() if k != "fake_relu"), name
    # a tuning value replaces only itself: the preset's other values stay
    s = generate_iris(vgg_like, str(3 * n), seeds, steps=5, progress="never", tuning={"fold_bn": False}).settings
    assert (s["preset"], s["lr"], s["beta1"], s["fold_bn"]) == ("vgg-last-pool", 0.02, 0.98, False)
    s = generate_iris(vgg_like, str(3 * n), seeds, steps=5, progress="never", tuning={"lr": 0.2}).settings
    assert (s["lr"], s["cycle_steps"], s["beta1"], s["beta2"]) == (0.2, 400, 0.98, 0.95)
    s = generate_iris(vgg_like, str(3 * n), seeds, steps=5, progress="never", cycle_steps=100).settings
    assert (s["lr"], s["cycle_steps"], s["beta2"]) == (0.02, 100, 0.95)
    # VGG's avgpool at 32x32 copies the last pool's values 7x7 times: the rule counts the values, not copies
    head = nn.Sequential(*layers, nn.MaxPool2d(16), nn.AdaptiveAvgPool2d(7), nn.Flatten()).eval()
    for layer in (str(3 * n + 1), str(3 * n + 2)):                      # 4x7x7 = 196 values, 4 distinct
        s = generate_iris(head, layer, seeds, steps=5, progress="never").settings
        assert (s["preset"], s["fake_relu"]) == ("vgg-last-pool", "last"), layer
    plain = nn.Sequential(*[m for m in layers if not isinstance(m, nn.BatchNorm2d)], nn.MaxPool2d(4)).eval()
    assert generate_iris(plain, str(2 * n), seeds, steps=5, progress="never").settings["preset"] == "vgg-last-pool-nobn"
    assert trace_front(plain, plain, seeds[:1]).batchnorm_calls == 0
    assert trace_front(head, head, seeds[:1]).batchnorm_calls == n
    short = nn.Sequential(*layers[:6], nn.MaxPool2d(2)).eval()          # 2 ReLUs: plain Adam
    s = generate_iris(short, "6", seeds, steps=5, progress="never").settings
    assert (s["preset"], s["lr"], s["cycle_steps"], s["fold_bn"], s["relu_leak"]) == ("adam", 0.2, 300, False, 0.0)


def test_compresses_needs_both_sizes_and_the_factor():
    from similarity_plugins.iri.presets import compresses

    assert compresses(3072, 1536, 2) and compresses(3072, 512, 4) and not compresses(3072, 1537, 2)
    assert not compresses(0, 512, 2) and not compresses(3072, 0, 2)   # unknown sizes never count


def test_deep_unpooled_fronts_that_barely_compress_get_the_resnet_preset():
    n = LBFGS_MIN_RELUS
    deep = dict(relu_calls=2 * n, relus_after_last_maxpool=n)
    assert choose_preset(Structure(**deep, input_values=3072, output_values=2048, stride=8)) == "resnet"
    assert PRESETS["resnet"]["beta1"] == 0.98 and PRESETS["resnet"]["cycle_decay"] == 0.5
    assert choose_preset(Structure(relu_calls=2 * n, relus_after_last_maxpool=n - 1, input_values=3072,
                                   output_values=512, ends_at_maxpool=True)) == "vgg-last-pool"   # pooled: VGG's
    torch.manual_seed(0)
    w = 8   # stem with stride 2, then 3 residual blocks: 7 ReLU calls, 8x16x16 = 2,048 values from 1,024 pixels
    model = nn.Sequential(nn.Conv2d(1, w, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                          *[ResidualBlock(w) for _ in range(3)]).eval()
    seeds = torch.rand(2, 1, 32, 32)
    s = generate_iris(model, "5", seeds, steps=5, progress="never").settings
    assert (s["preset"], s["optimizer"], s["lr"], s["cycle_steps"], s["beta1"], s["relu_leak"], s["fold_bn"],
            s["cycle_decay"]) == ("resnet", "adam", 0.2, 300, 0.98, 0.1, True, 0.5)
    s = generate_iris(model, "5", seeds, steps=5, progress="never", tuning={"cycle_decay": 1.0}).settings
    assert (s["preset"], s["cycle_decay"], s["beta1"]) == ("resnet", 1.0, 0.98)     # the caller's value, only it
    s = generate_iris(model, "5", seeds, steps=5, progress="never", cycle_steps=100, tuning={"cycle_mult": 1.0}).settings
    assert (s["cycle_steps"], s["cycle_mult"], s["cycle_decay"], s["beta1"]) == (100, 1.0, 0.5, 0.98)
    s = generate_iris(model, "5", seeds, steps=5, progress="never", tuning={"lr": 0.1, "relu_leak": 0.0}).settings
    assert (s["optimizer"], s["lr"], s["beta1"], s["relu_leak"]) == ("adam", 0.1, 0.98, 0.0)
    narrow = nn.Sequential(*model, nn.Conv2d(w, 2, 1)).eval()   # 2x16x16 = 512 values: compressive, L-BFGS
    assert generate_iris(narrow, "6", seeds, steps=5, progress="never").settings["preset"] == "lbfgs"
    with pytest.raises(ValueError, match="apply only to optimizer adam"):
        generate_iris(narrow, "6", seeds, steps=5, progress="never", cycle_steps=100)   # never a switch to Adam
    s = generate_iris(narrow, "6", seeds, steps=5, progress="never", optimizer="adam", cycle_steps=100).settings
    assert (s["preset"], s["lr"], s["cycle_steps"]) == ("resnet-compressive", 0.1, 100)
    # ... where L-BFGS's curvature pairs would not fit in memory, auto runs that Adam preset itself
    from similarity_plugins.iri.generate import _settings

    trace = trace_front(narrow, narrow[:7], seeds[:1])
    common = dict(steps=5, tol=1e-2, optimizer="auto", init="noise", seed=0, cycle_steps=None, tuning=None)
    assert _settings(trace, common, 1.0).preset == "lbfgs"
    s = _settings(trace, common, LBFGS_MAX_BYTES + 1)
    assert (s.preset, s.optimizer, s.lr, s.beta1, s.relu_leak, s.fold_bn) == ("resnet-compressive", "adam", 0.1, 0.98,
                                                                               0.1, True)


class _Untraceable(nn.Module):
    """Seven Conv-BN-ReLU layers behind data-dependent control flow (torch.fx cannot trace it)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.ModuleList(nn.Sequential(nn.Conv2d(1 if i == 0 else 4, 4, 3, padding=1), nn.BatchNorm2d(4),
                                                nn.ReLU()) for i in range(7))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.detach().sum()) < 0:   # data-dependent: breaks symbolic tracing
            x = -x
        for layer in self.body:
            x = layer(x)
        return x


def test_untraceable_fronts_run_unfolded_through_the_hook_path():
    from similarity_plugins.iri.front import folded_front
    from similarity_plugins.networks.split import SplitNetwork

    torch.manual_seed(0)
    model = _Untraceable().eval()
    assert SplitNetwork(model, "body.6").front_graph is None
    assert folded_front(SplitNetwork(model, "body.6").front_graph) is None
    seeds = torch.rand(2, 1, 8, 8)
    iris = generate_iris(model, "body.6", seeds, steps=5, progress="never")   # 256 values from 64: Adam
    assert (iris.settings["optimizer"], iris.settings["fold_bn"], iris.stats["bn_folded"]) == ("adam", True, False)
    assert torch.isfinite(iris.rel_error).all()
    iris = generate_iris(model, "body.6", seeds, steps=5, progress="never", optimizer="lbfgs")
    assert iris.stats["bn_folded"] is False and torch.isfinite(iris.rel_error).all()


def test_study_variants_by_name_or_inline_options_and_donor_lrs():
    study = load_repo_module("lab/iri_depth_study.py", "iri_depth_study")
    assert study.variant_options("lbfgs") == {"optimizer": "lbfgs"}
    assert study.variant_options("optimizer=adam+lr=0.025+cycle_steps=400+fold_bn=True+fake_relu='none'") == {
        "optimizer": "adam", "cycle_steps": 400, "tuning": {"lr": 0.025, "fold_bn": True, "fake_relu": "none"}}
    with pytest.raises(KeyError):
        study.variant_options("no_such_variant")
    bench = load_repo_module("benchmarks/bench_iri.py", "bench_iri_for_test")
    assert bench.train_lr("vgg16_bn") == bench.train_lr("vgg11_bn") == 1e-4   # VGG collapses at 1e-3
    assert bench.train_lr("resnet50") == 1e-3


def test_bench_natural_image_patches_cover_every_class_in_the_pixel_range(monkeypatch):
    bench = load_repo_module("benchmarks/bench_iri.py", "bench_iri_for_patches")
    x, y = bench._patches_rgb32.__wrapped__(per_class=3)
    assert x.shape == (30, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and float(x.std()) > 0.05
    assert y[-10:].sort().values.tolist() == list(range(10))          # the last crops (the seeds) cover every class
    assert torch.equal(x, bench._patches_rgb32.__wrapped__(per_class=3)[0])   # fixed generator
    monkeypatch.setattr(bench, "DATA", "cifar")
    with pytest.raises(ValueError, match="'digits' or 'patches'"):
        bench.donor_data()


def test_bench_warm_up_touches_no_parameter_gradient():
    bench = load_repo_module("benchmarks/bench_iri.py", "bench_iri_for_warm_up")
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    bench.warm_up(model, torch.rand(2, 3, 8, 8))
    assert all(p.grad is None for p in model.parameters())


class _FunctionalBlock(nn.Module):
    """A :class:`ResidualBlock`'s modules run with functional ReLUs (``F.relu``, ``torch.relu``, ``Tensor.relu_``)."""

    def __init__(self, block: ResidualBlock) -> None:
        super().__init__()
        self.c1, self.b1, self.c2, self.b2 = block.c1, block.b1, block.c2, block.b2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x).relu_()


class _FunctionalTwin(nn.Module):
    """The tiny ResNet's stem and blocks, sharing its modules, with no ``nn.ReLU`` module in the front."""

    def __init__(self, model: nn.Sequential) -> None:
        super().__init__()
        self.stem, self.bn = model[0], model[1]
        self.blocks = nn.Sequential(*[_FunctionalBlock(b) for b in model[3:6]])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(nn.functional.relu(self.bn(self.stem(x)), inplace=True))


class _MixedTwin(_FunctionalTwin):
    """The functional twin with the tiny ResNet's own ``nn.ReLU`` module in the stem: a mixed front."""

    def __init__(self, model: nn.Sequential) -> None:
        super().__init__(model)
        self.act = model[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.act(self.bn(self.stem(x))))


def test_a_front_mixing_relu_modules_and_functions_runs_as_its_module_twin(tiny_resnet):
    """One nn.ReLU module and six functional calls: all seven count (before, only the module was seen, and
    the front ran a shallow cut's rules)."""
    from similarity_plugins.iri.relu import trace_front
    from similarity_plugins.networks.split import SplitNetwork

    model, seeds = tiny_resnet
    mixed = _MixedTwin(model).eval()
    trace = trace_front(mixed, mixed, seeds[:1])
    assert (len(trace.relu_calls), trace.functional_relu_calls) == (1, 6)
    assert trace_front(model, SplitNetwork(model, "5").front, seeds[:1]).functional_relu_calls == 0
    common = dict(steps=40, progress="never")
    ours, theirs = generate_iris(model, "5", seeds[:4], **common), generate_iris(mixed, "blocks.2", seeds[:4], **common)
    for key in ("optimizer", "relu_leak", "fake_relu", "fold_bn", "lr"):
        assert ours.settings[key] == theirs.settings[key], key
    assert theirs.settings["fake_relu_at"] == ["iri_relu_5#1"]
    assert torch.allclose(ours.inputs, theirs.inputs, atol=1e-5), (ours.inputs - theirs.inputs).abs().max()
    assert not any(name.startswith("iri_relu") for name, _ in mixed.named_modules())


class _ClampReLU(nn.ReLU):
    """An nn.ReLU whose forward calls no ReLU function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0)


def test_functional_relu_calls_count_only_calls_outside_relu_modules():
    from similarity_plugins.iri.relu import trace_front

    model = nn.Sequential(nn.Conv2d(1, 2, 3), _ClampReLU(), nn.Conv2d(2, 2, 3), nn.ReLU(inplace=True))
    front = lambda x: nn.functional.relu(model(x))  # noqa: E731 - one functional call after two module calls
    trace = trace_front(model, front, torch.rand(1, 1, 8, 8))
    assert (len(trace.relu_calls), trace.functional_relu_calls) == (2, 1)


def test_functional_relus_get_the_rules_and_surrogates_of_relu_modules(tiny_resnet):
    """A hand-written front that calls ReLU as a function runs as its nn.ReLU twin: same optimiser, same
    surrogate gradients, the same IRIs; without the rewrite it ran Adam's defaults (no ReLU calls seen)."""
    from similarity_plugins.iri.relu import relu_modules
    from similarity_plugins.networks.split import SplitNetwork

    model, seeds = tiny_resnet
    twin = _FunctionalTwin(model).eval()
    before = {k: v.clone() for k, v in twin.state_dict().items()}
    common = dict(steps=40, progress="never")
    ours, theirs = generate_iris(model, "5", seeds[:4], **common), generate_iris(twin, "blocks.2", seeds[:4], **common)
    for key in ("optimizer", "relu_leak", "fake_relu", "fold_bn", "lr"):
        assert ours.settings[key] == theirs.settings[key], key
    assert theirs.settings["optimizer"] == "lbfgs" and theirs.settings["fake_relu_at"] == ["iri_relu_6#1"]
    assert torch.allclose(ours.inputs, theirs.inputs, atol=1e-5), (ours.inputs - theirs.inputs).abs().max()
    assert all(torch.equal(v, before[k]) for k, v in twin.state_dict().items())
    assert not any(name.startswith("iri_relu") for name, _ in twin.named_modules())   # the model is untouched
    assert relu_modules(SplitNetwork(model, "5").front_graph) is None                 # nothing to rewrite


def test_fronts_without_relu_calls_get_the_smooth_preset():
    torch.manual_seed(0)
    seeds = torch.rand(2, 1, 16, 16)
    for act in (nn.GELU, nn.SiLU, nn.ReLU6):
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), act(), nn.MaxPool2d(2)).eval()
        s = generate_iris(model, "3", seeds, steps=3, progress="never").settings
        assert (s["preset"], s["cycle_steps"], s["fold_bn"], s["fake_relu"]) == ("smooth", 150, True, "none"), act
    linear = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.MaxPool2d(2)).eval()   # no activation at all
    assert generate_iris(linear, "1", seeds, steps=3, progress="never").settings["preset"] == "adam"
    assert choose_preset(Structure(relu_calls=1, other_activation_calls=5)) == "adam"   # ReLU calls decide
