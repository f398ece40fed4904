"""The one hook mechanism: attach functions to named HookPoints for the length of a ``with`` block.

Every analyzer in interp goes through :class:`HookSet`; none registers torch hooks itself (tests/test_layers.py
checks it). The contract is
baukit-style: hooks are attached on ``__enter__`` and detached in ``__exit__`` whatever happened in between
(an exception in a hook or in the body, KeyboardInterrupt, a failure halfway through attaching).

A hook function has the TransformerLens signature ``fn(tensor, hook) -> None | Tensor``: return ``None`` to
only read, or a tensor of the same shape to replace the activation.

Ending a forward early: a hook raises :class:`StopForward`; the ``with`` block it was attached in swallows it
(baukit's ``stop=True``), so no caller writes try/except. :func:`capture` is the one reader built on this: it keeps
the named activations and, with ``stop=True``, ends the forward as soon as the last of them has fired.
:func:`recorded_calls` is the one hook on modules rather than HookPoints: it keeps how a forward called them.
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import torch
from transformer_lens.hook_points import HookPoint

HookFn = Callable[..., "torch.Tensor | None"]


@dataclass
class _Attached:
    name: str
    description: str
    point: HookPoint
    handle: object  # transformer_lens LensHandle


class StopForward(Exception):
    """Raised by a hook to end a forward pass early; the hook context it runs in swallows it."""


class HookSet:
    """Registry of the hooks interp attached to one model's HookPoints."""

    def __init__(self, points: Mapping[str, HookPoint]):
        self.points = dict(points)
        self._attached: list[_Attached] = []

    def point(self, name: str) -> HookPoint:
        try:
            return self.points[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self.points), n=3)
            hint = f"; did you mean {close}?" if close else ""
            raise ValueError(
                f"unknown hook name {name!r}: the model has {len(self.points)} hook points, e.g. "
                f"'blocks.0.hook_resid_pre', 'blocks.0.attn.hook_pattern'{hint}"
            ) from None

    def attach(self, hooks: Iterable[tuple[str, HookFn]], description: str = "") -> "_HookContext":
        """Context manager attaching ``[(hook_name, fn), ...]``; names are checked before anything attaches."""
        pairs = [(name, fn) for name, fn in hooks]
        for name, fn in pairs:
            self.point(name)
            if not callable(fn):
                raise TypeError(f"hook for {name!r} must be callable, got {type(fn).__name__}")
        return _HookContext(self, pairs, description)

    def active(self) -> list[tuple[str, str]]:
        """``[(hook_name, description)]`` for every hook interp has attached right now, in attach order."""
        return [(a.name, a.description) for a in self._attached]

    def count_torch_hooks(self) -> int:
        """Forward/backward hooks registered on the HookPoints by anyone — for leak checks."""
        seen, total = set(), 0
        for hp in self.points.values():
            if id(hp) in seen:
                continue
            seen.add(id(hp))
            total += len(hp._forward_hooks) + len(hp._backward_hooks) + len(hp._forward_pre_hooks)
        return total

    def _add(self, name: str, fn: HookFn, description: str) -> _Attached:
        hp = self.point(name)
        handle = hp.add_hook(fn, dir="fwd")
        entry = _Attached(name, description, hp, handle)
        self._attached.append(entry)
        return entry

    def _remove(self, entry: _Attached) -> None:
        entry.handle.hook.remove()
        if entry.handle in entry.point.fwd_hooks:
            entry.point.fwd_hooks.remove(entry.handle)
        if entry in self._attached:
            self._attached.remove(entry)


class _HookContext:
    """Attaches on enter, detaches on exit; nestable and composable (inner hooks run after outer ones)."""

    def __init__(self, hookset: HookSet, pairs: list[tuple[str, HookFn]], description: str):
        self.hookset, self.pairs, self.description = hookset, pairs, description
        self._entries: list[_Attached] = []

    def __enter__(self) -> "_HookContext":
        if self._entries:
            raise RuntimeError("this hook context is already active; build a new one to nest")
        try:
            for name, fn in self.pairs:
                self._entries.append(self.hookset._add(name, fn, self.description or _describe(fn)))
        except BaseException:
            self._detach()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._detach()
        # A hook ended the forward early on purpose: the block ends here, and the caller reads what it captured.
        return exc_type is not None and issubclass(exc_type, StopForward)

    def _detach(self) -> None:
        # Reverse order, and keep going if one removal fails, so nothing is ever left behind.
        errors = []
        while self._entries:
            entry = self._entries.pop()
            try:
                self.hookset._remove(entry)
            except Exception as e:  # pragma: no cover - torch handle removal does not fail in practice
                errors.append(e)
        if errors:
            raise errors[0]


def _describe(fn: HookFn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def capture(model, inp, names: Sequence[str], *, keep: Callable | None = None, stop: bool = False,
            hooks: Iterable[tuple[str, HookFn]] = (), grad: bool = False, description: str = "interp capture",
            forward_kwargs: Mapping | None = None):
    """One forward of ``inp`` keeping the named activations -> ``(store, logits)``.

    ``store[name]`` is ``keep(name, t)`` (default: ``t.detach()``, on the hook's device, model dtype) for each
    name; ``hooks`` are further ``(name, fn)`` pairs attached for the same forward (they run before the capture
    when they share a hook point, so the capture sees their result). With ``stop=True`` the forward ends as
    soon as every named activation has been kept and ``logits`` is None; otherwise ``logits`` is the model's
    output (on its device). Everything is detached when this returns, whatever happened. RuntimeError if a name
    never fired. ``forward_kwargs`` go to :meth:`~interp.core.model.Model.forward`."""
    wanted = list(dict.fromkeys(names))
    store: dict = {}
    keep = keep or (lambda name, t: t.detach())

    def saver(name):
        def fn(t, hook):
            store[name] = keep(name, t)
            if stop and len(store) == len(wanted):
                raise StopForward
            # Some bridge hook points (attn.hook_z, hook_q/k/v) see a reshaped copy of the real tensor: returning
            # it makes the kept tensor the one the forward goes on with, so gradients reach it.
            return t if grad else None
        return fn

    out = {}
    with torch.set_grad_enabled(grad), model.hooks(list(hooks) + [(n, saver(n)) for n in wanted],
                                                   description=description):
        out["logits"] = model.forward(inp, **(forward_kwargs or {}))
    missing = [n for n in wanted if n not in store]
    if missing:
        raise RuntimeError(f"hooks {missing[:3]} did not fire during the forward pass")
    return store, out.get("logits")


@contextlib.contextmanager
def recorded_calls(modules: Sequence[torch.nn.Module]):
    """Within the block, each call of ``modules[i]`` is recorded: yields ``calls``, where ``calls[i]`` becomes
    ``(args after the first, kwargs)`` of the module's last call (None until it is called). Forward pre-hooks on
    the modules themselves (a HookPoint sees a tensor, not how its block was called), removed on every exit path."""
    calls: list = [None] * len(modules)

    def keeper(i):
        def fn(module, args, kwargs):
            calls[i] = (tuple(args[1:]), dict(kwargs))
        return fn

    handles = []
    try:
        for i, module in enumerate(modules):
            handles.append(module.register_forward_pre_hook(keeper(i), with_kwargs=True))
        yield calls
    finally:
        for h in handles:
            h.remove()
