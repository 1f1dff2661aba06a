"""The standalone HTML report: one file, the panel bundle inlined, the snapshot embedded so that
no string in it can leave its JSON block, a CSP that allows only the inlined bundle."""

import base64
import copy
import hashlib
import html
import json
import os
import re

import pytest
import torch
import torch.nn as nn

from memlens import Tracer
from memlens.reports import html as html_report
from memlens.reports.html import BundleMissing, embed_json, render_html, write_html_report
from memlens.snapshot import validate_snapshot, write_snapshot

HOSTILE = '<img src=x onerror="document.title=\'pwned\'">'
BREAKOUT = "</script><script>document.title='pwned'</script>"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


@pytest.fixture(scope="module")
def snapshot():
    """A real snapshot from the engine: two training steps of a small model."""
    with Tracer("cpu", iterations=2) as tracer:
        model = Net()
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(3):
            model(torch.randn(8, 32)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    snap = tracer.snapshot()
    validate_snapshot(snap)
    return snap


def hostile(snap):
    """The same snapshot with attacker-chosen strings where names and paths go."""
    bad = copy.deepcopy(snap)
    for m in bad["modules"]:
        m["fqn"] = (m["fqn"] + HOSTILE + BREAKOUT) if m["fqn"] else m["fqn"]
        m["class"] = "Evil" + HOSTILE
    for f in bad["frames"]:
        f["file"] = f"/tmp/{BREAKOUT}/{HOSTILE}.py"
        f["name"] = HOSTILE
    bad["meta"]["target"]["name"] = BREAKOUT + "&amp;" + HOSTILE
    validate_snapshot(bad)
    return bad


def data_block(page: str, block: str = "memlens-data") -> str:
    m = re.search(rf'<script type="application/json" id="{block}">(.*?)</script>', page, re.S)
    assert m, f"no {block} block"
    return m.group(1)


def payload(page: str) -> dict:
    """The embedded payload with the deferred parts (tensors, allocations) put back."""
    data = json.loads(data_block(page))
    for key, block in data.pop("deferred").items():
        data["snapshot"][key] = json.loads(data_block(page, block))
    return data


def data_blocks(page: str) -> list[str]:
    return re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', page, re.S)


def test_the_snapshot_round_trips_through_the_page(snapshot, fake_bundle):
    page = render_html(snapshot, source="run.json")
    data = payload(page)
    assert data["snapshot"] == snapshot
    assert data["source"] == "run.json"
    assert "compare" not in data
    # The big arrays sit in blocks of their own, parsed after the first paint.
    main = json.loads(data_block(page))
    assert main["snapshot"]["tensors"] == [] and main["snapshot"]["allocations"] is None
    assert main["deferred"] == {"tensors": "memlens-data-tensors",
                                "allocations": "memlens-data-allocations"}


def test_hostile_strings_stay_inside_the_data_block(snapshot, fake_bundle):
    bad = hostile(snapshot)
    page = render_html(bad, source=BREAKOUT)
    blocks = data_blocks(page)
    assert len(blocks) == 3
    # No character that could end a block or start markup is left in them...
    for block in blocks:
        assert not set("<>&") & set(block)
    # ... and they still decode to exactly the hostile snapshot.
    assert payload(page)["snapshot"] == bad
    # Only our script elements exist: the three data blocks and the bundle.
    assert len(re.findall(r"<script\b", page, re.I)) == 4
    assert len(re.findall(r"</script>", page, re.I)) == 4
    outside = page
    for block in blocks:
        outside = outside.replace(block, "")
    assert "<img" not in outside
    # The title is HTML-escaped text.
    assert f"<title>{html.escape('memlens · ' + bad['meta']['target']['name'])}</title>" in page


def test_embedding_escapes_what_could_break_out():
    text = embed_json({"a": "</script><!-- & \u2028 \u2029 >"})
    assert text == '{"a":"\\u003c/script\\u003e\\u003c!-- \\u0026 \\u2028 \\u2029 \\u003e"}'
    assert json.loads(text) == {"a": "</script><!-- & \u2028 \u2029 >"}


def test_the_csp_allows_exactly_the_inlined_bundle(snapshot, fake_bundle):
    page = render_html(snapshot)
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    digest = lambda s: base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()  # noqa: E731
    assert f"script-src 'sha256-{digest(script)}'" in csp
    assert f"style-src 'sha256-{digest(style)}'" in csp
    assert "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    # Source-map comments are dropped: the page never asks for another file.
    assert "sourceMappingURL" not in page
    # Nothing is loaded from anywhere: no src/href attributes at all.
    outside = page
    for block in data_blocks(page):
        outside = outside.replace(block, "")
    assert not re.search(r"\s(src|href)=", outside)


def test_compare_is_embedded_too(snapshot, fake_bundle, tmp_path):
    other = copy.deepcopy(snapshot)
    other["summary"]["peak_bytes"] += 512
    path = write_html_report(snapshot, tmp_path / "out" / "r.html", source="a.json", compare=other,
                             compare_source="b.json")
    data = payload(path.read_text())
    assert data["compare"] == other
    assert data["compareSource"] == "b.json"


def test_a_missing_bundle_says_how_to_build_it(snapshot, tmp_path, monkeypatch):
    monkeypatch.delenv("MEMLENS_WEBVIEW_DIST", raising=False)
    monkeypatch.setattr(html_report, "_PACKAGE_BUNDLE", tmp_path / "none")
    monkeypatch.setattr(html_report, "_SOURCE_CHECKOUT_BUNDLE", tmp_path / "none")
    with pytest.raises(BundleMissing, match="npm run build:webview"):
        render_html(snapshot)


@pytest.mark.slow  # traces in a fresh process
def test_show_html_from_the_command_line(snapshot, fake_bundle, tmp_path, memlens):
    snap_path = tmp_path / "s.json"
    write_snapshot(hostile(snapshot), snap_path)
    out = memlens("show", str(snap_path), "--html", str(tmp_path / "r.html"),
                  env={"MEMLENS_WEBVIEW_DIST": str(fake_bundle)})
    assert out.returncode == 0, out.stderr
    assert "HTML report:" in out.stdout
    page = (tmp_path / "r.html").read_text()
    assert payload(page)["source"] == "s.json"
    bad = memlens("show", str(snap_path), "--compare", str(snap_path))
    assert bad.returncode == 1
    assert "--compare goes with --html" in bad.stderr


def test_with_the_real_bundle(snapshot, tmp_path, monkeypatch):
    """The built panel bundle inlines cleanly (skipped when it was not built)."""
    monkeypatch.delenv("MEMLENS_WEBVIEW_DIST", raising=False)
    try:
        html_report.bundle_dir()
    except BundleMissing:
        if os.environ.get("MEMLENS_STRICT_TESTS"):  # `make test` builds it first
            raise
        pytest.skip("the panel bundle is not built (npm run build:webview)")
    page = write_html_report(snapshot, tmp_path / "r.html").read_text()
    assert payload(page)["snapshot"] == snapshot
    assert "memlens-standalone" in page
