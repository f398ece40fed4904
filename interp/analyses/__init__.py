"""Layer 1, the analyses: each reads a model through the core and returns a result object. They import core
and each other, never editing or the command line.

What is where (a family of four or more modules is a package whose ``__init__`` re-exports its public names,
so ``from interp.analyses.trace import causal_trace``; an analysis with only its view stays a flat pair):

- ``lens.py`` (+ ``lens_view``) the logit lens · ``tuned_lens/`` the tuned lens: ``lens`` (translators, file,
  cache), ``train`` (CPU training), ``evaluate`` (held-out KL, prediction depth)
- ``attribution.py`` (+ view) decomposition, direct logit attribution · ``attention.py`` (+ view) patterns,
  per-head statistics · ``head_scan.py`` those statistics over a corpus
- ``neurons.py`` (+ view) FFN neurons: activations, corpus top-k, vocabulary projection, ablation ·
  ``experts.py`` mixture-of-experts routing, load, an expert's neurons, expert ablation
- ``induction/`` ``heads`` (induction, prefix-matching, previous-token and copying scores, ablation, ICL),
  ``toy`` (an attention-only model) and ``train`` (the phase change from scratch), ``view``
- ``trace/`` causal tracing: ``trace``, ``corrupt`` (Gaussian noise or symmetric token replacement), ``facts``
  (the per-fact average), ``view``
- ``patching/`` ``activation`` (exhaustive), ``attribution`` (AtP, AtP*), ``path``, ``metrics`` (logit_diff,
  prob, kl_to_clean), ``datasets`` (IOI, factual-recall and induction prompt pairs), ``view``
- corpus machinery: ``accumulate`` (the accumulator protocol and the one scan driver), ``topk`` (top-k
  contexts), ``dist`` (the same statistics over torch.distributed ranks) · ``stats`` ROME's key second moments

How to add an analysis (sparse-autoencoder features, ``features/``, is the next: ``sae.py`` with the ``SAE``
module, ``load_sae`` and ``splice(sae)``, a hook returning the reconstruction for ``model.hooks``; feature
contexts as a ``TopK`` whose ``keep`` encodes, as ``experts.ExpertTopK``; a ``train.py`` shaped like
``tuned_lens/train``):

1. The file: ``analyses/<name>.py``, or a package ``analyses/<name>/`` whose ``__init__.py`` says what it
   holds and re-exports its public names. Build on ``core`` (``hooks.capture``, ``inputs`` for argument
   checks) and the other analyses.
2. The result: a ``core.results.Result`` subclass (a dataclass) with ``to_frame()`` and ``plot(*, out=None)``;
   ``summary()`` and ``to_json()`` default to the table (override them to say more), and ``show()``,
   ``save_html(path)`` and the notebook display come from ``view()``, by default the summary and table.
3. A corpus statistic: an ``accumulate.Accumulator`` (``add``, ``merge``, ``state_dict``, ``reduction``)
   streamed by ``accumulate.scan`` and combined over ranks by ``accumulate.reduce``, never a loop of its own.
4. Its view, beside it: ``<name>_view.py`` returns ``View(kind, title, data, script=SCRIPT)`` with
   ``SCRIPT = Path(__file__).with_name("<name>_view.js")``, a script that registers
   ``InterpViews.renderers.<kind>`` (in a package: ``view.py`` and ``view.js``; heatmaps need no script of
   their own, ``core.views.grid_view``); ``Result.view()`` imports it lazily. Nothing in ``core/views``
   changes.
5. The command: ``interp/cli/<name>.py`` with ``add_cli(subparsers)`` and a handler that checks its flags
   before the model loads (copy ``cli/neurons.py``), listed in ``COMMAND_MODULES``
   (``interp/cli/__init__.py``).
6. The face: the entry point exported from ``interp/__init__.py`` (and its ``__all__``), one row in the
   README's API table.
7. Tests: ``tests/test_<name>.py``, numbers checked against a computation written out by hand on the
   ``tiny_llama`` fixture; tests/test_layers.py checks the layering and the Result protocol,
   tests/test_views.py the view.
"""
