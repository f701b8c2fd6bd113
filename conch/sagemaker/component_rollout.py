"""``conch deploy --components`` and ``conch undeploy --components`` as functions: upload each archive, make its
model, bring the endpoint up (or move it to a new config), create or update one inference component per archive,
remove the components and models of archives no longer deployed, then scale each component."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch.aws import AwsTarget, aws_errors
from conch.errors import DeployError
from conch.sagemaker.component_scaling import CopyScaling, apply_component_scaling, remove_component_scaling
from conch.sagemaker.components import ComponentEndpoint, differs
from conch.sagemaker.endpoint import (
    DEFAULT_POLL_S,
    DEFAULT_WAIT_TIMEOUT_S,
    _described,
    _listed,
    _logs,
    _tagged_for,
    describe_endpoint,
    wait_in_service,
)
from conch.sagemaker.s3 import ModelLocation, Upload, upload_archives

Progress = Callable[[str], None]


@dataclass
class ComponentDeployment:
    """What a deploy did: uploads, the endpoint's action, each component's action, what went, the policies."""

    uploads: list[Upload]
    endpoint_action: str
    components: dict[str, str] = field(default_factory=dict)  # name -> created / updated / unchanged
    removed: list[str] = field(default_factory=list)
    policy_arns: dict[str, list[str]] = field(default_factory=dict)


def upload_for_components(archives: Sequence[Path], location: ModelLocation, aws: AwsTarget, *,
                          progress: Progress | None = None, sent: Callable[[int], None] | None = None) -> list[Upload]:
    """Each archive to ``<prefix>/<name>``, as built: every component runs its own Triton, so no step name can
    collide with another archive's and nothing is stamped."""
    return upload_archives(archives, location, aws, progress=progress, sent=sent)


def deploy_components(
    spec: ComponentEndpoint,
    aws: AwsTarget,
    *,
    uploads: Sequence[Upload] = (),
    scaling: CopyScaling | None = None,
    wait: bool = True,
    timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    poll: float = DEFAULT_POLL_S,
    progress: Progress | None = None,
) -> ComponentDeployment:
    """Bring ``spec`` up on SageMaker: models, endpoint config, endpoint, one inference component each."""
    say = progress or (lambda _: None)
    sm = aws.client("sagemaker")
    if scaling is not None and not wait:
        raise DeployError("autoscaling needs the components InService: drop --no-wait, or deploy once more with the "
                          "scaling options when they are up")
    for component in spec.components:
        request = spec.model_request(component)
        if _described(sm.describe_model, f"model {request['ModelName']!r}", ModelName=request["ModelName"]) is None:
            say(f"creating model {request['ModelName']} ({component.served_model} from {component.model_data_url})")
            with aws_errors(f"creating SageMaker model {request['ModelName']!r}",
                            "the role must be passable (iam:PassRole)"):
                sm.create_model(**request)
    if _described(sm.describe_endpoint_config, f"endpoint config {spec.config_name!r}",
                  EndpointConfigName=spec.config_name) is None:
        scaling_range = spec.production_variants()[0]["ManagedInstanceScaling"]
        say(f"creating endpoint config {spec.config_name} ({spec.instance_count} x {spec.instance_type}, managed "
            f"instance scaling {scaling_range['MinInstanceCount']}..{scaling_range['MaxInstanceCount']})")
        with aws_errors(f"creating endpoint config {spec.config_name!r}"):
            sm.create_endpoint_config(**spec.config_request())
    current = describe_endpoint(sm, spec.name)
    done = ComponentDeployment(list(uploads), "created")
    if current is None:
        say(f"creating endpoint {spec.name}")
        with aws_errors(f"creating endpoint {spec.name!r}"):
            sm.create_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name,
                               Tags=[{"Key": "conch:endpoint", "Value": spec.name}])
    elif current["EndpointConfigName"] == spec.config_name:
        done.endpoint_action = "unchanged"
    else:
        done.endpoint_action = "updated"
        with aws_errors(f"updating endpoint {spec.name!r} to config {spec.config_name!r}"):
            sm.update_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name)
    if done.endpoint_action != "unchanged":
        # inference components are created on an InService endpoint only
        wait_in_service(sm, spec.name, timeout=timeout, poll=poll, expect_config=spec.config_name, progress=say)
    for component in spec.components:
        described = describe_component(sm, component.name)
        if described is None:
            say(f"creating inference component {component.name} ({component.copies} copies, "
                f"{component.resources.memory_mb} MiB {component.resources.source})")
            with aws_errors(f"creating inference component {component.name!r}"):
                sm.create_inference_component(**spec.component_request(component))
            done.components[component.name] = "created"
        elif differs(described, spec.specification(component)):
            say(f"updating inference component {component.name} to {spec.model_name(component)}")
            with aws_errors(f"updating inference component {component.name!r}"):
                sm.update_inference_component(**spec.update_request(component, copies=scaling is None))
            done.components[component.name] = "updated"
        else:
            done.components[component.name] = "unchanged"
    if wait:
        for name, action in done.components.items():
            if action != "unchanged":
                wait_component(sm, name, timeout=timeout, poll=poll, progress=say)
    wanted = {c.name for c in spec.components}
    for name in endpoint_components(sm, spec.name):
        if name not in wanted:
            done.removed += remove_component(aws, sm, name, say)
    if wait:  # the old models and configs are no longer in use once the updates are done
        done.removed += _remove_tagged(sm, spec.name, {spec.model_name(c) for c in spec.components},
                                       {spec.config_name})
    if scaling is not None:
        for component in spec.components:
            done.policy_arns[component.name] = apply_component_scaling(aws, component.name, scaling)
    return done


def describe_component(sm: Any, name: str) -> dict[str, Any] | None:
    return _described(sm.describe_inference_component, f"inference component {name!r}", InferenceComponentName=name)


def endpoint_components(sm: Any, endpoint: str) -> list[str]:
    """The names of the inference components on ``endpoint``."""
    names: list[str] = []
    token: str | None = None
    with aws_errors(f"listing the inference components of {endpoint!r}"):
        while True:
            page = sm.list_inference_components(EndpointNameEquals=endpoint, MaxResults=100,
                                                **({"NextToken": token} if token else {}))
            names += [c["InferenceComponentName"] for c in page.get("InferenceComponents", [])]
            token = page.get("NextToken")
            if not token:
                return names


def wait_component(sm: Any, name: str, *, timeout: float = DEFAULT_WAIT_TIMEOUT_S, poll: float = DEFAULT_POLL_S,
                   progress: Progress | None = None, gone: bool = False) -> None:
    """Poll until the component is InService (or, with ``gone``, deleted); fail on Failed or the timeout."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        described = describe_component(sm, name)
        if described is None:
            if gone:
                return
            raise DeployError(f"inference component {name!r} disappeared while waiting for it (deleted elsewhere?)")
        status = str(described.get("InferenceComponentStatus", ""))
        if status != last and progress:
            progress(f"inference component {name}: {status}")
        last = status
        if status == "InService" and not gone:
            return
        if status == "Failed":
            reason = described.get("FailureReason") or "no reason given"
            raise DeployError(f"inference component {name!r} failed: {reason}"
                              f"{_logs(str(described.get('EndpointName', name)))}")
        if time.monotonic() >= deadline:
            raise DeployError(f"inference component {name!r} is still {status} after {timeout:.0f} s; SageMaker "
                              f"carries on: `aws sagemaker describe-inference-component --inference-component-name "
                              f"{name}`, or wait longer with --wait-timeout")
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def remove_component(aws: AwsTarget, sm: Any, name: str, say: Progress) -> list[str]:
    """Delete one component and its autoscaling; what went."""
    removed = remove_component_scaling(aws, name)
    say(f"deleting inference component {name}")
    with aws_errors(f"deleting inference component {name!r}"):
        sm.delete_inference_component(InferenceComponentName=name)
    return [*removed, f"inference component {name}"]


def _remove_tagged(sm: Any, endpoint: str, models: set[str], configs: set[str]) -> list[str]:
    """Delete the endpoint configs and models conch tagged for ``endpoint`` (names starting with the endpoint's:
    a component's name does), except those kept."""
    removed = []
    for kind, lister, key, param, keep, deleter in (
        ("endpoint config", sm.list_endpoint_configs, "EndpointConfigs", "EndpointConfig", configs,
         sm.delete_endpoint_config),
        ("model", sm.list_models, "Models", "Model", models, sm.delete_model),
    ):
        with aws_errors(f"cleaning up the {kind}s conch made for endpoint {endpoint!r}"):
            for item in _listed(lister, key, f"{endpoint[:50].rstrip('-')}-"):
                name = item[f"{param}Name"]
                if name not in keep and _tagged_for(sm, item[f"{param}Arn"], endpoint):
                    deleter(**{f"{param}Name": name})
                    removed.append(f"{kind} {name}")
    return removed


def delete_components_endpoint(name: str, aws: AwsTarget, *, timeout: float = DEFAULT_WAIT_TIMEOUT_S,
                               poll: float = DEFAULT_POLL_S, progress: Progress | None = None) -> list[str]:
    """Delete every inference component on the endpoint (with its autoscaling), the endpoint, and the configs and
    models conch made for it. Components go first: SageMaker deletes no endpoint that still hosts one."""
    say = progress or (lambda _: None)
    sm = aws.client("sagemaker")
    deleted: list[str] = []
    components = endpoint_components(sm, name)
    for component in components:
        deleted += remove_component(aws, sm, component, say)
    for component in components:
        wait_component(sm, component, timeout=timeout, poll=poll, progress=say, gone=True)
    if describe_endpoint(sm, name) is not None:
        with aws_errors(f"deleting endpoint {name!r}"):
            sm.delete_endpoint(EndpointName=name)
        deleted.append(f"endpoint {name}")
        say(f"deleting endpoint {name}")
    deleted += _remove_tagged(sm, name, set(), set())
    if not deleted:
        raise DeployError(f"nothing to undeploy: no endpoint {name!r} with inference components in {aws.region}, and "
                          "no model or endpoint config conch made for it")
    return deleted
