"""Neural integrators, the model registry and model files.

Every model is a ``torch.nn.Module`` with attributes ``dim``, ``seq_len``, ``pred_window`` and ``config``
(the keyword arguments plus ``"name"``; ``build_model(**model.config)`` rebuilds it). ``forward`` maps
(batch, seq_len, dim) to (batch, pred_window, dim), and one window (seq_len, dim) to (pred_window, dim)
(so ``torch.func.vmap(torch.func.jacrev(model))`` runs over a batch of windows). Models pickle
(``torch.save(model)``). ``build_model(name, dim=...)`` fills every key left out with the configuration
below, as ``vp-train --model NAME`` does.

===========  =====================================  ====================================================
name         class                                  paper configuration (parameters)
===========  =====================================  ====================================================
``vpff``     [`VolumePreservingFeedForward`][vpintegrator.models.VolumePreservingFeedForward]   dim 3, n_blocks 6 (135)
``vpt``      [`VolumePreservingTransformer`][vpintegrator.models.VolumePreservingTransformer]   dim 3, seq_len 3, n_blocks 2, L 3 (162; 180 arbitrary)
``st``       [`StandardTransformerIntegrator`][vpintegrator.models.StandardTransformerIntegrator] dim 3, seq_len 3, n_blocks 2, L 3, 1 head (189)
===========  =====================================  ====================================================

The symplectic side (states (q, p), dim even; GML's defaults, no paper configuration):

==========================  ==============================  ===================================================
name                        class                           GML defaults (parameters)
==========================  ==============================  ===================================================
``la_sympnet``              [`LASympNet`][vpintegrator.models.LASympNet]              dim 4, depth 5, nhidden 1 (42)
``g_sympnet``               [`GSympNet`][vpintegrator.models.GSympNet]               dim 4, upscaling 8, n_layers 2 (32)
``symplectic_transformer``  [`SymplecticTransformer`][vpintegrator.models.SymplecticTransformer]  dim 4, seq_len 3, n_sympnet 2, L 1 (70; L 4: 280)
==========================  ==============================  ===================================================

Lie–Poisson networks for so(3)* (the rigid body; Casimir-exact Poisson maps, ``vpintegrator.models.lie_poisson``):

==================  ============================  =====================================================
name                class                         defaults (parameters)
==================  ============================  =====================================================
``lpnet``           [`LiePoissonNet`][vpintegrator.models.LiePoissonNet]        dim 3, n_layers 8, width 4 (128)
``lp_transformer``  [`LiePoissonTransformer`][vpintegrator.models.LiePoissonTransformer] dim 3, seq_len 3, L 2, n_layers 4, width 4 (166)
==================  ============================  =====================================================

Context-conditioned models for families of systems (``vpintegrator.models.context``; c read once from the
first ``context_len`` states, every step structure-preserving for every fixed c):

=================  =======================================  ==================================================
name               class                                    defaults
=================  =======================================  ==================================================
``lpnet_ctx``      [`ContextLiePoissonNet`][vpintegrator.models.ContextLiePoissonNet]   dim 3, context_len 3, n_layers 6, width 4
``g_sympnet_ctx``  [`ContextGSympNet`][vpintegrator.models.ContextGSympNet]        dim 4, context_len 5, n_layers 4, width 8
``vpff_ctx``       [`ContextVolumeNet`][vpintegrator.models.ContextVolumeNet]       any dim, context_len 3, n_layers 6
=================  =======================================  ==================================================

Learned vector fields integrated by a classical method (``vpintegrator.models.vector_field``; the window map is
``substeps`` steps of ``method`` on f_θ, the rollout integrates f_θ with any registered integrator):

=============  ==================================================================  ===============================
name           class                                                               defaults (parameters)
=============  ==================================================================  ===============================
``hnn``        [`HamiltonianNet`][vpintegrator.models.HamiltonianNet]                       dim 4, width 32, depth 2, implicit midpoint (1 249)
``lphnn``      [`LiePoissonHamiltonianNet`][vpintegrator.models.LiePoissonHamiltonianNet]   dim 3, width 32, depth 2, implicit midpoint (1 217)
``divfree``    [`DivergenceFreeField`][vpintegrator.models.DivergenceFreeField]             dim 3, width 16, depth 2, rk4 (1 059)
``node``       [`NeuralODE`][vpintegrator.models.NeuralODE]                                 dim 3, width 32, depth 2, rk4 (1 283)
=============  ==================================================================  ===============================

What each architecture keeps by construction: ``model.preserves`` / [`model_preserves`][vpintegrator.models.model_preserves].

Your own model: an ``nn.Module`` class in your own module, registered beside its class with
``@register_model(defaults={...})`` (``model_name`` the registry name), or named
``"package.module:ClassName"`` wherever a model name goes (``build_model``, ``fit``, ``vp-train --model``,
a config's ``[model] name``). Its ``config`` then records ``model_class`` (the path), so checkpoints,
``config.toml`` and ``summary.json`` name the class and [`load_model`][vpintegrator.models.load_model]
imports it again in a fresh process ([`model_class`][vpintegrator.models.model_class] resolves either form).

Model file format (``save_model``/``load_model``): one ``torch.save`` dict
``{"format": "vpintegrator-model", "version": 1, "config": {...}, "state_dict": {...},
"vpintegrator_version": "...", **extra}``, loadable with ``torch.load(weights_only=True)`` (no pickled code).

Modules: ``volume`` (VPFF, VPT), ``standard`` (ST), ``symplectic`` (LA-SympNet, G-SympNet, symplectic
transformer), ``registry`` (names, defaults, ``build_model``, ``register_model``, ``model_class``), ``files`` (model files, pretrained models),
``gml`` (weight files of GeometricMachineLearning.jl: ``read_gml``, ``load_model("gml:FILE.h5")``),
``delay`` (``delay_mlp``, ``delay_vpff``: maps of the delay vector, the window without attention: the control of
the multi-step transformers on observed states),
``recurrent`` (``gru``, ``lru``: the window read in order by a GRU or a linear recurrent unit, the recurrent rung
of the memory ladder),
``ablation`` (``without_attention``: a transformer with its attention layers switched to the identity;
``constant_coupling``: a Lie–Poisson transformer with its cross-state information removed).
``_symmetric`` (the palindromic, time-reversible composition ``symmetric=True`` of vpff, vpt, lpnet and
lp_transformer: one mixin for ``evolve``, ``inverse`` and ``preserves``).

Fitted models beside the trained ones (``vpintegrator.models.fitted``: one interface, ``fit`` on the training
split, the step-map contract, ``describe``, ``save`` / [`load_fitted`][vpintegrator.models.load_fitted], and the
registry ``fitted_class`` / ``list_fitted`` the rollout engine picks its fitted rows from): ``memory`` (``arx``,
``narx``, ``delay_dmd``) and ``parrot`` (context parroting); the SINDy rows register from
``vpintegrator.rollout.sindy`` (they integrate their fitted fields by the classical methods).
"""

from __future__ import annotations

# the families first, in the registry's order (each registers itself: @register_model beside its class)
from . import volume, standard, symplectic, lie_poisson, context, vector_field, delay, recurrent  # noqa: F401  (in this order)
from .registry import count_parameters
from .ablation import constant_coupling, mean_attention, without_attention
from .files import (
    MODEL_FORMAT,
    MODEL_FORMAT_VERSION,
    MOVED_MODULES,
    PRETRAINED_PREFIX,
    list_pretrained,
    load_checkpoint,
    load_model,
    load_pickled,
    pretrained_info,
    read_torch_file,
    save_model,
    weights_sha256,
)
from .delay import DelayMLP, DelayVolumeNet
from .recurrent import GRUWindow, LRUWindow
from .context import ContextGSympNet, ContextLiePoissonNet, ContextModel, ContextVolumeNet
from .gml import read_gml
from .lie_poisson import LiePoissonNet, LiePoissonTransformer
from .registry import (
    build_model,
    default_model_config,
    list_models,
    model_class,
    model_preserves,
    model_size,
    register_model,
)
from .standard import StandardTransformerIntegrator
from .symplectic import GSympNet, LASympNet, SymplecticTransformer
from .volume import VolumePreservingFeedForward, VolumePreservingTransformer
from .vector_field import DivergenceFreeField, HamiltonianNet, LiePoissonHamiltonianNet, NeuralODE, VectorFieldModel
# the fitted rows register themselves (a FittedModel subclass with a row name)
from .parrot import ParrotStep
from .memory import ARXStep, DelayDMDStep, NARXStep
from .fitted import FittedModel, fitted_class, list_fitted, load_fitted

__all__ = [
    "read_gml",
    "VolumePreservingFeedForward",
    "VolumePreservingTransformer",
    "StandardTransformerIntegrator",
    "DelayMLP",
    "DelayVolumeNet",
    "GRUWindow",
    "LRUWindow",
    "LASympNet",
    "GSympNet",
    "SymplecticTransformer",
    "build_model",
    "list_models",
    "register_model",
    "default_model_config",
    "save_model",
    "load_model",
    "load_checkpoint",
    "load_pickled",
    "list_pretrained",
    "pretrained_info",
    "weights_sha256",
    "count_parameters",
    "read_torch_file",
    "without_attention",
    "mean_attention",
    "constant_coupling",
    "LiePoissonNet",
    "LiePoissonTransformer",
    "model_preserves",
    "model_class",
    "ContextModel",
    "ContextLiePoissonNet",
    "ContextGSympNet",
    "ContextVolumeNet",
    "model_size",
    "VectorFieldModel",
    "HamiltonianNet",
    "LiePoissonHamiltonianNet",
    "DivergenceFreeField",
    "NeuralODE",
    "FittedModel",
    "fitted_class",
    "list_fitted",
    "load_fitted",
    "ParrotStep",
    "ARXStep",
    "NARXStep",
    "DelayDMDStep",
]
