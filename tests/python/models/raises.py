"""A model file that fails while it is loaded."""
import torch  # noqa: F401

raise RuntimeError("this model file is broken on purpose")
