"""`conch invoke`: an archive's samples replayed on a deployed MME, each answer judged, or one JSON body sent."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from conch.cli.console import document, progress_bar, result, say
from conch.cli.flags import Subcommands, add_aws_flags
from conch.verdicts import replay_document
from conch.wire import BODIES


def cmd_invoke(args: argparse.Namespace) -> int:
    from conch.aws import AwsTarget
    from conch.errors import DeployError
    from conch.sagemaker.runtime import invoke_raw, read_json_body, replay_endpoint

    request = args.request
    if args.stray:  # `--json FILE`: --request's old spelling; the answer was printed as JSON then too
        if not (args.json_output and len(args.stray) == 1 and request is None):
            raise DeployError(f"unexpected {' '.join(args.stray)!r}: invoke takes options only (a request body is "
                              "--request FILE)")
        request = Path(args.stray[0])
        say(f"conch: warning: `invoke --json {request}` is spelt `invoke --request {request} --json` now")
    aws = AwsTarget.resolve(args.region, args.endpoint_url)
    component = args.inference_component
    if args.components and component is None:
        from conch.wire import component_name

        if args.archive is None:
            raise DeployError("--components names each archive's inference component after it: give --archive, "
                              "or name the component with --inference-component")
        component = component_name(args.endpoint, args.archive.name)
    if request is not None:
        if not args.target_model and component is None:
            raise DeployError("--request needs --target-model (the archive's name under the prefix, e.g. x.tar.gz)")
        body = read_json_body(request)
        content, content_type = invoke_raw(aws, args.endpoint, args.target_model or "", body, "application/json",
                                           component=component)
        try:
            answer = json.loads(content)
        except ValueError:
            result(f"({content_type}) {content.decode('utf-8', 'replace')}")
            document({"content_type": content_type, "text": content.decode("utf-8", "replace")})
        else:
            result(json.dumps(answer, indent=1))
            document(answer)
        return 0
    if args.archive is None:
        raise DeployError("give --archive PATH (replays its samples, or those named with --sample) or --request FILE")
    with progress_bar(f"invoking {args.endpoint}", None) as bar:
        report = replay_endpoint(aws, args.endpoint, args.archive, bodies=args.body or BODIES,
                                 samples=args.sample or (), target_model=args.target_model,
                                 progress=bar.line, component=component)
    result(report.table())
    document(replay_document(report))
    return 0 if report.passed else 1


def register(sub: Subcommands) -> None:
    v = sub.add_parser("invoke", help="replay an archive's samples (or send a JSON body) on a deployed MME")
    add_aws_flags(v)
    v.add_argument("--archive", type=Path, help="local archive whose samples to send (TargetModel: its name)")
    v.add_argument("--target-model", help="TargetModel (default: the archive's file name)")
    v.add_argument("--sample", action="append", help="only this sample of the archive (repeatable)")
    v.add_argument("--request", type=Path, help="send this KServe v2 JSON request body and print the answer "
                   "(with --json: the answer is the JSON document)")
    v.add_argument("stray", nargs="*", help=argparse.SUPPRESS)  # `--json FILE`, as --request was once spelt
    v.add_argument("--body", action="append", choices=BODIES,
                   help="request body kinds for samples (default both)")
    v.add_argument("--inference-component", metavar="NAME", help="send to this inference component (an endpoint "
                   "deployed with `conch deploy --components`, or `conch serve --components`) instead of a TargetModel")
    v.add_argument("--components", action="store_true", help="the endpoint hosts inference components: send to the "
                   "archive's, <endpoint>-<archive stem>")
    v.set_defaults(func=cmd_invoke)
