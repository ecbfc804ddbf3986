"""A safe YAML reader that remembers line numbers.

``yaml.SafeLoader`` already refuses ``!!python/...`` tags; this subclass also

- refuses aliases (``*name``): no billion-laughs expansion, nothing shared between rules;
- refuses duplicate mapping keys (PyYAML silently keeps the last one);
- reads the file through :func:`analyzer.boundedio.read_regular` (regular files only, the size capped
  while reading);
- returns :class:`LineDict` / :class:`LineList` carrying the 1-based line of the node and of each
  key or item, so that every validation error can name ``file:line``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from analyzer.boundedio import BoundedReadError, read_regular
from analyzer.errors import RuleError, UnsafeRuleError

MAX_DOCUMENT_BYTES = 1 << 20  # a rule pack is text written by people; 1 MiB is far more than needed


class LineDict(dict):  # type: ignore[type-arg]
    """A mapping from YAML with ``line`` (of the mapping) and ``key_lines`` (line of each key)."""

    line: int = 0
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return getattr(self, "key_lines", {}).get(key, self.line)


class LineList(list):  # type: ignore[type-arg]
    """A sequence from YAML with ``line`` and ``item_lines``."""

    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        lines = getattr(self, "item_lines", [])
        return lines[index] if index < len(lines) else self.line


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(
                f"YAML alias *{event.anchor} is not allowed here; repeat the value instead",
                event.start_mark.line + 1,
            )
        return super().compose_node(parent, index)


class _Refused(Exception):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) or key is None:
            raise _Refused(f"mapping key {key!r} must be a plain name", key_node.start_mark.line + 1)
        if key in result:
            raise _DuplicateKey(f"duplicate key {key!r}", key_node.start_mark.line + 1)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


class _DuplicateKey(_Refused):
    pass


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)

_FastLoader: Any = None
if getattr(yaml, "__with_libyaml__", False):
    class _CLoader(yaml.CSafeLoader):  # type: ignore[misc,name-defined]
        """libyaml's parser and composer (5-10x faster than PyYAML's) with the same constructors."""

    _CLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
    _CLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)
    _FastLoader = _CLoader


def _load_fast(text: str) -> Any:
    """The document through libyaml when that is certainly what the careful loader would return, else
    None. Without an ``&`` the text has no anchor, so no alias can resolve (the one check libyaml's
    composer does not let us make); constructors, tags, duplicate keys and line numbers are the same
    code. Any problem at all goes to the careful loader, which reports it exactly."""
    if _FastLoader is None or "&" in text:
        return None
    loader = _FastLoader(text)
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
    except Exception:  # noqa: BLE001 - re-parsed by the careful loader for the exact error
        return None
    finally:
        loader.dispose()
    return documents[0] if len(documents) == 1 else None


def _a(kind: str) -> str:
    """``kind`` with its indefinite article: "a rule file", "an accepted-findings file"."""
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def load_yaml(path: Path, kind: str = "rule file") -> Any:
    """Read one YAML document safely. Raises :class:`UnsafeRuleError` / :class:`RuleError`; ``kind``
    names the file in messages (``rule file``, ``accepted-findings file``)."""
    file = str(path).replace("\0", "\\0")
    try:
        raw = read_regular(path, MAX_DOCUMENT_BYTES, kind)
    except BoundedReadError as err:
        raise UnsafeRuleError(f"{kind} {err.reason}", file=file, hint=err.hint) from None
    except OSError as err:
        raise RuleError(f"cannot read {kind}: {err.strerror or err}", file=file) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RuleError(f"cannot read {kind}: not UTF-8 text ({err.reason} at byte {err.start})",
                        file=file) from None
    return load_yaml_text(text, file, kind)


def load_yaml_text(text: str, file: str, kind: str = "rule file") -> Any:
    """Parse ``text`` (named ``file`` in errors) with the safe, line-recording loader."""
    if len(text.encode("utf-8")) > MAX_DOCUMENT_BYTES:
        raise UnsafeRuleError(f"{kind} is over the {MAX_DOCUMENT_BYTES} byte limit", file=file)
    try:
        loader = _Loader(text)  # its reader refuses NUL and other control characters right away
    except yaml.reader.ReaderError as err:
        line: int | None = text.count("\n", 0, err.position) + 1
        char = f"U+{err.character:04X}" if isinstance(err.character, int) else repr(err.character)
        raise RuleError(f"invalid YAML: character {char} is not allowed in {_a(kind)}",
                        file=file, line=line, hint="YAML text holds no NUL or other control characters") from None
    fast = _load_fast(text)
    if fast is not None:
        loader.dispose()
        return fast
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
    except _DuplicateKey as err:
        raise RuleError(str(err), file=file, line=err.line, hint="each key may appear once") from None
    except _Refused as err:
        raise UnsafeRuleError(str(err), file=file, line=err.line) from None
    except yaml.constructor.ConstructorError as err:
        line = err.problem_mark.line + 1 if err.problem_mark else None
        raise UnsafeRuleError(
            f"YAML tag not allowed in {_a(kind)} ({(err.problem or '').strip()})",
            file=file,
            line=line,
            hint=f"{_a(kind)} is plain data: mappings, lists, strings and numbers",
        ) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        raise RuleError(f"invalid YAML: {err.problem or err.context}", file=file, line=line) from None
    except RecursionError:
        raise RuleError("invalid YAML: lists or mappings nested too deeply", file=file,
                        hint=f"{_a(kind)} nests a few levels") from None
    except yaml.YAMLError as err:
        raise RuleError(f"invalid YAML: {type(err).__name__}", file=file) from None
    except ValueError as err:  # a scalar the constructor cannot build: an integer of 4,300+ digits
        raise RuleError(f"invalid YAML: a value cannot be read ({str(err).split(';')[0]})", file=file,
                        hint=f"numbers in {_a(kind)} are short") from None
    finally:
        loader.dispose()
    if len(documents) != 1:
        raise RuleError(f"expected one YAML document, found {len(documents)}", file=file)
    return documents[0]
