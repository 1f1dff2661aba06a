"""The language server's entry point for other editors never runs the workspace's code."""

import subprocess
import sys
from pathlib import Path


def test_memlens_server_ignores_a_memlens_package_in_the_workspace(tmp_path):
    # A workspace whose own `memlens` package would leave a mark if it were imported.
    mark = tmp_path / "imported"
    package = tmp_path / "memlens"
    package.mkdir()
    (package / "__init__.py").write_text(f"open({str(mark)!r}, 'w').write('x')\n")
    (package / "server").mkdir()
    (package / "server" / "__init__.py").write_text("")
    (package / "server" / "__main__.py").write_text(f"open({str(mark)!r}, 'w').write('x')\n")
    server = Path(sys.executable).with_name("memlens-server")
    assert server.is_file(), "the set-up installs the memlens-server console script"
    out = subprocess.run([str(server), "--help"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Torch Memory Lens language server" in out.stdout
    assert not mark.exists()
    # What the console script protects against: `-m` imports the workspace's package.
    subprocess.run([sys.executable, "-m", "memlens.server", "--help"], cwd=tmp_path,
                   capture_output=True, text=True, timeout=60)
    assert mark.exists()
