"""deepool import: PyTorch modules to deepool.graph files (docs/models.md, "Importing a PyTorch
model"). Standard library and torch only; run with the project's .venv Python."""
