"""A traced script's output reaches the client within limits, and all of it a file
(issue 15 item 8): 100 MB printed must not become a million `window/logMessage` notifications."""

from __future__ import annotations

import pytest

from memlens.server.output_log import TraceOutputLog
from support.lsp import MemlensClient, execute, open_document, session_fixtures


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lines_per_second_then_a_note_then_the_byte_budget(tmp_path):
    sent: list[str] = []
    clock = FakeClock()
    note = f"… more lines this second not shown; full log at {tmp_path / 't.log'}"
    # Room for four 7-byte lines ("line N" and a newline), the note, and 3 bytes more.
    budget = 4 * 7 + len(note.encode()) + 1 + 3
    log = TraceOutputLog(str(tmp_path / "t.log"), sent.append, clock, lines_per_second=3,
                         byte_budget=budget)
    for i in range(5):  # second 100: three lines go, then the note, once
        log.write(f"line {i}")
    clock.now = 101.2
    log.write("line 5")  # a new second
    assert sent == ["line 0", "line 1", "line 2", note, "line 5"]
    assert log.sent_bytes == budget - 3
    log.write("line 6")  # 7 bytes more than the 3 left: the end of what the client gets
    log.write("line 7")
    assert sent[-1] == f"… output truncated; full log at {tmp_path / 't.log'}"
    assert len(sent) == 6 and log.truncated
    log.close()
    assert (tmp_path / "t.log").read_text() == "".join(f"line {i}\n" for i in range(8))


def test_a_long_line_is_cut_for_the_client_kept_in_the_file(tmp_path):
    sent: list[str] = []
    log = TraceOutputLog(str(tmp_path / "t.log"), sent.append, FakeClock())
    log.write("x" * 10_000)
    log.close()
    assert sent == ["x" * 2000 + "…"]
    assert (tmp_path / "t.log").read_text() == "x" * 10_000 + "\n"


LOUD = """\
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1):
    for i in range(200_000):
        print(f"noise {i:06d} " + "y" * 40)
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    optimizer.step()
"""

pytestmark_lsp = pytest.mark.asyncio(loop_scope="module")
workspace, client = session_fixtures({"device": "cpu", "traceTimeout": 300})


@pytestmark_lsp
@pytest.mark.slow  # a language server tracing in a fresh process
async def test_a_loud_script_reaches_the_client_truncated(client: MemlensClient, workspace):
    script = workspace / "loud_train.py"
    script.write_text(LOUD)  # 200,000 lines, 10.6 MB
    open_document(client, script)
    result = await execute(client, "memlens.trace", {"targetId": "script:loud_train.py"})
    assert result["status"] == "ok", result
    # The server forwards all of the worker's output before it answers the command; some of
    # it says where the full log is.
    await client.wait_until(lambda: any("; full log at " in m.message
                                        for m in client.log_messages), 10,
                            "the note that says where the full log is")
    ours = [m.message for m in client.log_messages if m.message.startswith("[loud_train.py] ")]
    noise = [m for m in ours if "noise " in m]
    # At most the byte budget (1,000,000) of 58-byte lines reach the client: 17,241; fewer
    # where the rate (200 lines a second) holds them back first.
    assert 0 < len(noise) <= 1_000_000 // 58
    sent = sum(len(m.removeprefix("[loud_train.py] ").encode()) + 1 for m in ours)
    assert sent <= 1_000_000 + 200
    notes = [m for m in ours if "; full log at " in m]
    assert notes and all("more lines this second not shown; " in m or "output truncated; " in m for m in notes)
    path = notes[0].split("full log at ", 1)[1]
    assert path.startswith(str(workspace / ".memlens" / "logs"))
    lines = open(path, encoding="utf-8").read().splitlines()
    assert sum(1 for ln in lines if ln.startswith("noise ")) == 200_000
