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
    return sagemaker_image(Release.of(release), account, region)


def sagemaker_image(release: Release, account: str, region: str) -> str:
    """The SageMaker Triton image URI of ``release`` in ``account``'s registry of ``region``."""
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/sagemaker-tritonserver:{release}-py3"
