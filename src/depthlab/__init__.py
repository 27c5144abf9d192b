"""depthlab: train small GPT-style language models and see why they train well or badly.

The public names are imported lazily (PEP 562), so ``import depthlab.data`` does not pay for torch.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "GPT": "model", "ModelConfig": "config", "DataConfig": "config", "TrainConfig": "config",
    "RunConfig": "config", "CharTokenizer": "data", "load_corpus": "data", "train": "train",
    "Trainer": "train", "Callback": "train", "generate": "sample", "load_run": "sample",
    "sample_text": "sample", "DepthlabError": "errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'depthlab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
