"""dashboards/loadgen-soak.json: it validates against the schema of what a Grafana import needs
(dashboards/grafana-dashboard.schema.json; no headless Grafana is packaged for PyPI or Debian),
its panels sit on the grid without overlapping, and every query names metrics loadgen's own
/metrics serves, histogram quantiles over `le` buckets."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema
import pytest

from loadgen.engine.live_metrics import LiveMetrics
from loadgen.records import StreamError, StreamRecord

from support.paths import REPO

ROOT = REPO / "dashboards"
SCHEMA = json.loads((ROOT / "grafana-dashboard.schema.json").read_text())
DASHBOARD = json.loads((ROOT / "loadgen-soak.json").read_text())
METRIC = re.compile(r"\bloadgen_[a-z_]+")


def served_names() -> set[str]:
    """Every sample name LiveMetrics writes once it has seen an ok and a failed stream."""
    live = LiveMetrics()
    for error in (None, StreamError("http_500", "x")):
        live.see(StreamRecord(
            id="r", group="g", rep=0, status="error" if error else "ok", error=error,
            api="completions", model="m", prompt_tokens=1, requested_prompt_tokens=1,
            completion_tokens=2, cached_tokens=None, chunks=2, events=2, bytes=0,
            token_source="chunk_count", finish_reason="length", http_status=200,
            t_intended_ns=0, t_sent_ns=0, t_headers_ns=1, t_first_ns=2, t_last_ns=3,
            t_done_ns=3, chunk_ns=[2, 3],
        ))  # fmt: skip
    return {s.name for family in live.collect() for s in family.samples}


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_the_dashboard_validates_against_the_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(DASHBOARD, SCHEMA, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "break_it",
    [
        lambda d: d.pop("uid"),
        lambda d: d["panels"][0]["targets"][0].pop("expr"),
        lambda d: d["panels"][0]["gridPos"].update(w=25),
        lambda d: d["panels"][0].update(type="graph-of-the-future"),
        lambda d: d["panels"][1]["datasource"].update(type="loki"),
    ],
)
def test_the_schema_refuses_what_an_import_would(break_it: Any):
    broken = copy.deepcopy(DASHBOARD)
    break_it(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_panels_have_unique_ids_and_do_not_overlap():
    panels = DASHBOARD["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    grids = [p["gridPos"] for p in panels]
    cells = [
        (g["x"] + dx, g["y"] + dy) for g in grids for dx in range(g["w"]) for dy in range(g["h"])
    ]
    assert len(cells) == len(set(cells))
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in panels)
    for p in panels:
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]


def test_every_query_names_served_metrics_and_every_served_family_is_shown():
    served = served_names()
    named = {m for e in exprs(DASHBOARD) for m in METRIC.findall(e)}
    assert named <= served, named - served
    families = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in served}
    shown = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in named}
    assert families == shown


def test_quantiles_are_taken_over_le_buckets_and_variables_are_declared():
    declared = {v["name"] for v in DASHBOARD["templating"]["list"]}
    for expr in exprs(DASHBOARD):
        if "histogram_quantile" in expr:
            assert re.search(r"by \(le\b", expr) and "_bucket" in expr, expr
        used = set(re.findall(r"\$(?!__)([A-Za-z_]+)", expr))
        assert used <= declared, expr
    assert served_names() >= {"loadgen_ttft_seconds_bucket", "loadgen_itl_seconds_bucket"}


def test_the_check_fails_on_a_metric_loadgen_does_not_serve():
    served = served_names()
    assert "loadgen_ttft_second_bucket" not in served  # a typo the check must catch
    broken = copy.deepcopy(DASHBOARD)
    broken["panels"][2]["targets"][0]["expr"] = "loadgen_ttft_second_bucket"
    assert not {m for e in exprs(broken) for m in METRIC.findall(e)} <= served
