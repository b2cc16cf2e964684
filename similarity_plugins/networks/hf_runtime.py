"""What transformers adds to a model during the model's own forward pass, told apart from a change to the model.

A transformers model is not static while it runs:

- the first forward that asks for ``output_hidden_states`` or ``output_attentions`` (an argument, or the
  config's flag) installs forward hooks that collect those outputs on the blocks and attention modules, and
  marks the model with a private flag so that it never installs them again. The hooks only record: they
  return nothing and change no output. Removing them while the flag stays breaks the model (it then returns
  no hidden states), so they belong to the model from then on.
- a rotary embedding of the ``dynamic`` or ``longrope`` kind recomputes its frequencies (``inv_freq``), its
  cached length and its scaling from the length of each input: a cache of the last input, not a setting.

The donor guard (``runner/guard.py``) and the fingerprints of modules (`fingerprint.module_config`,
`fingerprint.fingerprinted_tensors`) read both through this module, so that a model run once by transformers
has the same digest as before and a metric that ran it is not blamed for changing it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

#: The transformers modules whose output-capturing hook (``output_capturing_hook``) is installed on a first forward.
_CAPTURE_MODULES = ("transformers.utils.output_capturing", "transformers.utils.generic")
_CAPTURE_HOOK = "output_capturing_hook"
#: Rotary embedding kinds whose forward rewrites the embedding's frequencies from the input's length.
_RECOMPUTED_ROPE = ("dynamic", "longrope")
#: Endings of the attribute names such an embedding rewrites (``max_seq_len_cached``, ``sliding_attention_scaling``).
_ROPE_ATTRIBUTES = ("max_seq_len_cached", "attention_scaling")


def is_capture_hook(hook: Any) -> bool:
    """True for a forward hook that transformers installs to collect ``hidden_states`` or ``attentions``.

    Args:
        hook: a value of a module's ``_forward_hooks`` (or any hook dict).

    Returns:
        Whether it is transformers' output-capturing hook, which records outputs and never changes them.
    """
    return (getattr(hook, "__name__", None) == _CAPTURE_HOOK
            and getattr(hook, "__module__", None) in _CAPTURE_MODULES)


def forward_cache(module: nn.Module) -> tuple[frozenset[str], frozenset[str]]:
    """The state of ``module`` that transformers' own forward rewrites from the length of each input.

    Args:
        module: any module; only a rotary embedding whose ``rope_type`` is ``"dynamic"`` or ``"longrope"`` (or
            a dict of layer types to such kinds) has such state.

    Returns:
        ``(buffer names, attribute names)``, the frequency buffers (names ending in ``inv_freq``, except the
            ``original_inv_freq`` it starts from) and the cached length and scaling; both empty for other modules.
    """
    kinds = getattr(module, "rope_type", None)
    kinds = list(kinds.values()) if isinstance(kinds, dict) else [kinds]
    if not any(isinstance(k, str) and any(r in k for r in _RECOMPUTED_ROPE) for k in kinds):
        return frozenset(), frozenset()
    buffers = {n for n in module._buffers if n.endswith("inv_freq") and not n.endswith("original_inv_freq")}
    attributes = {n for n in vars(module) if n.endswith(_ROPE_ATTRIBUTES)}
    return frozenset(buffers), frozenset(attributes)
