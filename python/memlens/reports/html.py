"""The standalone HTML report: one self-contained file with the panel's own bundle (the same
views as in VS Code) and the snapshot embedded, that opens offline in any browser.

The snapshot's JSON sits in ``<script type="application/json">`` blocks (never executed): the
tensors and the allocation stream in blocks of their own, which the page parses after its first
paint, so a 100,000-tensor report shows its summary at once.

Safety: a snapshot may come from someone else. Its JSON blocks with ``<``, ``>`` and ``&`` written
as ``\\u003c``, ``\\u003e``, ``\\u0026``, so no string in it can close the block; the page's
Content Security Policy allows only the inlined bundle (by its SHA-256) and nothing remote; and
the panel puts every string on screen as text.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import MemlensError

BUNDLE_FILES = ("webview.js", "webview.css")
_PACKAGE_BUNDLE = Path(__file__).parent.with_name("webview_dist")
_SOURCE_CHECKOUT_BUNDLE = Path(__file__).resolve().parents[3] / "dist"
_SOURCE_MAP = re.compile(r"\n?(//# sourceMappingURL=\S+|/\*# sourceMappingURL=\S+ \*/)\s*$")


class BundleMissing(MemlensError):
    """The built panel bundle is not there (a source checkout that was never built)."""


def bundle_dir() -> Path:
    """Where webview.js and webview.css are: $MEMLENS_WEBVIEW_DIST, the copy inside the package
    (python/memlens/webview_dist, made by the build), or dist/ of a source checkout."""
    candidates = []
    if os.environ.get("MEMLENS_WEBVIEW_DIST"):
        candidates.append(Path(os.environ["MEMLENS_WEBVIEW_DIST"]))
    candidates += [_PACKAGE_BUNDLE, _SOURCE_CHECKOUT_BUNDLE]
    for d in candidates:
        if all((d / f).is_file() for f in BUNDLE_FILES):
            return d
    raise BundleMissing(
        "the panel bundle (webview.js, webview.css) is not built, so no HTML report can be made: "
        "run `make build` (or `npm ci && npm run build:webview`) at the repository root (it writes "
        f"{_PACKAGE_BUNDLE}), or install a memlens package that includes it")


def read_bundle() -> tuple[str, str]:
    d = bundle_dir()
    js = _SOURCE_MAP.sub("", (d / "webview.js").read_text(encoding="utf-8"))
    css = _SOURCE_MAP.sub("", (d / "webview.css").read_text(encoding="utf-8"))
    # The bundle is inlined as raw text: it must not be able to end its own element.
    if re.search(r"</script", js, re.I) or re.search(r"</style", css, re.I):
        raise MemlensError("the panel bundle contains a closing script/style tag; it cannot be inlined")
    return js, css


def embed_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' characters at all (they
    only occur inside JSON strings, where the \\u escapes mean the same), and no line or
    paragraph separators."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for ch, esc in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def content_security_policy(js: str, css: str) -> str:
    return ("default-src 'none'; "
            f"script-src {_sha256(js)}; "
            f"style-src {_sha256(css)}; "
            "img-src data:; font-src data:; connect-src 'none'; "
            "base-uri 'none'; form-action 'none'; object-src 'none'")


def render_html(snapshot: dict[str, Any], *, source: str | None = None,
                compare: dict[str, Any] | None = None, compare_source: str | None = None) -> str:
    """The report page for an already validated snapshot (and an optional second one)."""
    js, css = read_bundle()
    main, deferred = split_snapshot(snapshot)
    payload: dict[str, Any] = {"snapshot": main,
                               "deferred": {key: f"memlens-data-{key}" for key in deferred}}
    if source:
        payload["source"] = source
    if compare is not None:
        payload["compare"] = compare
        if compare_source:
            payload["compareSource"] = compare_source
    target = (snapshot.get("meta") or {}).get("target") or {}
    title = f"memlens · {target.get('name') or 'snapshot'}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(content_security_policy(js, css), quote=False)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="dark light">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{css}</style>\n"
        "</head>\n"
        '<body class="memlens-standalone">\n'
        '<div id="memlens-root"><noscript>This report needs JavaScript to draw its views.</noscript></div>\n'
        f'<script type="application/json" id="memlens-data">{embed_json(payload)}</script>\n'
        + "".join(f'<script type="application/json" id="memlens-data-{key}">{embed_json(value)}</script>\n'
                  for key, value in deferred.items()) +
        f"<script>{js}</script>\n"
        "</body>\n</html>\n")


DEFERRED = ("tensors", "allocations")


def split_snapshot(snapshot: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The snapshot without its big arrays (tensors: [], allocations: null), and those arrays."""
    main = dict(snapshot)
    deferred = {}
    for key in DEFERRED:
        if main.get(key):
            deferred[key] = main[key]
            main[key] = [] if key == "tensors" else None
    return main, deferred


def write_html_report(snapshot: dict[str, Any], path: str | os.PathLike, *,
                      source: str | None = None, compare: dict[str, Any] | None = None,
                      compare_source: str | None = None) -> Path:
    from ..snapshot.output_files import write_atomically

    text = render_html(snapshot, source=source, compare=compare, compare_source=compare_source)
    return write_atomically(path, lambda f: f.write(text), "HTML report")
