"""Typed views of what a machine reported about itself and what its join proved (its hardware,
its TPM, its AWS caller): the parts `views.Machine` and `views.RequestedMachine` share, built by
`machines.facts_view`. Like `views`, imported only by type checkers and the OpenAPI generator.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

VIEW = ConfigDict(extra="forbid")


@with_config(VIEW)
class HardwareFacts(TypedDict):
    serialNumber: NotRequired[str]
    systemUuid: NotRequired[str]
    macAddresses: NotRequired[list[str]]


@with_config(VIEW)
class TpmFacts(TypedDict):
    ekPublicKeySha256: NotRequired[str]
    activated: NotRequired[
        Annotated[
            bool,
            Field(
                description="The TPM proved it holds this EK, during this join, for this key "
                "(credential activation). Absent or false: the EK was only claimed, which counts as no TPM."
            ),
        ]
    ]
    verifiedBy: NotRequired[
        Annotated[
            Literal["allow-list", "manufacturer"],
            Field(description="How the activated EK was trusted; absent: by neither (an operator decided)."),
        ]
    ]
    manufacturer: NotRequired[
        Annotated[str, Field(description="The listed root the EK certificate chains to")]
    ]
    ekCertificateIssuer: NotRequired[str]
    ekCertificateSerial: NotRequired[Annotated[str, Field(description="hex")]]
    ekCertificateProblem: NotRequired[
        Annotated[
            str, Field(description="Why the EK certificate did not verify against the site's manufacturers")
        ]
    ]
    akName: NotRequired[Annotated[str, Field(description="hex of the AK's TPM name (nameAlg || digest)")]]


@with_config(VIEW)
class AwsCaller(TypedDict):
    account: Annotated[str, Field(pattern=r"^[0-9]{12}$")]
    arn: Annotated[str, Field(description="the caller's ARN, as STS's GetCallerIdentity answered it")]
    userId: str
    instanceId: NotRequired[
        Annotated[
            str, Field(description="the EC2 instance whose instance profile signed (its role session's name)")
        ]
    ]


class ReportedFacts(TypedDict):
    """What a machine said about itself, as both `Machine` and `RequestedMachine` show it (the one
    builder is machines.facts_view); not a schema of its own."""

    hostname: str
    os: str
    arch: str
    cpuCount: int
    memoryMb: int
    gpuCount: int
    hardware: HardwareFacts
    tpm: TpmFacts
    aws: NotRequired[AwsCaller]
