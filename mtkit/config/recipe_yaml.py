"""The YAML reader of recipe files and ``--set`` values."""

from __future__ import annotations

import re

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"  # the key of `<<: *anchor`
# Nodes that aliases may add to a document: a recipe's anchors (`<<: *base`) add tens; an
# alias bomb ("billion laughs": each level aliases the one above nine times) adds hundreds of
# millions, which formatting or walking the value cannot survive.
MAX_ALIAS_NODES = 10_000
# Levels of nesting a document may have: a recipe has five or so; PyYAML composes, and
# everything after it walks, a value recursively, so a 2 KB line of brackets nested 1,000
# deep was the interpreter's RecursionError.
MAX_DEPTH = 50


class Unbounded(yaml.composer.ComposerError):
    """A document past one of the bounds the loader keeps (`MAX_ALIAS_NODES`, `MAX_DEPTH`)."""


class SafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the nodes that aliases add bounded (`MAX_ALIAS_NODES`): the
    loader keeps aliased values shared, but everything that walks them (validation, an error
    message) pays for every copy; and the nesting bounded (`MAX_DEPTH`) where the nodes are
    built, before anything recurses into them."""

    def compose_document(self) -> yaml.Node:
        self._alias_nodes = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}
        return super().compose_document()

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                self._alias_nodes += self._size(node)
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise Unbounded(None, None, f"aliases expand to more than "
                                    f"{MAX_ALIAS_NODES:,} nodes (an alias bomb?)",
                                    event.start_mark)
        elif self._depth >= MAX_DEPTH:
            raise Unbounded(None, None, f"nested more than {MAX_DEPTH} levels deep",
                            self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _size(self, node: yaml.Node) -> int:
        """Nodes in `node` as its aliases expand it, each shared node counted once per use."""
        if id(node) not in self._sizes:
            self._sizes[id(node)] = 1  # a node that holds itself counts once
            children = node.value if isinstance(node.value, list) else []
            total = 1
            for child in children:
                for part in (child if isinstance(child, tuple) else (child,)):
                    total += self._size(part)
                    if total > MAX_ALIAS_NODES:
                        break
            self._sizes[id(node)] = total
        return self._sizes[id(node)]


class RecipeLoader(SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML wants unique
    keys; PyYAML kept the last: `vocab_size: 500` above `vocab_size: 400` went unnoticed), and
    reading YAML 1.1's base-60 numbers as text: `max_time: 1:30` was 90 seconds, whichever of
    1 h 30 or 1 min 30 was meant; as text, it is refused with the durations mtkit reads."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # The mapping's own scalar keys only: a merge (`<<: *base`) may be overridden by a key
        # written beside it, and other keys are left to PyYAML to accept or refuse.
        seen: set = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1's sexagesimal ints and floats (1:30, 1:30.5): first in line, they resolve to text.
_BASE_60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
RecipeLoader.yaml_implicit_resolvers = {
    first: ([("tag:yaml.org,2002:str", _BASE_60)] if first in "+-0123456789" else []) + rules
    for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()}
