"""The tuned lens (Belrose et al. 2023): one affine translator per layer in front of the final norm, trained
so that every layer reads as the model's own output.

lens (``TunedLens``: its translators, file format and cache; ``load_tuned_lens``; ``tuned_lens``, which
returns the logit lens's result type marked ``tuned``) · train (``train_tuned_lens``: capture, least squares,
then KL steps, on a CPU and resumable) · evaluate (``evaluate_lens``: held-out KL and perplexity per layer;
``prediction_depth`` on fact records).
"""

from .evaluate import LensEvaluation, PredictionDepth, evaluate_lens, prediction_depth
from .lens import TunedLens, cached_lenses, load_tuned_lens, split_documents, tensor_path, tuned_lens
from .train import DEFAULTS, INITS, train_tuned_lens

__all__ = ["DEFAULTS", "INITS", "LensEvaluation", "PredictionDepth", "TunedLens", "cached_lenses",
           "evaluate_lens", "load_tuned_lens", "prediction_depth", "split_documents", "tensor_path",
           "train_tuned_lens", "tuned_lens"]
