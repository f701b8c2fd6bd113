"""`conch deploy`: upload archives to S3 (stamping any whose step names are taken under the prefix) and serve
them from one SageMaker MME, with autoscaling if asked."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.console import document, progress_bar, result, say
from conch.cli.flags import Subcommands, add_aws_flags
from conch.sagemaker.autoscaling import METRICS

if TYPE_CHECKING:
    from conch.sagemaker.autoscaling import Autoscaling
    from conch.sagemaker.s3 import Upload


def cmd_deploy(args: argparse.Namespace) -> int:
    from conch.aws import AwsTarget
    from conch.builder.discover import sort_paths
    from conch.sagemaker.endpoint import EndpointSpec
    from conch.sagemaker.images import triton_image
    from conch.sagemaker.rollout import archives_release, check_archives, deploy
    from conch.sagemaker.s3 import ModelLocation
    from conch.sagemaker.shm_environment import shm_environment

    archives = sort_paths(args.archives, archives_for="deploy", must_exist=True).archives
    checked = check_archives(archives)
    release = archives_release(archives, args.release)
    aws = AwsTarget.resolve(args.region, args.endpoint_url)
    if args.dry_run:
        from conch.sagemaker.dry_run import DryRunAws

        aws = DryRunAws(aws.region, aws.endpoint_url)
    location = ModelLocation(args.bucket, args.prefix)
    environment, said = shm_environment(archives, _pairs(args.env or []))
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
    d.set_defaults(func=cmd_deploy)
