"""One YAML loader for every file and ``--set`` value ``abm`` reads: data only, bounded, one-line errors.

``load(text_or_path, source=...)`` parses with a subclass of ``yaml.SafeLoader`` and refuses,
each with a one-line :class:`abm.errors.UserError` naming ``source`` (and the key path and
line where there is one):

- files (or texts) over ``MAX_BYTES``, before reading them;
- nesting deeper than ``MAX_DEPTH`` (checked while composing, so no ``RecursionError``);
- more than ``MAX_VALUES`` values (as ``abm.config`` counts them: aliases expanded);
- duplicate mapping keys (the key, its line and the first one's line), keys that are lists or mappings;
- integers of more than ``MAX_INT_DIGITS`` digits (no ``ValueError`` from Python's int limit);
- strings (and keys) containing NUL;
- tags other than YAML's standard ones (``!!python/...``, ``!foo``, ``%TAG`` handles);
- anchors and aliases: a few lines of them expand to billions of values, and no scenario or
  study needs them (``allow_aliases=True`` instead accepts them within ``MAX_VALUES``, the
  check ``abm.config`` applied so far, with its message);
- with ``require_mapping=True``: an empty or comment-only document, ``{}``, or a top level that
  is not a mapping.

Anything else that goes wrong while parsing (broken syntax, a bad ``!!binary``, a date such as
``2001-13-45``) is also a one-line UserError: no other exception leaves ``load``. A plain ``=``
is the string ``"="`` (PyYAML's ``!!value`` tag has no constructor and would fail).

``text_or_path``: a ``pathlib.Path`` (or other ``os.PathLike``) is a file to read; a ``str`` is
the document itself; ``bytes`` are its UTF-8 encoding.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from abm.errors import UserError

MAX_BYTES = 5_000_000  # 5 MB: the largest study file is a few KB
MAX_DEPTH = 50  # levels of nested lists/mappings
MAX_VALUES = 100_000  # the same bound as abm.config.MAX_VALUES
MAX_INT_DIGITS = 1_000  # Python refuses int() of more than 4,300 digits by default

_T = "tag:yaml.org,2002:"
SCALAR_TAGS = {_T + t for t in ("null", "bool", "int", "float", "str", "binary", "timestamp")}
COLLECTION_TAGS = {_T + t for t in ("seq", "map", "set", "omap", "pairs")}
MERGE_TAG = _T + "merge"
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines splits on
_KEY = object()  # path marker: composing a mapping key


class _Refusal(Exception):
    def __init__(self, message: str, mark=None):
        super().__init__(message)
        self.message, self.mark = message, mark


def _short(text: str, limit: int = 40) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _one_line(text: str) -> str:
    return "".join(repr(c)[1:-1] if c in _LINE_BREAKS else c for c in text)


def _tag(tag: str) -> str:
    """A tag as written: ``!!python/name:x`` rather than ``tag:yaml.org,2002:python/name:x``."""
    return repr(_short("!!" + tag[len(_T):] if tag.startswith(_T) else tag))


def _segment(name: str) -> str:
    simple = name and all(c.isalnum() or c in "_-" for c in name) and name.isascii()
    return name if simple else repr(_short(name))


class SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the checks above, made while composing (paths and lines known)."""

    # PyYAML resolves a plain "=" to the !!value tag, which no safe constructor handles
    yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag != _T + "value"]
                               for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream, *, allow_aliases: bool = False):
        super().__init__(stream)
        self.allow_aliases = allow_aliases
        self._path: list = []
        self._depth = 0
        self._count = 0
        self._weights: dict[int, int] = {}  # id(anchored node) -> values it expands to
        self._open: set[int] = set()  # ids of anchored nodes still being composed
        self.saw_alias = False

    # -- where we are ---------------------------------------------------------------------
    def where(self) -> str:
        parts: list[str] = []
        for seg in self._path:
            if seg is _KEY:
                continue
            if isinstance(seg, int):
                parts.append(f"[{seg}]")
            else:
                parts.append(("." if parts else "") + _segment(seg))
        if len(parts) > 8:
            parts = parts[:3] + [".…"] + parts[-3:]
        text = "".join(parts).lstrip(".") or "(top level)"
        return text + (" (a key)" if self._path and self._path[-1] is _KEY else "")

    def refuse(self, problem: str, mark) -> None:
        raise _Refusal(f"{self.where()}: {problem}", mark)

    def _tick(self, n: int, mark) -> None:
        self._count += n
        if self._count > MAX_VALUES:
            if self.saw_alias:
                raise _Refusal(f"expands to more than {MAX_VALUES:,} values (YAML aliases repeating or "
                               "containing themselves?)")
            raise _Refusal(f"more than {MAX_VALUES:,} values (no scenario or study needs that many)", mark)

    # -- composing ------------------------------------------------------------------------
    def compose_node(self, parent, index):
        if isinstance(parent, yaml.SequenceNode):
            seg = index
        elif isinstance(parent, yaml.MappingNode):
            seg = _KEY if index is None else (index.value if isinstance(index, yaml.ScalarNode) else "?")
        else:
            seg = None
        if seg is not None:
            self._path.append(seg)
        try:
            return self._compose(parent, index)
        finally:
            if seg is not None:
                self._path.pop()

    def _compose(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self.saw_alias = True
            if not self.allow_aliases:
                self.refuse(f"YAML alias *{_short(event.anchor)} refused: anchors and aliases are not supported "
                            "(a few lines of them can expand to billions of values); write the value out",
                            event.start_mark)
            if event.anchor in self._open:
                self._tick(MAX_VALUES + 1, event.start_mark)  # a node containing itself expands forever
            node = super().compose_node(parent, index)  # the anchored node (or an undefined-alias error)
            self._tick(self._weights.get(event.anchor, 1), event.start_mark)
            return node
        if event.anchor is not None and not self.allow_aliases:
            self.refuse(f"YAML anchor &{_short(event.anchor)} refused: anchors and aliases are not supported; "
                        "write the value out", event.start_mark)
        collection = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if collection and self._depth >= MAX_DEPTH:
            self.refuse(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        self._tick(1, event.start_mark)
        before = self._count
        if event.anchor is not None:
            self._open.add(event.anchor)
        self._depth += collection
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= collection
        if event.anchor is not None:
            self._open.discard(event.anchor)
            self._weights[event.anchor] = 1 + self._count - before
        if isinstance(node, yaml.ScalarNode):
            self._check_scalar(node, is_key=isinstance(parent, yaml.MappingNode) and index is None)
        else:
            if node.tag not in COLLECTION_TAGS:
                self.refuse(f"YAML tag {_tag(node.tag)} is not allowed (standard tags only)", node.start_mark)
            if isinstance(node, yaml.MappingNode):
                self._check_keys(node)
        return node

    def _check_scalar(self, node, is_key: bool) -> None:
        if "\x00" in node.value:
            self.refuse("text contains a NUL character", node.start_mark)
        if node.tag == MERGE_TAG and not is_key and node.value == "<<" and node.style is None:
            node.tag = _T + "str"  # a plain "<<" that is not a merge key is just text
        if node.tag not in SCALAR_TAGS and not (is_key and node.tag == MERGE_TAG):
            self.refuse(f"YAML tag {_tag(node.tag)} is not allowed (standard tags only)", node.start_mark)
        if node.tag == _T + "int":
            digits = sum(c.isalnum() for c in node.value)
            if digits > MAX_INT_DIGITS:
                self.refuse(f"integer of {digits:,} digits, more than the {MAX_INT_DIGITS:,} allowed", node.start_mark)
        if node.tag not in (_T + "str", MERGE_TAG):
            try:
                self.construct_object(node)
            except Exception as exc:  # noqa: BLE001  e.g. !!bool abc, 2001-13-45, !!binary zz
                reason = " ".join(str(getattr(exc, "problem", None) or exc).split())
                detail = "" if reason in ("", repr(node.value), "None") else f" ({_short(reason, 60)})"
                self.refuse(f"not a valid {node.tag[len(_T):]}: {_short(node.value)!r}{detail}", node.start_mark)

    def _check_keys(self, node) -> None:
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self._path.append(_KEY)
                try:
                    self.refuse("a mapping key must be a plain value, not a list or a mapping", key_node.start_mark)
                finally:
                    self._path.pop()
            key = self.construct_object(key_node)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # not reachable for scalar keys; kept so no TypeError escapes
                first = key_node
            if first is not key_node:
                self._path.append(key_node.value)
                try:
                    self.refuse(f"duplicate key (line {key_node.start_mark.line + 1}; first at line "
                                f"{first.start_mark.line + 1})", key_node.start_mark)
                finally:
                    self._path.pop()


# -- the public functions -----------------------------------------------------------------
def load(text_or_path: "str | bytes | os.PathLike", *, source: str, require_mapping: bool = False,
         allow_aliases: bool = False) -> Any:
    """The document in ``text_or_path`` as plain data, or a one-line UserError naming ``source``."""
    text = _read(text_or_path, source)
    data = _parse(text, source, allow_aliases=allow_aliases)
    if require_mapping:
        if data is None:
            raise UserError(_one_line(f"{source}: empty document (nothing but comments or blank lines); "
                                      "expected a mapping of sections"))
        if not isinstance(data, dict):
            raise UserError(_one_line(f"{source}: the top level must be a mapping of sections, got "
                                      f"{type(data).__name__}"))
        if not data:
            raise UserError(_one_line(f"{source}: empty mapping {{}}; expected a mapping of sections"))
    return data


def load_override_value(text: str, *, field: str, allow_aliases: bool = False) -> Any:
    """The value of ``--set FIELD=TEXT``, parsed as YAML with the same limits (so ``0.1`` is a
    float and ``[a, b]`` a list). As before, an empty value is ``""`` and text that is not valid
    YAML syntax (``a: b: c``) is kept as the string itself; refusals (size, depth, NUL, huge
    integers, tags, aliases, duplicate keys) are one-line UserErrors naming ``--set FIELD``."""
    source = f"--set {field}"
    if not isinstance(text, str):
        raise UserError(_one_line(f"{source}: expected text, got {type(text).__name__}"))
    _check_length(len(text.encode("utf-8", "surrogatepass")), source)
    if not text.strip():
        return ""
    try:
        return _parse(text, source, allow_aliases=allow_aliases, syntax_errors=False)
    except _SyntaxError:
        if "\x00" in text:
            raise UserError(f"{source}: text contains a NUL character") from None
        return text


class _SyntaxError(Exception):
    pass


def _check_length(size: int, source: str) -> None:
    if size > MAX_BYTES:
        raise UserError(_one_line(f"{source}: {size:,} bytes, more than the {MAX_BYTES:,} allowed "
                                  f"({MAX_BYTES // 1_000_000} MB)"))


def _read(text_or_path, source: str) -> str:
    if isinstance(text_or_path, bytes):
        _check_length(len(text_or_path), source)
        return _decode(text_or_path, source)
    if isinstance(text_or_path, str):
        _check_length(len(text_or_path.encode("utf-8", "surrogatepass")), source)
        return text_or_path
    if not isinstance(text_or_path, os.PathLike):
        raise UserError(_one_line(f"{source}: expected a path or text, got {type(text_or_path).__name__}"))
    path = os.fspath(text_or_path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(_one_line(f"{source}: file not found")) from None
    except OSError as exc:
        raise UserError(_one_line(f"{source}: cannot read ({exc.strerror or exc})")) from None
    import stat

    if not stat.S_ISREG(info.st_mode):
        raise UserError(_one_line(f"{source}: not a file"))
    _check_length(info.st_size, source)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)  # a file growing while we read is still bounded
    except OSError as exc:
        raise UserError(_one_line(f"{source}: cannot read ({exc.strerror or exc})")) from None
    _check_length(len(data), source)
    return _decode(data, source)


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(_one_line(f"{source}: not UTF-8 text (byte {exc.start})")) from None


def _parse(text: str, source: str, *, allow_aliases: bool, syntax_errors: bool = True) -> Any:
    loader = None
    try:
        loader = SafeLoader(text, allow_aliases=allow_aliases)
        return loader.get_single_data()
    except _Refusal as exc:
        message = exc.message
        if not syntax_errors:  # a --set value: one line of its own, no "(top level)" inside it
            message = message.removeprefix("(top level): ")
        elif exc.mark is not None and "(line " not in message:
            message += f" (line {exc.mark.line + 1})"
        raise UserError(_one_line(f"{source}: {message}")) from None
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        if not syntax_errors and char != "\x00":
            raise _SyntaxError() from None
        position = exc.position if isinstance(exc.position, int) else 0
        line = text.count("\n", 0, position) + 1
        if char == "\x00":
            where = f" (line {line})" if syntax_errors else ""
            raise UserError(_one_line(f"{source}: text contains a NUL character{where}")) from None
        raise UserError(_one_line(f"{source}: invalid YAML at line {line}: unacceptable character "
                                  f"#x{ord(char):04x} (special characters are not allowed)")) from None
    except yaml.MarkedYAMLError as exc:
        if not syntax_errors:
            raise _SyntaxError() from None
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid"
        raise UserError(_one_line(f"{source}: invalid YAML{where}: {' '.join(str(problem).split())}")) from None
    except yaml.YAMLError as exc:
        if not syntax_errors:
            raise _SyntaxError() from None
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UserError(_one_line(f"{source}: invalid YAML: {first}")) from None
    except RecursionError:  # not expected (depth is bounded before composing); never a traceback
        raise UserError(_one_line(f"{source}: nested too deeply")) from None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
        # a constructor failing outside the scalar checks; kept so no such exception escapes
        raise UserError(_one_line(f"{source}: cannot read as YAML ({type(exc).__name__}: "
                                  f"{_short(' '.join(str(exc).split()), 80)})")) from None
    finally:
        if loader is not None:
            loader.dispose()
