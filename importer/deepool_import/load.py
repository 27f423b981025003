"""Finds the user's factory (`--file model.py --factory build_model` or `--module pkg.mod:build`)
and calls it with the --kwargs. Every failure names the file and, when the user's code raised,
the line it raised at."""
import importlib
import importlib.util
import os
import sys

from .convert import exception_location
from .errors import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_REFUSED, ImportFailure, one_line

_USER_MODULE = "deepool_user_model"


def _raised(what, exc):
    where = exception_location(exc)
    return ImportFailure(EXIT_FAILED,
                         f"{what} raised{' at ' + where if where else ''}: {one_line(exc)}")


def load_file(path):
    if not os.path.isfile(path):
        raise ImportFailure(EXIT_NOT_FOUND, f"--file {path}: no such file")
    absolute = os.path.abspath(path)
    spec = importlib.util.spec_from_file_location(_USER_MODULE, absolute)
    if spec is None or spec.loader is None:
        raise ImportFailure(EXIT_NOT_FOUND, f"--file {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_USER_MODULE] = module
    sys.path.insert(0, os.path.dirname(absolute))  # so the file's own imports of siblings work
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        raise _raised(f"loading {path}", e) from None
    return module


def load_module(name):
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise ImportFailure(EXIT_NOT_FOUND, f"--module {name}: no module named {e.name}") \
                from None
        raise _raised(f"importing {name}", e) from None
    except (Exception, SystemExit) as e:
        raise _raised(f"importing {name}", e) from None


def build(module, source, factory_name, kwargs):
    import torch

    factory = getattr(module, factory_name, None)
    if factory is None or not callable(factory):
        defined = sorted(n for n, v in vars(module).items()
                         if callable(v) and not n.startswith("_") and
                         getattr(v, "__module__", None) == module.__name__)
        hint = f" (it defines {', '.join(defined[:8])})" if defined else ""
        what = "no factory" if factory is None else "not callable:"
        raise ImportFailure(EXIT_NOT_FOUND, f"{source}: {what} {factory_name}{hint}")
    try:
        model = factory(**kwargs)
    except (Exception, SystemExit) as e:
        raise _raised(f"{factory_name}(**{kwargs})", e) from None
    if not isinstance(model, torch.nn.Module):
        raise ImportFailure(EXIT_REFUSED, f"{factory_name} returned {type(model).__name__}, "
                            "not a torch.nn.Module")
    return model
