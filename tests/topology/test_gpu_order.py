"""The one GPU numbering rule every topology builder (sysfs, hwloc XML) applies."""

from __future__ import annotations

from toposcope.topology.model import (
    PCI_VENDOR_AMD,
    PCI_VENDOR_NVIDIA,
    Gpu,
    PciDevice,
    number_gpus,
)


def _device(bus_id: str, vendor: int, class_id: int, node: int = 0) -> PciDevice:
    return PciDevice(bus_id, vendor, 0x1234, class_id, node, (node,))


def test_nvidia_gpus_come_first_in_bus_order_then_the_others() -> None:
    devices = [
        _device("0000:81:00.0", PCI_VENDOR_NVIDIA, 0x0302, node=1),
        _device("0000:01:00.0", PCI_VENDOR_AMD, 0x0380),  # a compute GPU below the NVIDIA ones
        _device("0000:02:00.0", PCI_VENDOR_AMD, 0x0300),  # onboard video: not a GPU
        _device("0000:03:00.0", 0x15B3, 0x0200),  # a NIC
        _device("0000:41:00.0", PCI_VENDOR_NVIDIA, 0x0300),
        _device("0000:c1:00.0", PCI_VENDOR_AMD, 0x0B40, node=1),
    ]
    gpus = number_gpus(devices, {"0000:81:00.0": ("H100", "GPU-81")})
    # nvidia-smi's GPU 0 and 1 stay 0 and 1 beside the AMD boards
    assert [(g.index, g.pci_bus_id) for g in gpus] == [
        (0, "0000:41:00.0"),
        (1, "0000:81:00.0"),
        (2, "0000:01:00.0"),
        (3, "0000:c1:00.0"),
    ]
    assert gpus[1] == Gpu(1, "0000:81:00.0", 1, (1,), PCI_VENDOR_NVIDIA, "H100", "GPU-81")
    assert (gpus[0].model, gpus[0].uuid, gpus[3].vendor) == (None, None, PCI_VENDOR_AMD)
