"""Stand-in for the ``scalpl`` package: the testbench uses only ``Cut(d)``, ``get``/``del``
of a dotted key with list indexes (``acl[0].entity``) and ``.data``, to drop fields from a
response."""

import re

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(key):
    return [int(index) if index else name for name, index in _PART.findall(key)]


class Cut:
    def __init__(self, data):
        self.data = data

    def _parent(self, key):
        steps = _steps(key)
        node = self.data
        for step in steps[:-1]:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                return None, None
        return node, steps[-1]

    def get(self, key, default=None):
        node, last = self._parent(key)
        try:
            return default if node is None else node[last]
        except (KeyError, IndexError, TypeError):
            return default

    def __delitem__(self, key):
        node, last = self._parent(key)
        if node is None:
            raise KeyError(key)
        del node[last]
