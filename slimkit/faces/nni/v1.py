"""NNI 1.x's class names that are not slimkit's engine names, at their own path.

NNI 2.x reused ten of NNI 1.x's pruner names with other signatures; as in NNI (``nni.algorithms.compression
.pytorch.pruning`` against ``nni.algorithms.compression.v2.pytorch.pruning``) each version has its own path:
``slimkit.compression.LevelPruner`` is NNI 2.x's (:mod:`slimkit.faces.nni.v2`) and
``slimkit.faces.nni.v1.LevelPruner`` is NNI 1.x's, which is slimkit's engine itself (``LevelEngine``: NNI 1.x's
``(model, config_list, optimizer=None, ...)``). ``QAT_Quantizer`` is NNI's spelling of ``QATQuantizer``. Every
other NNI 1.x name (``L1FilterPruner``, ``TaylorFOWeightFilterPruner``, ``WeightMasker``, ``QATQuantizer``...)
is the engine's own class name, which ``slimkit.compression`` gives.
"""

from slimkit.engines.pruning.admm import ADMMEngine
from slimkit.engines.pruning.agp import AGPEngine
from slimkit.engines.pruning.amc import AMCEngine
from slimkit.engines.pruning.auto_compress import AutoCompressEngine
from slimkit.engines.pruning.lottery_ticket import LotteryTicketEngine
from slimkit.engines.pruning.movement import MovementEngine
from slimkit.engines.pruning.one_shot import FPGMEngine, LevelEngine, SlimEngine
from slimkit.engines.pruning.simulated_annealing import SimulatedAnnealingEngine
from slimkit.engines.quantization.qat import QATEngine

ADMMPruner = ADMMEngine
AGPPruner = AGPEngine
AMCPruner = AMCEngine
AutoCompressPruner = AutoCompressEngine
FPGMPruner = FPGMEngine
LevelPruner = LevelEngine
LotteryTicketPruner = LotteryTicketEngine
MovementPruner = MovementEngine
SimulatedAnnealingPruner = SimulatedAnnealingEngine
SlimPruner = SlimEngine
QAT_Quantizer = QATEngine

__all__ = [
    "ADMMPruner", "AGPPruner", "AMCPruner", "AutoCompressPruner", "FPGMPruner", "LevelPruner", "LotteryTicketPruner",
    "MovementPruner", "QAT_Quantizer", "SimulatedAnnealingPruner", "SlimPruner",
]
