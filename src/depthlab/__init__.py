"""depthlab: train small GPT-style language models and see why they train well or badly.

The names below are loaded on first use (PEP 562), so ``import depthlab.cli`` does not import
torch: the ``depthlab`` command can set up the process (OpenMP's wait policy) before torch loads.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "GPT": "model", "ModelConfig": "config", "DataConfig": "config", "TrainConfig": "config",
    "RunConfig": "config", "CharTokenizer": "data", "load_corpus": "data", "DepthlabError": "errors",
    "generate": "sample", "load_run": "sample", "sample_text": "sample",
    "train": "analytics",  # trainer.train + the default analytics observers
    "Callback": "callbacks", "StepInfo": "callbacks", "Trainer": "trainer",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'depthlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names, each once (a name loaded already is in globals() too), and the package's submodules
    loaded so far; not the helpers this file imports (``Any``, ``import_module``)."""
    modules = [k for k, v in globals().items() if type(v).__name__ == "module" and not k.startswith("_")]
    return sorted(set(__all__) | set(modules) | {"__version__"})
