"""The linear parameter form f(y) = F(y) θ lives on the system: the finite-difference encoder and the
identification baselines ask the system, and a system without the form is a one-line error naming what it lacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import torch

import vpintegrator as vp
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models.context import finite_difference_context, parameter_features
from vpintegrator.rollout.identify import identify_parameters, system_from_theta, theta_of
from vpintegrator.systems import CoupledOscillator, RigidBody, System


@dataclass(frozen=True)
class Decay(System):
    """dy/dt = -λ y in 2-D: linear in θ = (λ,); a user's system with the form."""

    lam: float = 0.7
    name: ClassVar[str] = "test_decay"
    dim: ClassVar[int] = 2
    theta_names: ClassVar[tuple[str, ...]] = ("lambda",)

    def vector_field(self, y):
        return -self.lam * np.asarray(y, dtype=np.float64)

    def jacobian(self, y):
        y = np.asarray(y, dtype=np.float64)
        return np.broadcast_to(-self.lam * np.eye(2), y.shape + (2,)).copy()

    @classmethod
    def parameter_features(cls, z):
        return -z[..., :, None]

    def theta(self):
        return np.array([self.lam])

    def with_theta(self, theta):
        return Decay(lam=float(theta[0]))


@dataclass(frozen=True)
class Bare(System):
    name: ClassVar[str] = "test_bare"
    dim: ClassVar[int] = 2

    def vector_field(self, y):
        return np.asarray(y, dtype=np.float64)


@pytest.mark.parametrize("system", [RigidBody(inertia=(0.7, 2.5, 1.3)), CoupledOscillator(m=(1.3, 0.7), k=0.8)])
def test_shipped_forms_give_the_field_and_round_trip(system):
    z = np.random.default_rng(0).normal(size=(6, system.dim))
    F = type(system).parameter_features(z)
    assert F.shape == (6, system.dim, len(system.theta_names))
    np.testing.assert_allclose(F @ system.theta(), system.vector_field(z), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(system.with_theta(system.theta()).vector_field(z), system.vector_field(z), rtol=1e-12,
                               atol=1e-13)
    G = system.theta_basis()
    assert np.allclose(G @ np.linalg.lstsq(G, system.theta(), rcond=None)[0], system.theta())


def test_a_users_system_with_the_form_is_identified():
    s = Decay(lam=0.9)
    prefix = vp.data.solve_flow(s, np.array([[1.0, -0.5], [0.3, 0.2]]), 0.1 * np.arange(4))
    c = finite_difference_context(Decay, torch.as_tensor(prefix)).numpy()
    np.testing.assert_allclose(c / 0.1, 0.9, rtol=1e-2)
    np.testing.assert_allclose(identify_parameters(Decay(), prefix, 0.1, "shooting"), [[0.9], [0.9]], atol=1e-8)
    assert system_from_theta(Decay(), np.array([0.4])) == Decay(lam=0.4)


def test_a_system_without_the_form_is_a_one_line_error_naming_what_is_missing():
    assert Bare.linear_form_missing() == ["theta_names", "parameter_features", "theta", "with_theta"]
    assert RigidBody.linear_form_missing() == []
    for call in (lambda: theta_of(Bare()), lambda: parameter_features(Bare, np.zeros((1, 2))), lambda: Bare().theta()):
        with pytest.raises(VPIntegratorError, match="theta_names, parameter_features, theta, with_theta") as err:
            call()
        assert "\n" not in str(err.value)


def test_one_definition_of_each_shipped_field():
    """The compiled kernels are numba's compilation of the systems' own field functions (no second formula)."""
    from vpintegrator.compiled import systems as compiled_systems

    for kid, cls in compiled_systems.SHIPPED.items():
        for what, fn in (("field", cls.field), ("jacobian", cls.field_jacobian)):
            jitted = getattr(compiled_systems, f"{cls.name}_{what}")
            assert getattr(jitted, "py_func", jitted) is fn
        s = cls()
        assert compiled_systems.system_kernel(s)[0] == kid


@dataclass(frozen=True)
class Rotation(System):
    """A user's system giving only the field on components: vector_field and jacobian come from it."""

    w: float = 2.0
    name: ClassVar[str] = "test_rotation"
    dim: ClassVar[int] = 2

    def field_params(self):
        return np.array([self.w])

    @staticmethod
    def field(p, x):
        return (-p[0] * x[1], p[0] * x[0])

    @staticmethod
    def field_jacobian(p, x):
        return ((0.0, -p[0]), (p[0], 0.0))


def test_a_users_field_on_components_gives_vector_field_and_jacobian():
    y = np.random.default_rng(1).normal(size=(4, 3, 2))
    s = Rotation()
    np.testing.assert_array_equal(s.vector_field(y), np.stack([-2.0 * y[..., 1], 2.0 * y[..., 0]], -1))
    assert s.jacobian(y).shape == (4, 3, 2, 2)
    np.testing.assert_array_equal(s.jacobian(y)[1, 2], [[0.0, -2.0], [2.0, 0.0]])
    with pytest.raises(NotImplementedError):
        Bare().jacobian(y[0, 0])
