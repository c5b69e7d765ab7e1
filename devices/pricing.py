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
from typing import TYPE_CHECKING

from ngb.core.statistics.intervals import Estimate

# Price and the resolution through groups sit below this module (device_entry,
# Inventory.price_of): the inventory checks prices while it validates and this module reads an
# Inventory, so the shared part lives where both reach it and no import points back up
from ngb.devices.device_entry import Price as Price

if TYPE_CHECKING:
    from ngb.devices.inventory import Inventory


def price_of(inventory: Inventory, device: str) -> Price | None:
    """The price per hour of ``device`` (see the module docstring), or None when none is set
    (``Inventory.price_of``, which the inventory's own validation calls)."""
    return inventory.price_of(device)


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
