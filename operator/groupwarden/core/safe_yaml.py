"""Load an untrusted YAML stream (a policy file) within bounds: only typed errors, bounded time and memory.

PyYAML's SafeLoader is safe against code execution, not against resource use or odd input
(found by `bench/fuzz_policy.py`):
- aliases are expanded by reference, but every later walk of the result (validation, copies)
  visits each reference again: nine nested lists of nine aliases ("billion laughs") are 9^7 nodes
  and took 45 s and 158 MB to reject;
- composing is recursive (RecursionError past ~490 levels) and the scanner is quadratic in the
  flow nesting depth (5,000 `[` took 43 s);
- constructors raise plain errors: ValueError for an int beyond Python's 4,300-digit limit or a
  date such as 2001-13-45, IndexError for `!!float ''`, KeyError for `!!bool x`, TypeError for a
  mapping or list used as a mapping key.
Policy files are small (a manifest is a few dozen nodes), so the limits below are far above any
real policy and far below anything that costs time or memory.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_TEXT_CHARS = 1 << 20  # 1 MiB of text; a Kubernetes object is at most ~1.5 MiB in etcd
MAX_DEPTH = 64  # nesting of collections
MAX_NODES = 10_000  # nodes of one document once aliases are expanded (a policy has ~40)


class YamlLimitError(yaml.YAMLError):
    """The stream is too large, too deep, or expands to too many nodes."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


class BoundedSafeLoader(yaml.SafeLoader):
    """SafeLoader with a depth limit, an expanded-size limit, no duplicate keys, no raw ValueErrors."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes once aliases are expanded

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner runs ahead of the composer and keeps one possible simple key per flow level,
        # checked on every token: bound the level here, before that work grows.
        if self.flow_level >= MAX_DEPTH:
            raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels ({_where(self.get_mark())})")
        super().fetch_flow_collection_start(TokenClass)

    def compose_document(self) -> Node | None:
        self._sizes = {}
        node: Node | None = super().compose_document()
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node: Node | None = super().compose_node(parent, index)
            if id(node) not in self._sizes:  # its anchor is still being composed
                raise ComposerError(None, None, "found a recursive alias", event.start_mark)
            return node
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise YamlLimitError(f"nested deeper than {MAX_DEPTH} levels ({_where(mark)})")
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is None:
            return None
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._sizes[id(child)] for child in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._sizes[id(key)] + self._sizes[id(value)] for key, value in node.value)
        if size > MAX_NODES:
            raise YamlLimitError(
                f"a document expands to more than {MAX_NODES} nodes (aliases count each time they are "
                f"used; {_where(node.start_mark)})"
            )
        self._sizes[id(node)] = size
        return node


def _mapping_without_duplicates(loader: BoundedSafeLoader, node: MappingNode) -> dict[Any, Any]:
    """PyYAML silently keeps the last of duplicate keys (a typo trap): reject them."""
    if not isinstance(node, MappingNode):  # `!!map x`
        raise ConstructorError(None, None, f"expected a mapping, found a {node.id}", node.start_mark)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # a list or mapping used as a key
            raise ConstructorError(
                None, None, f"a key must be a scalar, found {type(key).__name__}", key_node.start_mark
            ) from None
        if duplicate:
            line = key_node.start_mark.line + 1
            raise ConstructorError(None, None, f"duplicate key {key!r} on line {line}")
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


def _checked(constructor: Any) -> Any:
    """A scalar constructor whose plain errors become a ConstructorError with the value's position.

    PyYAML's own: `!!int ''`/`!!float ''` raise IndexError, `!!bool x` KeyError, `!!timestamp x`
    AttributeError, `2001-13-45` and ints over 4,300 digits ValueError.
    """

    def construct(loader: BoundedSafeLoader, node: Node) -> Any:
        try:
            return constructor(loader, node)
        except (ValueError, OverflowError, IndexError, KeyError, AttributeError, TypeError) as error:
            kind = node.tag.rsplit(":", 1)[-1]
            raise ConstructorError(None, None, f"invalid {kind}: {error!s:.200}", node.start_mark) from None

    return construct


BoundedSafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
for _tag in ("int", "float", "bool", "timestamp", "binary"):
    BoundedSafeLoader.add_constructor(
        f"tag:yaml.org,2002:{_tag}", _checked(yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{_tag}"])
    )


def load_documents(text: str) -> list[Any]:
    """The non-empty documents of a YAML stream; raises yaml.YAMLError (never another error) on bad input."""
    if len(text) > MAX_TEXT_CHARS:
        raise YamlLimitError(f"{len(text)} characters, more than the {MAX_TEXT_CHARS} a policy file may have")
    try:
        return [doc for doc in yaml.load_all(text, Loader=BoundedSafeLoader) if doc is not None]
    except RecursionError:  # not expected with MAX_DEPTH; a bound, never a crash
        raise YamlLimitError("nested too deeply") from None
