"""MEMIT's two stages (Meng et al. 2023, "Mass-Editing Memory in a Transformer"): the per-fact target residuals and
their spread over a range of MLP layers. :mod:`interp.editing.memit` builds the edit object on top of these.

1. Targets. For each fact, ``delta_i`` [d_model] is optimised with ROME's v* loop
   (:func:`interp.editing.vstar.optimize_delta`) but added to the residual stream after the *last* layer ``L`` of
   the range (``blocks.{L}.hook_resid_post``) at the subject's last token of every templated prompt, clamped to
   ``clamp_norm_factor`` times the norm of that residual. ``z_i = h_i + delta_i`` with ``h_i`` the residual
   averaged over the templates (delta is added at every template row, so the mean edited residual is exactly
   ``h_i + delta_i``). A fact whose target already is the model's greedy answer keeps ``z_i = h_i`` (``answered``
   in its info; in evaluations, the second fact of a subject can be made true by the round that edited the
   first). The reference code takes ``h_i`` from the bare prompt but averages the keys over templates;
   here keys and residuals are both template means, the same choice :mod:`rome` makes for k* and v*.
2. Spread. For the layers ``l_1 < ... < l_m = L`` in order: keys ``K`` [n, d_mlp] (template-mean MLP hidden
   vectors at the subject's last token) and current residuals ``H`` [n, d_model] at ``L`` are read from the model
   *as edited so far*; the remaining residual error is shared equally by the layers left,
   ``R = (Z - H) / (m - j)``, and ``ΔW_l = Rᵀ K (λ C_l + Kᵀ K)⁻¹`` (``W`` [d_model, d_mlp], ``out = W k``),
   the minimiser of ``Σ_i |ΔW k_i - r_i|² + λ tr(ΔW C_l ΔWᵀ)``, is written before the next layer's keys are read.
   ``C_l = E[k kᵀ]`` over Wikipedia text (the float64 statistics of :mod:`interp.analyses.stats`); λ is
   ``mom2_update_weight``: C is a mean, so λ counts how many "preserved" keys the text's statistics stand for.

Post-norm models (Gemma). A layer whose MLP output ``o`` is normalised before it joins the residual writes
``post(o) = g ⊙ o / rms(o)``, not ``ΔW k``: its write always has ``mean((write / g)²) = 1``, so the update only
turns it. Each layer's residual share is then mapped to the MLP-output change that makes the write move by it,
through the norm at the fact's current scale (:func:`post_norm_targets`: per template row, the nearest write the
norm can reach, at the row's own ``rms(o)``; to first order ``Δo = rms(o) r / g``), and ``ΔW`` is solved for that
change instead of the share. The residuals are read again before the next layer, so what the norm's nonlinearity
or the solve leaves of one layer's step is shared by the later ones; each layer's ``write_reach_mean`` (the share
of its step the nearest write delivers) and ``step_reach_mean`` (the share the written update delivered) are in
the norms.

Every context of a fact (``key_spread_weight`` β). The solve answers to each fact's template-mean key ``k̄_i``,
but a prompt whose own key ``k`` is far from ``k̄_i`` gets ``ΔW k``, not ``ΔW k̄_i``: a subject right after BOS
(the bare rewrite prompt "{} is located in ...") has a key unlike the same subject after a context prefix, the
mismatch ROME's ``key_rule="auto"`` answers. With β > 0 the objective also asks every templated key of a fact
(rows ``k_ir``, weight ``1/n_i`` each) for the fact's residual share: ``Σ_r (1/n_i) |ΔW k_ir - r_i|²`` is the
template-mean term ``|ΔW k̄_i - r_i|²`` plus ``Σ_r (1/n_i) |ΔW (k_ir - k̄_i)|²``; weighting the second part by β
changes only the solve's Gram term, ``λC + K̄ᵀK̄ + β Σ_i Cov_i`` with ``Cov_i = (1/n_i) Σ_r (k_ir - k̄_i)(k_ir -
k̄_i)ᵀ`` (β = 1: every templated key asks for the share; larger β asks harder that every context be treated
alike). β = 0 is the paper's template-mean solve and the default: on dev, at the chosen λ, β = 4 did not beat
it (the failed edits there mostly lacked reach, not key share; larger β lost; study "memit_key_rule"). Each
fact's ``key_match`` (per layer, in ``facts_info``) is the share ``a_i · k_i0 / a_i · k̄_i`` of the update its bare
prompt's key gets relative to its mean key (``a_i`` its row of ``K̄ (λC + ...)⁻¹``), ROME's ``v · k``.

The bare prompt's key (``bare_key_weight`` γ). A subject right after BOS is read with nothing before it, and its
key can be far from the template mean (on a second fact set, one-token place names at the start of "{} is located
on the continent of" got a median 0.35 of the update). With γ > 0 such a fact's bare key ``k_i0`` is a row of the
solve too, asking for the same residual share: ``Σ_i |ΔW k̄_i - r_i|² + γ_i |ΔW k_i0 - r_i|² + λ tr(ΔW C ΔWᵀ)``,
solved by ``ΔW = Rᵀ (K̄ + Γ K₀)(λC + K̄ᵀK̄ + K₀ᵀ Γ K₀)⁻¹`` (the update keeps its factored form). ``bare_key_when``
says which facts get the row: "mismatch" (those whose ``key_match`` under the batch's solve without it is below
``bare_key_threshold``, by default :data:`~interp.editing.hparams.KEY_MATCH`, ROME's ``key_rule="auto"`` bound;
each layer decides afresh), "alone" (the same share under the fact's own edit, ``(λC)⁻¹ k̄_i``, what ROME's
"auto" reads for one fact; the rest of the batch does not move it) or "always". The embedded model's defaults
use γ = 4 on the facts whose own-edit share is below 0.4 (study "memit_shared": on dev the two rules gave about as
many rows, and the choice between them was within noise); β asks every templated key alike, γ only the prompt
that is asked.

Other subjects' keys (``preserve_weight`` μ). ``+ μ Σ_p tr(ΔW P_p ΔWᵀ)`` with ``P_p`` the mean ``k kᵀ`` of
other subjects' keys under the batch's prompt ``p`` (:mod:`interp.editing.preserve`): only the Gram term changes,
``λC + KᵀK + μ Σ_p P_p``. ``neighbour_mean_weight`` ν adds ``ν Σ_p m_p m_pᵀ``, ``m_p`` those subjects' mean key
under the bare prompt ``p`` (the part of a neighbour's key that every subject so read shares).

The text's own directions left alone (``null_space_mass`` q, after AlphaEdit, Fang et al. 2025). With q > 0 the
update is confined to the eigen-directions of ``C`` outside the fewest leading ones that hold a share q of its
trace (``U`` [d_mlp, m], :func:`null_space_basis`): ``ΔW = Y Uᵀ``, so ``ΔW`` maps every key's component in those
leading directions to nothing, and ``Y`` minimises the same objective within that span,
``A = (K + Γ K₀) U (Uᵀ M U)⁻¹ Uᵀ`` with ``M`` the Gram term above. AlphaEdit drops ``λC`` once the projection
is in place; here it stays, so q = 0 is the solve above and q > 0 only takes directions away.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import torch

from ..core import arch
from ..core.hooks import capture
from ..core.inputs import pad_rows
from .base import check_dense_mlps, notify
from .matrices import kept_matrices
from .facts import Fact, Request, as_fact, check_prompt, check_target
from .hparams import MemitHparams
from .vstar import edit_batch, optimize_delta, optimize_deltas

TARGET_CHUNK = 16  # facts whose v* optimisations share forwards (7 rows each with the default templates; bounds memory)


# ============================================================================================ input checks
def check_editable(model) -> None:
    """MEMIT needs dense MLPs (one down projection per layer that every token's key goes through). A post-norm on
    the MLP output (Gemma) is allowed: :func:`post_norm_targets` maps each residual share to the MLP output."""
    check_dense_mlps(model, "MEMIT", "no update of one matrix per layer stores it")


def check_layers(model, layers) -> list[int]:
    """``layers`` as a list of consecutive increasing ints inside ``0..n_layers-2``."""
    hi = model.n_layers - 2
    allowed = (f"allowed: consecutive increasing MLP layers within 0..{hi} (the last one below the final layer "
               f"{hi + 1}, whose residual at the subject no later layer reads)")
    try:
        out = [int(x) for x in layers]
        ok = all(not isinstance(x, bool) and int(x) == x for x in layers)
    except (TypeError, ValueError):
        raise ValueError(f"layers={layers!r} is not a list of ints; {allowed}") from None
    if not ok or not out:
        raise ValueError(f"layers={layers!r}; {allowed}")
    if any(not 0 <= x <= hi for x in out):
        raise ValueError(f"layers={out} reach outside the model ({model.n_layers} layers); {allowed}")
    if any(b != a + 1 for a, b in pairwise(out)):
        raise ValueError(f"layers={out} are not consecutive and increasing; {allowed}")
    return out


def as_requests(records) -> list[dict]:
    """Facts, Requests, record dicts or request dicts (prompt, subject, target_new[, target_true, case_id]) -> dicts
    ``{index, case_id, prompt, subject, target_new, target_true}``; ValueError for a subject asked twice with
    different targets (its key is the same in both, so one matrix cannot send it to two values)."""
    if isinstance(records, (dict, Fact, Request)):
        records = [records]
    records = list(records)
    if not records:
        raise ValueError("records is empty; give at least one fact to edit")
    out = []
    for i, r in enumerate(records):
        where = f"record {i}"
        if isinstance(r, Request):
            req = {"case_id": i if r.case_id is None else r.case_id, "prompt": r.prompt, "subject": r.subject,
                   "target_new": r.target_new, "target_true": r.target_true}
        elif isinstance(r, Fact) or (isinstance(r, dict) and "case_id" in r and "paraphrase_prompts" in r):
            f = as_fact(r, where)
            req = {"case_id": f.case_id, "prompt": f.prompt, "subject": f.subject, "target_new": f.target_new,
                   "target_true": f.target_true}
        elif isinstance(r, dict):
            missing = [k for k in ("prompt", "subject", "target_new") if k not in r]
            if missing:
                raise ValueError(f"{where}: missing keys {missing}; a request needs prompt (with '{{}}'), subject "
                                 "and target_new (with its leading space)")
            target = r["target_new"]["str"] if isinstance(r["target_new"], dict) else r["target_new"]
            req = {"case_id": r.get("case_id", i), "prompt": r["prompt"], "subject": r["subject"],
                   "target_new": target, "target_true": r.get("target_true")}
            if isinstance(req["target_true"], dict):
                req["target_true"] = req["target_true"].get("str")
            check_prompt(req["prompt"], req["subject"], where)
            check_target(req["target_new"], f"{where}: target_new")
        else:
            raise ValueError(f"{where}: expected a Fact or a dict, got {type(r).__name__}")
        out.append({"index": i, **req})
    first: dict[str, dict] = {}
    for req in out:
        seen = first.setdefault(req["subject"], req)
        if seen is not req and seen["target_new"] != req["target_new"]:
            raise ValueError(f"subject {req['subject']!r} appears twice with different targets: record "
                             f"{seen['index']} (case_id {seen['case_id']!r}) -> {seen['target_new']!r} and record "
                             f"{req['index']} (case_id {req['case_id']!r}) -> {req['target_new']!r}; the subject's "
                             "key is the same in both, so one edit cannot store both (edit them separately)")
    return out


def subject_rounds(records) -> list[list[int]]:
    """Indices of ``records`` split into rounds in which every subject appears once, in order: a subject's key
    (its last token, read before the prompt) is the same in every fact about it, so one MEMIT solve cannot give
    one key two values. Facts of one subject with different prompts (relations) are compatible, but must be
    edited one round after the other; the same subject with the same prompt and different targets is a
    contradiction and raises. Records: Facts or dicts with ``subject``, ``prompt`` and ``target_new``."""
    rounds: list[list[int]] = []
    seen: list[dict] = []
    asked: dict[tuple, tuple] = {}
    for i, r in enumerate(records):
        get = (lambda k: getattr(r, k)) if not isinstance(r, dict) else r.get
        subject, prompt, target = get("subject"), get("prompt"), get("target_new")
        prev = asked.setdefault((subject, prompt), (i, target))
        if prev[1] != target:
            raise ValueError(f"subject {subject!r} with prompt {prompt!r} has two different targets: record {prev[0]} "
                             f"-> {prev[1]!r} and record {i} -> {target!r}; one model cannot answer both")
        k = next((j for j, names in enumerate(seen) if subject not in names), len(rounds))
        if k == len(rounds):
            rounds.append([])
            seen.append({})
        rounds[k].append(i)
        seen[k][subject] = i
    return rounds


def check_batch_size(model, n: int) -> None:
    if n > model.d_mlp:
        raise ValueError(f"{n} facts in one batch but the MLP keys have only d_mlp={model.d_mlp} dimensions: more "
                         "keys than dimensions are linearly dependent, so no update of a layer can map every key "
                         "to its own value (K Kᵀ is then full rank and λC + K Kᵀ no longer leaves room for the C "
                         f"prior: the solve becomes a least-squares compromise between facts). Edit at most "
                         f"{model.d_mlp} facts at once (far fewer in practice) and apply the batches in turn")


# ============================================================================================ stage 1: targets
@dataclass
class Targets:
    """The residual targets of a batch at ``layer`` (stage 1; independent of λ and of where the range starts)."""
    layer: int
    requests: list
    z: torch.Tensor          # [n, d_model] float64, h + delta
    init: torch.Tensor       # [n, d_model] float64, h (template mean, unedited model)
    batches: list            # rome.EditBatch per fact (rows used for the keys too)
    info: list               # per fact: v* optimisation diagnostics
    losses: list             # per fact: NLL per step
    templates: list
    seed: int


def optimize_targets(model, requests: list[dict], layer: int, hp: MemitHparams, templates: list[str], *,
                     seed: int = 0, progress=None, neighbours=None) -> Targets:
    """Stage 1 for every request: ``z_i`` at ``blocks.{layer}.hook_resid_post`` (see the module docstring).
    ``neighbours``: per request, other subjects its v* asks to keep their answers with ``vstar_neighbour_share`` of
    its delta (:func:`interp.editing.preserve.vstar_neighbours`)."""
    hook = f"blocks.{layer}.hook_resid_post"
    zs, inits, batches, info, losses = [], [], [], [], []
    made = [edit_batch(model, r["prompt"], r["subject"], model.target_tokens(r["target_new"]), templates,
                       hp.kl_prompt, hp.subject_token, neighbours=neighbours[i] if neighbours else (),
                       neighbour_share=hp.vstar_neighbour_share, neighbour_weight=hp.vstar_neighbour_weight)
            for i, r in enumerate(requests)]
    opts = []
    for c in range(0, len(requests), TARGET_CHUNK):
        for j in range(c, min(c + TARGET_CHUNK, len(requests))):
            notify(progress, stage="target", fact=j, of=len(requests), subject=requests[j]["subject"])
        opts += _optimized(model, layer, requests[c: c + TARGET_CHUNK], made[c: c + TARGET_CHUNK], hp, hook)
    for req, b, opt in zip(requests, made, opts):
        init = opt["out_init"].to(torch.float64)
        delta = opt["delta"].to(torch.float64)
        zs.append(init + delta)
        inits.append(init)
        batches.append(b)
        losses.append(opt["losses"])
        dn = float(delta.norm())
        info.append({"case_id": req["case_id"], "subject": req["subject"], "target_new": req["target_new"],
                     "answer_before": opt["answer"], "p_before": opt["p_before"], "nll_initial": opt["losses"][0],
                     "nll_final": opt["losses"][-1], "steps": len(opt["losses"]), "delta_norm": dn,
                     "resid_norm": opt["out_norm"], "clamp": opt["max_norm"],
                     "clamp_bound": bool(dn >= opt["max_norm"] * (1 - 1e-4)), "answered": opt["answered"]})
    return Targets(layer, requests, torch.stack(zs), torch.stack(inits), batches, info, losses, list(templates),
                   seed)


def _optimized(model, layer: int, requests: list[dict], made: list, hp: MemitHparams, hook: str) -> list[dict]:
    """The v* optimisations of some facts, sharing forwards (each as alone, :func:`~.vstar.optimize_deltas`); when
    one fails, they run one by one so that the error names its record. A fact the model already answers (e.g.
    made true by an earlier round's edit of the same subject) keeps its residual: z = h, delta 0."""
    try:
        return optimize_deltas(model, layer, made, hp, [r["target_new"] for r in requests], None, value_hook=hook,
                               answered="keep")
    except (ValueError, FloatingPointError):
        pass
    out = []
    for req, b in zip(requests, made):
        try:
            out.append(optimize_delta(model, layer, b, hp, req["target_new"], None, value_hook=hook,
                                      answered="keep"))
        except (ValueError, FloatingPointError) as e:
            raise type(e)(f"record {req['index']} (case_id {req['case_id']!r}, {req['subject']!r} -> "
                          f"{req['target_new']!r}): {e}") from None
    return out


# ============================================================================================ stage 2: spread
@dataclass
class States:
    """What the spread reads from the model as it is now, per fact (float64): ``keys`` [n, d_mlp] the template-mean
    MLP hidden vector at a layer, ``resid`` [n, d_model] the template-mean residual after the last layer,
    ``bare`` [n, d_mlp] the key of the bare rewrite prompt (template row 0) and, when asked for, ``spread``
    [d_mlp, d_mlp] = Σ_i Cov_i, the facts' key covariances over their templates (module docstring), and ``outs``
    [rows, d_model] the MLP output before its post-norm on every template row, with ``owner`` [rows] its fact."""
    keys: torch.Tensor
    resid: torch.Tensor
    bare: torch.Tensor
    spread: torch.Tensor | None = None
    outs: torch.Tensor | None = None
    owner: torch.Tensor | None = None


def read_at(model, rows: list, pos: list, names: list, chunk: int, description: str):
    """Per chunk of ``rows`` (token-id lists, each read at its position ``pos``): ``{name: [chunk, d]}`` float64
    of every hook in ``names`` at that position, the forward stopped after the last hook."""
    for s in range(0, len(rows), chunk):
        toks, _ = pad_rows(model, rows[s: s + chunk])
        r_idx, p_idx = torch.arange(toks.shape[0]), torch.tensor(pos[s: s + chunk])
        store, _ = capture(model, toks, names, stop=True, description=description,
                           keep=lambda n, t, r=r_idx, p=p_idx: t.detach()[r.to(t.device), p.to(t.device)]
                           .to("cpu", torch.float64))
        yield store


def subject_states(model, batches: list, layer: int, z_layer: int, *, with_spread: bool = False,
                   with_outputs: bool = False, chunk: int = 64) -> States:
    """:class:`States` at ``layer`` (keys; with ``with_outputs`` the MLP output before its post-norm too) and
    ``z_layer`` (residuals) at each fact's subject-last token over its template rows (rows end at that token:
    nothing after it reaches it), from the model as it is now."""
    rows, pos, owner = [], [], []
    for f, b in enumerate(batches):
        for r in range(b.n_rewrite):
            p = int(b.subject_pos[r])
            rows.append(b.tokens[r, : p + 1].tolist())
            pos.append(p)
            owner.append(f)
    names = [f"blocks.{layer}.mlp.hook_post", f"blocks.{z_layer}.hook_resid_post"]
    if with_outputs:
        names.append(arch.pre_norm_hook(model, layer, "mlp"))
    parts: dict[str, list] = {n: [] for n in names}
    for store in read_at(model, rows, pos, names, chunk, "memit keys"):
        for n in names:
            parts[n].append(store[n])
    owner_t = torch.tensor(owner)
    counts = torch.bincount(owner_t, minlength=len(batches)).to(torch.float64)[:, None]
    rows_k, rows_h = torch.cat(parts[names[0]]), torch.cat(parts[names[1]])          # [rows, d_mlp], [rows, d_model]
    keys, resid = (torch.zeros(len(batches), x.shape[1], dtype=torch.float64).index_add_(0, owner_t, x) / counts
                   for x in (rows_k, rows_h))
    first = torch.cumsum(counts[:, 0].long(), 0) - counts[:, 0].long()               # row 0 of each fact: bare
    spread = None
    if with_spread:
        # Σ_i (1/n_i) Σ_r (k_ir - k̄_i)(k_ir - k̄_i)ᵀ, [d_mlp, d_mlp]
        centred = (rows_k - keys[owner_t]) / counts[owner_t].sqrt()
        spread = centred.T @ centred
    outs = torch.cat(parts[names[2]]) if with_outputs else None
    return States(keys, resid, rows_k[first], spread, outs, owner_t if with_outputs else None)


def second_moment(stats, layer: int, d_mlp: int) -> torch.Tensor:
    """C [d_mlp, d_mlp] float64 from a KeyStats (its ``mom2``) or a tensor."""
    if isinstance(stats, torch.Tensor):
        c = stats
    elif hasattr(stats, "mom2"):
        if getattr(stats, "layer", layer) != layer:
            raise ValueError(f"statistics of layer {stats.layer} given for layer {layer}")
        c = stats.mom2
    else:
        raise ValueError(f"statistics for layer {layer} must be a KeyStats or a [d_mlp, d_mlp] tensor, got "
                         f"{type(stats).__name__}")
    if tuple(c.shape) != (d_mlp, d_mlp):
        raise ValueError(f"second-moment matrix for layer {layer} has shape {tuple(c.shape)}; expected "
                         f"{(d_mlp, d_mlp)}")
    return c.to("cpu", torch.float64)


def null_space_basis(mom2: torch.Tensor, mass: float) -> torch.Tensor:
    """``U`` [d_mlp, m] float64: the orthonormal eigenvectors of ``C`` left when the fewest leading ones whose
    eigenvalues sum to at least ``mass`` of its trace are taken away (``mass`` in [0, 1); 0: every direction)."""
    if not 0.0 <= mass < 1.0:
        raise ValueError(f"null_space_mass={mass!r}; allowed: a number in [0, 1) (the share of C's trace whose "
                         "leading directions the update must leave alone; 0: none)")
    vals, vecs = torch.linalg.eigh(mom2.to(torch.float64))                  # ascending
    vals = vals.flip(0).clamp_min(0)
    lead = int(torch.searchsorted(torch.cumsum(vals, 0) / vals.sum(), torch.tensor(mass, dtype=vals.dtype)))
    lead = lead + 1 if mass > 0 else 0
    if lead >= vals.shape[0]:
        raise ValueError(f"null_space_mass={mass!r} takes away every direction of C (d_mlp {vals.shape[0]}): the "
                         "update would have nowhere to go; use a smaller share")
    return vecs.flip(1)[:, lead:]


def solve_layer(keys: torch.Tensor, mom2: torch.Tensor, weight: float, ridge: float = 0.0, *, extra=None,
                bare=None, bare_weights=None, basis=None, layer=None) -> torch.Tensor:
    """``(K + Γ K₀) (λC + KᵀK + K₀ᵀ Γ K₀ + E + ridge I)⁻¹`` [n, d_mlp] in float64 (Cholesky: the matrix is
    symmetric positive definite whenever C is); ``E`` [d_mlp, d_mlp] (``extra``, already weighted) the Gram terms
    the solve adds besides the rows, ``β S + μP`` (:func:`layer_adjoint`); ``K₀`` [n, d_mlp] the bare prompts'
    keys (``bare``) and ``Γ`` the diagonal of ``bare_weights`` [n] (none: Γ = 0); ``basis`` ``U``
    (:func:`null_space_basis`) confines the update to its span, ``lhs U (Uᵀ M U)⁻¹ Uᵀ``; ``ΔW = Rᵀ`` times this."""
    k = keys.to(torch.float64)
    a = weight * mom2 + k.T @ k
    if extra is not None:
        a = a + extra
    lhs = k
    if bare_weights is not None and bool((bare_weights > 0).any()):
        k0 = bare.to(torch.float64)
        g = bare_weights.to(torch.float64)[:, None]
        a = a + (g * k0).T @ k0
        lhs = k + g * k0
    if ridge:
        a = a + ridge * torch.eye(a.shape[0], dtype=torch.float64)
    if basis is not None:
        u = basis.to(torch.float64)
        a, lhs = u.T @ a @ u, lhs @ u                                         # [m, m], [n, m]
    chol, info = torch.linalg.cholesky_ex(a)
    if int(info) != 0:
        raise ValueError(f"λC + KᵀK at layer {layer} is not positive definite (λ={weight}): the key statistics "
                         "are singular (fewer tokens than d_mlp, or dead units); use more mom2_n_tokens or "
                         "mom2_ridge > 0")
    adj = torch.cholesky_solve(lhs.T, chol).T
    return adj if basis is None else adj @ u.T


def key_share(adj: torch.Tensor, st: States) -> torch.Tensor:
    """[n] each fact's ``key_match``: the update its bare prompt's key gets relative to its mean key's."""
    return (adj * st.bare).sum(1) / (adj * st.keys).sum(1)


def layer_adjoint(st: States, mom2: torch.Tensor, hp: MemitHparams, layer: int, preserve=None, basis=None
                  ) -> tuple[torch.Tensor, int]:
    """One layer's ``A`` [n, d_mlp] (:func:`solve_layer`) and how many facts got a bare-key row (weight γ =
    ``bare_key_weight``): every fact with ``bare_key_when="always"``; with "mismatch" the facts whose bare key gets
    less than ``bare_key_threshold`` of the update under the solve without the rows, which is then made again with
    them; with "alone" the same under each fact's own solve (:func:`alone_share`)."""
    beta = float(hp.key_spread_weight)
    terms = [t for t in (beta * st.spread if beta else None, preserve) if t is not None]   # β S, μP
    extra = sum(terms) if terms else None                                  # summed once, for both solves

    def solve(gamma):
        return solve_layer(st.keys, mom2, hp.mom2_update_weight, hp.mom2_ridge, extra=extra, bare=st.bare,
                           bare_weights=gamma, basis=basis, layer=layer)

    weight = float(hp.bare_key_weight)
    if weight and hp.bare_key_when == "always":
        pick = torch.ones(st.keys.shape[0], dtype=torch.bool)
    elif weight and hp.bare_key_when == "alone":
        pick = alone_share(st, mom2, hp) < hp.bare_key_threshold
        if not bool(pick.any()):
            return solve(None), 0
    else:
        adj = solve(None)
        pick = key_share(adj, st) < hp.bare_key_threshold if weight else torch.zeros(0, dtype=torch.bool)
        if not bool(pick.any()):
            return adj, 0
    return solve(pick.to(torch.float64) * weight), int(pick.sum())


def alone_share(st: States, mom2: torch.Tensor, hp: MemitHparams) -> torch.Tensor:
    """[n] each fact's bare-key share under its own solve: ``a_i ∝ (λC + ridge I + k̄_i k̄_iᵀ)⁻¹ k̄_i``, which is
    ``(λC + ridge I)⁻¹ k̄_i`` times a scalar (Sherman–Morrison), so the share needs one solve for the batch."""
    a = float(hp.mom2_update_weight) * mom2
    if hp.mom2_ridge:
        a = a + hp.mom2_ridge * torch.eye(a.shape[0], dtype=torch.float64)
    return key_share(torch.linalg.solve(a, st.keys.T).T, st)


def factor_product(resid: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    """``ΔW = Rᵀ A`` [d_model, d_mlp] float64 on one thread, so the bits do not depend on the thread count: a
    saved edit re-applied in another process writes the same weights."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        return resid.to(torch.float64).T @ adj.to(torch.float64)
    finally:
        torch.set_num_threads(threads)


def updated(matrix: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``W + ΔW`` in float64 on the CPU, rounded once to ``W``'s dtype (every MEMIT write goes through here)."""
    return (matrix.detach().to("cpu", torch.float64) + delta).to(matrix.dtype)


# ============================================================================================ post-norm writes
def post_norm_targets(model, layer: int, resid: torch.Tensor, outs: torch.Tensor, owner: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """For a layer whose MLP output ``o`` reaches the residual as ``post(o) = g ⊙ o / rms(o)`` (Gemma): the change
    of ``o`` [n, d_model] each fact's template-mean key should get so that the write moves the residual by the
    fact's share ``resid`` [n, d_model], and the share of that step the best write can deliver [n] (the mean over
    the fact's template rows of ``(w' - w)·r / |r|²``; 1: reachable).

    The norm fixes the write's size: every write is ``g ⊙ v`` with ``mean(v²) = 1``, so a residual step that
    leaves that ellipsoid cannot be made by any weight. Per template row (``outs`` [rows, d_model], ``owner``
    [rows] their facts) the wanted write ``t = w + r`` is taken to its nearest reachable point
    (:func:`nearest_write`), and the output that writes it at the row's own scale is ``rms(o) · v``; the fact's
    target is the mean change over its rows, because MEMIT solves for the rows' mean key and ``ΔW`` is linear
    (``mean_r ΔW k_r = ΔW k̄``). For a small step this is the norm's linearisation ``Δo ≈ rms(o) · r / g`` (minus
    the part along ``o``, which only rescales); unlike that formula it never asks a coordinate with a gain near 0
    (Gemma has exact zeros) for an output so large that the norm shrinks the whole write. The next layer re-reads
    the residuals, so what one layer's linear solve misses is shared by the later ones."""
    norm = arch.post_norm_module(model, layer, "mlp")
    eps = float(getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", None) or model.cfg.eps)
    gain = arch.norm_gain(model, norm).double()
    rms = (outs.pow(2).mean(1, keepdim=True) + eps).sqrt()
    write = gain * outs / rms
    step = resid[owner]
    v = nearest_write(gain, write + step, outs / rms)
    change = rms * v - outs
    reach = ((gain * v - write) * step).sum(1) / step.pow(2).sum(1).clamp_min(1e-300)
    counts = torch.bincount(owner, minlength=resid.shape[0]).to(torch.float64)
    mean = lambda x: torch.zeros(resid.shape[0], *x.shape[1:], dtype=torch.float64).index_add_(0, owner, x) / (
        counts.view(-1, *[1] * (x.dim() - 1)))
    return mean(change), mean(reach)


def nearest_write(gain: torch.Tensor, want: torch.Tensor, fill: torch.Tensor, iters: int = 120) -> torch.Tensor:
    """Per row of ``want`` [rows, d]: the ``v`` with ``mean(v²) = 1`` (an RMS norm's output before its gain
    ``gain`` [d]) whose ``gain ⊙ v`` is nearest to it, ``v = g t / (g² + μ)``, the multiplier μ > -min g² found
    by bisection (the trust-region secular equation, monotone in μ). Where some gains are exactly 0 and the
    others can reach ``want`` with ``mean(v²) <= 1`` (μ would be 0), the missing norm goes to the zero-gain
    coordinates, which the write does not see, along ``fill``'s part there (uniformly if that is 0)."""
    d = want.shape[1]
    g2, gt = gain.pow(2), gain * want
    zero = gain == 0
    size = lambda mu: (gt / torch.where(zero, 1.0, g2 + mu)).pow(2).sum(1)          # [rows], decreasing in mu
    lo = torch.full((want.shape[0], 1), 0.0 if zero.any() else -float(g2.min()), dtype=torch.float64)
    hi = torch.maximum(gt.norm(dim=1, keepdim=True) / d ** 0.5, lo + 1e-12)          # size(hi) <= d
    for _ in range(iters):
        mid = (lo + hi) / 2
        above = (size(mid) > d)[:, None]
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    v = gt / torch.where(zero, 1.0, g2 + hi)
    if zero.any():
        short = d - v.pow(2).sum(1, keepdim=True)       # ~0 where the root mu > 0 was found, > 0 where mu = 0
        part = torch.where(zero, fill, 0.0)
        part = torch.where(part.norm(dim=1, keepdim=True) > 0, part, zero.to(torch.float64))
        v = torch.where(short > 1e-6 * d, v + short.clamp_min(0).sqrt() * part / part.norm(dim=1, keepdim=True), v)
    return v / v.pow(2).mean(1, keepdim=True).sqrt()


def spread(model, targets: Targets, layers: list[int], stats: dict, hp: MemitHparams, progress=None, *,
           preserve: dict | None = None) -> dict:
    """Stage 2 (see the module docstring): writes each layer's update in turn and returns, per layer, the factors
    ``resid`` [n, d_model] and ``adj`` [n, d_mlp] (ΔW = residᵀ adj; on a layer with a post-norm ``resid`` is the
    MLP-output change :func:`post_norm_targets` maps the residual share to), the keys and the norms (with
    ``step_reach_mean``: the mean share of its residual step the layer's write delivered, read at the next
    layer), plus the originals and the written matrices. ``preserve``: ``{layer: μP}`` of the preserved subjects
    (:mod:`interp.editing.preserve`) or None. Any failure restores every layer (:func:`kept_matrices`)."""
    z_layer = layers[-1]
    beta = float(hp.key_spread_weight)
    out = {"resid": {}, "adj": {}, "keys": {}, "norms": {}, "edited": {}, "key_match": {}}
    hs, shares = [], []
    moving = torch.tensor([not i.get("answered") for i in targets.info], dtype=torch.bool)  # z = h: no step asked
    with kept_matrices(model, layers) as originals:
        for j, layer in enumerate(layers):
            post = arch.post_norm_module(model, layer, "mlp") is not None
            notify(progress, stage="keys", layer=layer)
            st = subject_states(model, targets.batches, layer, z_layer, with_spread=beta > 0, with_outputs=post)
            keys, h = st.keys, st.resid
            resid = (targets.z - h) / (len(layers) - j)
            notify(progress, stage="solve", layer=layer, error=float((targets.z - h).norm(dim=1).mean()))
            factor, reach = post_norm_targets(model, layer, resid, st.outs, st.owner) if post else (resid, None)
            basis = null_space_basis(stats[layer], float(hp.null_space_mass)) if hp.null_space_mass else None
            adj, bare_rows = layer_adjoint(st, stats[layer], hp, layer, None if preserve is None else preserve[layer],
                                           basis)
            out["key_match"][layer] = key_share(adj, st).tolist()
            delta = factor_product(factor, adj)
            w = model.mlp_out_matrix(layer)
            new = updated(originals[layer], delta)
            with torch.no_grad():
                w.copy_(new.to(w.device))
            if not torch.isfinite(w).all():
                raise FloatingPointError(f"the MEMIT update produced non-finite weights at layer {layer}")
            notify(progress, stage="update", layer=layer)
            w0 = float(originals[layer].double().norm())
            out["resid"][layer], out["adj"][layer], out["keys"][layer], out["edited"][layer] = factor, adj, keys, new
            out["norms"][layer] = {"update": float(delta.norm()), "weight": w0,
                                   "relative_update": float(delta.norm()) / w0,
                                   "residual_error_mean": float((targets.z - h).norm(dim=1).mean()),
                                   "resid_mean": float(resid.norm(dim=1).mean()),
                                   "key_norm_mean": float(keys.norm(dim=1).mean()), "bare_rows": bare_rows,
                                   "update_dims": model.d_mlp if basis is None else basis.shape[1]}
            if post:
                out["norms"][layer].update(mlp_target_mean=float(factor.norm(dim=1).mean()),
                                           mlp_out_mean=float(st.outs.norm(dim=1).mean()),
                                           write_reach_mean=_mean_over(reach, moving))
            hs.append(h)
            shares.append(resid)
        h_final = subject_states(model, targets.batches, z_layer, z_layer).resid
    out["originals"] = originals
    hs.append(h_final)
    for j, layer in enumerate(layers):  # what each write delivered: the residual moved from one read to the next
        moved = ((hs[j + 1] - hs[j]) * shares[j]).sum(1) / shares[j].pow(2).sum(1).clamp_min(1e-300)
        out["norms"][layer].update(step_reach_mean=_mean_over(moved, moving),
                                   residual_error_after=float((targets.z - hs[j + 1]).norm(dim=1).mean()))
    out["z_error"] = ((targets.z - h_final).norm(dim=1) / (targets.z - targets.init).norm(dim=1)
                      .clamp_min(1e-12)).tolist()
    return out


def _mean_over(values: torch.Tensor, keep: torch.Tensor) -> float | None:
    """Mean of ``values`` over the facts ``keep`` (those with a target: an answered fact's step is only what the
    other facts' writes moved it by, and a ratio to it means nothing)."""
    return float(values[keep].mean()) if bool(keep.any()) else None
