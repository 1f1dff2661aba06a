"""A word-language-model-style LSTM trained with hand-written SGD (no torch.optim): the
update is `p.data.add_(p.grad, alpha=-lr)` after clipping, as in small research scripts."""
import argparse
import sys

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--ntokens", type=int, default=100)
parser.add_argument("--emsize", type=int, default=16)
parser.add_argument("--nhid", type=int, default=32)
parser.add_argument("--nlayers", type=int, default=2)
parser.add_argument("--bptt", type=int, default=8)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--lr", type=float, default=20.0)
parser.add_argument("--clip", type=float, default=0.25)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--update", choices=("add_", "isub"), default="add_")
args = parser.parse_args()


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, input, hidden):
        emb = self.encoder(input)
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(output).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


corpus = torch.randint(0, args.ntokens, (args.bptt * 6 + 1, args.batch_size))
model = RNNModel(args.ntokens, args.emsize, args.nhid, args.nlayers)
criterion = nn.CrossEntropyLoss()

step = 0
for epoch in range(args.epochs):
    model.train()
    hidden = model.init_hidden(args.batch_size)
    for i in range(0, corpus.size(0) - 1, args.bptt):
        data, targets = get_batch(corpus, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        with torch.no_grad():
            for p in model.parameters():
                if args.update == "add_":
                    p.data.add_(p.grad, alpha=-args.lr)
                else:
                    p -= args.lr * p.grad
        step += 1
        print(f"step {step}", file=sys.stderr)
