"""Saved edits of every editor (ROME, MEMIT, FT-L): a round trip re-applies the same bits, and a damaged or altered
file — either of the pair — is refused with an error naming it, before anything is written."""

import json

import pytest
import torch

import interp
from interp import rome
from interp.analyses.stats import mlp_key_second_moment, mlp_key_second_moments
from interp.editing.memit import load_memit_edit, memit_edit
from interp.editing.registry import EDITORS

REQUEST = ("{} is in the city of", "Tower", " Rome")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One edit of each editor on a tiny model, saved and reverted: (model, {editor: (path, loader)})."""
    model = interp.load_tiny("llama", seed=0, n_layers=3)
    stats0 = mlp_key_second_moment(model, 0, n_tokens=3000, cache=False, progress=False)
    stats01 = mlp_key_second_moments(model, [0, 1], n_tokens=3000, cache=False, progress=False)
    d0 = model.weights_digest()
    folder = tmp_path_factory.mktemp("edits")
    edits = {"rome": (rome.edit(model, *REQUEST, 0, stats=stats0, v_steps=4), rome.load_edit),
             "ft": (rome.ft_edit(model, *REQUEST, 0, steps=3, lr=1e-2), rome.load_ft_edit),
             "memit": (memit_edit(model, [dict(zip(("prompt", "subject", "target_new"), REQUEST))], layers=[0, 1],
                                  stats=stats01, v_steps=4, templates=((5, 1),)), load_memit_edit)}
    out = {}
    for name, (e, loader) in reversed(list(edits.items())):  # reverted in reverse order of making
        written = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in range(model.n_layers)}
        e.revert()
        out[name] = (e.save(folder / name), loader, written)
    assert model.weights_digest() == d0
    return model, out


@pytest.mark.parametrize("name", ["rome", "ft", "memit"])
def test_a_saved_edit_applies_the_same_bits(saved, name):
    model, files = saved
    path, loader, _ = files[name]
    d0 = model.weights_digest()
    e = loader(path)
    assert type(e) is EDITORS[name].edit_type
    before = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in range(model.n_layers)}
    with model.edited(e):
        changed = [l for l in range(model.n_layers) if not torch.equal(model.mlp_out_matrix(l).cpu(), before[l])]
        assert changed == (e.layers if name == "memit" else [e.layer])
        again = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in changed}
    assert model.weights_digest() == d0
    with model.edited(loader(path.with_suffix(".json"))):  # either file of the pair names it
        assert all(torch.equal(model.mlp_out_matrix(l).cpu(), m) for l, m in again.items())
    assert model.weights_digest() == d0


def _copy(path, tmp_path, name):
    tensors, meta = path, path.with_suffix(".json")
    dst = tmp_path / name
    dst.with_suffix(".safetensors").write_bytes(tensors.read_bytes())
    dst.with_suffix(".json").write_bytes(meta.read_bytes())
    return dst.with_suffix(".safetensors"), dst.with_suffix(".json")


@pytest.mark.parametrize("name", ["rome", "ft", "memit"])
def test_damaged_or_altered_files_are_refused_naming_them(saved, name, tmp_path):
    model, files = saved
    path, loader, _ = files[name]
    d0 = model.weights_digest()

    # a flipped byte in the .json: not UTF-8 (it used to raise a raw UnicodeDecodeError)
    tensors, meta = _copy(path, tmp_path, "flipped")
    raw = bytearray(meta.read_bytes())
    raw[len(raw) // 2] = 0xFF
    meta.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"flipped\.json.*damaged: not UTF-8"):
        loader(tensors)

    # cut short: not JSON
    tensors, meta = _copy(path, tmp_path, "cut")
    meta.write_bytes(meta.read_bytes()[: len(meta.read_bytes()) // 2])
    with pytest.raises(ValueError, match=r"cut\.json.*damaged: not valid JSON"):
        loader(tensors)

    # valid JSON with a field changed (e.g. the layer, or a hyperparameter): the tensor file vouches for the fields
    tensors, meta = _copy(path, tmp_path, "altered")
    doc = json.loads(meta.read_text())
    doc["hparams"] = {**doc["hparams"], next(iter(doc["hparams"])): 12345}
    meta.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"altered\.json.*was altered"):
        loader(tensors)

    # the tensors changed: their sha256 no longer matches the one the .json records
    tensors, meta = _copy(path, tmp_path, "tensors")
    raw = bytearray(tensors.read_bytes())
    raw[-3] ^= 0x01
    tensors.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"tensors\.safetensors.*were altered"):
        loader(tensors)

    # another editor's files: the format tag names what they are
    other = next(n for n in files if n != name)
    with pytest.raises(ValueError, match=r"is not an interp .* edit \(format 'interp\."):
        loader(files[other][0])
    assert model.weights_digest() == d0
