"""Layer 0, the core: what every analysis stands on. Imports third-party libraries and itself only.

hooks.py (the one hook mechanism, ``capture``) · model.py (``Model``) · arch.py (architecture access) ·
cache.py (``run_with_cache``, ``Cache``, activation gradients) · resume.py (a forward resumed at a layer) ·
interventions.py (patch, steer, ablate as hook lists) · inputs.py (text/target/position/layer checks) ·
generation.py (the one sampler) · loading.py (models and their cache) · placement.py (devices, device maps) ·
results.py (the result protocol, figures) · views/ (interactive HTML views: page builder, escaping, 8-bit data,
the package's own JavaScript and CSS) · progress.py · caches.py (per-model memo tables) · paths.py (where the
embedded data lives) · corpus.py (Wikipedia documents, token batches).
"""
