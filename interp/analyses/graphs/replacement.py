"""The local replacement model of one prompt: the real model with everything nonlinear frozen at its values on that
prompt, so that what is left is linear and an edge is a direct effect.

Frozen (stop-gradient, held at the clean run's values): every attention pattern (``attn.hook_pattern``) and every
norm's scale (each ``*.hook_scale``: pre-norms, Gemma's post-norms, the final norm). Each MLP write
(``hook_mlp_out``) becomes its transcoder's output plus an error term: ``a @ W_dec + z @ W_skip + b_dec`` (raw
scale) ``+ error``, with the feature activations ``a`` and the error held constant and the skip term left live (it
is linear in the MLP's input). A layer without a transcoder keeps its whole MLP write as one constant error.
With every source at its clean value the frozen forward reproduces the real model's logits on the prompt.

Sources (the graph's input nodes) are added through zero-valued *taps*: one at the embedding (``blocks.0.
hook_resid_pre``) and one at each MLP write. The gradient of a target with respect to a tap at (layer, position)
is the target's sensitivity to anything written there; a source's edge is its written vector dotted with it:
``a_f * W_dec[f] * out_scale`` for a feature, the error vector for an error node, the embedding for a token.

The BOS position's MLP writes are the same on every prompt (attention sinks, not content): unless
``bos_features``, that position's features are folded into its error node (the sum is unchanged).

Targets are read where they are computed: a feature's pre-activation is ``W_enc[:, f] · x / in_scale + b_enc[f]``
of its layer's MLP input ``x`` (after the frozen pre-norm); a logit target is the logit minus the mean logit at the
last position. Rows of targets run as one batched backward pass (``is_grads_batched``) through one kept forward.
"""

from __future__ import annotations

import warnings

import torch

from ..features.use import as_set


class LocalReplacement:
    """Built from one clean run of ``text``; ``run(rows)`` is the frozen forward of ``rows`` copies of it."""

    def __init__(self, model, transcoders, text, *, bos_features: bool = False):
        self.model = model
        ds = as_set(transcoders).check(model)
        if any(d.kind != "transcoder" for _, d in ds):
            raise ValueError("a local replacement model is built from transcoders (MLP in, MLP out); got an SAE")
        self.dicts = {d.site.layer: d.eval() for _, d in ds}
        self.tokens = model.to_tokens(text).to(model.device)                  # [1, pos]
        if self.tokens.shape[0] != 1:
            raise ValueError("an attribution graph is built for one prompt; got a batch")
        self.n_pos = self.tokens.shape[1]
        names = set(model.hook_names())
        self.frozen_names = sorted(n for n in names if n.endswith(".hook_scale") or n.endswith("attn.hook_pattern"))
        L = model.n_layers
        self.read = {i: f"blocks.{i}.mlp.hook_in" for i in range(L)}
        self.write = {i: f"blocks.{i}.hook_mlp_out" for i in range(L)}
        want = self.frozen_names + list(self.read.values()) + list(self.write.values()) + ["blocks.0.hook_resid_pre"]
        with torch.no_grad():
            logits, cache = model.run_with_cache(self.tokens, want)
        self.logits = logits[0, -1].float()                                   # [vocab] of the real model
        self.frozen = {n: cache[n].detach() for n in self.frozen_names}
        self.embed = cache["blocks.0.hook_resid_pre"][0].detach().float()      # [pos, d]
        self.acts, self.error, self.feature_write = {}, {}, {}
        self._graph = None          # (taps, last-position logits, MLP inputs) of a kept frozen forward
        with torch.no_grad():
            for i in range(L):
                y = cache[self.write[i]][0].float()                            # [pos, d]
                d = self.dicts.get(i)
                if d is None:
                    self.error[i] = y
                    continue
                x = cache[self.read[i]][0].float()
                a = d.encode(x)                                                # [pos, width]
                if not bos_features and int(self.tokens[0, 0]) == model.bos_token_id:
                    a[0] = 0      # the BOS position's write is the same on every prompt: one error node, not features
                self.acts[i] = a
                self.feature_write[i] = (a @ d.W_dec.float()) * d.out_scale.float()
                self.error[i] = y - d.decode(a, x).float()

    # ------------------------------------------------------------------------------------------ the forward
    def run(self, rows: int = 1, *, taps: dict | None = None, zero_sources: bool = False, keep_reads: bool = False):
        """Frozen forward of ``rows`` copies of the prompt -> ``(logits [rows, pos, vocab], reads)``. ``taps``:
        ``{"embed": t, layer: t}`` tensors [rows, pos, d] added at the embedding and at MLP writes (zeros, with
        ``requires_grad``, to read gradients there). ``zero_sources``: every source at 0 (embeddings, feature
        activations and errors), leaving the constant terms (biases) and the linear paths. ``reads``: each MLP
        input [rows, pos, d] of this forward, when ``keep_reads``."""
        taps = taps or {}
        reads = {}
        dtype = self.embed.dtype

        def frozen(name):
            v = self.frozen[name]
            return lambda t, hook: v.to(t.dtype).expand(t.shape[0], *v.shape[1:])

        def embed(t, hook):
            base = torch.zeros_like(t) if zero_sources else self.embed.to(t.dtype).expand_as(t)
            return base + taps["embed"].to(t.dtype) if "embed" in taps else base

        def keep(i):
            def fn(t, hook):
                reads[i] = t
            return fn

        def write(i):
            d = self.dicts.get(i)

            def fn(t, hook):
                out = torch.zeros(t.shape, dtype=dtype, device=t.device)
                if d is not None:
                    x = reads[i]
                    out = out + (d.normalise(x).reshape(*x.shape[:-1], -1) @ d.W_skip.float() if d.W_skip is not None
                                 else 0) * d.out_scale.float() + d.b_dec.float() * d.out_scale.float()
                    if not zero_sources:
                        out = out + self.feature_write[i]
                if not zero_sources:
                    out = out + self.error[i]
                if i in taps:
                    out = out + taps[i]
                return out.to(t.dtype)
            return fn

        hooks = [(n, frozen(n)) for n in self.frozen_names] + [("blocks.0.hook_resid_pre", embed)]
        for i in range(self.model.n_layers):
            hooks += [(self.read[i], keep(i)), (self.write[i], write(i))]
        with self.model.hooks(hooks, description="local replacement model"), warnings.catch_warnings():
            # holding a norm's scale is the point here; TransformerLens warns on every such edit (its reconstructed
            # output differs from HF's at rounding scale, which the exactness tests bound)
            warnings.filterwarnings("ignore", message="A forward hook edited hook_scale")
            logits = self.model.forward(self.tokens.expand(rows, -1))
        return logits, (reads if keep_reads else {})

    # ------------------------------------------------------------------------------------------ gradients
    def tap_gradients(self, targets: list) -> dict:
        """For each target (``("logit", token)`` or ``("feature", layer, pos, feature)``), the gradient of its value
        with respect to every tap: ``{"embed": [n, pos, d], layer: [n, pos, d]}``, one row per target. The frozen
        model is linear in its taps, so its gradients do not depend on where it is evaluated: one forward of one
        copy is kept, and every call runs only a backward pass through it, one row per target
        (``is_grads_batched``)."""
        n = len(targets)
        d_model = self.model.d_model
        if self._graph is None:
            taps = {"embed": torch.zeros(1, self.n_pos, d_model, requires_grad=True)}
            for i in range(self.model.n_layers):
                taps[i] = torch.zeros(1, self.n_pos, d_model, requires_grad=True)
            with torch.enable_grad():
                logits, reads = self.run(1, taps=taps, keep_reads=True)
            self._graph = (taps, logits[:, -1].float(), {k: v.float() for k, v in reads.items()})
        taps, last, reads = self._graph
        vocab = last.shape[-1]
        g_logit = torch.zeros(n, 1, vocab)
        g_read = {}
        for r, t in enumerate(targets):
            if t[0] == "logit":
                g_logit[r, 0] -= 1.0 / vocab                            # the logit minus the mean logit
                g_logit[r, 0, t[1]] += 1.0
            else:
                _, layer, pos, f = t
                d = self.dicts[layer]
                g = g_read.setdefault(layer, torch.zeros(n, 1, self.n_pos, d_model))
                g[r, 0, pos] = d.W_enc[:, f].detach().float() / d.in_scale.detach().float()
        outs, grads = ([last], [g_logit]) if bool(g_logit.any()) else ([], [])
        for layer, g in g_read.items():
            outs.append(reads[layer])
            grads.append(g)
        names = list(taps)
        with torch.enable_grad():
            got = torch.autograd.grad(outs, [taps[k] for k in names], grads, retain_graph=True, allow_unused=True,
                                      is_grads_batched=True)
        return {k: (torch.zeros(n, self.n_pos, d_model) if g is None else g[:, 0]) for k, g in zip(names, got)}
