"""The published shapes and root file systems, as the emulator advertises them.

Shapes are the service's published ids with plausible sizes. Root file
systems are names only: every emulated sandbox runs on the host's system.
``devbox:1`` is the one the official TypeScript SDK's README, docs and
examples name, and the Langflow backend's default. A template's ``FROM`` may
also name one of the service's allowlisted Docker bases (``DOCKER_BASES``),
built here from this machine's system as the catalog's bases are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    id: str
    vcpu: float
    mem_mib: int
    default_disk_mib: int
    cpu_quota_pct: int


def _shape(vcpu: float, mem_mib: int, disk_mib: int) -> Shape:
    label = f"{vcpu:g}vcpu-{mem_mib}mb" if mem_mib < 1024 else f"{vcpu:g}vcpu-{mem_mib >> 10}gb"
    return Shape(f"s-{label}", vcpu, mem_mib, disk_mib, round(vcpu * 100))


SHAPES = {
    shape.id: shape
    for shape in (
        _shape(1, 256, 2048),
        _shape(0.25, 512, 4096),
        _shape(0.5, 1024, 8192),
        _shape(1, 1024, 8192),
        _shape(1, 2048, 10240),
        _shape(2, 2048, 10240),
        _shape(2, 4096, 20480),
        _shape(4, 4096, 20480),
        _shape(4, 8192, 40960),
        _shape(8, 8192, 40960),
        _shape(8, 16384, 81920),
    )
}

DEFAULT_ROOTFS = "ubuntu-24.04"
# A rootfs entry's ``successor`` is omitted, not null, when it has none (as on the service).
ROOTFS = (
    {"name": "ubuntu-24.04", "description": "Ubuntu 24.04 LTS", "deprecated": False},
    {"name": "ubuntu-22.04", "description": "Ubuntu 22.04 LTS", "deprecated": True,
     "successor": "ubuntu-24.04"},
    {"name": "devbox:1", "description": "A development box (the official SDKs' examples use it)",
     "deprecated": False},
    {"name": "python-3.12", "description": "Ubuntu 24.04 with Python 3.12", "deprecated": False},
    {"name": "node-22", "description": "Ubuntu 24.04 with Node.js 22", "deprecated": False},
    {"name": "desktop:1", "description": "A desktop for computer use (Xvfb, openbox, xterm)",
     "deprecated": False},
)  # fmt: skip
# Docker images a template may start FROM besides the catalog's names (the service's
# allowlist, as the official TypeScript SDK's docs and examples use it).
DOCKER_BASES = ("nodeops/sandbox:debian", "debian:trixie-slim")
ROOTFS_NAMES = tuple(str(entry["name"]) for entry in ROOTFS)


def shapes_json() -> list[dict[str, Any]]:
    return [asdict(shape) for shape in SHAPES.values()]


def rootfs_json() -> dict[str, Any]:
    return {"rootfs": list(ROOTFS_NAMES), "default": DEFAULT_ROOTFS, "entries": list(ROOTFS)}


def hosts_json() -> list[dict[str, Any]]:
    """The one host an emulator is (``GET /v1/hosts``, the service's ``HostPublic``)."""
    return [{"id": "emulator", "status": "active", "free_mib": 1 << 20, "vm_count": 0,
             "rootfses": list(ROOTFS_NAMES)}]  # fmt: skip
