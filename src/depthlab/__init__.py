"""depthlab: train small GPT-style language models and see why they train well or badly."""

from .config import DataConfig, ModelConfig, RunConfig, TrainConfig
from .data import CharTokenizer, load_corpus
from .errors import DepthlabError
from .model import GPT
from .sample import generate, load_run, sample_text
from .train import Callback, Trainer, train  # binds the function `train`, not the module

__version__ = "0.1.0"

__all__ = ["GPT", "ModelConfig", "DataConfig", "TrainConfig", "RunConfig", "CharTokenizer", "load_corpus",
           "train", "Trainer", "Callback", "generate", "load_run", "sample_text", "DepthlabError"]
