"""depthlab: train small GPT-style language models and see why they train well or badly."""

from .config import DataConfig, ModelConfig, RunConfig, TrainConfig
from .data import CharTokenizer, load_corpus
from .errors import DepthlabError
from .model import GPT
from .sample import generate, load_run, sample_text
from .analytics import train  # trainer.train + the default analytics observers
from .callbacks import Callback, StepInfo
from .trainer import Trainer

__version__ = "0.1.0"

__all__ = ["GPT", "ModelConfig", "DataConfig", "TrainConfig", "RunConfig", "CharTokenizer", "load_corpus",
           "train", "Trainer", "Callback", "StepInfo", "generate", "load_run", "sample_text", "DepthlabError"]
