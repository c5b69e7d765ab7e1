"""What a device costs to run: ``price_per_hour`` in the inventory, and the cost of inferences.

A device's own ``price_per_hour`` wins; otherwise its groups' (``[groups.NAME]
price_per_hour = ...``), where a nested group's price overrides its parent's. Two unrelated
groups giving one device different prices is an inventory error (one line naming both), caught
when the inventory is validated, so a report never picks one silently. The currency is whatever
the operator wrote; reports say "per hour's price units".

Cost per million inferences = price_per_hour / 3600 / throughput x 1e6. Its interval comes from
the throughput's (cost is a decreasing function of throughput, so the bounds swap); the price is
taken as exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.errors import ConfigError
from ngb.core.intervals import Estimate

if TYPE_CHECKING:  # inventory.py calls check_prices while it validates: no import back
    from ngb.devices.inventory import Inventory


@dataclass(frozen=True)
class Price:
    per_hour: float
    source: str  # "device" or "group NAME"


def price_of(inventory: Inventory, device: str) -> Price | None:
    """The price per hour of ``device`` (see the module docstring), or None when none is set."""
    dev = inventory.devices.get(device)
    if dev is None:
        return None
    if dev.price_per_hour is not None:
        return Price(float(dev.price_per_hour), "device")
    priced = [
        g
        for g in inventory.groups_of(device)
        if g in inventory.groups and inventory.groups[g].price_per_hour is not None
    ]
    # a group whose descendant also prices the device gives way to that descendant
    nested = inventory.subgroups  # every group below one, itself first
    specific = [g for g in priced if not any(o != g and o in nested(g) for o in priced)]
    values = {inventory.groups[g].price_per_hour for g in specific}
    if not specific:
        return None
    if len(values) > 1:
        named = ", ".join(f"{g} = {inventory.groups[g].price_per_hour}" for g in specific)
        raise ConfigError(
            f"device {device!r}: its groups give different prices per hour ({named}); set "
            "price_per_hour on the device"
        )
    return Price(float(values.pop() or 0.0), f"group {specific[0]}")


def check_prices(inventory: Inventory, where: str = "") -> None:
    """Raise ``ConfigError`` for a device its groups price differently."""
    for name in inventory.devices:
        try:
            price_of(inventory, name)
        except ConfigError as exc:
            raise ConfigError(f"{where}{exc}") from None


def load_prices(inventory: Inventory) -> dict[str, Price]:
    """Device name -> price, from ``inventory`` (devices without one left out)."""
    out = {}
    for name in inventory.devices:
        price = price_of(inventory, name)
        if price is not None:
            out[name] = price
    return out


def cost_per_million(
    price_per_hour: float, throughput: float, low: float | None = None, high: float | None = None
) -> Estimate:
    """Cost of a million inferences at ``throughput`` samples/s; with the throughput's interval
    ``[low, high]``, the cost's interval ``[cost(high), cost(low)]`` (cost falls as throughput
    rises, so the bounds swap; NaN when the throughput is not a positive number)."""
    if not (math.isfinite(throughput) and throughput > 0):
        return Estimate(math.nan)

    def cost(t: float) -> float:
        return price_per_hour / 3600.0 / t * 1e6 if t > 0 else math.inf

    value = cost(throughput)
    if not (math.isfinite(price_per_hour) and math.isfinite(value)):
        return Estimate(math.nan)  # overflowed: no number rather than a 309-digit one
    if low is None or high is None or not (0 < low <= high < math.inf):
        return Estimate(value)
    bounds = (cost(high), cost(low))
    if not all(math.isfinite(b) for b in bounds):
        return Estimate(value)
    return Estimate(value, *bounds)
