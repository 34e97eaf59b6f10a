"""stepdoctor: why is this training step slow?

The repository root is the `stepdoctor` package; `analysis`, `knowledge`, `tools`, `server` and
`evals` are its subpackages (see DESIGN.md).
"""

__version__ = "0.1.0"
