"""A training step that checkpoints and reads its checkpoint back, the way resumable training
scripts do: `torch.save` of the model and optimizer state, and a sharded
`torch.distributed.checkpoint` of the model, each loaded again; what it read back goes to
`--report` (a JSON file)."""

import argparse
import json

import torch
import torch.distributed.checkpoint as dcp

parser = argparse.ArgumentParser()
parser.add_argument("--ckpt", default="ckpt.pt")
parser.add_argument("--dcp", default="dcp_ckpt")
parser.add_argument("--report", default="report.json")
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(256, 256).to(device)
optimizer = torch.optim.AdamW(model.parameters())
model(torch.randn(8, 256, device=device)).sum().backward()
optimizer.step()

torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1},
           args.ckpt)
resumed = torch.load(args.ckpt, weights_only=False)

dcp.save({"model": model.state_dict()}, checkpoint_id=args.dcp)
sharded = {"model": {k: torch.empty_like(v) for k, v in model.state_dict().items()}}
dcp.load(sharded, checkpoint_id=args.dcp)

with open(args.report, "w") as f:
    json.dump({"step": resumed["step"],
               "shapes": {k: list(v.shape) for k, v in resumed["model"].items()},
               "optimizer_states": len(resumed["optimizer"]["state"]),
               "sharded": {k: list(v.shape) for k, v in sharded["model"].items()}}, f)
