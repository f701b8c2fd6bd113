"""`conch undeploy`: delete an endpoint and the configs, models and autoscaling conch made for it."""

from __future__ import annotations

import argparse

from conch.cli.console import document, result, say
from conch.cli.flags import Subcommands, add_aws_flags


def cmd_undeploy(args: argparse.Namespace) -> int:
    from conch.aws import AwsTarget
    from conch.sagemaker.endpoint import delete_endpoint

    aws = AwsTarget.resolve(args.region, args.endpoint_url)
    if args.components:
        from conch.sagemaker.component_rollout import delete_components_endpoint

        deleted = delete_components_endpoint(args.endpoint, aws, progress=say)
    else:
        deleted = delete_endpoint(args.endpoint, aws, progress=say)
    result("\n".join([*(f"deleted {item}" for item in deleted), "the archives stay in S3"]))
    document({"endpoint": args.endpoint, "region": aws.region, "deleted": deleted})
    return 0


def register(sub: Subcommands) -> None:
    u = sub.add_parser("undeploy", help="delete an endpoint and the configs, models and autoscaling conch made")
    add_aws_flags(u)
    u.add_argument("--components", action="store_true",
                   help="the endpoint hosts inference components: delete them (and their autoscaling) first")
    u.set_defaults(func=cmd_undeploy)
