"""`conch deploy`: upload archives to S3 (stamping any whose step names are taken under the prefix) and serve
them from one SageMaker MME, with autoscaling if asked."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.console import document, progress_bar, result, say
from conch.cli.flags import Subcommands, add_aws_flags, size
from conch.sagemaker.autoscaling import METRICS

if TYPE_CHECKING:
    from conch.aws import AwsTarget
    from conch.ensembles.target import Release
    from conch.sagemaker.autoscaling import Autoscaling
    from conch.sagemaker.s3 import ModelLocation, Upload


def _target(args: argparse.Namespace, archives: Sequence[Path],
            ) -> tuple[Release, AwsTarget, ModelLocation, dict[str, str], list[str]]:
    """What a deploy goes to, for an MME and for inference components alike: the archives' release, the AWS
    target (a recorder under --dry-run), the S3 location, and the container's environment with what it says."""
    from conch.aws import AwsTarget
    from conch.sagemaker.rollout import archives_release
    from conch.sagemaker.s3 import ModelLocation
    from conch.sagemaker.shm_environment import shm_environment

    release = archives_release(archives, args.release)
    aws = AwsTarget.resolve(args.region, args.endpoint_url)
    if args.dry_run:
        from conch.sagemaker.dry_run import DryRunAws

        aws = DryRunAws(aws.region, aws.endpoint_url)
    environment, said = shm_environment(archives, _pairs(args.env or []))
    return release, aws, ModelLocation(args.bucket, args.prefix), environment, said


def cmd_deploy(args: argparse.Namespace) -> int:
    from conch.builder.discover import sort_paths
    from conch.sagemaker.endpoint import EndpointSpec
    from conch.sagemaker.images import triton_image
    from conch.sagemaker.rollout import check_archives, deploy

    archives = sort_paths(args.archives, archives_for="deploy", must_exist=True).archives
    checked = check_archives(archives)
    if args.components:
        return _deploy_components(args, archives, checked)
    release, aws, location, environment, said = _target(args, archives)
    spec = EndpointSpec(
        args.endpoint, args.role, location.model_data_url, triton_image(release, aws.region, args.image),
        args.instance_type, args.instance_count, args.variant, environment,
    )
    scaling = _scaling(args, spec.instance_type)
    for warning in spec.warnings:
        say(f"conch: warning: {warning}")
    per_archive = len(args.names) if args.names else args.copies or 1
    total = sum(a.stat().st_size for a in archives) * per_archive
    with progress_bar("uploading", None if args.dry_run else total, bytes_=True) as bar:
        done = deploy(archives, location, spec, aws, scaling=scaling, wait=not args.no_wait,
                      timeout=args.wait_timeout, progress=None if args.dry_run else say, checked=checked,
                      sent=None if args.dry_run else bar.advance, names=args.names or (), copies=args.copies)
    if args.dry_run:
        result("\n".join([*(f"shared memory: {line}" for line in said), *_stamp_lines(done.uploads, "would stamp")]))
        for warning in done.warnings:
            say(f"conch: warning: {warning}")
        result(aws.report())  # type: ignore[attr-defined]
        document({"dry_run": True, "region": aws.region, "shared_memory": said,
                  "uploads": [_upload_json(u) for u in done.uploads], "warnings": done.warnings,
                  "calls": [asdict(call) for call in aws.calls]})  # type: ignore[attr-defined]
        return 0
    for warning in done.warnings:
        say(f"conch: warning: {warning}")
    ended = done.endpoint
    lines = [f"endpoint {ended.name} {ended.action} ({ended.status}) in {aws.region}: {spec.instance_count} x "
             f"{spec.instance_type}, {spec.image}, models from {location.model_data_url}"]
    lines += [f"  {upload.action:9} {upload.url}  TargetModel={upload.target_model}" for upload in done.uploads]
    lines += _stamp_lines(done.uploads, "  stamped")
    lines += [f"  removed   {removed}" for removed in ended.removed]
    lines += [f"  shared memory: {line}" for line in said]
    if scaling is not None:
        lines.append(f"  autoscaling {scaling.min_instances}..{scaling.max_instances} instances, target "
                     f"{scaling.target_value:g} {scaling.target_unit} ({done.policy_arn})")
    first = done.uploads[0]
    lines.append(f"  try: conch invoke --endpoint {ended.name} --archive {first.archive} "
                 f"{'' if first.archive.name == first.target_model else f'--target-model {first.target_model} '}"
                 f"--region {aws.region}")
    result("\n".join(lines))
    document({
        "endpoint": ended.name, "action": ended.action, "status": ended.status, "region": aws.region,
        "model": ended.model_name, "endpoint_config": ended.config_name, "image": spec.image,
        "instance_type": spec.instance_type, "instance_count": spec.instance_count,
        "model_data_url": location.model_data_url, "removed": ended.removed, "shared_memory": said,
        "warnings": done.warnings,
        "uploads": [_upload_json(u) for u in done.uploads],
        "autoscaling": None if scaling is None else {
            "min_instances": scaling.min_instances, "max_instances": scaling.max_instances,
            "metric": scaling.metric, "target_value": scaling.target_value, "policy_arn": done.policy_arn},
    })
    return 0


def _deploy_components(args: argparse.Namespace, archives: Sequence[Path], checked: Mapping[Path, Any]) -> int:
    """`conch deploy --components`: one model and one inference component per archive, on one endpoint."""
    from conch.sagemaker.component_rollout import deploy_components, upload_for_components
    from conch.sagemaker.components import ComponentEndpoint
    from conch.sagemaker.images import triton_image

    if args.names or args.copies:
        raise _usage("--as and --copies stamp copies for an MME; with --components each archive is one component: "
                     "scale its copies with --copy-count, --min-copies and --max-copies")
    release, aws, location, environment, said = _target(args, archives)
    components = _components(args, archives, checked, location)
    spec = ComponentEndpoint(
        args.endpoint, args.role, triton_image(release, aws.region, args.image), tuple(components),
        args.instance_type, args.instance_count, 1 if args.min_instances is None else args.min_instances,
        args.max_instances, args.variant, environment)
    scaling = _copy_scaling(args)
    uploads = upload_for_components(archives, location, aws, progress=None if args.dry_run else say)
    done = deploy_components(spec, aws, uploads=uploads, scaling=scaling, wait=not args.no_wait,
                             timeout=args.wait_timeout, progress=None if args.dry_run else say)
    lines = [f"component {c.name}: {c.archive} serving {c.served_model}, {c.copies} copies of "
             f"{c.resources.memory_mb} MiB ({c.resources.source}), {c.resources.cpus:g} CPU, "
             f"{c.resources.accelerators} accelerators" for c in components]
    lines += [f"shared memory: {line}" for line in said]
    if args.dry_run:
        result("\n".join([*lines, aws.report()]))  # type: ignore[attr-defined]
        document({"dry_run": True, "components": True, "region": aws.region, "shared_memory": said,
                  "calls": [asdict(call) for call in aws.calls]})  # type: ignore[attr-defined]
        return 0
    lines.insert(0, f"endpoint {spec.name} {done.endpoint_action} in {aws.region}: {spec.instance_count} x "
                 f"{spec.instance_type}, {spec.image}")
    lines += [f"  {action:9} inference component {name}" for name, action in done.components.items()]
    lines += [f"  removed   {removed}" for removed in done.removed]
    lines.append(f"  try: conch invoke --endpoint {spec.name} --inference-component {components[0].name} "
                 f"--archive {archives[0]} --region {aws.region}")
    result("\n".join(lines))
    document({"endpoint": spec.name, "action": done.endpoint_action, "region": aws.region, "image": spec.image,
              "components": done.components, "removed": done.removed, "policy_arns": done.policy_arns,
              "uploads": [_upload_json(u) for u in done.uploads], "shared_memory": said})
    return 0


def _components(args: argparse.Namespace, archives: Sequence[Path], checked: Mapping[Path, Any],
                location: Any) -> list[Any]:
    """One Component per archive, its reservation from --resources, --component-memory/--component-cpus, a probe,
    or assumed; refused when one copy does not fit the instance type's memory."""
    from conch.plan.instance_data import load_instances
    from conch.sagemaker.component_resources import read_overrides, read_probes, resources_for
    from conch.sagemaker.components import Component, component_name, served_model
    from conch.sagemaker.instances import gpus

    probes, overrides = read_probes(args.probe or []), read_overrides(args.resources)
    known = {t.name: t for t in load_instances(None).types}
    components = []
    for archive in archives:
        models = checked[archive]
        served = served_model(archive.name, models.ensembles, models.single)
        memory = None if args.component_memory is None else -(-args.component_memory // 2**20)
        resources = resources_for(archive.name, served, accelerators=min(gpus(args.instance_type), 1),
                                  probes=probes, overrides=overrides, memory_mb=memory, cpus=args.component_cpus)
        itype = known.get(args.instance_type)
        if itype is not None and resources.memory_mb * 2**20 > itype.memory_bytes:
            from conch.errors import DeployError

            raise DeployError(f"{archive.name}: one copy reserves {resources.memory_mb} MiB ({resources.source}) but "
                              f"{itype.name} has {itype.memory_bytes // 2**20} MiB; pick a larger --instance-type or "
                              "lower the reservation (--resources, --component-memory)")
        if resources.source.startswith("assumed"):
            say(f"conch: warning: {archive.name}: no probe measured it; each copy reserves {resources.memory_mb} MiB "
                f"(assumed): measure it with `conch bench --probe {archive}` and pass --probe PROBE.json")
        components.append(Component(component_name(args.endpoint, archive.name), archive.name,
                                    f"s3://{location.bucket}/{location.key(archive.name)}", served, resources,
                                    args.copy_count))
    return components


def _copy_scaling(args: argparse.Namespace) -> Any:
    from conch.sagemaker.component_scaling import CopyScaling

    if args.max_copies is None:
        if args.min_copies is not None or args.invocations_per_copy is not None:
            raise _usage("copy autoscaling needs --max-copies (with --min-copies, --invocations-per-copy)")
        return None
    if args.invocations_per_copy is None:
        raise _usage("copy autoscaling needs --invocations-per-copy: the invocations per minute one copy should "
                     "serve (measure it with `conch bench`)")
    return CopyScaling(args.max_copies, args.invocations_per_copy, 0 if args.min_copies is None else args.min_copies)


def _usage(message: str) -> Exception:
    from conch.errors import DeployError

    return DeployError(message)


def _stamp_lines(uploads: Sequence[Upload], verb: str) -> list[str]:
    """One line per stamped upload: which TargetModel, why, and how many step names it got."""
    return [f"{verb} {u.archive.name} as {u.target_model} ({u.stamped}): step names "
            f"{', '.join(f'{a} -> {b}' for a, b in sorted(u.steps.items()))}" for u in uploads if u.stamped]


def _upload_json(u: Upload) -> dict[str, Any]:
    return {"archive": str(u.archive), "url": u.url, "target_model": u.target_model, "sha256": u.sha256,
            "action": u.action, "stamped": u.stamped, "steps": dict(u.steps)}


def _pairs(items: Sequence[str]) -> dict[str, str]:
    from conch.errors import DeployError

    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise DeployError(f"--env {item!r}: write KEY=VALUE")
        pairs[key] = value
    return pairs


def _scaling(args: argparse.Namespace, instance_type: str) -> Autoscaling | None:
    from conch.errors import DeployError
    from conch.sagemaker.autoscaling import Autoscaling

    if args.max_instances is None:
        if args.scale_on or args.target_value is not None or args.min_instances is not None:
            raise DeployError("autoscaling needs --max-instances (with --min-instances, --scale-on, --target-value)")
        return None
    return Autoscaling.for_instance_type(
        instance_type, args.max_instances, args.scale_on, target_value=args.target_value,
        min_instances=1 if args.min_instances is None else args.min_instances,
        scale_in_cooldown=args.scale_in_cooldown, scale_out_cooldown=args.scale_out_cooldown,
    )


def register(sub: Subcommands) -> None:
    from conch.sagemaker.endpoint import DEFAULT_INSTANCE_TYPE, DEFAULT_VARIANT, DEFAULT_WAIT_TIMEOUT_S

    d = sub.add_parser("deploy", help="upload archives to S3 (stamping any whose step names are taken under the "
                       "prefix) and serve them from one SageMaker MME")
    d.add_argument("archives", nargs="+", type=Path, help=".tar.gz archives built by `conch build`, or folders")
    d.add_argument("--bucket", required=True, help="S3 bucket in the endpoint's region")
    d.add_argument("--prefix", default="", help="S3 prefix the MME serves (the archives go to <prefix>/<name>)")
    d.add_argument("--as", dest="names", action="append", metavar="NAME",
                   help="upload the one archive as TargetModel NAME (repeatable), each stamped with step names of "
                   "its own")
    d.add_argument("--copies", type=int, default=0, metavar="N",
                   help="upload each archive N times, as <name>-1.tar.gz … <name>-N.tar.gz, each stamped")
    d.add_argument("--role", required=True, help="ARN of the execution role SageMaker assumes")
    add_aws_flags(d)
    d.add_argument("--instance-type", default=DEFAULT_INSTANCE_TYPE, help=f"default {DEFAULT_INSTANCE_TYPE}")
    d.add_argument("--instance-count", type=int, default=1)
    d.add_argument("--variant", default=DEFAULT_VARIANT, help=f"production variant name (default {DEFAULT_VARIANT})")
    d.add_argument("--release", help="Triton release of the image (default: the release the archives were built for)")
    d.add_argument("--image", help="image URI instead of the SageMaker Triton image of the release and region")
    d.add_argument("--env", action="append", metavar="KEY=VALUE", help="container environment (repeatable)")
    d.add_argument("--min-instances", type=int, help="autoscaling minimum (default 1)")
    d.add_argument("--max-instances", type=int, help="autoscaling maximum; turns autoscaling on")
    d.add_argument("--scale-on", choices=METRICS,
                   help="metric to track (default: gpu on GPU instances, else invocations)")
    d.add_argument("--target-value", type=float,
                   help="GPU utilisation in %% (default 60), or invocations per instance per minute (required)")
    d.add_argument("--scale-in-cooldown", type=int, default=600, help="seconds (default 600)")
    d.add_argument("--scale-out-cooldown", type=int, default=200, help="seconds (default 200)")
    d.add_argument("--no-wait", action="store_true", help="return once SageMaker accepted the change")
    d.add_argument("--dry-run", action="store_true",
                   help="print every AWS call the deploy would make, with its arguments, and make none")
    d.add_argument("--wait-timeout", type=float, default=DEFAULT_WAIT_TIMEOUT_S,
                   help=f"seconds to wait for InService (default {DEFAULT_WAIT_TIMEOUT_S:.0f})")
    ic = d.add_argument_group("inference components (--components)")
    ic.add_argument("--components", action="store_true",
                    help="serve each archive as an inference component of its own on the endpoint, not from an MME")
    ic.add_argument("--probe", type=Path, action="append", metavar="PROBE.json",
                    help="what `conch bench --probe` measured of an archive: its copy's memory (repeatable)")
    ic.add_argument("--resources", type=Path, metavar="FILE", help='per ensemble: {"<ensemble>": {"memory_mb": N, '
                    '"cpus": N, "accelerators": N}} (wins over everything else)')
    ic.add_argument("--component-memory", type=size, help="memory one copy reserves, for every component")
    ic.add_argument("--component-cpus", type=float, help="CPU cores one copy reserves (default 1)")
    ic.add_argument("--copy-count", type=int, default=1, help="copies each component starts with (default 1)")
    ic.add_argument("--min-copies", type=int, help="copy autoscaling minimum (default 0: scale to zero)")
    ic.add_argument("--max-copies", type=int, help="copy autoscaling maximum; turns copy autoscaling on")
    ic.add_argument("--invocations-per-copy", type=float,
                    help="target of SageMakerInferenceComponentInvocationsPerCopy (per minute)")
    d.set_defaults(func=cmd_deploy)
