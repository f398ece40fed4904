"""The editors' hyperparameters: sibling frozen dataclasses that check themselves.

    hp = RomeHparams.make(clamp_norm_factor=1.5)    # unknown names and bad values are refused, naming what is allowed
    hp.to_dict()                                     # what an edit and a run record

:class:`VStarHparams` holds the value optimisation ROME and MEMIT share (:mod:`interp.editing.vstar`); each of
:class:`RomeHparams` and :class:`MemitHparams` adds only its own fields, so neither inherits a knob it must then
refuse (MEMIT's defaults for the shared knobs differ where the reference code's do). :class:`FTHparams` stands
alone. Values that were chosen on a dev split for one model live in :mod:`interp.editing.defaults`, not here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Settings:
    """A frozen dataclass made with :meth:`make` (unknown names refused, then :meth:`check`) and recorded with
    :meth:`to_dict` (without the fields named in ``UNRECORDED``, which do not change a result). ``KIND`` names it
    in error messages."""

    KIND = "run"
    NOUN = "setting"
    UNRECORDED = ()  # (no annotation: a class attribute, not a field)

    @classmethod
    def make(cls, **overrides):
        known = {f.name for f in fields(cls)}
        bad = sorted(set(overrides) - known)
        if bad:
            raise ValueError(f"unknown {cls.KIND} {cls.NOUN}(s) {bad}; allowed: {sorted(known)}")
        made = cls(**cls.normalise(overrides))
        made.check()
        return made

    @classmethod
    def normalise(cls, overrides: dict) -> dict:
        """Overrides in the field types (e.g. JSON lists to tuples) before construction."""
        return overrides

    def check(self) -> None:  # each subclass checks its own fields
        pass

    def replace(self, **overrides):
        """A copy with ``overrides`` (checked like :meth:`make`)."""
        return type(self).make(**{**asdict(self), **overrides})

    def to_dict(self) -> dict:
        return {k: _plain(v) for k, v in asdict(self).items() if k not in self.UNRECORDED}


def _plain(v):
    return [_plain(x) for x in v] if isinstance(v, (tuple, list)) else v


def check_positive(obj, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
            raise ValueError(f"{name}={value!r}; allowed: a finite number > 0")


def check_non_negative(obj, *names: str, zero_means: dict | None = None) -> None:
    """``zero_means``: ``{name: what 0 does}``, added to the error so the reader knows 0 switches it off."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 <= value < math.inf):
            hint = f" (0: {zero_means[name]})" if zero_means and name in zero_means else ""
            raise ValueError(f"{name}={value!r}; allowed: a finite number >= 0{hint}")


def check_count(obj, *names: str, minimum: int = 1) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name}={value!r}; allowed: an integer >= {minimum}")


@dataclass(frozen=True)
class VStarHparams(Settings):
    """The v* optimisation (names follow the reference code; values the paper's GPT-2 XL ones except the
    templates: shorter and fewer, a 135M model's samples)."""
    templates: tuple = ((5, 2), (10, 2))   # (tokens, count) of sampled context prefixes, besides the bare "{}"
    v_steps: int = 20                       # Adam steps on delta (paper: 20)
    v_lr: float = 0.5                       # Adam learning rate (paper: 0.5)
    v_loss_stop: float = 0.05               # stop once the mean target NLL is below this
    v_weight_decay: float = 0.5             # * |delta| / |out|^2
    clamp_norm_factor: float = 4.0          # |delta| <= factor * |out| (the value delta is added to)
    kl_factor: float = 0.0625               # weight of KL(P_edited || P_orig) after "{subject} is a"
    kl_prompt: str = "{} is a"
    mom2_n_tokens: int = 100_000            # Wikipedia tokens in the key statistics C = E[k k^T]
    mom2_ridge: float = 0.0                 # C + ridge * I when solving
    subject_token: int = -1                 # the subject token edited, counted in the subject (-1: its last)

    KIND = "v*"
    NOUN = "hyperparameter"

    @classmethod
    def normalise(cls, overrides: dict) -> dict:
        if "templates" in overrides:
            try:
                overrides = {**overrides, "templates": tuple((int(n), int(c)) for n, c in overrides["templates"])}
            except (TypeError, ValueError):
                raise ValueError(f"templates={overrides['templates']!r}; allowed: pairs (tokens >= 2, count >= 0)"
                                 ) from None
        return overrides

    def check(self) -> None:
        if isinstance(self.subject_token, bool) or not isinstance(self.subject_token, int):
            raise ValueError(f"subject_token={self.subject_token!r}; allowed: an integer index into the subject's "
                             "tokens (-1: the last, 0: the first)")
        check_count(self, "v_steps", "mom2_n_tokens")
        check_positive(self, "v_lr", "clamp_norm_factor")
        check_non_negative(self, "v_weight_decay", "kl_factor", "mom2_ridge", "v_loss_stop")
        if any(n < 2 or c < 0 for n, c in self.templates):
            raise ValueError(f"templates={self.templates!r}; allowed: pairs (tokens >= 2, count >= 0)")
        if not isinstance(self.kl_prompt, str) or self.kl_prompt.count("{}") != 1:
            raise ValueError(f"kl_prompt {self.kl_prompt!r} must contain exactly one '{{}}'")


KEY_RULES = ("auto", "mean", "each")  # RomeHparams.key_rule (interp.editing.rome.update_direction)
# "auto" answers to every templated key when the bare prompt would get less than this share of the update under
# "mean" (chosen on dev: study "key_rule"); the failure diagnosis "key mismatch" uses the same bound.
KEY_MATCH = 0.5
BARE_KEY_WHEN = ("mismatch", "alone", "always")  # MemitHparams.bare_key_when
PRESERVE_SELECT = ("first", "nearest")


@dataclass(frozen=True)
class RomeHparams(VStarHparams):
    """ROME: the v* optimisation, the keys the update answers to, and the edit guard."""
    key_rule: str = "auto"                  # the keys the update answers to (rome.update_direction; dev-chosen)
    max_loss_rise: float = 0.0              # refuse an edit raising the guard texts' loss more (percent; 0: off)

    KIND = "ROME"

    def check(self) -> None:
        super().check()
        check_non_negative(self, "max_loss_rise")
        if self.key_rule not in KEY_RULES:
            raise ValueError(f"key_rule={self.key_rule!r}; allowed: {', '.join(map(repr, KEY_RULES))}")


@dataclass(frozen=True)
class MemitHparams(VStarHparams):
    """MEMIT (values the reference code's GPT-J / GPT-2 XL ones except λ, chosen on a dev split: the defaults
    table cites the study). Every layer is solved for the facts' template-mean keys; ``key_spread_weight`` β > 0
    also asks every templated key for the fact's share, ``bare_key_weight`` γ > 0 the bare rewrite prompt's key
    (of the facts ``bare_key_when`` picks) (:mod:`interp.editing.memit_solve`); ``preserve_weight`` μ > 0 asks
    ``preserve_count`` other subjects' keys under the batch's prompts to keep their outputs, and
    ``neighbour_mean_weight`` ν > 0 their mean key under each bare prompt (:mod:`interp.editing.preserve`);
    ``null_space_mass`` q > 0 keeps the update out of the leading directions of the text's keys (memit_solve);
    ``vstar_neighbours`` > 0 asks each fact's v* to leave that many similar subjects' answers alone when they get
    ``vstar_neighbour_share`` of it (:func:`interp.editing.preserve.vstar_neighbours`)."""
    templates: tuple = ((10, 5),)           # (tokens, count) of sampled context prefixes besides "{}" (paper: 5 x 10)
    clamp_norm_factor: float = 0.75         # |delta| <= factor * |h| (the residual at the last layer)
    mom2_update_weight: float = 2500.0      # λ in λ C + K Kᵀ (GPT-J 15000, GPT-2 XL 20000)
    key_spread_weight: float = 0.0          # β: weight of every templated key of a fact
    bare_key_weight: float = 0.0            # γ: weight of a fact's bare rewrite-prompt key (as an extra row)
    bare_key_when: str = "mismatch"         # which facts get that row: "mismatch", "alone" or "always" (memit_solve)
    bare_key_threshold: float = KEY_MATCH   # the bare key's share of the update below which a fact gets the row
    preserve_weight: float = 0.0            # μ: weight of other subjects' keys under the batch's prompts (preserve.py)
    preserve_count: int = 1000              # how many of those subjects (records/preserve_subjects.json)
    preserve_select: str = "first"          # which: the list's "first", or per prompt the "nearest" to the batch's
    neighbour_mean_weight: float = 0.0      # ν: weight of those subjects' mean key under each bare prompt (preserve.py)
    null_space_mass: float = 0.0            # q: share of C's trace whose leading directions the update leaves alone
    vstar_neighbours: int = 0               # other subjects per fact whose prompt v* reads (preserve.vstar_neighbours)
    vstar_neighbour_share: float = 0.5      # the share of delta added at their subject
    vstar_neighbour_weight: float = 1.0     # weight of their KL(P_edited || P_orig) in the v* loss

    KIND = "MEMIT"

    def check(self) -> None:
        super().check()
        check_positive(self, "mom2_update_weight")
        check_non_negative(self, "key_spread_weight", "bare_key_weight", "preserve_weight", "neighbour_mean_weight",
                           zero_means={"key_spread_weight": "the template-mean keys alone",
                                       "bare_key_weight": "no bare-key row",
                                       "preserve_weight": "no preserved subject keys",
                                       "neighbour_mean_weight": "no mean neighbour key"})
        check_count(self, "preserve_count")
        check_count(self, "vstar_neighbours", minimum=0)
        check_positive(self, "vstar_neighbour_share")
        check_non_negative(self, "vstar_neighbour_weight")
        t = self.bare_key_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0:
            raise ValueError(f"bare_key_threshold={t!r}; allowed: a number >= 0 (the bare key's share of the update "
                             "below which a fact gets the bare-key row; 0: none, inf: every fact)")
        if self.preserve_select not in PRESERVE_SELECT:
            raise ValueError(f"preserve_select={self.preserve_select!r}; allowed: "
                             f"{', '.join(map(repr, PRESERVE_SELECT))}")
        if self.bare_key_when not in BARE_KEY_WHEN:
            raise ValueError(f"bare_key_when={self.bare_key_when!r}; allowed: {', '.join(map(repr, BARE_KEY_WHEN))}")
        q = self.null_space_mass
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q < 1:
            raise ValueError(f"null_space_mass={q!r}; allowed: a number in [0, 1) (the share of C's trace whose "
                             "leading directions the update leaves alone; 0: none)")


@dataclass(frozen=True)
class FTHparams(Settings):
    """FT-L, constrained fine-tuning of one down projection (the ROME paper's baseline). ``steps``, ``lr`` and
    ``loss_stop`` are the reference FT-L's; its ``norm_constraint`` (5e-4, for GPT-2 XL) never flips a fact of
    the embedded model, so it was chosen on the dev split (study ``ft_norm``, in the defaults table)."""
    steps: int = 25
    lr: float = 5e-4
    norm_constraint: float = 1e-2           # every entry of the update D within [-c, c] (an L-infinity ball)
    loss_stop: float = 1e-2

    KIND = "FT-L"
    NOUN = "hyperparameter"

    def check(self) -> None:
        check_count(self, "steps")
        check_positive(self, "lr", "norm_constraint")
        check_non_negative(self, "loss_stop")
