"""``conch deploy`` as a function: check the archives, upload them under the prefix, bring the MME up
(or move it to a new config), then scale it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from conch.archive.fleet_check import ArchiveModels, check_archive_models
from conch.aws import AwsTarget
from conch.ensembles.target import DEFAULT_RELEASE, Release
from conch.errors import DeployError
from conch.sagemaker.autoscaling import Autoscaling, apply_autoscaling
from conch.sagemaker.endpoint import (
    DEFAULT_POLL_S,
    DEFAULT_WAIT_TIMEOUT_S,
    EndpointResult,
    EndpointSpec,
    deploy_endpoint,
)
from conch.sagemaker.images import churn_note
from conch.sagemaker.instances import gpus
from conch.sagemaker.runtime import built_manifest
from conch.sagemaker.s3 import ModelLocation, Upload, upload_archives
from conch.sagemaker.upload_plan import plan_uploads
from conch.scratch import scratch_temp


@dataclass
class Deployment:
    """What a deploy did: the uploads, the endpoint's fate, the scaling policy, and what to watch out for."""

    location: ModelLocation
    uploads: list[Upload]
    endpoint: EndpointResult
    policy_arn: str | None = None
    warnings: list[str] = field(default_factory=list)


def check_archives(archives: Sequence[Path]) -> dict[Path, ArchiveModels]:
    """Refuse the deploy if any archive fails `conch check` (each failing archive on its own line); else what
    the fleet check needs of each archive, read from the check's own parse of its configs (the upload plan
    and the upload's S3 metadata go on with it: each config is parsed once)."""
    checked = {archive: check_archive_models(archive) for archive in archives}
    failing = [report for report, _ in checked.values() if not report.ok]
    if failing:
        lines = "\n".join(f"  {report.summary()}" for report in failing)
        raise DeployError(f"refusing to deploy: {len(failing)} of {len(archives)} archives fail `conch check` "
                          f"(run it for every finding; fix or rebuild them):\n{lines}")
    return {archive: models for archive, (_, models) in checked.items() if models is not None}


def archives_release(archives: Sequence[Path], release: Release | str | None = None) -> Release:
    """The one Triton release the archives were built for (checked against ``release`` if given).

    A release fixes the Python of the Python-backend stub, so an archive must run on its own release's image;
    a ``local`` build (CPU stand-ins) is not for SageMaker."""
    if not archives:
        raise DeployError("no archives to deploy: give .tar.gz files built with `conch build` (or folders of them)")
    built: dict[str, list[str]] = {}
    for archive in archives:
        manifest = built_manifest(archive)
        if manifest is None:  # made by hand: it runs on the endpoint's release
            continue
        if manifest.target != "production":
            raise DeployError(
                f"{archive.name} is a {manifest.target!r} build (CPU stand-ins for the local server); build "
                "it for SageMaker with `conch build --target production`"
            )
        built.setdefault(manifest.release, []).append(archive.name)
    if release is not None:
        wanted = Release.of(release)
        others = {r: names for r, names in built.items() if Release.of(r) != wanted}
        if others:
            r, names = next(iter(others.items()))
            raise DeployError(
                f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} built for Triton {r} but the endpoint "
                f"would run {wanted}; deploy with --release {r} or rebuild with --release {wanted}"
            )
        return wanted
    if not built:  # every archive made by hand
        return Release.of(DEFAULT_RELEASE)
    if len(built) > 1:
        listing = "; ".join(f"{r}: {', '.join(names)}" for r, names in sorted(built.items()))
        raise DeployError(
            f"the archives were built for different Triton releases ({listing}); one endpoint runs one image: "
            "rebuild them for one release"
        )
    return Release.of(next(iter(built)))


def lookup_race_note(release: Release, target_models: int) -> str | None:
    """What Triton's races under churn mean for an endpoint of several TargetModels on ``release`` (None: one
    TargetModel, nothing moves); the facts and their sources are ``images.churn_note``'s."""
    if target_models < 2:
        return None
    return f"with {target_models} TargetModels, {churn_note(release)}"


def deploy(
    archives: Sequence[Path],
    location: ModelLocation,
    spec: EndpointSpec,
    aws: AwsTarget,
    *,
    scaling: Autoscaling | None = None,
    wait: bool = True,
    timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    poll: float = DEFAULT_POLL_S,
    multipart_threshold: int | None = None,
    progress: Callable[[str], None] | None = None,
    checked: Mapping[Path, ArchiveModels] | None = None,
    sent: Callable[[int], None] | None = None,
    names: Sequence[str] = (),
    copies: int = 0,
) -> Deployment:
    """Upload ``archives`` to ``location`` and serve them all from the MME ``spec`` describes.

    ``names`` (``--as``) uploads the one archive under each name, ``copies`` (``--copies``) each archive as
    ``<name>-1`` … ``<name>-N``; those, and any archive whose step names another TargetModel under the prefix
    already uses, go up stamped (conch.sagemaker.upload_plan), after the fleet check of the prefix plus uploads.
    Every archive must pass `conch check` first (``checked``: what ``check_archives`` returned, when the caller
    already ran it; an archive it does not hold, or whose file changed since that check, is checked here, so a
    check of other archives or of older bytes skips none).
    ``spec.warnings`` (about its instance type) are the caller's to show before this starts."""
    checked = dict(checked or {})
    unchecked = [archive for archive in archives
                 if archive not in checked or not checked[archive].unchanged_since_check(archive)]
    if unchecked:
        checked.update(check_archives(unchecked))
    if spec.model_data_url != location.model_data_url:
        raise DeployError(f"the endpoint would serve {spec.model_data_url} but the archives go to "
                          f"{location.model_data_url}")
    if scaling is not None:
        if not wait:
            raise DeployError("autoscaling needs the endpoint InService: drop --no-wait, or deploy once more "
                              "with the scaling options when it is up")
        if scaling.metric == "gpu" and gpus(spec.instance_type) == 0:
            raise DeployError(f"{spec.instance_type} has no GPU, so it reports no GPUUtilization: scale on "
                              "invocations (--scale-on invocations --target-value N)")
    warnings: list[str] = []
    threshold = {"multipart_threshold": multipart_threshold} if multipart_threshold else {}
    with scratch_temp("conch-deploy-") as tmp:
        plan = plan_uploads(archives, location, aws, Path(tmp), names=names, copies=copies, progress=progress,
                            read=checked)
        warnings += plan.warnings
        uploads = upload_archives([p.file for p in plan.uploads], location, aws, progress=progress, sent=sent,
                                  bucket_checked=True, read={p.file: p.models for p in plan.uploads},
                                  **threshold)
    uploads = [replace(u, archive=p.source, stamped=p.stamped, steps=p.steps)
               for u, p in zip(uploads, plan.uploads, strict=True)]
    served = set(plan.already) | {u.target_model for u in uploads}
    race = lookup_race_note(archives_release(archives), len(served))
    warnings += [race] if race else []
    for upload in uploads:
        if upload.action == "replaced":
            warnings.append(
                f"{upload.url} had other bytes and was replaced: instances that already loaded "
                f"{upload.target_model} keep serving their copy until SageMaker unloads it; give a new version "
                "a new archive name to be sure callers get it"
            )
    result = deploy_endpoint(spec, aws, wait=wait, timeout=timeout, poll=poll, progress=progress)
    deployment = Deployment(location, uploads, result, warnings=warnings + result.notes)
    if scaling is not None:
        deployment.policy_arn = apply_autoscaling(aws, spec.name, spec.variant, scaling)
    return deployment
