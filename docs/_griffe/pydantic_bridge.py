"""A griffe extension for the API pages: LlamaIndex's re-exports of pydantic read as pydantic.

The package imports ``BaseModel`` and ``Field`` from ``llama_index.core.bridge.pydantic`` (as
LlamaIndex does); griffe-pydantic recognises a settings model and its fields only by the
names ``pydantic.BaseModel`` and ``pydantic.Field``. Listed before ``griffe_pydantic`` in
mkdocs.yml, this points the package's imports from the bridge at pydantic, so the settings
models render with their fields, types, defaults and descriptions.
"""

from __future__ import annotations

from typing import Any

import griffe

BRIDGE = "llama_index.core.bridge.pydantic."


class PydanticBridge(griffe.Extension):
    """Rewrites ``llama_index.core.bridge.pydantic.X`` imports of a package to ``pydantic.X``."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite the imports of every module of ``pkg``.

        Args:
            pkg: the loaded package.
            **kwargs: the other hook arguments.
        """
        self._rewrite(pkg)

    def _rewrite(self, module: griffe.Module) -> None:
        for member in module.members.values():
            if isinstance(member, griffe.Alias):  # checked without resolving it
                if member.target_path.startswith(BRIDGE):
                    member.target_path = "pydantic." + member.target_path[len(BRIDGE):]
            elif isinstance(member, griffe.Module):
                self._rewrite(member)
