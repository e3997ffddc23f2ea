"""Pruna's ``energy_consumed`` (kWh) and ``co2_emissions`` (kg CO2-eq), measured by codecarbon in offline mode.

codecarbon's ``OfflineEmissionsTracker`` runs around ``n_iterations`` forwards of the first test batch (after
``n_warmup_iterations`` untimed ones); it reads the hardware's power where it can (RAPL, NVML) and otherwise
estimates it the way codecarbon documents. Offline, CO2 needs the country whose grid powers the machine:
``country_iso_code="FRA"`` (or the ``SLIMKIT_CO2_COUNTRY`` environment variable); energy alone does not.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from slimkit.errors import ConfigError, MissingPackageError, check_int
from slimkit.faces.pruna.evaluation.metrics.metric_base import (
    SharedStats,
    first_inputs,
    resolve_device,
    run_inference,
)

ENERGY_CONSUMED, CO2_EMISSIONS = "energy_consumed", "co2_emissions"
COUNTRY_VARIABLE = "SLIMKIT_CO2_COUNTRY"
_ESTIMATED_MODES = {"cpu_load", "constant", "tdp"}  # codecarbon CPU modes that estimate instead of reading counters
_ENERGY_ONLY_COUNTRY = "USA"  # energy does not depend on the grid; codecarbon's offline tracker wants a country


class EnvironmentalImpactStats(SharedStats):
    """One codecarbon run shared by :class:`EnergyConsumedMetric` and :class:`CO2EmissionsMetric`."""

    def __init__(self, n_iterations: int = 100, n_warmup_iterations: int = 10, device: str | torch.device | None = None,
                 country_iso_code: str | None = None) -> None:
        self.n_iterations = check_int("n_iterations", n_iterations)
        self.n_warmup_iterations = check_int("n_warmup_iterations", n_warmup_iterations, 0)
        self.device = resolve_device(device)
        country = country_iso_code or os.environ.get(COUNTRY_VARIABLE)
        if country is not None and (not isinstance(country, str) or len(country) != 3 or not country.isalpha()):
            raise ConfigError(f"country_iso_code must be a 3-letter ISO code like 'FRA' or 'USA', got {country!r}.")
        self.country_iso_code = country.upper() if country else None

    def measure(self, model: Any, dataloader: Any) -> dict[str, float | int]:
        """``{"energy_consumed": kWh, "co2_emissions": kg}`` of the timed forwards (CO2 None without a country)."""
        try:
            from codecarbon import OfflineEmissionsTracker
        except ImportError as exc:
            raise MissingPackageError(
                "energy_consumed and co2_emissions are measured with codecarbon, which is not installed: "
                "pip install 'slimkit[eval]' (or pip install codecarbon)."
            ) from exc
        inputs = first_inputs(dataloader, self.device)
        tracker = OfflineEmissionsTracker(country_iso_code=self.country_iso_code or _ENERGY_ONLY_COUNTRY,
                                          measure_power_secs=0.1, output_methods=[], log_level="error",
                                          project_name="slimkit")
        with torch.inference_mode():
            for _ in range(self.n_warmup_iterations):
                run_inference(model, inputs)
            tracker.start()
            try:
                for _ in range(self.n_iterations):
                    run_inference(model, inputs)
                if self.device.startswith("cuda"):
                    torch.cuda.synchronize()
            finally:
                emissions = tracker.stop()
        energy = tracker.final_emissions_data.energy_consumed
        modes = {str(getattr(h, "_mode", "")) for h in getattr(tracker, "_hardware", [])}  # how codecarbon got power
        return {ENERGY_CONSUMED: float(energy), CO2_EMISSIONS: float(emissions) if self.country_iso_code else None,
                "cpu_estimated": bool(modes & _ESTIMATED_MODES)}

    def notes(self, raw: dict[str, float | int]) -> list[str]:
        """What the number covers, and whether codecarbon estimated the CPU's power rather than reading it."""
        where = f", grid of {self.country_iso_code}" if self.country_iso_code else ""
        lines = [f"codecarbon offline, {self.n_iterations} forwards of the first test batch{where}"]
        if raw.get("cpu_estimated"):
            lines.append("CPU power estimated by codecarbon from the CPU's TDP and load (no power counters readable)")
        return lines


class EnergyConsumedMetric(EnvironmentalImpactStats):
    """Energy of ``n_iterations`` forwards in kWh (Pruna's ``energy_consumed``)."""

    metric_name = ENERGY_CONSUMED
    metric_units = "kWh"
    higher_is_better = False


class CO2EmissionsMetric(EnvironmentalImpactStats):
    """CO2-equivalent of ``n_iterations`` forwards in kg (Pruna's ``co2_emissions``); needs the grid's country."""

    metric_name = CO2_EMISSIONS
    metric_units = "kgCO2e"
    higher_is_better = False

    def __init__(self, n_iterations: int = 100, n_warmup_iterations: int = 10, device: str | torch.device | None = None,
                 country_iso_code: str | None = None) -> None:
        super().__init__(n_iterations, n_warmup_iterations, device, country_iso_code)
        if self.country_iso_code is None:
            raise ConfigError(
                "co2_emissions needs the country whose grid powers this machine (slimkit runs codecarbon offline, "
                f"so it cannot look it up): CO2EmissionsMetric(country_iso_code='FRA'), or set {COUNTRY_VARIABLE}=FRA "
                "in the environment to use the name 'co2_emissions'."
            )
