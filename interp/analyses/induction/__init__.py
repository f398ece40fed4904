"""Induction heads: find them in any model, check their role causally, and watch them form from scratch.

heads (``induction_heads``: induction, prefix-matching, previous- and duplicate-token and copying scores per
head, ``InductionScan``) · causal (``ablation_check``: the top heads against layer-matched random heads) · icl
(``icl_score``, in-context learning on text; ``icl_ablation``, the score with heads ablated) · toy
(``AttnOnlyTransformer``, a tiny attention-only model with TransformerLens hook names, and
``handmade_induction_model``) · train (``reproduce``: the induction-head phase change trained on a CPU, with
its 1-layer control) · view (the interactive heatmaps of ``InductionScan.show()``).
"""

from .causal import AblationCheck, ablation_check, random_heads
from .heads import SCORES, InductionScan, copying_score, induction_heads, induction_scores, ordinary_token_ids
from .icl import ICLAblation, ICLScore, icl_ablation, icl_score
from .toy import AttnOnlyTransformer, ToyConfig, handmade_induction_model
from .train import Reproduction, TrainConfig, TrainingRun, reproduce

__all__ = ["SCORES", "AblationCheck", "AttnOnlyTransformer", "ICLAblation", "ICLScore", "InductionScan",
           "Reproduction", "ToyConfig", "TrainConfig", "TrainingRun", "ablation_check", "copying_score",
           "handmade_induction_model", "icl_ablation", "icl_score", "induction_heads", "induction_scores",
           "ordinary_token_ids", "random_heads", "reproduce"]
