"""A second, independent client: Neovim's built-in LSP client (Debian's `nvim --headless`),
configured for the memlens server, reads a hover and the inlay hints of the example.

The snapshot comes from the CLI (`memlens trace`), so this also checks that the server shows
snapshots it did not make. Neovim 0.7 (Debian 12) has no inlay-hint UI; the hints are asked
for with a plain `textDocument/inlayHint` request, as any LSP client may.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from support.runs import run_memlens
from support.lsp import REPO, line_of, make_workspace
from memlens.units import format_bytes

NVIM = shutil.which("nvim")
# `make test` installs Neovim (scripts/setup-system.sh) and sets MEMLENS_STRICT_TESTS: there a
# missing nvim fails the test instead of skipping it.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    NVIM is None and not os.environ.get("MEMLENS_STRICT_TESTS"),
    reason="Neovim is not installed (scripts/setup-system.sh installs it)")]

INIT_LUA = r"""
local ws, out_path = os.getenv("MEMLENS_WS"), os.getenv("MEMLENS_OUT")
local line = tonumber(os.getenv("MEMLENS_LINE"))
local result = { errors = {} }

local function run()
  local client_id = vim.lsp.start_client({
    name = "memlens",
    cmd = { os.getenv("MEMLENS_PY"), "-m", "memlens.server" },
    root_dir = ws,
    workspace_folders = { { uri = vim.uri_from_fname(ws), name = "ws" } },
    init_options = { settings = { device = "cpu" } },
  })
  vim.cmd("edit " .. ws .. "/model.py")
  local buf = vim.api.nvim_get_current_buf()
  vim.lsp.buf_attach_client(buf, client_id)
  local ready = vim.wait(60000, function()
    local c = vim.lsp.get_client_by_id(client_id)
    return c ~= nil and c.initialized
  end, 100)
  if not ready then error("the server did not initialize") end
  result.server = vim.lsp.get_client_by_id(client_id).server_capabilities.inlayHintProvider ~= nil

  local uri = vim.uri_from_bufnr(buf)
  local range = { start = { line = 0, character = 0 },
                  ["end"] = { line = vim.api.nvim_buf_line_count(buf), character = 0 } }
  -- The server reads the snapshot in a helper process: ask until the hints are there.
  local deadline = vim.loop.now() + 120000
  while vim.loop.now() < deadline do
    local res = vim.lsp.buf_request_sync(buf, "textDocument/inlayHint",
                                         { textDocument = { uri = uri }, range = range }, 10000)
    local r = res and res[client_id]
    if r and r.result and #r.result > 0 then
      result.hints = r.result
      break
    end
    vim.wait(300)
  end
  local res = vim.lsp.buf_request_sync(buf, "textDocument/hover", {
    textDocument = { uri = uri }, position = { line = line, character = 2 } }, 10000)
  result.hover = res and res[client_id] and res[client_id].result
end

local ok, err = pcall(run)
if not ok then table.insert(result.errors, tostring(err)) end
local f = io.open(out_path, "w")
f:write(vim.fn.json_encode(result))
f:close()
vim.cmd("qa!")
"""


def test_neovim_reads_a_hover_and_the_inlay_hints(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    traced = run_memlens("trace", f"{ws / 'model.py'}:GPT", "--device", "cpu", "--json",
                         cwd=ws)
    assert traced.returncode == 0, traced.stderr
    snap = json.loads(open(json.loads(traced.stdout)["snapshot"]).read())
    block = line_of(ws / "model.py", "class Block(")
    init = tmp_path / "init.lua"
    init.write_text(INIT_LUA)
    out = tmp_path / "out.json"
    env = {**os.environ, "MEMLENS_WS": str(ws), "MEMLENS_OUT": str(out),
           "MEMLENS_PY": sys.executable, "MEMLENS_LINE": str(block),
           "PYTHONPATH": str(REPO / "python")}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[var] = str(tmp_path / var.lower())
    done = subprocess.run([NVIM, "--headless", "-n", "-i", "NONE", "-u", str(init)], env=env,
                          cwd=ws, capture_output=True, text=True, timeout=300)
    assert out.exists(), f"Neovim wrote nothing: {done.stdout}\n{done.stderr}"
    result = json.loads(out.read_text())
    assert result["errors"] == [], result["errors"]
    assert result["server"] is True  # the server announced inlay hints

    text = (ws / "model.py").read_text().split("\n")
    hints = {h["position"]["line"]: h for h in result["hints"]}
    blocks = [m for m in snap["modules"] if m["class"] == "Block"]
    state = sum(m["parameter_bytes"] + m["gradient_bytes"] + m["optimizer_state_bytes"]
                for m in blocks) // 2
    act = sum(m["activation_bytes"] for m in blocks) // 2
    assert hints[block]["label"] == f"≈ {format_bytes(state + act)} · {format_bytes(act)} act ×2"
    assert hints[block]["position"]["character"] == len(text[block])
    assert line_of(ws / "model.py", "class GPT(") in hints

    hover = result["hover"]["contents"]
    assert hover["kind"] == "markdown"
    assert "**class `Block`** · 2 instances: `h.0`, `h.1`" in hover["value"]
    assert "| parameters | 774.5 KiB | 1.5 MiB |" in hover["value"]
    assert f"Peak **{format_bytes(snap['summary']['peak_bytes'])}**" in hover["value"]
