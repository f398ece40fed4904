"""The editor protocol: every editor registered once with its hyperparameter dataclass, edit class and entry points;
hyperparameters and run settings check themselves; one per-model defaults table whose rows cite studies that
exist; a bound editor records the settings it uses. No model is needed except a tiny one."""

import dataclasses
from pathlib import Path

import pytest

import interp
from interp.editing import defaults, registry
from interp.editing.base import DIAGNOSTICS, WeightEdit
from interp.editing.eval.run import EvalSettings
from interp.editing.eval.scale import ScaleSettings
from interp.editing.hparams import FTHparams, MemitHparams, RomeHparams, Settings, VStarHparams

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def test_every_editor_is_registered_with_its_parts():
    assert list(registry.EDITORS) == ["rome", "ft", "memit"]
    for name, spec in registry.EDITORS.items():
        assert spec.name == name and issubclass(spec.edit_type, WeightEdit)
        assert dataclasses.is_dataclass(spec.hparams) and issubclass(spec.hparams, Settings)
        assert (spec.one is None) != (spec.many is None)
        # every edit reports the diagnostics the evaluation reads, under the same names
        assert spec.edit_type.diagnostics is not WeightEdit.diagnostics
    with pytest.raises(ValueError, match="editor 'nope' not known; allowed: 'rome', 'ft', 'memit'"):
        registry.editor_spec("nope")
    with pytest.raises(ValueError, match="registered already"):
        registry.register(dataclasses.replace(registry.EDITORS["rome"], title="other"))


def test_hyperparameters_are_siblings_that_check_themselves():
    # nothing inherited to be refused: MEMIT has none of ROME's own knobs, and FT-L none of the v* ones
    rome_own = {f.name for f in dataclasses.fields(RomeHparams)} - {f.name for f in dataclasses.fields(VStarHparams)}
    assert rome_own == {"key_rule", "max_loss_rise"}
    assert not rome_own & {f.name for f in dataclasses.fields(MemitHparams)}
    assert not {f.name for f in dataclasses.fields(VStarHparams)} & {f.name for f in dataclasses.fields(FTHparams)}
    for cls, bad, match in [(MemitHparams, {"key_rule": "each"}, "unknown MEMIT hyperparameter"),
                            (MemitHparams, {"mom2_update_weight": 0}, "mom2_update_weight=0; allowed: a finite"),
                            (FTHparams, {"norm_constraint": float("nan")}, "norm_constraint=nan"),
                            (FTHparams, {"steps": 2.5}, "steps=2.5; allowed: an integer >= 1"),
                            (RomeHparams, {"templates": [[1, 2]]}, r"templates=\(\(1, 2\),\)"),
                            (RomeHparams, {"kl_prompt": "no subject"}, "exactly one")]:
        with pytest.raises(ValueError, match=match):
            cls.make(**bad)
    hp = RomeHparams.make(templates=[[5, 1]])
    assert hp.templates == ((5, 1),) and hp.to_dict()["templates"] == [[5, 1]]
    assert hp.replace(v_steps=3).v_steps == 3 and hp.v_steps == 20


def test_run_settings_check_themselves_and_record_what_changes_a_result():
    with pytest.raises(ValueError, match="unknown evaluation setting"):
        EvalSettings.make(batchsize=2)
    with pytest.raises(ValueError, match="gen_tokens=0; allowed: an integer >= 1"):
        EvalSettings.make(gen_tokens=0)
    assert "progress" not in EvalSettings.make(progress=False).to_dict()
    s = ScaleSettings.make(checkpoints=[3, 1])
    assert s.checkpoints == (3, 1) and s.steps(3) == [1, 3]
    with pytest.raises(ValueError, match=r"checkpoints entry 5; allowed: step numbers 1\.\.3"):
        s.replace(checkpoints=[5]).steps(3)
    with pytest.raises(ValueError, match="max_entropy_drop=True; allowed: a number > 0"):
        ScaleSettings.make(max_entropy_drop=True)


def test_one_defaults_table_whose_rows_cite_existing_studies():
    for fingerprint, row in defaults.DEFAULTS.items():
        assert row.studies, fingerprint
        for setting, study in row.studies.items():
            assert (STUDIES / study / "README.md").is_file(), (fingerprint, setting, study)
            # a cited setting is one the row sets
            head, *rest = setting.split(".")
            value = getattr(row, head)
            for part in rest:
                value = value[part]
            assert value is not None, setting
        for editor, overrides in {**row.hparams, **row.sequential}.items():
            registry.editor_spec(editor).hparams.make(**overrides)  # every override is a valid setting
    for (editor, setting), study in defaults.CHOSEN_DEFAULTS.items():
        assert (STUDIES / study / "README.md").is_file(), study
        assert setting in {f.name for f in dataclasses.fields(registry.editor_spec(editor).hparams)}


def test_bind_uses_the_table_then_the_caller_and_records_it():
    model = interp.load_tiny("llama", seed=0, n_layers=2)
    ed = registry.bind(model, "ft", layer=1, hparams={"steps": 3})
    assert ed.name == "ft" and ed.layers == [1] and ed.hparams == {**FTHparams().to_dict(), "steps": 3}
    assert ed.one is not None and ed.many is None and ed.together is not None
    memit = registry.bind(model, "memit", hparams={"layers": [0], "mom2_update_weight": 10.0}, stats={0: None})
    assert memit.layers == [0] and memit.hparams["mom2_update_weight"] == 10.0 and memit.many is not None
    with pytest.raises(ValueError, match=r"layers=\[0, 1\]; ROME writes one layer"):
        registry.bind(model, "rome", layer=[0, 1], stats="identity")
    custom = registry.bind(model, lambda m, fact: None)
    assert custom.layers is None and custom.one is not None


def test_the_table_reaches_an_edit(monkeypatch):
    """A row's values are what an editor gets unless the caller says otherwise; with ``sequential`` the row's
    sequential overrides come on top."""
    model = interp.load_tiny("llama", seed=0, n_layers=2)
    row = defaults.ModelDefaults(layer=1, hparams={"rome": {"kl_factor": 0.5}},
                                 sequential={"rome": {"kl_factor": 0.25, "v_steps": 3}})
    monkeypatch.setattr(defaults, "DEFAULTS", {model.fingerprint: row})
    assert defaults.default_layer(model) == 1
    assert defaults.hparams_for(model, RomeHparams, "rome").kl_factor == 0.5
    seq = defaults.hparams_for(model, RomeHparams, "rome", sequential=True)
    assert (seq.kl_factor, seq.v_steps) == (0.25, 3)
    assert defaults.hparams_for(model, RomeHparams, "rome", sequential=True, kl_factor=0.0).kl_factor == 0.0
    assert defaults.hparams_for(model, FTHparams, "ft") == FTHparams()


def test_diagnostics_have_one_schema():
    nan = WeightEdit.diagnostics(None)
    assert tuple(nan) == DIAGNOSTICS
