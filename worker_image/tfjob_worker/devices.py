"""Device set-up: GPU pinning by local rank, memory growth, logical (virtual) devices."""

from __future__ import annotations

from typing import Any


def gpus_for_local_rank(local_rank: int, local_size: int, num_gpus: int) -> list[int] | None:
    """GPU indices this process should see, or None to leave visibility alone.

    One process per node keeps all its GPUs. With several processes on a node the GPUs are split
    into contiguous groups by local rank (one each when there are as many GPUs as processes).
    """
    if num_gpus == 0 or local_size <= 1:
        return None
    if local_size > num_gpus:
        return [local_rank % num_gpus]  # oversubscribed: processes share GPUs round-robin
    per_process = num_gpus // local_size
    return list(range(local_rank * per_process, (local_rank + 1) * per_process))


def configure_devices(tf: Any, local_rank: int, local_size: int, virtual_devices: int) -> tuple[list[str], int]:
    """Apply pinning, memory growth and virtual devices; return (visible GPU names, devices to mirror over).

    Must run before TensorFlow initialises its devices (before any op or strategy is created).
    """
    gpus = tf.config.list_physical_devices("GPU")
    chosen = gpus_for_local_rank(local_rank, local_size, len(gpus))
    if chosen is not None:
        gpus = [gpus[i] for i in chosen]
        tf.config.set_visible_devices(gpus, "GPU")
    if virtual_devices > 1:
        # Split the first device into N logical ones so multi-device code runs on one device.
        if gpus:
            config = [tf.config.LogicalDeviceConfiguration(memory_limit=1024) for _ in range(virtual_devices)]
            tf.config.set_logical_device_configuration(gpus[0], config)
            gpus = gpus[:1]
        else:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(virtual_devices)]
            )
    else:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    names = [gpu.name for gpu in gpus]
    local_devices = virtual_devices if virtual_devices > 1 else max(len(gpus), 1)
    return names, local_devices


def mirrored_device_names(tf: Any, local_devices: int) -> list[str]:
    """Logical device names a MirroredStrategy should use (GPUs if any, else the virtual CPUs)."""
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return [d.name for d in gpus][: max(local_devices, 1)]
    return [d.name for d in tf.config.list_logical_devices("CPU")][: max(local_devices, 1)]
