"""The package's layering, read from the source (function-local imports included): imports only point down
(core <- analyses <- editing <- cli/entry points), no import cycle, no module over 600 lines, no private name
imported across modules."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "interp"
LAYER = {"core": 0, "analyses": 1, "patching": 1, "induction": 1, "features": 1, "editing": 2, "rome": 2, "cli": 3, "dist": 3}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, imported names, line) for every interp import in the file, nested ones included."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("interp")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("interp"):
                names = [a.name for a in node.names]
                # "from . import x" imports the submodule x
                subs = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES]
                found += [(s, [], node.lineno) for s in subs] or [(mod, names, node.lineno)]
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def _edges() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m, p) if t in MODULES and t != m} for m, p in MODULES.items()}


def test_imports_point_down():
    bad = []
    for m, p in MODULES.items():
        lm = _layer(m)
        if lm is None:
            continue
        for t, _, line in _imports(m, p):
            lt = _layer(t)
            if lt is not None and lt > lm:
                bad.append(f"{p.relative_to(PKG.parent)}:{line} ({m}, layer {lm}) imports {t} (layer {lt})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_library_module_imports_the_cli():
    users = [m for m, ts in _edges().items()
             if not (m.startswith("interp.cli") or m.endswith("__main__"))
             and any(t.startswith("interp.cli") for t in ts)]
    assert not users


def test_no_import_cycle():
    edges, index, low, stack, on, cycles, counter = _edges(), {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_under_600_lines(name):
    n = sum(1 for _ in open(MODULES[name], encoding="utf-8"))
    assert n <= 600, f"{name} has {n} lines; split it by concern"


def test_no_private_names_imported_across_modules():
    bad = [f"{MODULES[m].relative_to(PKG.parent)}:{line} imports {t}.{n}"
           for m, p in MODULES.items() for t, names, line in _imports(m, p) for n in names
           if n.startswith("_") and not n.startswith("__")]
    assert not bad, "\n".join(bad)


def test_each_folder_has_a_docstring_saying_its_job():
    for folder in ("core", "analyses", "editing", "cli"):
        doc = ast.get_docstring(ast.parse((PKG / folder / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, f"interp/{folder}/__init__.py needs a docstring saying what the folder holds"


def test_every_result_follows_the_protocol():
    """Every Result subclass in the package: its own to_frame and plot, and ``out`` keyword-only on plot and every
    plot_* method (so ``res.plot("x.png")`` can never mean different things on different results)."""
    import importlib
    import inspect
    import pkgutil

    import interp
    from interp.core.results import Result

    for m in pkgutil.walk_packages(interp.__path__, "interp."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)

    classes = set(subclasses(Result))
    assert len(classes) >= 20
    for cls in (c for c in classes if not c.__subclasses__()):  # the concrete results (WeightEdit is a base)
        assert cls.to_frame is not Result.to_frame, cls
        assert cls.plot is not Result.plot, cls
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if name == "plot" or name.startswith("plot_"):
                out = inspect.signature(fn).parameters.get("out")
                assert out is not None and out.kind is inspect.Parameter.KEYWORD_ONLY, f"{cls.__name__}.{name}"


# ============================================================================================ one hook mechanism
# Registering a torch hook or replacing a module's forward changes what a forward computes; only the hook module
# does it, and each other place is named here with the reason it cannot go through HookPoints.
CHANGES_A_FORWARD = __import__("re").compile(
    r"\.register_(forward_pre_|forward_|full_backward_|full_backward_pre_|backward_|)hook\(|\.add_hook\(|"
    r"\.forward\s*=(?!=)|setattr\([^)]*['\"]forward['\"]")
FORWARD_EXCEPTIONS = {
    "interp.core.hooks": "the one hook mechanism (HookPoints, and recorded_calls' pre-hooks on blocks)",
    "interp.editing.matrices": "row_matrices: each row of a batch under its own down-projection weights (a hook "
                               "sees activations, not the weight a product uses); put back on every exit path",
}


def test_only_the_hook_module_changes_a_forward():
    bad = []
    for name, path in MODULES.items():
        if name in FORWARD_EXCEPTIONS:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if CHANGES_A_FORWARD.search(line.split("#")[0]):
                bad.append(f"{path.relative_to(PKG.parent)}:{i}: {line.strip()}")
    assert not bad, "torch hooks or forward replacements outside interp/core/hooks.py:\n" + "\n".join(bad)
    for name in FORWARD_EXCEPTIONS:  # each exception is still there and still needed
        assert CHANGES_A_FORWARD.search(MODULES[name].read_text(encoding="utf-8")), name


def test_core_holds_no_machinery_of_one_layer_above():
    """A core module that something above core imports has an importer outside editing: machinery only editing
    uses belongs in editing."""
    edges = _edges()
    for m in (m for m in MODULES if m.startswith("interp.core.")):
        users = {u for u, ts in edges.items() if m in ts and not u.startswith("interp.core")}
        assert not users or any(not u.startswith("interp.editing") for u in users), f"{m}: only {sorted(users)}"


def test_no_editor_is_told_apart_by_its_name():
    """The evaluation, the scale runs and the CLI look an editor up in the registry once; none compares names."""
    pattern = __import__("re").compile(r"""\beditor\s*(==|!=|in)\s*\(?["']""")
    bad = [f"{p.relative_to(PKG.parent)}:{i}" for p in MODULES.values()
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not bad, bad


def test_the_editing_face_stays_small():
    import interp

    assert len(interp.rome.__all__) <= 25 and len(interp.memit.__all__) <= 10
    assert len(interp.patching.__all__) <= 15 and len(interp.induction.__all__) <= 10
    assert len(interp.features.__all__) <= 16          # 16: promoted_tokens, which notebook 09 reads per feature
    for face in (interp.rome, interp.memit, interp.patching, interp.induction, interp.features):
        assert all(hasattr(face, n) for n in face.__all__)


# ============================================================================================ function size
MAX_LINES, MAX_PARAMS = 80, 10
# Public functions over the limits, each with the reason it stays so. Parameters count *args and **kwargs.
SIZE_EXCEPTIONS = {
    "scan": "the one corpus driver: every accumulator's corpus, batching, sharding and resume options",
    "activation_patching": "mirrors TransformerLens's patching call (clean, corrupted, metric, over, positions, "
                           "direction, ...)",
    "mlp_key_second_moment": "the statistic's corpus, shard, cache and checkpoint options, all recorded in its meta",
    "causal_trace": "the ROME paper's knobs (noise, samples, window, corruption kind) as keywords",
    "train_tuned_lens": "tuned-lens's training options, every one recorded in the lens's provenance",
    "tiny_transformers": "the architecture sizes of a test model as keywords",
    "tiny_moe_transformers": "the architecture sizes of a test model as keywords",
    "panel": "a plotting primitive: every figure option of a grid panel",
}


def _public_functions():
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs] + [x for x in (a.vararg, a.kwarg) if x]
                if params and params[0].arg in ("self", "cls"):
                    params = params[1:]
                yield name, node, len(params), node.end_lineno - node.lineno + 1


def test_public_functions_are_short_and_take_few_parameters():
    bad = [f"{m}.{node.name}: {lines} lines, {n} parameters" for m, node, n, lines in _public_functions()
           if (lines > MAX_LINES or n > MAX_PARAMS) and node.name not in SIZE_EXCEPTIONS]
    assert not bad, "take a settings dataclass or split the function:\n" + "\n".join(bad)
    still = {node.name for _, node, n, lines in _public_functions() if lines > MAX_LINES or n > MAX_PARAMS}
    assert set(SIZE_EXCEPTIONS) <= still, f"exceptions no longer needed: {set(SIZE_EXCEPTIONS) - still}"
