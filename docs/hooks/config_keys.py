"""griffe extension (mkdocstrings' reader): a config field declared ``key(DEFAULT, ...)`` shows as ``= DEFAULT``.

The config dataclasses declare every field with ``vpintegrator.config.key`` (its default, type, bounds, help
and flag in one call). griffe reads a field's default as written, so the signatures in the API reference
showed ``data: list[str] = key(default_factory=list, check=_check_data, flag='')``. Here each such value
becomes its default (``default_factory=F``: ``F()``; none: a required parameter) before griffe's dataclass
support builds ``__init__`` from the fields. Nothing is imported (no torch for the docs build).
"""

from __future__ import annotations

import griffe


class ConfigKeyDefaults(griffe.Extension):
    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs) -> None:
        value = attr.value
        if not isinstance(value, griffe.ExprCall) or str(value.function) not in ("key", "config.key"):
            return
        positional = [a for a in value.arguments if not isinstance(a, griffe.ExprKeyword)]
        keywords = {a.name: a.value for a in value.arguments if isinstance(a, griffe.ExprKeyword)}
        if positional:
            attr.value = positional[0]
        elif "default" in keywords:
            attr.value = keywords["default"]
        elif "default_factory" in keywords:
            attr.value = f"{keywords['default_factory']}()"
        else:
            attr.value = None  # a required field
