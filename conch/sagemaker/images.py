"""The SageMaker Triton image for a release in a region: AWS publishes it from one ECR account per region."""

from __future__ import annotations

from conch.ensembles.target import Release
from conch.errors import DeployError

# The registry account of `sagemaker-tritonserver` per region (the table of AWS's SageMaker Triton MME
# examples, seed 002). A region not listed here needs --image.
TRITON_IMAGE_ACCOUNTS: dict[str, str] = {
    "us-east-1": "785573368785",
    "us-east-2": "007439368137",
    "us-west-1": "710691900526",
    "us-west-2": "301217895009",
    "eu-west-1": "802834080501",
    "eu-west-2": "205493899709",
    "eu-west-3": "254080097072",
    "eu-north-1": "601324751636",
    "eu-south-1": "966458181534",
    "eu-central-1": "746233611703",
    "ap-east-1": "110948597952",
    "ap-south-1": "763008648453",
    "ap-northeast-1": "941853720454",
    "ap-northeast-2": "151534178276",
    "ap-southeast-1": "324986816169",
    "ap-southeast-2": "355873309152",
    "cn-northwest-1": "474822919863",
    "cn-north-1": "472730292857",
    "sa-east-1": "756306329178",
    "ca-central-1": "464438896020",
    "me-south-1": "836785723513",
    "af-south-1": "774647643957",
}


def triton_image(release: Release | str, region: str, image: str | None = None) -> str:
    """``image`` if given, else the SageMaker Triton image of ``release`` in ``region``."""
    if image:
        return image
    account = TRITON_IMAGE_ACCOUNTS.get(region)
    if account is None:
        raise DeployError(
            f"conch does not know the SageMaker Triton image registry of region {region!r} (it knows "
            f"{', '.join(sorted(TRITON_IMAGE_ACCOUNTS))}); pass the image URI with --image "
            f"(<account>.dkr.ecr.{region}.amazonaws.com/sagemaker-tritonserver:{Release.of(release)}-py3)"
        )
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/sagemaker-tritonserver:{Release.of(release)}-py3"


# Triton's races under MME churn, by release (sources read in the server and core repositories):
# - The SageMaker front end (server src/sagemaker_server.cc) reads its TargetModel list on every invoke without
#   the lock that its load and unload hold, and unload erased from it only at its end: server PRs #8563 and
#   #8571, cherry-picked to r25.12 as #8574 and #8573, first in server v2.64.0 = release 25.12.
# - Triton's model-name lookup (core src/model_repository_manager/model_repository_manager.cc,
#   FindModelIdentifier) reads global_map_ without the mutex that loads and unloads hold while they rewrite it:
#   a call can get "Request for unknown model" for a loaded model while another model loads or unloads.
#   Unlocked in core r24.10 (server 2.51) and still in r26.06: no release fixes it.
LIST_GUARD_RELEASE = Release(25, 12)


def churn_note(release: Release | str) -> str:
    """One line on what Triton's races mean for an MME whose models load and unload while it serves (churn),
    on ``release``; ``conch plan`` and ``conch deploy`` print it."""
    release = Release.of(release)
    # no rate: benchmarks/local_mme.py --churn counts these misses (TritonLookupMisses) on this machine's run
    lookup = ("calls that overlap another model's load or unload can get 'unknown model' (ModelError 400) on every "
              "release so far")
    if release < LIST_GUARD_RELEASE:
        return (f"release {release}: its SageMaker front end reads the TargetModel list unlocked during loads and "
                f"unloads (fixed in {LIST_GUARD_RELEASE}, server 2.64.0); and {lookup}: clients should retry "
                "ModelError 400 'unknown model' or keep churn low")
    return f"release {release}: {lookup}: clients should retry ModelError 400 'unknown model' or keep churn low"
