"""Prompt-pair datasets for patching: equal token lengths, single-token answers, seeded, and the corruption where
the docstrings say it is."""

import pytest
import torch

from interp.analyses.patching import fact_pairs, induction_pairs, ioi


def test_induction_pairs_are_seeded_and_differ_only_in_the_first_half(tiny_llama):
    a = induction_pairs(tiny_llama, 4, seq_len=6, seed=3)
    b = induction_pairs(tiny_llama, 4, seq_len=6, seed=3)
    assert torch.equal(a.clean, b.clean) and torch.equal(a.corrupted, b.corrupted)
    assert not torch.equal(a.clean, induction_pairs(tiny_llama, 4, seq_len=6, seed=4).clean)
    assert a.clean.shape == a.corrupted.shape == (4, 1 + 6 + 5)
    assert (a.clean[:, 0] == tiny_llama.bos_token_id).all()
    assert (a.clean[:, 1:7] != a.corrupted[:, 1:7]).all()  # R' differs from R everywhere
    assert torch.equal(a.clean[:, 7:], a.corrupted[:, 7:]) and torch.equal(a.clean[:, 7:], a.clean[:, 1:6])
    assert a.answer_ids == a.clean[:, 6].tolist() and a.wrong_ids == a.corrupted[:, 6].tolist()
    assert len(a) == 4 and len(a[1:3]) == 2 and torch.equal(a[1:3].clean, a.clean[1:3])
    assert len(a.to_frame()) == 4
    with pytest.raises(ValueError, match="seq_len"):
        induction_pairs(tiny_llama, 4, seq_len=1)


@pytest.mark.slow
def test_ioi_pairs(embedded):
    pp = ioi(embedded, 24, seed=0)
    assert pp.clean == ioi(embedded, 24, seed=0).clean and pp.clean != ioi(embedded, 24, seed=1).clean
    for x, y, ans, wrong, meta in zip(pp.clean, pp.corrupted, pp.answers, pp.wrongs, pp.meta):
        tx, ty = embedded.encode(x), embedded.encode(y)
        assert len(tx) == len(ty)
        diff = [i for i, (s, t) in enumerate(zip(tx, ty)) if s != t]
        assert len(diff) == 1  # only the second mention of the subject changed
        io, s, c = meta["IO"], meta["S"], meta["C"]
        assert ans == " " + io and wrong == " " + s
        assert x.count(" " + s) == 2 and y.count(" " + c) == 1
        # the corrupted name is the second mention: the text up to the first mention of S is unchanged
        assert y.replace(" " + c, " " + s, 1) == x
    assert pp.answer_ids == [embedded.to_single_token(a) for a in pp.answers]
    assert pp.wrong_ids == [embedded.to_single_token(w) for w in pp.wrongs]


@pytest.mark.slow
def test_ioi_substring_names_replace_the_right_mention(embedded):
    # "Dan" is inside "Daniel": the second mention of B must change, never the first mention of A.
    from interp.analyses.patching import datasets

    pp = datasets.ioi(embedded, 12, seed=0, templates=("When {A} and {B} went to the {place}, {B} gave a {obj} to",))
    names = datasets.single_token_words(embedded, ["Daniel", "Dan"])
    if len(names) == 2:
        orig = datasets.NAMES
        try:
            datasets.NAMES = ("Daniel", "Dan", "Mary")
            pp = datasets.ioi(embedded, 6, seed=0)
        finally:
            datasets.NAMES = orig
    for x, y, meta in zip(pp.clean, pp.corrupted, pp.meta):
        assert y == x[: x.rindex(" " + meta["S"])] + " " + meta["C"] + x[x.rindex(" " + meta["S"]) + 1 +
                                                                           len(meta["S"]):]


@pytest.mark.slow
def test_fact_pairs_swap_subjects_within_a_relation(embedded):
    from interp.editing.facts import load_records

    records = load_records()
    before = [r.to_dict() for r in records[:3]]
    pp = fact_pairs(embedded, records, 10, seed=0)
    assert [r.to_dict() for r in records[:3]] == before  # the caller's records are untouched
    by_subject = {r.subject: r for r in records}
    for x, y, ans, wrong, meta in zip(pp.clean, pp.corrupted, pp.answers, pp.wrongs, pp.meta):
        assert len(embedded.encode(x)) == len(embedded.encode(y))
        r, o = by_subject[meta["subject"]], by_subject[meta["swapped"]]
        assert r.relation == o.relation == meta["relation"]
        assert ans == r.target_true and wrong == o.target_true and ans != wrong
        assert x == r.prompt.format(r.subject) and y == r.prompt.format(o.subject)
    assert fact_pairs(embedded, records, 10, seed=0).clean == pp.clean
