"""How far the front's linear model holds, at IRIs, at their seeds and at the noise starts (a study, not an option).

    python lab/iri_kinks.py --case vgg16_bn:features.33 --seeds 8 [--option relu_leak=0 ...]

A front of ReLUs, max-pools, convolutions and (eval-mode) BatchNorm is piecewise linear in its input. A step
of a Gauss-Newton or quasi-Newton method is only as good as the linear model ``f(x + eps d) ~ f(x) + eps J d``
over the step. This script generates IRIs with ``generate_iris``'s defaults (``--steps``, 1,000; ``--option
KEY=VALUE`` passes options to it), then, in float64 (so that rounding does not pass for a kink), measures along
``--directions`` random directions ``d`` of RMS 1 (pixels) the linear model's relative mismatch
``|f(x + eps d) - f(x) - eps J d| / |f(x + eps d) - f(x)|`` for every ``eps`` of ``--eps`` (RMS pixel moves),
at three points per sample: the IRI, its seed and its noise start (``0.5 + randn/20``, the paper's). ``J d`` is
one forward-mode product (``torch.func.jvp`` on a float64 copy of the front). Printed: the median mismatch
over samples and directions, per point and ``eps`` (and for the converged and the unconverged IRIs apart
when there are both). The donors and seeds are those of
``benchmarks/bench_iri.py`` (``IRI_BENCH_DATA=patches`` for natural-image crops). Round 13 of
docs/iri_depth.md has the figures.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "lab")]


def mismatch(front, x: torch.Tensor, d: torch.Tensor, eps: list[float]) -> list[float]:
    """Relative mismatch of the linear model of ``front`` at ``x`` (C, H, W) along ``d`` (C, H, W), per ``eps``
    (moves ``eps * d`` in pixel units): ``|f(x + eps d) - f(x) - eps J d| / |f(x + eps d) - f(x)|``, one float each."""
    f = lambda v: front(v[None]).flatten()  # noqa: E731
    fx, jd = torch.func.jvp(f, (x,), (d,))
    out = []
    for e in eps:
        actual = f(x + e * d) - fx
        out.append(float(((actual - e * jd).norm() / actual.norm().clamp_min(1e-300)).detach()))
    return out


def plain_front(model: torch.nn.Module, layer: str) -> torch.fx.GraphModule:
    """A float64 copy of the layers of ``model`` up to ``layer``, as a plain callable that functorch can
    transform (``SplitNetwork.front`` toggles ``requires_grad``, which functorch refuses)."""
    from similarity_plugins.networks.split import SplitNetwork

    twin = copy.deepcopy(model).double().eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    graph = SplitNetwork(twin, layer).front_graph
    if graph is None:
        raise SystemExit(f"{layer}: torch.fx cannot trace this front; the study needs a traced one")
    return graph


def main(argv: list[str] | None = None) -> None:
    """Parse the options, generate the IRIs, print the median mismatch per point and ``eps``."""
    import bench_iri as bench
    from iri_depth_study import variant_options

    from similarity_plugins.iri import generate_iris
    from similarity_plugins.iri.settings import make_settings
    from similarity_plugins.iri.state import initial_inputs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="vgg16_bn:features.33")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--eps", default="1e-8,1e-6,1e-4,1e-2")
    p.add_argument("--directions", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of generate_iris (relu_leak=0, fake_relu=none, ...; values as Python literals)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    arch, layer = args.case.split(":")
    eps = [float(v) for v in args.eps.split(",")]
    model, seeds = bench.case_inputs(arch, args.seeds)
    options = variant_options("+".join(args.option)) if args.option else {}
    iris = generate_iris(model, layer, seeds, steps=args.steps, batch_size=len(seeds), progress="never", **options)
    starts = initial_inputs(seeds, range(len(seeds)), make_settings(steps=1, tol=1e-2, init="noise", seed=0, preset="adam"), None)
    front = plain_front(model, layer)
    g = torch.Generator().manual_seed(0)
    print(f"# {args.case} {options or 'defaults'}: {len(seeds)} seeds, IRI median error {iris.summary['median_error']:.4f}, "
          f"{args.directions} directions; median mismatch of the linear model at RMS pixel move eps")
    print(f"{'point':14s}" + "".join(f"{e:>10g}" for e in eps))
    done = iris.converged
    groups = [("IRI", iris.inputs), ("seed", seeds), ("start", starts)]
    if 0 < int(done.sum()) < len(seeds):   # some converged, some not: their IRIs apart too
        groups[1:1] = [(f"IRI conv ({int(done.sum())})", iris.inputs[done]),
                       (f"IRI not ({int((~done).sum())})", iris.inputs[~done])]
    for name, points in groups:
        rows = []
        for x in points.double():
            for _ in range(args.directions):
                d = torch.randn(x.shape, generator=g, dtype=torch.float64)
                rows.append(mismatch(front, x, d / d.pow(2).mean().sqrt(), eps))
        med = torch.tensor(rows).median(dim=0).values
        print(f"{name:14s}" + "".join(f"{v:10.3f}" for v in med.tolist()), flush=True)


if __name__ == "__main__":
    main()
