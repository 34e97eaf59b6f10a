"""`template`: no automatic edit; the before/after templates are shown for an edit by hand."""

from __future__ import annotations

from typing import ClassVar, Literal

from .base import EditBase


class Template(EditBase):
    """A change too dependent on the user's code to make automatically (`apply` is never called)."""

    automatic: ClassVar[bool] = False

    kind: Literal["template"]
