"""What a machine said about itself when it joined (and what its join proved of its TPM and its
AWS caller), as a join request's `machine` and a machine's `facts` store it: sub-documents of
those items (`joinplane.dal.requests`, `joinplane.dal.machines`, which re-exports them)."""

from __future__ import annotations

from typing import NamedTuple

from joinplane.dal.dynamo import Item


class HardwareFactsRecord(NamedTuple):
    """The machine's hardware ids as it sent them (None: not sent)."""

    serial_number: str | None = None
    system_uuid: str | None = None
    mac_addresses: tuple[str, ...] | None = None

    @classmethod
    def from_item(cls, item: Item) -> HardwareFactsRecord:
        macs = item.get("macAddresses")
        return cls(
            item.get("serialNumber"), item.get("systemUuid"), tuple(macs) if macs is not None else None
        )

    def to_item(self) -> Item:
        item: Item = {"serialNumber": self.serial_number, "systemUuid": self.system_uuid}
        if self.mac_addresses is not None:
            item["macAddresses"] = list(self.mac_addresses)
        return {name: value for name, value in item.items() if value is not None}


_TPM_NAMES = (
    ("ek_public_key_sha256", "ekPublicKeySha256"),
    ("activated", "activated"),
    ("verified_by", "verifiedBy"),
    ("manufacturer", "manufacturer"),
    ("ek_certificate_issuer", "ekCertificateIssuer"),
    ("ek_certificate_serial", "ekCertificateSerial"),
    ("ek_certificate_problem", "ekCertificateProblem"),
    ("ak_name", "akName"),
)


class TpmFactsRecord(NamedTuple):
    """The TPM a machine presented, and what the join proved of it (docs/tpm.md). Fields an older
    item lacks read as "not activated"."""

    ek_public_key_sha256: str = ""  # "": the machine sent no TPM
    activated: bool = False  # the TPM answered the credential challenge for this EK and AK
    verified_by: str = ""  # "allow-list" | "manufacturer" | "": neither (an operator decided)
    manufacturer: str = ""  # the listed root the EK certificate chains to
    ek_certificate_issuer: str = ""
    ek_certificate_serial: str = ""
    ek_certificate_problem: str = ""
    ak_name: str = ""

    @classmethod
    def from_item(cls, item: Item) -> TpmFactsRecord:
        return cls(**{field: item[name] for field, name in _TPM_NAMES if name in item})

    def to_item(self) -> Item:
        return {name: getattr(self, field) for field, name in _TPM_NAMES if getattr(self, field)}


_AWS_NAMES = (("account", "account"), ("arn", "arn"), ("user_id", "userId"), ("instance_id", "instanceId"))


class AwsFactsRecord(NamedTuple):
    """The AWS caller an IAM join proved (docs/aws.md), as STS answered; all "" for other joins."""

    account: str = ""
    arn: str = ""
    user_id: str = ""
    instance_id: str = ""  # the EC2 instance whose profile signed (its role session's name)

    @classmethod
    def from_item(cls, item: Item) -> AwsFactsRecord:
        return cls(**{field: item[name] for field, name in _AWS_NAMES if name in item})

    def to_item(self) -> Item:
        return {name: getattr(self, field) for field, name in _AWS_NAMES if getattr(self, field)}


class PreflightCheckRecord(NamedTuple):
    name: str = ""
    ok: bool = False
    message: str = ""
    severity: str = ""

    @classmethod
    def from_item(cls, item: Item) -> PreflightCheckRecord:
        return cls(
            item.get("name", ""), item.get("ok", False), item.get("message", ""), item.get("severity", "")
        )

    def to_item(self) -> Item:
        return {"name": self.name, "ok": self.ok, "message": self.message, "severity": self.severity}


class MachineFactsRecord(NamedTuple):
    """What a machine said about itself when it joined, as stored on its join request (`machine`)
    and its machine record (`facts`). Fields an older item lacks read as the join's defaults."""

    fingerprint: str = ""
    hostname: str = ""
    os: str = ""
    arch: str = ""
    cpu_count: int = 0
    memory_mb: int = 0
    gpu: tuple[str, ...] = ()
    gpu_count: int = 0
    gpu_ids: tuple[str, ...] = ()
    executor: str = ""
    cpu_millicores: int = 0
    network_slot_pool_size: int = 0
    container_start_concurrency: int = 0
    capabilities: tuple[str, ...] = ()
    schedulable: bool = True
    worker_image: str = ""
    hardware: HardwareFactsRecord = HardwareFactsRecord()
    tpm: TpmFactsRecord = TpmFactsRecord()
    preflight: tuple[PreflightCheckRecord, ...] = ()
    aws: AwsFactsRecord = AwsFactsRecord()

    @classmethod
    def from_item(cls, item: Item) -> MachineFactsRecord:
        return cls(
            fingerprint=item.get("fingerprint", ""),
            hostname=item.get("hostname", ""),
            os=item.get("os", ""),
            arch=item.get("arch", ""),
            cpu_count=item.get("cpuCount", 0),
            memory_mb=item.get("memoryMb", 0),
            gpu=tuple(item.get("gpu", ())),
            gpu_count=item.get("gpuCount", 0),
            gpu_ids=tuple(item.get("gpuIds", ())),
            executor=item.get("executor", ""),
            cpu_millicores=item.get("cpuMillicores", 0),
            network_slot_pool_size=item.get("networkSlotPoolSize", 0),
            container_start_concurrency=item.get("containerStartConcurrency", 0),
            capabilities=tuple(item.get("capabilities", ())),
            schedulable=item.get("schedulable", True),
            worker_image=item.get("workerImage", ""),
            hardware=HardwareFactsRecord.from_item(item.get("hardware") or {}),
            tpm=TpmFactsRecord.from_item(item.get("tpm") or {}),
            preflight=tuple(PreflightCheckRecord.from_item(check) for check in item.get("preflight", ())),
            aws=AwsFactsRecord.from_item(item.get("aws") or {}),
        )

    def to_item(self) -> Item:
        return {
            "fingerprint": self.fingerprint,
            "hostname": self.hostname,
            "os": self.os,
            "arch": self.arch,
            "cpuCount": self.cpu_count,
            "memoryMb": self.memory_mb,
            "gpu": list(self.gpu),
            "gpuCount": self.gpu_count,
            "gpuIds": list(self.gpu_ids),
            "executor": self.executor,
            "cpuMillicores": self.cpu_millicores,
            "networkSlotPoolSize": self.network_slot_pool_size,
            "containerStartConcurrency": self.container_start_concurrency,
            "capabilities": list(self.capabilities),
            "schedulable": self.schedulable,
            "workerImage": self.worker_image,
            "hardware": self.hardware.to_item(),
            "tpm": self.tpm.to_item(),
            "preflight": [check.to_item() for check in self.preflight],
            # Only an IAM join's: the items of every other join stay as they were.
            **({"aws": self.aws.to_item()} if self.aws.account else {}),
        }
