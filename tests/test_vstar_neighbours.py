"""v* with neighbour rows (``vstar_neighbours``, :func:`interp.editing.vstar.edit_batch`): other subjects' bare
prompts read with a share of delta at their subject and asked to keep their next-token distribution. The loss the
optimisation reports is checked against an independent one from plain hooked forwards of whole rows (no prefix
reuse, no shared batch); no neighbours is the plain optimisation bit for bit; a large weight keeps the
neighbours' distributions where a zero weight moves them; the neighbours chosen and bad settings."""

import pytest
import torch

from interp.editing.hparams import MemitHparams
from interp.editing.memit_solve import optimize_targets
from interp.editing.preserve import nearest_subjects, subject_list, vstar_neighbours
from interp.editing.vstar import edit_batch, optimize_delta

PROMPT, SUBJECT, TARGET = "{} is in the city of", "Tower", " Rome"
OTHERS = ["Bridge", "Castle", "Museum"]
LAYER = 0
HOOK = f"blocks.{LAYER}.hook_resid_post"


def hp_for(**kw):
    return MemitHparams.make(v_loss_stop=0.0, templates=((5, 1),), **kw)


def batch(m, hp, others=OTHERS, weight=1.0):
    tpl = ["{}", "Because of it. {}"]
    return edit_batch(m, PROMPT, SUBJECT, m.target_tokens(TARGET), tpl, hp.kl_prompt, neighbours=others,
                      neighbour_share=hp.vstar_neighbour_share, neighbour_weight=weight)


def run(m, b, hp, steps):
    events = []
    out = optimize_delta(m, LAYER, b, hp.replace(v_steps=steps), TARGET, events.append, value_hook=HOOK,
                         answered="keep")
    return out, [e for e in events if e.get("stage") == "optimize"]


def last_logp(m, tokens, length, pos, delta, scale, hook_name=HOOK):
    """log-probabilities [vocab] after row ``tokens[:length]`` with ``scale * delta`` added at ``pos``, one forward."""
    def add(t, hook):
        t = t.clone()
        t[0, pos] += (scale * delta).to(t.dtype)
        return t
    with m.hooks([(hook_name, add)]):
        logits = m.run(tokens[None, :length])
    return torch.log_softmax(logits[0, -1].double(), -1)


def independent_loss(m, b, hp, delta, weight, hook_name=HOOK):
    """The v* loss at ``delta`` from whole rows: mean target NLL over the rewrite rows + kl_factor KL on the KL
    prompt + weight decay + ``weight`` × the neighbours' mean KL(P_edited || P_orig)."""
    n_rw, T = b.target_pos.shape
    zero = torch.zeros_like(delta)
    nll = 0.0
    for r in range(n_rw):
        lp = [last_logp(m, b.tokens[r], int(b.target_pos[r, t]) + 1, int(b.subject_pos[r]), delta, 1.0, hook_name)
              for t in range(T)]
        nll += sum(-lp[t][int(b.target_ids[t])] for t in range(T)) / T
    nll /= n_rw

    def kl(row, pos, scale):
        after = last_logp(m, b.tokens[row], pos + 1, int(b.subject_pos[row]), delta, scale, hook_name)
        before = last_logp(m, b.tokens[row], pos + 1, int(b.subject_pos[row]), zero, scale, hook_name)
        return float((after.exp() * (after - before)).sum())

    kl0 = kl(n_rw, b.kl_pos, 1.0)
    nb = sum(kl(n_rw + 1 + j, int(p), b.neighbour_share) for j, p in enumerate(b.neighbour_pos)) / b.n_neighbours
    return float(nll), kl0, nb


def test_reported_loss_equals_an_independent_one_from_whole_rows(tiny_llama):
    m, hp = tiny_llama, hp_for(vstar_neighbour_share=0.5, v_lr=20.0, clamp_norm_factor=50.0)  # KLs well above rounding
    b = batch(m, hp, weight=3.0)
    assert b.n_neighbours == 3 and b.tokens.shape[0] == b.n_rewrite + 1 + 3
    one, _ = run(m, b, hp, 1)                           # delta after the first Adam step
    _, events = run(m, b, hp, 2)                         # the loss the second step reports is at that delta
    delta = one["delta"].double()
    assert delta.norm() > 0
    nll, kl0, nb = independent_loss(m, b, hp, delta.float(), 3.0)
    assert nb > 1e-6                                     # the neighbour term is not zero, so the check can fail
    decay = hp.v_weight_decay * float(delta.norm()) / one["out_norm"] ** 2
    want = nll + hp.kl_factor * kl0 + decay + 3.0 * nb
    got = events[1]
    assert got["nll"] == pytest.approx(nll, rel=1e-4)
    assert got["kl"] == pytest.approx(kl0, rel=1e-3, abs=1e-6)
    assert got["neighbour_kl"] == pytest.approx(nb, rel=1e-3, abs=1e-6)
    assert got["loss"] == pytest.approx(want, rel=1e-4)


def test_no_neighbours_is_the_plain_optimisation_bit_for_bit(tiny_llama):
    m, hp = tiny_llama, hp_for()
    tpl = ["{}", "Because of it. {}"]
    plain = edit_batch(m, PROMPT, SUBJECT, m.target_tokens(TARGET), tpl, hp.kl_prompt)
    empty = batch(m, hp, others=())
    assert empty.neighbour_pos is None and torch.equal(empty.tokens, plain.tokens)
    a, _ = run(m, plain, hp, 4)
    b, _ = run(m, empty, hp, 4)
    assert torch.equal(a["delta"], b["delta"]) and a["losses"] == b["losses"]
    assert a["keys"].shape[0] == plain.n_rewrite + 1
    c, _ = run(m, batch(m, hp, weight=1.0), hp, 4)       # the neighbours' keys are not the subject's
    assert c["keys"].shape == a["keys"].shape


def test_the_weight_keeps_the_neighbours_answers_on_the_embedded_model(embedded):
    """The random tiny models barely answer delta, so this asks the embedded model: with the neighbours weighted,
    delta still reaches the target and moves the neighbours' next-token distributions far less (their whole delta
    added, share 1)."""
    m, hook = embedded, "blocks.4.hook_resid_post"
    hp = MemitHparams.make(templates=((5, 1),), vstar_neighbour_share=1.0, v_steps=15)
    tpl, moved, nll = ["{}", "Because of it. {}"], {}, {}
    for w in (0.0, 10.0):
        b = edit_batch(m, "{} is located in the city of", "The Eiffel Tower", m.target_tokens(" Rome"), tpl,
                       hp.kl_prompt, neighbours=["Big Ben", "The Louvre", "Notre-Dame"], neighbour_share=1.0,
                       neighbour_weight=w)
        out = optimize_delta(m, 4, b, hp, " Rome", None, value_hook=hook, answered="keep")
        nll[w], _, moved[w] = independent_loss(m, b, hp, out["delta"], w, hook)
    assert max(nll.values()) < 0.1, nll
    assert moved[10.0] < 0.25 * moved[0.0] and moved[0.0] > 0.3, moved


def test_memit_targets_read_the_chosen_neighbours(tiny3):
    m, stats = tiny3
    hp = hp_for(vstar_neighbours=2, v_steps=3)
    req = [{"prompt": PROMPT, "subject": SUBJECT, "target_new": TARGET, "case_id": 0, "index": 0}]
    nb = vstar_neighbours(m, req, LAYER, hp)
    assert len(nb[0]) == 2 and set(nb[0]) <= set(subject_list())
    assert nb[0] == nearest_subjects(m, PROMPT, [SUBJECT], 2, LAYER)
    few = nearest_subjects(m, PROMPT, [SUBJECT], 2, LAYER, subject_list()[:40])      # a pool of 40 ranks alike
    assert set(few) <= set(subject_list()[:40]) and (set(nb[0]) & set(subject_list()[:40])) <= set(few)
    tg = optimize_targets(m, req, LAYER, hp, ["{}"], neighbours=nb)
    assert tg.batches[0].n_neighbours == 2
    assert vstar_neighbours(m, req, LAYER, hp_for()) is None


@pytest.mark.parametrize("bad, match", [({"vstar_neighbours": -1}, "vstar_neighbours=-1"),
                                        ({"vstar_neighbours": 1.5}, "vstar_neighbours=1.5"),
                                        ({"vstar_neighbour_share": 0.0}, "vstar_neighbour_share=0.0"),
                                        ({"vstar_neighbour_weight": -1.0}, "vstar_neighbour_weight=-1.0")])
def test_bad_settings_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        MemitHparams.make(**bad)


def test_more_neighbours_than_the_list_is_refused(tiny_llama):
    n = len(subject_list())
    hp = hp_for(vstar_neighbours=n)
    with pytest.raises(ValueError, match=f"vstar_neighbours={n}; allowed: at most {n - 1}"):
        vstar_neighbours(tiny_llama, [{"prompt": PROMPT, "subject": SUBJECT}], LAYER, hp)
