"""One SageMaker endpoint hosting each archive as an inference component: the requests, built as plain dicts.

Each archive is a SageMaker Model (the Triton image of its release, ``ModelDataUrl`` the archive itself, in
single-model mode, ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`` its served model) and an inference component on one
endpoint whose config names no model: the role is the config's ``ExecutionRoleArn`` and the variant carries
``ManagedInstanceScaling`` and ``RoutingConfig`` (AWS's guide "Deploy models for real-time inference", and the
shapes of botocore's sagemaker service model). Names are hashes of what they hold, as for the MME
(conch.sagemaker.endpoint), and everything conch creates carries the ``conch:endpoint`` tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conch.archive.verify import ROOT_MODEL
from conch.errors import DeployError
from conch.sagemaker.component_resources import Resources
from conch.sagemaker.endpoint import _NAME, _ROLE, DEFAULT_VARIANT, TAG_KEY, _named
from conch.wire import component_name

__all__ = ["Component", "ComponentEndpoint", "component_name", "differs", "served_model", "tags"]

DEFAULT_MODEL_NAME_ENV = "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
ROUTING = "LEAST_OUTSTANDING_REQUESTS"
DEFAULT_COMPONENT_INSTANCE_TYPE = "ml.g5.xlarge"


@dataclass(frozen=True)
class Component:
    """One archive as a model and an inference component: its S3 URL, the model Triton serves, one copy's
    reservation and the copies to start with."""

    name: str
    archive: str
    model_data_url: str
    served_model: str
    resources: Resources
    copies: int = 1

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise DeployError(f"inference component name {self.name!r}: SageMaker takes 1-63 letters, digits and "
                              "hyphens, starting with a letter or digit")
        if self.copies < 0:
            raise DeployError(f"component {self.name}: {self.copies} copies; give 0 (scaled to zero) or more")
        if not self.model_data_url.startswith("s3://") or not self.model_data_url.endswith(".tar.gz"):
            raise DeployError(f"component {self.name}: model data {self.model_data_url!r} is not the S3 URL of "
                              "an archive (.tar.gz)")


@dataclass(frozen=True)
class ComponentEndpoint:
    """The endpoint: one variant of ``instance_count`` instances of ``instance_type`` (managed instance
    scaling between ``min_instances`` and ``max_instances``), the image, and one component per archive."""

    name: str
    role_arn: str
    image: str
    components: tuple[Component, ...]
    instance_type: str = DEFAULT_COMPONENT_INSTANCE_TYPE
    instance_count: int = 1
    min_instances: int = 1
    max_instances: int | None = None
    variant: str = DEFAULT_VARIANT
    environment: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise DeployError(f"endpoint name {self.name!r}: SageMaker takes 1-63 letters, digits and hyphens")
        if not _ROLE.fullmatch(self.role_arn):
            raise DeployError(f"role {self.role_arn!r}: give the ARN of the IAM role SageMaker assumes, e.g. "
                              "arn:aws:iam::123456789012:role/SageMakerExecution")
        top = self.max_instances if self.max_instances is not None else self.instance_count
        if not 0 <= self.min_instances <= self.instance_count <= top or self.instance_count < 1:
            raise DeployError(f"instances: min {self.min_instances}, initial {self.instance_count}, max {top}; an "
                              "endpoint starts with at least one instance and min <= initial <= max")
        names = [c.name for c in self.components]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise DeployError(f"two archives make the component {twice[0]!r} (names are <endpoint>-<archive "
                              "stem>, cut at 63 characters): rename one archive")

    def model_request(self, component: Component) -> dict[str, Any]:
        """``create_model``: the archive in single-model mode with the served model named."""
        environment = {**self.environment, DEFAULT_MODEL_NAME_ENV: component.served_model}
        return {
            "ModelName": self.model_name(component),
            "ExecutionRoleArn": self.role_arn,
            "PrimaryContainer": {"Image": self.image, "ModelDataUrl": component.model_data_url,
                                 "Mode": "SingleModel", "Environment": dict(sorted(environment.items()))},
            "Tags": tags(self.name),
        }

    def model_name(self, component: Component) -> str:
        environment = {**self.environment, DEFAULT_MODEL_NAME_ENV: component.served_model}
        return _named(component.name, {"image": self.image, "data": component.model_data_url, "role": self.role_arn,
                                       "environment": dict(sorted(environment.items()))})

    def production_variants(self) -> list[dict[str, Any]]:
        return [{
            "VariantName": self.variant,
            "InstanceType": self.instance_type,
            "InitialInstanceCount": self.instance_count,
            "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": self.min_instances,
                                       "MaxInstanceCount": max(self.max_instances or 0, self.instance_count)},
            "RoutingConfig": {"RoutingStrategy": ROUTING},
        }]

    @property
    def config_name(self) -> str:
        return _named(self.name, {"role": self.role_arn, "variants": self.production_variants()})

    def config_request(self) -> dict[str, Any]:
        """``create_endpoint_config``: no model in the variant; the role is the config's."""
        return {"EndpointConfigName": self.config_name, "ExecutionRoleArn": self.role_arn,
                "ProductionVariants": self.production_variants(), "Tags": tags(self.name)}

    def specification(self, component: Component) -> dict[str, Any]:
        return {"ModelName": self.model_name(component),
                "ComputeResourceRequirements": component.resources.requirements()}

    def component_request(self, component: Component) -> dict[str, Any]:
        """``create_inference_component``."""
        return {"InferenceComponentName": component.name, "EndpointName": self.name, "VariantName": self.variant,
                "Specification": self.specification(component),
                "RuntimeConfig": {"CopyCount": component.copies}, "Tags": tags(self.name)}

    def update_request(self, component: Component, *, copies: bool = True) -> dict[str, Any]:
        """``update_inference_component`` to this spec (without ``RuntimeConfig`` when autoscaling owns the
        copy count)."""
        request: dict[str, Any] = {"InferenceComponentName": component.name,
                                   "Specification": self.specification(component)}
        if copies:
            request["RuntimeConfig"] = {"CopyCount": component.copies}
        return request


def differs(described: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a described component runs another model or reservation than ``wanted`` (its Specification)."""
    spec = described.get("Specification", {})
    held = {"ModelName": spec.get("ModelName"), "ComputeResourceRequirements": spec.get("ComputeResourceRequirements")}
    return held != {"ModelName": wanted["ModelName"],
                    "ComputeResourceRequirements": wanted["ComputeResourceRequirements"]}


def tags(endpoint: str) -> list[dict[str, str]]:
    return [{"Key": TAG_KEY, "Value": endpoint}]


def served_model(archive: str, ensembles: Sequence[str], single: str | None) -> str:
    """The model a single-model Triton container serves by default: the archive's ensemble, or its one model."""
    if single == ROOT_MODEL and not ensembles:
        raise DeployError(f"{archive}: its config.pbtxt is at the root; an inference component's Triton reads the "
                          "archive as a model repository: pack the model in a folder of its own")
    if single:
        return single
    if len(ensembles) != 1:
        raise DeployError(f"{archive}: {len(ensembles)} ensembles ({', '.join(ensembles) or 'none'}); an inference "
                          f"component serves one model by {DEFAULT_MODEL_NAME_ENV}: build one ensemble per archive")
    return ensembles[0]
