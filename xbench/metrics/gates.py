"""Sanity gates: figures that cannot be right, or deserve a second look, become warnings on the record.

Pure Python over a record's measurements and derived figures (no torch).
"""

from __future__ import annotations

MFU_ERROR = 1.0  # above the peak: the measurement is wrong (an untimed device, a missing sync, a wrong peak)
MFU_WARN = 0.65  # above what well-tuned training reaches on any current chip


def mfu_gate(derived: dict) -> list[str]:
    mfu = derived.get("mfu")
    if mfu is None:
        return []
    if mfu > MFU_ERROR:
        return [f"measurement error: MFU {mfu:.0%} exceeds the platform's peak (an untimed device, a missing "
                "sync, or a wrong peak_tflops in conf/platform)"]
    if mfu > MFU_WARN:
        return [f"MFU {mfu:.0%} is above {MFU_WARN:.0%}: check the platform's peak_tflops and the timing"]
    return []


def batch_scaling_gate(points: list[tuple[int, float]], tolerance: float = 0.05) -> list[str]:
    """Throughput should not fall when the batch grows (points: (batch_size, samples/s)).

    A fall beyond `tolerance` usually means the device was not timed (work still queued at the
    window's end) or a synchronisation is missing; on a saturated device a flat curve is normal.
    """
    out = []
    pts = sorted(points)
    for (b1, t1), (b2, t2) in zip(pts, pts[1:]):
        if b2 > b1 and t2 < t1 * (1 - tolerance):
            out.append(
                f"throughput fell from {t1:.4g} to {t2:.4g} samples/s when the batch grew from {b1} to "
                f"{b2}: check the timing (missing device sync?) before trusting either figure"
            )
    return out


def record_gates(measurements: dict, derived: dict) -> list[str]:
    # A recipe run far from the global batch it was tuned at (training/schedule.py batch_warning).
    far = [measurements["lr_batch_warning"]] if measurements.get("lr_batch_warning") else []
    return mfu_gate(derived) + far
