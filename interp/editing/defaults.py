"""Per-model editing defaults: one table, keyed by model fingerprint, each value citing the study that chose it.

    defaults_for(model).layer                      # ROME / FT-L's edit layer (None: not chosen for this model)
    hparams_for(model, RomeHparams, "rome")        # the editor's dataclass defaults, then this model's row
    hparams_for(model, RomeHparams, "rome", sequential=True)   # ... then the row's overrides for edits in a row

Every value here was chosen on a dev split of the model's own fact records; the study folders under ``studies/``
hold the script, the results and the log of each choice. A model without a row gets the dataclass defaults, and
its layer from causal tracing over its dev facts (:func:`default_layer`, kept in the model's cache).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

from ..analyses.trace import trace_facts
from ..core.caches import model_cache
from .facts import load_records

SMOLLM2_135M = "b6b4e20b-538090432"   # the embedded SmolLM2-135M-Instruct (Q4_1 GGUF)
GEMMA3_270M = "99115288-1072419280"   # Gemma 3 270M (Q4_K_M GGUF)

MEMIT_SPAN = 5  # a model without a chosen range: this many consecutive layers ending at its edit layer
# The edit guard's bound (RomeHparams.max_loss_rise, percent) for ROME edits in a row on SmolLM2: twice the largest
# rise of 100 dev edits in a row with a converged v*, rounded up (study "loss_rise"). Off for one edit.
GUARD_BOUND = 1.0


@dataclass(frozen=True)
class ModelDefaults:
    """One model's row. ``hparams[editor]``: overrides of that editor's dataclass defaults; ``sequential[editor]``:
    further overrides for edits applied one on top of another (:func:`interp.editing.eval.scale.sequential_edits`);
    ``studies``: which study chose each entry."""
    layer: int | None = None
    memit_layers: tuple | None = None
    hparams: dict = field(default_factory=dict)
    sequential: dict = field(default_factory=dict)
    studies: dict = field(default_factory=dict)


DEFAULTS = types.MappingProxyType({
    SMOLLM2_135M: ModelDefaults(
        layer=4,
        memit_layers=(0, 1, 2, 3, 4),
        # Edits harmless alone add up in a row (study "editing_at_scale"): each is guarded, and made smaller by
        # stopping v* earlier and clamping it tighter, which cut the single-edit drift at a small cost in efficacy
        # on dev (study "sequential_fix"); a single edit keeps the larger update, whose paraphrase score is higher.
        sequential={"rome": {"max_loss_rise": GUARD_BOUND, "v_loss_stop": 0.5, "clamp_norm_factor": 1.5}},
        # MEMIT: a subject right after BOS has a key unlike its template mean, so the bare rewrite prompt got too
        # little of the update (continent facts, one-token place names); such facts also answer to their bare key
        # (study "memit_shared": on a second fact set's dev split, efficacy 88.8 -> 95.3 with all 233 at once). Which
        # facts: those whose bare key gets under 0.4 of their own edit's update, whatever else is in the batch; by
        # the study's rule it kept the most of the own dev split's neighbourhood (a margin within noise there).
        hparams={"memit": {"bare_key_weight": 4.0, "bare_key_when": "alone", "bare_key_threshold": 0.4}},
        studies={"layer": "rome_layer", "memit_layers": "memit_layers", "sequential.rome.max_loss_rise": "loss_rise",
                 "hparams.memit.bare_key_weight": "memit_shared", "hparams.memit.bare_key_when": "memit_shared",
                 "hparams.memit.bare_key_threshold": "memit_shared",
                 "sequential.rome.v_loss_stop": "sequential_fix", "sequential.rome.clamp_norm_factor": "sequential_fix"}),
    GEMMA3_270M: ModelDefaults(
        layer=5,
        # MEMIT: its residual at layer 5 is long, so v* at the reference learning rate ran out of its steps on many
        # dev facts; the range and λ beat the others with 100 dev facts at once (study "memit_gemma").
        memit_layers=(0, 1, 2, 3, 4, 5),
        # Gemma normalises the MLP output again before adding it, so the write has a fixed size and delta only turns
        # its direction: with the paper's clamp delta dominates the write of every key that overlaps k*, and
        # neighbours flip too (study "rome_layer", its Gemma part).
        # FT-L's SmolLM2 constraint turns every write of a post-normed MLP: on Gemma it wrecked the neighbours and
        # the loss; the dev sweep's best harmonic mean is at a tenth of it (study "ft_norm_gemma").
        # SmolLM2's bare-key row (γ 4) ties γ 0 here: no Gemma dev fact's bare prompt misses its key (study
        # "memit_shared"), so γ stays 0.
        hparams={"rome": {"clamp_norm_factor": 1.0}, "ft": {"norm_constraint": 1e-3},
                 "memit": {"v_lr": 2.0, "mom2_update_weight": 5000.0}},
        studies={"layer": "rome_layer", "hparams.rome.clamp_norm_factor": "rome_layer",
                 "hparams.ft.norm_constraint": "ft_norm_gemma", "memit_layers": "memit_gemma",
                 "hparams.memit.v_lr": "memit_gemma", "hparams.memit.mom2_update_weight": "memit_gemma"}),
})
_NONE = ModelDefaults()
# Dataclass defaults that were chosen (on SmolLM2's dev split) rather than taken from the reference code: every model
# without a value of its own in its row gets them. (editor, setting) -> study.
CHOSEN_DEFAULTS = types.MappingProxyType({("rome", "key_rule"): "key_rule",
                                          ("memit", "mom2_update_weight"): "memit_key_rule",
                                          ("ft", "norm_constraint"): "rome_layer"})


def defaults_for(model) -> ModelDefaults:
    """``model``'s row of :data:`DEFAULTS` (an empty row for a model without one)."""
    return DEFAULTS.get(model.fingerprint, _NONE)


def hparams_for(model, cls, editor: str, *, sequential: bool = False, **overrides):
    """``cls.make(...)`` with ``model``'s row for ``editor`` (and its sequential overrides when ``sequential``) under
    ``overrides``: explicit keywords always win."""
    row = defaults_for(model)
    base = {**row.hparams.get(editor, {}), **(row.sequential.get(editor, {}) if sequential else {})}
    return cls.make(**{**base, **overrides})


def default_layer(model) -> int:
    """ROME's and FT-L's edit layer: the row's (chosen on dev); for other models the peak of the MLP indirect
    effect of causal tracing over 20 dev facts of the model's records (kept in the model's cache)."""
    chosen = defaults_for(model).layer
    if chosen is not None:
        return model.check_layer(chosen)
    table = model_cache(model, "editing.default_layer")
    if "layer" not in table:
        try:
            records = load_records(split="dev", model=model)
        except FileNotFoundError as e:
            raise ValueError(f"no default edit layer for {model.source}: pass layer=... ({e})") from None
        table["layer"] = int(trace_facts(model, [r.to_dict() for r in records[:20]]).peak_layer(kind="mlp"))
    return model.check_layer(table["layer"])


def default_layers(model) -> list[int]:
    """MEMIT's layer range: the row's (chosen on dev), else :data:`MEMIT_SPAN` consecutive layers ending at
    :func:`default_layer` (at most the second-to-last layer: the last one's residual is read by no later layer)."""
    chosen = defaults_for(model).memit_layers
    end = min(default_layer(model), model.n_layers - 2) if chosen is None else None
    layers = list(chosen) if chosen is not None else list(range(max(0, end - MEMIT_SPAN + 1), end + 1))
    return [model.check_layer(l) for l in layers]
