"""Where a key or value of a scenario file is: JSON paths (workloads.0.sizes) -> YAML line and column.

The file is parsed once with PyYAML's node API (compose, then construct), which keeps every node's start mark,
so an error names FILE:LINE:COLUMN of the offending key or value, as compilers do (editors jump there).
"""
from __future__ import annotations

import re

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from testbed.scenario.schema import ScenarioError

# the dotted path a message starts with: "workloads.0.sizes: ..." (the form every scenario error takes)
MESSAGE_PATH = re.compile(r"^([A-Za-z_][\w-]*(?:\.[\w-]+)*):\s")


def parse(text: str):
    """(data, root node) of a one-document YAML text, as yaml.safe_load reads it; raises yaml.YAMLError."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        return (loader.construct_document(root) if root is not None else None), root
    finally:
        loader.dispose()


def message_path(message: str) -> tuple:
    m = MESSAGE_PATH.match(message)
    return tuple(m.group(1).split(".")) if m else ()


def _child(node, part: str):
    """(value node, node to point at) of one step down, or None where the file has no such key or item."""
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if isinstance(k, ScalarNode) and k.value == part:
                return v, k
    elif isinstance(node, SequenceNode) and part.isdigit() and int(part) < len(node.value):
        item = node.value[int(part)]
        return item, item
    return None


class Marks:
    """The marks of one scenario file; `overridden` lists (path, 'key=value') the command line set (--set)."""

    def __init__(self, file: str, root, overridden: list[tuple[tuple, str]] = ()):
        self.file, self.root, self.overridden = file, root, list(overridden)

    def position(self, path=(), key=None) -> tuple[int, int] | None:
        """(line, column), from 1, of `key` under `path` or of the value at `path`: the deepest part of the
        path the file has (a missing key points at its parent). A collection is pointed at by its key."""
        node, pointer = self.root, self.root
        for part in (str(p) for p in path):
            step = _child(node, part)
            if step is None:
                key = None
                break
            node, pointer = step
        if node is None:
            return None
        if key is not None:
            step = _child(node, str(key))
            pointer = step[1] if step else pointer
        elif isinstance(node, ScalarNode):
            pointer = node               # the value itself: a wrong type or value is pointed at exactly
        return pointer.start_mark.line + 1, pointer.start_mark.column + 1

    def where(self, path=(), key=None) -> str:
        """'FILE:LINE:COLUMN', or 'FILE (--set k=v)' for what the command line set, or 'FILE'."""
        parts = tuple(str(p) for p in path) + (() if key is None else (str(key),))
        for keys, assignment in self.overridden:
            if parts[:len(keys)] == keys:
                return f"{self.file} (--set {assignment})"
        pos = self.position(path, key)
        return f"{self.file}:{pos[0]}:{pos[1]}" if pos else self.file

    def located(self, exc: ScenarioError) -> ScenarioError:
        """The error with its place in front: its own path, or the path its message starts with."""
        path = exc.path or message_path(str(exc))
        out = ScenarioError(f"{self.where(path, exc.key)}: {exc}", path, exc.key)
        out.position = self.position(path, exc.key) or (0, 0)
        return out

    def duplicate_keys(self) -> None:
        """A key given twice in one mapping is an error (YAML loaders silently keep the last): the first in the file."""
        seen, todo, twice = set(), [self.root], []
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, MappingNode):
                first = {}
                for k, v in node.value:
                    if isinstance(k, ScalarNode) and k.value != "<<":
                        if k.value in first:
                            twice.append((k.start_mark.line, k.start_mark.column, k.value,
                                          first[k.value].start_mark.line))
                        first.setdefault(k.value, k)
                    todo += [k, v]
            elif isinstance(node, SequenceNode):
                todo += node.value
        if twice:
            line, column, key, before = min(twice)
            raise ScenarioError(f"{self.file}:{line + 1}:{column + 1}: key {key!r} given twice in one mapping "
                                f"(first on line {before + 1}); YAML would keep only the last")
