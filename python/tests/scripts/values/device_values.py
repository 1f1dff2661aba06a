"""Values read back from device tensors, as training loops log and check them."""
import math

import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 8)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for step in range(4):
    x = torch.randn(32, 256, device="cuda")
    y = torch.randint(0, 8, (32,), device="cuda")
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    if torch.isnan(loss):
        raise SystemExit("loss is NaN")
    accuracy = (logits.argmax(-1) == y).float().mean()
    print(f"step {step} loss {loss:.4f} ppl {math.exp(float(loss)):.2f}")
    print("acc %.3f grad-norm %.3f" % (accuracy, norm))
    predicted = int(logits[0].argmax())
    history = logits[0].tolist()
    finite = bool(torch.isfinite(loss))
    if not torch.isfinite(loss).all() or torch.isnan(norm).any():
        raise SystemExit("a healthy run never gets here")
    with torch.inference_mode():  # an evaluation, as Lightning's validation and test loops run
        held = torch.tensor(history).to("cuda")  # a host tensor moved to the GPU
        total = float(held.sum() + logits.sum())
    # An assertion on device tensors, as transformers' vision-language models check their image
    # tokens: torch._check_tensor_all reads cond._is_all_true().
    torch._check_tensor_all_with(ValueError, y < 8, lambda: "a healthy run passes its checks")
