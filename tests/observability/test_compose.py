"""docker-compose's optional observability profile (no Docker engine here: the file is
checked as data)."""

from __future__ import annotations

import yaml

from tests.conftest import ROOT


def test_the_observability_profile_scrapes_metrics_and_receives_traces() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    optional = {name for name, s in services.items() if "observability" in s.get("profiles", [])}
    assert optional == {"jaeger", "prometheus"}
    assert all("profiles" not in services[name] for name in ("web", "worker", "beat"))
    assert "4318:4318" in services["jaeger"]["ports"]  # OTLP over HTTP
    scrape = yaml.safe_load(compose["configs"]["prometheus"]["content"])["scrape_configs"][0]
    assert scrape["metrics_path"] == "/metrics"
    assert scrape["authorization"]["type"] == "Bearer"
    assert "AGENTWEB_METRICS_TOKEN" in scrape["authorization"]["credentials"]
    (target,) = scrape["static_configs"][0]["targets"]
    host = target.split(":")[0]
    app_env = services["web"]["environment"]
    assert host in app_env["ALLOWED_HOSTS"]  # the scrape's Host header is accepted
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "AGENTWEB_METRICS_TOKEN", "AGENTWEB_LOG_FORMAT"):
        assert name in app_env
