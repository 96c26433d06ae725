"""The docs say only what the code does: every file, command, session, option,
count and model they name is checked against the repository here. Fast: no
process group, no compile."""

from __future__ import annotations

import ast
import dataclasses
import glob
import importlib
import importlib.machinery
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/design.md", "docs/conformance.md", "benchmarks/README.md")
PACKAGES = ("bucketing", "conformance", "benchmarks", "tests")
README_MAX_LINES = 300

# Narrative that dates a document instead of describing the code. Matched case-insensitively.
DATED_NARRATIVE = (
    r"\bthis stop\b", r"\ba later stop\b", r"\bstop to stop\b", r"\ba slower day\b", r"\ba slow day\b",
    r"\btoday\b", r"\btoday's\b", r"\bearlier session\b", r"\blater session\b", r"\bthis session\b",
    r"\bquieter machine\b", r"\bbefore a bucket could\b", r"\bno longer\b", r"\brerun", r"unaligned tcache", r"\bagents?\b", r"\bissue #?\d+", r"\bpassed in [\d.]+ ?(s|min)",
    r"\bminutes of tests\b", r"\bfresh-clone run\b", r"\bsessions?\b",
)


def _text(doc: str) -> str:
    return (ROOT / doc).read_text()


def _all_docs() -> dict[str, str]:
    return {doc: _text(doc) for doc in DOCS}


def _commands(text: str) -> str:
    """The text with shell line continuations joined."""
    return re.sub(r"\\\n\s*", " ", text)


def _tables(text: str) -> list[list[list[str]]]:
    """Markdown tables: rows of cells, the header row first, the separator row dropped."""
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _headings(text: str) -> list[tuple[int, str]]:
    """(line index, heading line) of every Markdown heading outside fenced code."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            out.append((i, line))
    return out


def _section(text: str, heading: str) -> str:
    """The body of the section whose heading line is `heading`, up to the next heading of its level or above."""
    level = len(heading.split(" ")[0])
    lines = text.splitlines()
    assert heading in lines, f"no section {heading!r}"
    start = lines.index(heading)
    end = next((i for i, h in _headings(text) if i > start and len(h.split(" ")[0]) <= level), len(lines))
    return "\n".join(lines[start + 1:end])


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# -- the documents and their shape ------------------------------------------------------------

def test_every_doc_exists():
    missing = [doc for doc in DOCS if not (ROOT / doc).is_file()]
    assert not missing, f"missing docs: {missing}"


def test_readme_is_short():
    lines = _text("README.md").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; keep it to {README_MAX_LINES} (details go to docs/)"


def test_readme_keeps_the_two_commands():
    readme = _text("README.md")
    for line in ("python -m pip install nox && nox -s demo", "python -m pip install nox && nox -s tests"):
        assert line in readme, f"README.md lost the command line {line!r}"


def test_readme_links_the_docs():
    readme = _text("README.md")
    for doc in DOCS[1:]:
        assert f"]({doc}" in readme, f"README.md does not link {doc}"


@pytest.mark.parametrize("doc", DOCS)
def test_no_dated_narrative(doc):
    text = _text(doc)
    found = [m.group(0) for pattern in DATED_NARRATIVE for m in re.finditer(pattern, text, re.I)]
    assert not found, f"{doc} dates itself or tells history: {found} (history belongs in git log)"


# -- files, links, commands -------------------------------------------------------------------

_PATH = re.compile(r"(?<![\w./-])((?:%s|docs)/[\w./*-]*)" % "|".join(PACKAGES))


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_named_exists(doc):
    missing = []
    for path in set(_PATH.findall(_text(doc))):
        path = path.rstrip(".,:;")
        if not glob.glob(str(ROOT / path)):
            missing.append(path)
    assert not missing, f"{doc} names paths that do not exist: {sorted(missing)}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_resolves(doc):
    base = (ROOT / doc).parent
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _text(doc)):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (base / path).resolve() if path else ROOT / doc
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            headings = [_slug(h.split(" ", 1)[1]) for _, h in _headings(file.read_text())]
            if anchor not in headings:
                broken.append(target)
    assert not broken, f"{doc} has broken links: {broken}"


# Files the docs name that the repository does not hold: the reader's own, and outputs.
NOT_IN_REPO = {"test_my_pass.py", "FILE.py", "bench.md"}


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_named_alone_exists(doc):
    """`test_kernels.py`, `members_64_gpu.check`: a file named without its folder is somewhere in the repo."""
    names = set(re.findall(r"`([\w-]+\.(?:py|check|md))`", _text(doc))) - NOT_IN_REPO
    files = {p.name for pkg in (*PACKAGES, "docs") for p in (ROOT / pkg).rglob("*")} | {p.name for p in ROOT.iterdir()}
    missing = sorted(names - files)
    assert not missing, f"{doc} names files that do not exist: {missing}"


def _nox_sessions() -> dict[str, dict[str, list]]:
    """Session name -> {parameter: values} from noxfile.py's decorators."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
    sessions = {}
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        decorators = [ast.unparse(d) for d in fn.decorator_list]
        if not any(d.startswith("nox.session") for d in decorators):
            continue
        params = {}
        for d in fn.decorator_list:
            if isinstance(d, ast.Call) and ast.unparse(d.func) == "nox.parametrize":
                values = d.args[1]
                if isinstance(values, ast.Name):
                    values = constants[values.id]
                params[ast.literal_eval(d.args[0])] = ast.literal_eval(values)
        sessions[fn.name] = params
    return sessions


@pytest.mark.parametrize("doc", DOCS)
def test_every_nox_session_exists(doc):
    sessions = _nox_sessions()
    wrong = []
    for name in re.findall(r"nox -s (\"[^\"]+\"|[\w-]+)", _text(doc)):
        call = re.fullmatch(r"\"(\w+)\((\w+)='([^']*)'\)\"", name)
        if call:
            session, param, value = call.groups()
            if value not in sessions.get(session, {}).get(param, []):
                wrong.append(name)
        elif name not in sessions:
            wrong.append(name)
    assert not wrong, f"{doc} names nox sessions noxfile.py does not have: {wrong} (sessions: {sorted(sessions)})"


def _module_sources(module: str) -> list[Path] | None:
    """The source files of a repository module run with -m (a package's files for its __main__), or None."""
    path = ROOT.joinpath(*module.split("."))
    if path.with_suffix(".py").is_file():
        return [path.with_suffix(".py")]
    if (path / "__main__.py").is_file():
        return sorted(path.glob("*.py"))
    return None


# A command: `python -m MODULE ...` or `torchrun ... -m MODULE ...`, up to the end of its line,
# code span or comment.
_RUN_MODULE = re.compile(r"(?:python3?|torchrun\b[^`\n#]*?)\s+-m\s+([A-Za-z_][\w.]*)([^`\n#]*)")


@pytest.mark.parametrize("doc", DOCS)
def test_every_python_m_module_and_flag_exists(doc):
    problems = []
    for module, args in _RUN_MODULE.findall(_commands(_text(doc))):
        top = module.split(".")[0]
        if top in PACKAGES:
            sources = _module_sources(module)
            if sources is None:
                problems.append(f"python -m {module}: no such module in the repository")
                continue
            text = "\n".join(p.read_text() for p in sources)
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", args):
                if f'"{flag}"' not in text and f"'{flag}'" not in text:
                    problems.append(f"python -m {module}: no option {flag}")
        # PathFinder: a plain sys.path lookup (importlib.util.find_spec("pip") would let
        # setuptools' distutils hack rearrange later imports).
        elif importlib.machinery.PathFinder.find_spec(top) is None:
            problems.append(f"python -m {module}: not importable")
    assert not problems, f"{doc}: " + "; ".join(problems)


# pytest's own options the docs use; the rest must be the suite's plugin's.
PYTEST_OPTIONS = {"--pyargs", "--junitxml", "--durations"}


@pytest.mark.parametrize("doc", DOCS)
def test_every_pytest_option_exists(doc):
    plugin = (ROOT / "conformance" / "plugin.py").read_text()
    unknown = []
    for args in re.findall(r"\bpytest\b([^`\n#]*)", _commands(_text(doc))):
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", args):
            if flag not in PYTEST_OPTIONS and f'"{flag}"' not in plugin:
                unknown.append(flag)
    assert not unknown, f"{doc} passes pytest options nobody defines: {sorted(set(unknown))}"


@pytest.mark.parametrize("doc", DOCS)
def test_python_examples_import_what_exists(doc):
    """Every import of this repository's packages in a Python example resolves, names included;
    torch modules are looked up without importing them (some change global state on import)."""
    problems = []
    for block in _python_blocks(_text(doc)):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Import):
                imports = [(alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                imports = [(node.module, [alias.name for alias in node.names])]
            else:
                continue
            for module, names in imports:
                top = module.split(".")[0]
                if top == "torch":
                    if importlib.util.find_spec(module) is None:
                        problems.append(f"{module}: no such module")
                elif top in PACKAGES:
                    try:
                        loaded = importlib.import_module(module)
                    except ImportError as exc:
                        problems.append(f"{module}: {exc}")
                        continue
                    problems += [f"from {module} import {name}: no such name" for name in names
                                 if not hasattr(loaded, name)]
    assert not problems, f"{doc}: " + "; ".join(problems)


def test_design_module_map_lists_every_module_of_the_pass():
    blocks = [b for b in re.findall(r"```\n(.*?)```", _text("docs/design.md"), re.S)
              if re.search(r"^\s*core\.py\s", b, re.M)]
    assert len(blocks) == 1, "docs/design.md should hold one module map (a code block listing core.py ...)"
    mapped = re.findall(r"^\s*([\w/]+\.py)\s", blocks[0], re.M)
    modules = sorted(p.relative_to(ROOT / "bucketing").as_posix() for p in (ROOT / "bucketing").rglob("*.py"))
    assert len(mapped) == len(set(mapped)), f"module map names a module twice: {mapped}"
    assert sorted(mapped) == modules, (
        f"docs/design.md module map: missing {sorted(set(modules) - set(mapped))}, "
        f"gone {sorted(set(mapped) - set(modules))}"
    )


# -- the README's options table ---------------------------------------------------------------

def _options_table() -> list[list[str]]:
    tables = [t for t in _tables(_section(_text("README.md"), "## Options")) if t[0][:2] == ["option", "default"]]
    assert len(tables) == 1, "README.md's Options section should hold one table headed | option | default | meaning |"
    return tables[0][1:]


def test_options_table_lists_every_option_once():
    from bucketing.options import BucketingOptions

    documented = [re.fullmatch(r"`(\w+)`", row[0]).group(1) for row in _options_table()]
    fields = [f.name for f in dataclasses.fields(BucketingOptions)]
    assert len(documented) == len(set(documented)), f"options documented twice: {documented}"
    assert set(documented) == set(fields), (
        f"README options table: missing {sorted(set(fields) - set(documented))}, "
        f"not options {sorted(set(documented) - set(fields))}"
    )


def test_options_table_defaults_are_the_code_defaults(monkeypatch):
    from bucketing.options import BucketingOptions

    monkeypatch.delenv("BUCKETING_VERIFY_PLAN", raising=False)  # it changes one default
    fields = {f.name: f for f in dataclasses.fields(BucketingOptions)}
    wrong = []
    for row in _options_table():
        name, default = row[0].strip("`"), re.fullmatch(r"`(.*)`", row[1])
        if name not in fields:
            continue  # test_options_table_lists_every_option_once says so
        field = fields[name]
        actual = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        if default is None or ast.literal_eval(default.group(1)) != actual:
            wrong.append(f"{name}: README {row[1]}, code {actual!r}")
    assert not wrong, "README options table defaults: " + "; ".join(wrong)


# -- counts the docs give ---------------------------------------------------------------------

def _catalog_counts() -> dict[int, int]:
    from conformance import catalog

    counts: dict[int, int] = {}
    for case_id in catalog.all_case_ids():
        world = catalog.get(case_id)[1]
        counts[world] = counts.get(world, 0) + 1
    return counts


def _inductor_subset() -> int:
    from conformance.multiproc.test_inductor import INDUCTOR_CASES

    return len(INDUCTOR_CASES)


def _default_session_models() -> set[tuple[str, int]]:
    """(model, world size) pairs `nox -s tests` trains: the model tests not marked slow."""
    from conformance.multiproc.test_models import _model_params

    return {tuple(p.values) for p in _model_params() if not any(m.name == "slow" for m in p.marks)}


def _per_pass_table() -> list[list[str]]:
    tables = [t for t in _tables(_text("README.md")) if t[0][0] == "pass"]
    assert len(tables) == 1, "README.md should hold one per-pass results table (first column: pass)"
    return tables[0]


def _column_count(header: str) -> int | None:
    """The count a results column's header promises, computed from the code."""
    fx = re.fullmatch(r"FX catalog, (\d+) ranks \((\d+)\)", header)
    if fx:
        return _catalog_counts().get(int(fx.group(1)), 0)
    if re.fullmatch(r"Inductor subset \(\d+\)", header):
        return _inductor_subset()
    if re.fullmatch(r"models \(\d+\)", header):
        return len(_default_session_models())
    return None


def test_per_pass_table_headers_give_the_code_counts():
    header = _per_pass_table()[0]
    checked = 0
    for cell in header[1:]:
        stated = re.search(r"\((\d+)\)$", cell)
        assert stated, f"per-pass results column {cell!r} should give its check count in parentheses"
        expected = _column_count(cell)
        assert expected is not None, f"per-pass results column {cell!r}: no rule to count it"
        assert int(stated.group(1)) == expected, f"per-pass results column {cell!r}: the code has {expected}"
        checked += 1
    assert checked >= 3


def test_per_pass_table_rows_add_up_to_the_counts():
    """Each cell (`N passed, M xfail, K skipped, F failed`) accounts for every check of its column."""
    table = _per_pass_table()
    counts = [int(re.search(r"\((\d+)\)$", cell).group(1)) for cell in table[0][1:]]
    wrong = []
    for row in table[1:]:
        for cell, count in zip(row[1:], counts):
            parts = re.findall(r"(\d+) (passed|xfail|skipped|failed)", cell)
            total = sum(int(n) for n, _ in parts)
            if not parts or total != count:
                wrong.append(f"{row[0]}: {cell!r} adds up to {total}, not {count}")
    assert not wrong, "per-pass results: " + "; ".join(wrong)


def test_passes_table_names_the_builtin_adapters():
    from conformance.adapters import BUILTIN

    tables = [t for t in _tables(_text("docs/conformance.md")) if t[0] == ["name", "pass"]]
    assert len(tables) == 1, "docs/conformance.md should list the built-in passes in one | name | pass | table"
    named = {row[0].strip("`") for row in tables[0][1:]}
    assert named == set(BUILTIN), f"built-in passes: docs {sorted(named)}, code {sorted(BUILTIN)}"


def test_case_option_vocabulary_is_the_catalogs():
    from conformance.catalog import OPTIONS

    text = _text("docs/conformance.md").replace("\n", " ")
    listed = re.search(r"`conformance\.catalog\.OPTIONS`\s*\(([^)]*)\)", text)
    assert listed, "docs/conformance.md should list conformance.catalog.OPTIONS"
    assert set(re.findall(r"`(\w+)`", listed.group(1))) == set(OPTIONS)


def test_default_locality_window_is_the_codes():
    from bucketing.plan.policy import default_locality_flops

    text = _text("docs/design.md").replace("\n", " ")
    stated = re.search(r"\(([\d.e]+) FLOPs on CPU, ([\d.e]+) on GPU\)", text)
    assert stated, "docs/design.md should give the default locality window on CPU and GPU"
    assert (float(stated.group(1)), float(stated.group(2))) == (default_locality_flops("cpu"),
                                                                default_locality_flops("cuda"))


# -- the model family -------------------------------------------------------------------------

def _collectives(cell: str) -> tuple[int, ...] | None:
    return None if cell == "-" else tuple(int(n) for n in cell.split(" + "))


def test_model_family_table_matches_the_specs():
    from conformance.models.clients import CLIENTS
    from conformance.models.family import MODELS

    specs = {**MODELS, **CLIENTS}
    tables = [t for t in _tables(_section(_text("docs/conformance.md"), "## The model family"))
              if t[0][0] == "model"]
    assert len(tables) == 1, "docs/conformance.md: one model-family table expected"
    header, rows = tables[0][0], tables[0][1:]
    col = {name: i for i, name in enumerate(header)}
    named = [row[0].strip("`") for row in rows]
    assert sorted(named) == sorted(specs), (
        f"model family table: missing {sorted(set(specs) - set(named))}, unknown {sorted(set(named) - set(specs))}"
    )
    in_tests = _default_session_models()
    wrong = []
    for row in rows:
        name = row[0].strip("`")
        spec = specs[name]
        ranks = tuple(int(w) for w in row[col["ranks"]].split(", "))
        if ranks != spec.world_sizes:
            wrong.append(f"{name}: ranks {ranks}, spec {spec.world_sizes}")
        cell = row[col["in `nox -s tests`"]]
        stated = set() if cell == "-" else {(name, int(w)) for w in cell.split(", ")}
        actual = {(m, w) for m, w in in_tests if m == name}
        if stated != actual:
            wrong.append(f"{name}: in nox -s tests {sorted(w for _, w in stated)}, code {sorted(w for _, w in actual)}")
        for variant in ("unbucketed", "default", "merge_all", "module_buckets"):
            heading = next(h for h in header if h.strip("`") == variant)
            documented = _collectives(row[col[heading]])
            if documented != spec.expect.get(variant):
                wrong.append(f"{name} [{variant}]: {documented}, spec {spec.expect.get(variant)}")
    assert not wrong, "model family table: " + "; ".join(wrong)


# -- versions ---------------------------------------------------------------------------------

def test_supported_versions_are_the_tested_ones():
    section = _section(_text("README.md"), "## Supported versions")
    releases = _nox_sessions()["tests"]["torch"]
    missing = [r for r in releases if f"{r.rsplit('.', 1)[0]}" not in section]
    assert not missing, f"README's supported versions leave out tested torch releases {missing}"
    stated = set(re.findall(r"\b2\.\d+\b", section))
    untested = stated - {r.rsplit(".", 1)[0] for r in releases}
    assert not untested, f"README's supported versions name torch releases nox does not test: {sorted(untested)}"
    import bucketing

    assert set(bucketing.TESTED_TORCH_RELEASES) == {r.rsplit(".", 1)[0] for r in releases}, (
        "bucketing.TESTED_TORCH_RELEASES and noxfile.py's releases differ"
    )
    python = re.search(r'requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"Python {python}+" in section, f"README's supported versions should say Python {python}+"


# -- benchmarks -------------------------------------------------------------------------------

def test_every_benchmark_table_has_its_command_and_date():
    text = _text("benchmarks/README.md")
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert sections, "benchmarks/README.md has no sections"
    missing = []
    for body in sections:
        title = body.splitlines()[0]
        tables = _tables(body)
        if len(tables) != 1:
            missing.append(f"{title}: {len(tables)} tables, one expected")
        if not re.search(r"`python (-m benchmarks\.|-c \"from benchmarks)", body):
            missing.append(f"{title}: no command")
        if not re.search(r"\b20\d\d-\d\d-\d\d\b", body):
            missing.append(f"{title}: no date")
    assert not missing, "benchmarks/README.md: " + "; ".join(missing)
    assert re.search(r"2-core x86_64", text) and "torch 2.13.0" in text, "benchmarks/README.md: name the machine"
