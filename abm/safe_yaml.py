"""One YAML loader for every file and ``--set`` value ``abm`` reads: data only, bounded, one-line errors.

``load(text_or_path, source=...)`` parses with a ``yaml.SafeLoader`` subclass (so no tag runs
code) and turns everything that goes wrong into one :class:`abm.errors.UserError` line naming
``source`` and, where there is one, the line. Beyond PyYAML's own errors it refuses:

- texts over ``MAX_BYTES`` (a file's size is checked before it is read, by
  :func:`abm.errors.read_user_file`, which ``abm.config.read_yaml`` reads it with); bytes that are not UTF-8;
- nesting deeper than ``MAX_DEPTH`` and more than ``MAX_VALUES`` values, counted while composing
  (so no ``RecursionError``, and aliases counted as the values they expand to: a few lines of
  them can expand to billions); anchors and aliases at all unless ``allow_aliases``;
- duplicate mapping keys (as Python compares them: ``1`` and ``true`` are one key) and keys that
  are lists or mappings;
- integers of more than ``MAX_INT_DIGITS`` digits, strings containing NUL, tags other than
  YAML's standard ones, and values a standard tag cannot read (``!!bool maybe``, ``2001-13-45``);
- with ``require_mapping=True``: an empty document, ``{}``, or a top level that is not a mapping.

A plain ``=`` is the string ``"="`` and a plain ``<<`` that is not a merge key the string ``"<<"``.
``text``: a ``str`` is the document itself; ``bytes`` are its UTF-8 encoding.
"""

from __future__ import annotations

from typing import Any

import yaml

from abm.errors import UserError, one_line, too_large

MAX_BYTES = 5_000_000  # 5 MB: the largest study file is a few KB
MAX_DEPTH = 50  # levels of nested lists/mappings
MAX_VALUES = 100_000  # values once aliases are expanded
MAX_INT_DIGITS = 1_000  # Python refuses int() of more than 4,300 digits by default

_T = "tag:yaml.org,2002:"
_MERGE = _T + "merge"
_COLLECTION_TAGS = {_T + t for t in ("seq", "map", "set", "omap", "pairs")}


class _Refusal(Exception):
    def __init__(self, message: str, mark=None, where: str | None = None):
        super().__init__(message)
        self.message, self.mark, self.where = message, mark, where  # where: the key path, set on the way out


class _SyntaxError(Exception):
    pass


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


class SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds and refusals above."""

    # PyYAML resolves a plain "=" to the !!value tag, which no safe constructor reads
    yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag != _T + "value"]
                               for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream, *, allow_aliases: bool = False):
        super().__init__(stream)
        self.allow_aliases = allow_aliases
        self._count = 0
        self._weights: dict[str, int] = {}  # anchor -> values its node expands to (once composed)
        self._aliased = False
        self._path: list[str | int] = []  # keys and list indices down to the node being composed

    # -- composing: depth, values, anchors, keys ------------------------------------------------
    def _tick(self, n: int, mark) -> None:
        self._count += n
        if self._count > MAX_VALUES and self._aliased:
            raise _Refusal(f"expands to more than {MAX_VALUES:,} values (YAML aliases repeating or "
                           "containing themselves?)", where="")
        if self._count > MAX_VALUES:
            raise _Refusal(f"more than {MAX_VALUES:,} values (no scenario or study needs that many)", mark, "")

    def compose_node(self, parent, index):
        # a list index, a mapping key's text; None for the top level and for keys themselves
        self._path.append(index.value if isinstance(index, yaml.ScalarNode) else
                          index if isinstance(parent, yaml.SequenceNode) else None)
        try:
            return self._compose_node(parent, index)
        except _Refusal as exc:
            exc.where = self._where() if exc.where is None else exc.where
            raise
        finally:
            self._path.pop()

    def _where(self, *more) -> str:
        parts = [f"[{s}]" if isinstance(s, int) else f".{_short(s)}" for s in [*self._path, *more] if s is not None]
        return "".join(parts if len(parts) <= 8 else parts[:3] + [".…"] + parts[-3:]).lstrip(".")

    def _compose_node(self, parent, index):
        event = self.peek_event()
        alias = isinstance(event, yaml.AliasEvent)
        if (alias or event.anchor is not None) and not self.allow_aliases:
            raise _Refusal(f"YAML {'alias *' if alias else 'anchor &'}{_short(event.anchor)} refused: anchors and "
                           "aliases are not supported (a few lines can expand to billions of values); write the "
                           "value out", event.start_mark)
        if alias:
            self._aliased = True
            still_open = event.anchor in self.anchors and event.anchor not in self._weights
            self._tick(MAX_VALUES + 1 if still_open else self._weights.get(event.anchor, 1), event.start_mark)
            return super().compose_node(parent, index)  # the anchored node, or PyYAML's undefined-alias error
        collection = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if collection and len(self._path) > MAX_DEPTH:  # the path holds one entry per enclosing collection, + 1
            raise _Refusal(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        self._tick(1, event.start_mark)
        before = self._count
        node = super().compose_node(parent, index)
        if event.anchor is not None:
            self._weights[event.anchor] = 1 + self._count - before
        if isinstance(node, yaml.ScalarNode):  # read now: refused where it is, before a later syntax error
            self.construct_object(node, deep=True)
        elif node.tag not in _COLLECTION_TAGS:  # an unknown tag, or a scalar's (``!!int [1]``)
            self._construct_undefined(node)
        return node

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Refusal("a mapping key must be a plain value, not a list or a mapping", key_node.start_mark)
            first = seen.setdefault(self.construct_object(key_node), key_node)
            if first is not key_node:
                raise _Refusal(f"duplicate key (line {key_node.start_mark.line + 1}; first at line "
                               f"{first.start_mark.line + 1})", where=self._where(key_node.value))
        return node

    # -- constructing: values ---------------------------------------------------------------
    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError, yaml.YAMLError) as exc:
            if not isinstance(node, yaml.ScalarNode):
                raise
            reason = " ".join(str(getattr(exc, "problem", None) or exc).split())
            useful = isinstance(exc, (ValueError, yaml.YAMLError)) and repr(node.value) not in reason
            detail = f" ({_short(reason, 60)})" if useful else ""  # e.g. "month must be in 1..12"
            raise _Refusal(f"not a valid {node.tag.removeprefix(_T)}: {_short(node.value)!r}{detail}",
                           node.start_mark) from None

    def construct_scalar(self, node):
        value = super().construct_scalar(node)
        if "\x00" in value:
            raise _Refusal("text contains a NUL character", node.start_mark)
        return value

    def _construct_int(self, node):
        digits = sum(c.isalnum() for c in node.value) if isinstance(node, yaml.ScalarNode) else 0
        if digits > MAX_INT_DIGITS:
            raise _Refusal(f"integer of {digits:,} digits, more than the {MAX_INT_DIGITS:,} allowed", node.start_mark)
        return self.construct_yaml_int(node)

    def _construct_merge_text(self, node):  # a plain "<<" where it is a value, not a merge key
        if isinstance(node, yaml.ScalarNode) and node.value == "<<" and node.style is None:
            return "<<"
        return self._construct_undefined(node)

    def _construct_undefined(self, node):
        tag = "!!" + node.tag[len(_T):] if node.tag.startswith(_T) else node.tag
        raise _Refusal(f"YAML tag {_short(tag)!r} is not allowed (standard tags only)", node.start_mark)


SafeLoader.add_constructor(_T + "int", SafeLoader._construct_int)
SafeLoader.add_constructor(_MERGE, SafeLoader._construct_merge_text)
SafeLoader.add_constructor(None, SafeLoader._construct_undefined)


# -- the public functions -----------------------------------------------------------------
def load(text: str | bytes, *, source: str, require_mapping: bool = False,
         allow_aliases: bool = False) -> Any:
    """The document in ``text`` as plain data, or a one-line UserError naming ``source``."""
    data = _parse(_read(text, source), source, allow_aliases=allow_aliases)
    if require_mapping and not (isinstance(data, dict) and data):
        problem = ("empty document (nothing but comments or blank lines); expected a mapping of sections"
                   if data is None else "empty mapping {}; expected a mapping of sections" if data == {}
                   else f"the top level must be a mapping of sections, got {type(data).__name__}")
        raise UserError(one_line(f"{source}: {problem}"))
    return data


def load_override_value(text: str, *, field: str, allow_aliases: bool = False) -> Any:
    """The value of ``--set FIELD=TEXT``, parsed as YAML with the same limits (so ``0.1`` is a
    float and ``[a, b]`` a list). An empty value is ``""`` and text that is not valid YAML syntax
    (``a: b: c``) is kept as the string itself; refusals are one-line UserErrors naming ``--set FIELD``."""
    source = f"--set {field}"
    _check_size(len(text.encode("utf-8", "surrogatepass")), source)
    if not text.strip():
        return ""
    try:
        return _parse(text, source, allow_aliases=allow_aliases, syntax_errors=False)
    except _SyntaxError:
        return text


def _check_size(size: int, source: str) -> None:
    if size > MAX_BYTES:
        raise too_large(one_line(source), size, MAX_BYTES)


def _read(text_or_bytes, source: str) -> str:
    if isinstance(text_or_bytes, str):
        _check_size(len(text_or_bytes.encode("utf-8", "surrogatepass")), source)
        return text_or_bytes
    if not isinstance(text_or_bytes, bytes):
        raise UserError(one_line(f"{source}: expected text or bytes, got {type(text_or_bytes).__name__}"))
    _check_size(len(text_or_bytes), source)
    try:
        return text_or_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(one_line(f"{source}: not UTF-8 text (byte {exc.start})")) from None


def _parse(text: str, source: str, *, allow_aliases: bool, syntax_errors: bool = True) -> Any:
    """``syntax_errors=False`` (a ``--set`` value): broken syntax raises ``_SyntaxError`` and
    messages carry no line."""
    loader = None
    try:
        loader = SafeLoader(text, allow_aliases=allow_aliases)  # the reader checks the characters here
        return loader.get_single_data()
    except _Refusal as exc:
        line = f" (line {exc.mark.line + 1})" if exc.mark is not None and syntax_errors else ""
        message = (f"{exc.where}: " if exc.where else "") + exc.message + line
    except yaml.reader.ReaderError as exc:  # characters YAML does not allow (``exc.character``: a code point)
        if "\x00" in text:
            line = text.count("\n", 0, text.index("\x00")) + 1
            message = "text contains a NUL character" + (f" (line {line})" if syntax_errors else "")
        elif not syntax_errors:
            raise _SyntaxError() from None
        else:
            message = (f"invalid YAML at line {text.count(chr(10), 0, exc.position) + 1}: unacceptable character "
                       f"#x{exc.character:04x} (special characters are not allowed)")
    except yaml.YAMLError as exc:
        if not syntax_errors:
            raise _SyntaxError() from None
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
        message = f"invalid YAML{where}: {' '.join(str(problem).split())}"
    except (RecursionError, ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
        # not expected (depth is bounded, values checked); kept so that no traceback escapes
        message = f"cannot read as YAML ({type(exc).__name__}: {_short(' '.join(str(exc).split()), 80)})"
    finally:
        if loader is not None:
            loader.dispose()
    raise UserError(one_line(f"{source}: {message}"))
