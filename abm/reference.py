"""The scenario-field reference and the JSON Schema, generated from the pydantic models.

``markdown()`` is ``docs/scenario-reference.md``: one section for the fields every family shares
(``abm.config``: ``name``, ``seed``, ``family``, ``objective``, ``episodes``, ``policy``,
``outputs``), one per built-in family (its top-level keys, then a table per block: population,
arrivals, dynamics, observation, bank, metrics, ...; nested models as subsections) and one per
built-in policy (its ``Params``, as ``abm policies NAME`` shows them). Each table row: field,
type, default, allowed range or choices, description (the ``Field`` descriptions). Defaults are
each family's effective ones (a family's own episode defaults included).

``json_schema()`` is ``docs/scenario.schema.json``: the JSON Schema of the scenario union of the
built-in families (pydantic's), with what the schema alone cannot say added for editors: a file
without ``family`` is the default family's (``abm.config.validate_scenario_dict``), and a
family's own episode defaults.

Only built-in families and policies are described (plugins loaded in this process, or installed
entry points, are not), so the output depends on the code alone. Describing the policies imports
every policy module (torch for the learning lenders: the ``[rl]`` extra), nothing is built.

``python -m abm.reference`` rewrites both files; ``--check`` exits 1 with one line when either
differs from what the code generates now (the test suite runs the same comparison).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter
from pydantic_core import to_jsonable_python

from abm import config, objectives, registry
from abm.errors import UserError

DOCS = Path(__file__).resolve().parents[1] / "docs"
MARKDOWN_FILE = "scenario-reference.md"
SCHEMA_FILE = "scenario.schema.json"
COMMAND = "python -m abm.reference"
LONG_DEFAULT = 60  # characters: a longer default is shown below its table

# allowed values that live in code rather than in a field's annotation
_ALLOWED = {
    (config.ScenarioBase, "objective"): f"`{objectives.FORMS}`",
    (config.PolicyConfig, "name"): "a built-in policy ([Policy parameters](#policy-parameters)) or a plugin "
                                   "`module:Class`",
}


# -- what is described ---------------------------------------------------------------------------
def families() -> list[str]:
    """The built-in families (``FAMILY_NAMES`` holds them only; plugins loaded since are not)."""
    return list(tuple.__iter__(registry.FAMILY_NAMES))


def scenario_class(family: str) -> type[BaseModel]:
    return registry.family_module(family).Scenario


def default_family() -> str:
    """The family of a scenario file that names none."""
    return type(config.validate_scenario_dict({}, "(defaults)")).model_fields["family"].default


def defaults(family: str) -> BaseModel:
    """The scenario of a file that names only its family: every effective default."""
    return config.validate_scenario_dict({"family": family}, f"(defaults of {family})")


def scenario_type() -> Any:
    """The pydantic type of a scenario of a built-in family, discriminated by ``family``."""
    classes = tuple(scenario_class(f) for f in families())
    return classes[0] if len(classes) == 1 else Annotated[Union[classes], Field(discriminator="family")]


# -- the JSON Schema -----------------------------------------------------------------------------
def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a scenario file."""
    schema = TypeAdapter(scenario_type()).json_schema()
    mapping = schema.get("discriminator", {}).get("mapping", {})  # family -> "#/$defs/<its model>"
    defs = schema.get("$defs", {})
    default = default_family()
    base_episodes = config.EpisodesConfig().model_dump(mode="json")
    for family in families():
        ref = mapping.get(family)
        node = defs[ref.rsplit("/", 1)[1]] if ref else schema
        if family != default:  # a file without `family` is the default family's, never this one
            node["required"] = sorted({*node.get("required", ()), "family"})
        episodes = defaults(family).episodes.model_dump(mode="json")
        if episodes != base_episodes and "episodes" in node.get("properties", {}):
            shown = ", ".join(f"{k} {_value(v)}" for k, v in episodes.items())
            node["properties"]["episodes"] = {**node["properties"]["episodes"], "default": episodes,
                                              "description": f"Episodes; this family's defaults: {shown}."}
    policy = defs.get("PolicyConfig", {}).get("properties", {}).get("name")
    if policy is not None:
        policy["examples"] = sorted(registry.POLICIES)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "abm scenario",
        "description": (f"A scenario file of abm (generated by `{COMMAND}` from the pydantic models; "
                        f"docs/{MARKDOWN_FILE} is the same as a table). `abm validate` also checks what spans "
                        f"fields and each policy's parameters, and refuses numbers written as text."),
        **schema,
    }


def json_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


# -- rendering a value, a type, a constraint -----------------------------------------------------
def _number(x: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, float):
        short = f"{x:g}"
        short = short if float(short) == x else repr(x)
        mantissa, e, exponent = short.partition("e")  # 1e+06 -> 1e6, 5e-05 -> 5e-5 (as YAML 1.2 reads them)
        return f"{mantissa}e{int(exponent)}" if e else short
    return str(x)


def _value(value: Any) -> str:
    """A default as a scenario file would write it (JSON flow style; text bare)."""
    value = to_jsonable_python(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(value)
    return json.dumps(value, ensure_ascii=False)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _args(annotation: Any) -> tuple[Any, ...]:
    return typing.get_args(annotation)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """``Annotated[X, ...]`` -> (X, its constraints)."""
    if typing.get_origin(annotation) is Annotated:
        base, *meta = _args(annotation)
        found = []
        for m in meta:
            found.extend(getattr(m, "metadata", None) or [m])
        return base, found
    return annotation, []


def _type(annotation: Any, link) -> str:
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if annotation is type(None):
        return "null"
    if _is_union(annotation):
        parts = [_type(a, link) for a in _args(annotation) if a is not type(None)]
        if type(None) in _args(annotation):
            parts.append("null")
        return " or ".join(dict.fromkeys(parts))
    if origin is Literal:
        kinds = {type(a) for a in _args(annotation)}
        return {str: "string", int: "int", bool: "bool", float: "number"}.get(kinds.pop(), "choice") \
            if len(kinds) == 1 else "choice"
    if origin in (list, set, frozenset) or (origin is tuple and (len(_args(annotation)) == 2
                                                                 and _args(annotation)[1] is Ellipsis)):
        return f"list of {_type(_args(annotation)[0], link)}"
    if origin is tuple:
        return "[" + ", ".join(_type(a, link) for a in _args(annotation)) + "]"
    if origin is dict:
        key, val = _args(annotation)
        return f"mapping of {_type(key, link)} to {_type(val, link)}"
    if _is_model(annotation):
        return link(annotation)
    return {bool: "bool", int: "int", float: "number", str: "string", Any: "any"}.get(
        annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(meta: list[Any]) -> list[str]:
    """``[Ge(0), Le(1)]`` -> ``['[0, 1]']``; lengths and patterns too."""
    got = {}
    for m in meta:
        for attr in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern", "multiple_of"):
            if getattr(m, attr, None) is not None:
                got[attr] = getattr(m, attr)
    out = []
    low = ("[", got["ge"]) if "ge" in got else ("(", got["gt"]) if "gt" in got else None
    high = ("]", got["le"]) if "le" in got else (")", got["lt"]) if "lt" in got else None
    if low and high:
        out.append(f"{low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}")
    elif low:
        out.append(f"{'>=' if low[0] == '[' else '>'} {_number(low[1])}")
    elif high:
        out.append(f"{'<=' if high[0] == ']' else '<'} {_number(high[1])}")
    lo, hi = got.get("min_length"), got.get("max_length")
    if lo is not None and hi is not None:
        out.append(f"length {lo}" if lo == hi else f"length {lo}..{hi}")
    elif lo is not None:
        out.append(f"length >= {lo}")
    elif hi is not None:
        out.append(f"length <= {hi}")
    if "multiple_of" in got:
        out.append(f"multiple of {_number(got['multiple_of'])}")
    if "pattern" in got:
        out.append(f"pattern {_code(str(got['pattern']))}")
    return out


def _allowed(annotation: Any, meta: list[Any]) -> list[str]:
    """Choices and ranges of a field: its own constraints, then those of what it holds."""
    annotation, inner = _strip(annotation)
    out = _bounds(meta + inner)
    if _is_union(annotation):
        for a in _args(annotation):
            if a is not type(None):
                out += _allowed(a, [])
        return list(dict.fromkeys(out))
    origin = typing.get_origin(annotation)
    if origin is Literal:
        out.append(", ".join(_code(_value(a)) for a in _args(annotation)))
    elif origin in (list, set, frozenset, tuple):
        items = [a for a in _args(annotation) if a is not Ellipsis]
        if len(set(map(str, items))) == 1:
            each = _allowed(items[0], [])
            if each:
                one_of = typing.get_origin(_strip(items[0])[0]) is Literal
                out.append(("each one of " if one_of else "each ") + "; ".join(each))
        else:
            for k, a in enumerate(items):
                each = _allowed(a, [])
                if each:
                    out.append(f"item {k + 1}: " + "; ".join(each))
    return out


def _models_in(annotation: Any, suffix: str = "") -> list[tuple[type[BaseModel], str]]:
    """The models a field holds, with the path suffix of one of them: ``[]`` (a list's entry)."""
    annotation, _ = _strip(annotation)
    if _is_model(annotation):
        return [(annotation, suffix)]
    origin = typing.get_origin(annotation)
    found = []
    if _is_union(annotation):
        for a in _args(annotation):
            found += _models_in(a, suffix)
    elif origin in (list, set, frozenset, tuple):
        for a in _args(annotation):
            if a is not Ellipsis:
                found += _models_in(a, suffix + "[]")
    elif origin is dict:
        found += _models_in(_args(annotation)[1], suffix + ".<key>")
    return list(dict.fromkeys(found))


def _doc(obj: Any) -> str:
    """An object's own docstring (not inherited), as one paragraph per blank-line break."""
    text = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    return inspect.cleandoc(text) if text else ""


def _first_paragraph(text: str) -> str:
    return " ".join(text.split("\n\n")[0].split())


# -- the Markdown --------------------------------------------------------------------------------
class _Page:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def heading(self, level: int, anchor: str, text: str) -> None:
        self.add(f'<a id="{anchor}"></a>', "", f"{'#' * min(level, 6)} {text}", "")

    def text(self) -> str:
        while self.lines and not self.lines[-1]:
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


def _anchor(*parts: str) -> str:
    raw = "-".join(parts).lower()
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in raw).strip("-")


def _table(page: _Page, model: type[BaseModel], values: BaseModel | None, anchor: str, path: str,
           fields: list[str] | None = None, first: tuple[str, ...] = ()) -> list[tuple]:
    """One table row per field of ``model`` (``values``: the effective defaults, when known;
    ``first``: rows written before them); returns the nested models to describe as subsections
    (model, path, defaults, anchor, the field's description)."""
    rows, later, subsections = list(first), [], []
    names = fields if fields is not None else list(model.model_fields)
    for name in names:
        info = model.model_fields[name]
        key = info.alias or name
        held = _models_in(info.annotation)

        def link(cls: type, _held=held, _key=key) -> str:
            suffix = next((s for c, s in _held if c is cls), "")
            target = _anchor(anchor, _key + suffix.replace("[]", "-entry"))
            label = "section" if not suffix else "entry"
            return f"[{label}](#{target})"

        type_text = _type(info.annotation, link)
        if info.is_required():
            default = "required"
        else:
            value = getattr(values, name) if values is not None else info.get_default(call_default_factory=True)
            if isinstance(value, BaseModel):
                default = "(below)"
            else:
                shown = _value(value)
                if len(shown) > LONG_DEFAULT:
                    default = "(below)"
                    later.append(f"- `{key}`: {_code(shown)}")
                else:
                    default = _code(shown if shown != "" else '""')
        allowed = list(_allowed(info.annotation, list(info.metadata)))
        for owner in model.__mro__:
            if (owner, name) in _ALLOWED:
                allowed.append(_ALLOWED[owner, name])
                break
        rows.append(f"| `{key}` | {_cell(type_text)} | {_cell(default)} | {_cell('; '.join(allowed))} | "
                    f"{_cell(info.description or '')} |")
        for cls, suffix in held:
            value = getattr(values, name, None) if values is not None else None
            sub = value if isinstance(value, cls) and not suffix else None
            subsections.append((cls, f"{path}{key}{suffix}", sub, _anchor(anchor, key + suffix.replace("[]", "-entry")),
                                info.description or ""))
    page.add("| field | type | default | allowed | description |", "|---|---|---|---|---|", *rows, "")
    if later:
        page.add("Longer defaults:", "", *later, "")
    return subsections


def _section(page: _Page, level: int, model: type[BaseModel], values: BaseModel | None, path: str, anchor: str,
             about: str = "", seen: tuple = ()) -> None:
    """A block's heading, its documentation, its table, then its nested models."""
    entry = path.endswith("[]")
    page.heading(level, anchor, f"`{path}`" + (" (each entry)" if entry else ""))
    for text in (about, _doc(model)):
        if text:
            page.add(_cell(text), "")
    if model in seen:  # a model that holds itself: described above
        page.add(f"As `{seen[-1]}` above.", "")
        return
    for cls, sub_path, sub_values, sub_anchor, sub_about in _table(page, model, values, anchor, f"{path}."):
        _section(page, level + 1, cls, sub_values, sub_path, sub_anchor, sub_about, (*seen, model))


def _intro(page: _Page) -> None:
    page.add(
        "# Scenario reference",
        "",
        f"Every field of a scenario file, generated from the pydantic models that validate it (`abm/config.py`, "
        f"each family's `Scenario` in `abm/families/`, each policy's `Params`). Do not edit it by hand: "
        f"`{COMMAND}` regenerates it and [`{SCHEMA_FILE}`]({SCHEMA_FILE}), and `{COMMAND} --check` (the "
        f"test suite runs it) fails while either is stale.",
        "",
        "Every key is optional (the default is shown) unless marked required; an unknown key is an error; numbers "
        "and flags are written as numbers and `true`/`false` (`\"7\"` is not 7). `abm validate FILE` checks a file, "
        "including what spans fields (a Hawkes process that explodes, a graph that does not fit the population) "
        "and whether the policy applies to the family; `--set dotted.path=value` overrides any field. A range "
        "`[a, b]` includes its ends, `(a, b]` excludes a.",
        "",
        f"**In an editor.** [`{SCHEMA_FILE}`]({SCHEMA_FILE}) is the JSON Schema of a scenario file (every "
        f"built-in family). With a YAML language server (VS Code's YAML extension, Neovim, JetBrains), a first "
        f"line `# yaml-language-server: $schema=PATH/TO/docs/{SCHEMA_FILE}` gives completion, these "
        f"descriptions on hover and errors as you type; or map `*.yaml` to it in the editor's `yaml.schemas` "
        f"setting.",
        "",
    )


def markdown() -> str:
    """``docs/scenario-reference.md``."""
    page = _Page()
    _intro(page)
    fams = families()
    base = config.ScenarioBase
    common = list(base.model_fields)
    page.add("Contents: [Every family](#every-family) · "
             + " · ".join(f"[{f}](#{_anchor('family', f)})" for f in fams)
             + " · [Policy parameters](#policy-parameters)", "")

    # fields every family shares
    page.heading(2, "every-family", "Every family")
    page.add(f"The top level of every scenario file. `family` selects the rest (default `{default_family()}`); "
             f"a plugin family is a module path `package.module` (docs/guide.md).", "")
    page.add("| family | what it simulates | provides to policies |", "|---|---|---|")
    for f in fams:
        about = _first_paragraph(_doc(registry.family_module(f)))
        caps = ", ".join(f"`{c}`" for c in sorted(scenario_class(f).capabilities))
        page.add(f"| [`{f}`](#{_anchor('family', f)}) | {_cell(about)} | {caps} |")
    page.add("")
    family_row = (f"| `family` | string | `{default_family()}` | " + ", ".join(f"`{f}`" for f in fams)
                  + ", or a plugin `package.module` | The scenario family: how the population is generated and what "
                    "a decision does (its blocks: below). |")
    subsections = _table(page, base, None, "", "", [n for n in common if n != "family"], (family_row,))
    for cls, path, values, anchor, about in subsections:
        _section(page, 3, cls, values, path, anchor, about)
        if cls is config.PolicyConfig:
            page.add("The policy's parameters are flat keys beside `name` (`policy: {name: random, p: 0.3}`); "
                     "each policy's are listed under [Policy parameters](#policy-parameters).", "")
        if cls is config.EpisodesConfig:
            page.add("The one-applicant-per-step families have their own episode defaults (in their "
                     "sections below).", "")

    # each family's own blocks
    base_episodes = config.EpisodesConfig().model_dump(mode="json")
    for f in fams:
        cls, values = scenario_class(f), defaults(f)
        anchor = _anchor("family", f)
        page.heading(2, anchor, f"Family `{f}`")
        module_doc = _doc(registry.family_module(f))
        if module_doc:
            page.add(_cell(_first_paragraph(module_doc)), "")
        episodes = values.episodes.model_dump(mode="json")
        if episodes != base_episodes:
            shown = ", ".join(f"`{k}` {_code(_value(v))}" for k, v in episodes.items())
            page.add(f"Episode defaults in this family: {shown} ([episodes](#episodes)).", "")
        own = [n for n in cls.model_fields if n not in common or cls.model_fields[n].annotation
               is not base.model_fields[n].annotation]
        page.add(f"Top-level keys of this family (besides [every family's](#every-family)):", "")
        for sub_cls, path, sub_values, sub_anchor, about in _table(page, cls, values, anchor, "", own):
            _section(page, 3, sub_cls, sub_values, path, sub_anchor, about)

    _policies(page)
    return page.text()


def _policies(page: _Page) -> None:
    page.heading(2, "policy-parameters", "Policy parameters")
    page.add("Each built-in policy's parameters (its `Params` model): flat keys beside `policy.name`, checked "
             "whenever a scenario naming the policy is validated. `abm policies NAME` shows the same for any "
             "policy, a plugin included.", "")
    page.add("| policy | what it is | applies to |", "|---|---|---|")
    names = sorted(registry.POLICIES)
    classes = {n: registry.get(n) for n in names}
    for n in names:
        fams = [f for f, caps in registry.FAMILY_CAPABILITIES.items() if set(classes[n].requires) <= caps]
        page.add(f"| [`{n}`](#{_anchor('policy', n)}) | {_cell(_first_paragraph(_doc(classes[n])))} | "
                 f"{', '.join(f'`{f}`' for f in fams) or 'none'} |")
    page.add("")
    for n in names:
        cls = classes[n]
        anchor = _anchor("policy", n)
        page.heading(3, anchor, f"`{n}`")
        doc = _first_paragraph(_doc(cls))
        needs = ", ".join(f"`{r}`" for r in sorted(cls.requires)) or "nothing"
        page.add(*( [_cell(doc), ""] if doc else []), f"`{registry.POLICIES[n]}`; needs {needs}.", "")
        if not cls.Params.model_fields:
            page.add("No parameters.", "")
            continue
        for sub_cls, path, values, sub_anchor, about in _table(page, cls.Params, None, anchor, "policy."):
            _section(page, 4, sub_cls, values, path, sub_anchor, about)


# -- the command ---------------------------------------------------------------------------------
def generated() -> dict[str, str]:
    """File name -> the text the code generates now."""
    return {MARKDOWN_FILE: markdown(), SCHEMA_FILE: json_text()}


def stale(folder: Path = DOCS) -> list[str]:
    """The generated files in ``folder`` that are missing or differ from what the code generates."""
    out = []
    for name, text in generated().items():
        path = Path(folder) / name
        try:
            same = path.read_text(encoding="utf-8") == text
        except OSError:
            same = False
        if not same:
            out.append(name)
    return out


def write(folder: Path = DOCS) -> list[Path]:
    written = []
    for name, text in generated().items():
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 if the files are stale (write nothing).")
    parser.add_argument("--dir", type=Path, default=DOCS, help="The folder of the two files (default: docs/).")
    args = parser.parse_args(argv)
    try:
        if args.check:
            bad = stale(args.dir)
            if bad:
                print(f"error: {', '.join(str(args.dir / b) for b in bad)} out of date with the scenario models: "
                      f"run `{COMMAND}`", file=sys.stderr)
                return 1
            print(f"{args.dir / MARKDOWN_FILE} and {args.dir / SCHEMA_FILE} are up to date")
            return 0
        for path in write(args.dir):
            print(f"wrote {path}")
        return 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
