"""The HTML sharding report (docs/Report.md) in headless Chromium.

The report of the transformer-block train step is loaded in Debian's
``chromium`` (installed by scripts/test.sh), its DOM after the page's
scripts ran is checked against ``--shardx-print-plan`` and the layouts, and
a screenshot is written to ``$SHARDX_BUILD/report/``.
"""

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

import shardx
from shardx.artifact import find_tool
from shardx.html_report import ReportError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = os.path.join(ROOT, "examples", "transformer_block_tp.mlir")


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: bash scripts/test.sh installs it (apt-get install chromium)")
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--disable-dev-shm-usage"]


class Dom(HTMLParser):
    """The parts of the report the test reads."""

    def __init__(self):
        super().__init__()
        self.stack = []  # (tag, attrs) of open elements
        self.reshards = []
        self.total = None
        self.by_phase = {}  # phase -> attrs of its #by-phase row
        self.alternatives = []
        self.values = []  # {kind, index, layout, shards, groups}
        self.mesh_heading = ""
        self._in_h3 = False

    VOID = {"br", "meta", "input", "img", "hr", "link"}  # HTML void elements

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "").split()
        if tag == "tr" and "reshard" in cls:
            self.reshards.append(a)
        if tag == "tr" and "total" in cls:
            self.total = a
        if tag == "tr" and "data-key" in a and self._inside_id("by-phase"):
            self.by_phase[a["data-key"]] = a
        if tag == "tr" and "alternative" in cls:
            self.alternatives.append(a)
        if tag == "div" and "value" in cls:
            self.values.append({"kind": a["data-kind"], "index": int(a["data-index"]),
                                "layout": a["data-layout"], "shards": None, "groups": 0})
        if tag == "div" and "picture" in cls and self._inside_value():
            self.values[-1]["shards"] = int(a.get("data-shards", -1))
        if tag == "g" and "shard" in cls and self._inside_value():
            self.values[-1]["groups"] += 1
        self._in_h3 = tag == "h3"
        if tag not in self.VOID and not tag.endswith("/"):
            self.stack.append((tag, cls, a.get("id")))

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        while self.stack:
            t, _, _ = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        if self._in_h3 and data.startswith("mesh @"):
            self.mesh_heading = data

    def _inside_id(self, ident):
        return any(i == ident for _, _, i in self.stack)

    def _inside_value(self):
        return any(t == "div" and "value" in c for t, c, _ in self.stack) and \
            not any(t == "template" for t, _, _ in self.stack)


def expected_shards(layout: str, mesh: list) -> int:
    """Shards of a layout: the product of the sizes of its non-R mesh axes."""
    placements = re.match(r"\[(.*?)\]", layout).group(1)
    n = 1
    for axis, p in enumerate(re.findall(r"R|S\(\d+\)|P\(\w+\)", placements)):
        if p != "R":
            n *= mesh[axis]
    return n


def print_plan_totals(path):
    proc = subprocess.run([find_tool("shardx-opt"), path, "--inline", "--shardx-propagate",
                           "--shardx-insert-reshards", "--shardx-print-plan", "-o", os.devnull],
                          capture_output=True, text=True, check=True)
    plans = re.findall(r"remark: plan .*: \d+ steps?, (\d+) collectives?, (\d+) bytes/rank, ([0-9.]+) us",
                       proc.stderr)
    assert plans, proc.stderr[:2000]
    return (len(plans), sum(int(c) for c, _, _ in plans), sum(int(b) for _, b, _ in plans),
            sum(float(u) for _, _, u in plans))


def test_transformer_block_report_in_chromium(build_dir, tmp_path):
    html = shardx.report(BLOCK, str(tmp_path / "transformer_block_tp.html"))
    browser = chromium()
    dom_text = subprocess.run(browser + ["--dump-dom", "file://" + html], capture_output=True,
                              text=True, timeout=300, check=True).stdout
    dom = Dom()
    dom.feed(dom_text)

    # One row per reshard; the totals are --shardx-print-plan's.
    count, collectives, plan_bytes, plan_us = print_plan_totals(BLOCK)
    assert len(dom.reshards) == count
    assert int(dom.total["data-reshards"]) == count
    assert int(dom.total["data-collectives"]) == collectives
    assert int(dom.total["data-bytes"]) == plan_bytes
    assert float(dom.total["data-us"]) == pytest.approx(plan_us, abs=1e-3 * count)
    assert sum(int(r["data-bytes"]) for r in dom.reshards) == plan_bytes

    # Each reshard names the source line of the PyTorch op it follows (the
    # importer's locations; backward ops carry their forward op's line) and
    # its train-step phase; the per-phase totals add up to the whole.
    lines = open(os.path.join(ROOT, "python", "shardx_dev", "models.py")).read().splitlines()
    for r in dom.reshards:
        m = re.fullmatch(r"(shardx_dev/models\.py|torch/[\w/]+\.py):(\d+)", r["data-location"])
        assert m, r
        if m.group(1) == "shardx_dev/models.py":
            assert re.search(r"self\.\w+\(", lines[int(m.group(2)) - 1]), (r, lines[int(m.group(2)) - 1])
        assert r["data-phase"] in ("forward", "backward", "optimizer"), r
    phases = {r["data-phase"] for r in dom.reshards}
    assert {"forward", "backward"} <= phases
    assert set(dom.by_phase) == phases
    assert sum(int(p["data-count"]) for p in dom.by_phase.values()) == count
    assert sum(int(p["data-bytes"]) for p in dom.by_phase.values()) == plan_bytes
    # The strategies propagation priced: ops with other strategies listed,
    # cheapest first, none cheaper than the chosen one (the refinement ends
    # where no single op's change lowers the total by more than its 1e-3 us
    # tie margin).
    assert dom.alternatives
    for a in dom.alternatives:
        costs = [float(c) for c in a["data-costs"].split(",")]
        assert len(costs) == int(a["data-count"]) >= 1
        assert costs == sorted(costs) and costs[0] >= -1e-3, a

    # Each argument's picture has as many blocks as its layout has shards.
    shape = re.search(r"shardx\.mesh @mesh\(shape = ([0-9x]+)", open(BLOCK).read()).group(1)
    mesh = [int(s) for s in shape.split("x")]
    assert dom.mesh_heading.startswith("mesh @mesh: " + " x ".join(map(str, mesh)))
    text = open(BLOCK).read()
    num_args = len(re.findall(r"^\s+%arg\d+: tensor", text, re.M))
    args = [v for v in dom.values if v["kind"] == "arg"]
    assert [v["index"] for v in args] == list(range(num_args))
    for v in args:
        want = expected_shards(v["layout"], mesh)
        assert v["shards"] == want, v
        assert v["groups"] == want, v
    assert {expected_shards(v["layout"], mesh) for v in args} == {1, 2}  # R and split ones
    assert any(v["kind"] == "result" for v in dom.values)

    # The screenshot (kept in the build directory for a person to look at).
    out_dir = os.path.join(build_dir, "report")
    os.makedirs(out_dir, exist_ok=True)
    png = os.path.join(out_dir, "transformer_block_tp.png")
    if os.path.exists(png):
        os.remove(png)
    subprocess.run(browser + ["--window-size=1280,2400", "--screenshot=" + png, "file://" + html],
                   capture_output=True, timeout=300, check=True)
    with open(png, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20000  # a blank page is a few kB
    shutil.copy(html, os.path.join(out_dir, "transformer_block_tp.html"))


def test_report_from_mlir_text(build_dir, tmp_path):
    text = open(os.path.join(ROOT, "examples", "mlp_dp_tp.mlir")).read()
    out = shardx.report(text, str(tmp_path / "mlp.html"), title="MLP dp x tp")
    page = open(out).read()
    assert "<title>MLP dp x tp</title>" in page
    assert 'data-kind="arg" data-index="2" data-layout="[S(0), S(0)], order = {0 = [1, 0]}"' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained


def test_report_error_is_raised(build_dir, tmp_path):
    with pytest.raises(ReportError, match="mesh"):
        shardx.report('func.func @f(%a: tensor<4xf32> {shardx.layout = #shardx.layout<@nomesh, [S(0)]>}) '
                      '-> tensor<4xf32> { return %a : tensor<4xf32> }', str(tmp_path / "bad.html"))
