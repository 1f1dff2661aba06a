"""pytorch/examples word_language_model-style, the Transformer variant: a corpus tokenised into
one long tensor, `batchify` into columns, `get_batch(source, i)` slicing `bptt` rows.

Patterns: a `Dictionary`/`Corpus` built from text files with `add_word`, `torch.tensor(ids)`,
`data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()`, `PositionalEncoding` with a
registered `pe` buffer, `nn.TransformerEncoder` with a square subsequent mask, `model.to(device)`,
SGD with momentum, `clip_grad_norm_`, `total_loss += loss.item()`, `math.exp(cur_loss)`,
`'| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | loss {:5.2f} | ppl {:8.2f}'`,
`evaluate()` with `model.eval()`, `torch.save(model.state_dict(), ...)`.
"""
import argparse
import math
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Dictionary:
    def __init__(self):
        self.word2idx, self.idx2word = {}, []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]


class Corpus:
    def __init__(self, path):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, "train.txt"))
        self.valid = self.tokenize(os.path.join(path, "valid.txt"))

    def tokenize(self, path):
        ids = []
        with open(path, encoding="utf8") as f:
            for line in f:
                ids += [self.dictionary.add_word(w) for w in line.split() + ["<eos>"]]
        return torch.tensor(ids, dtype=torch.int64)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[:x.size(0)]


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp=128, nhead=4, nhid=256, nlayers=2):
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.embedding = nn.Embedding(ntoken, ninp)
        self.decoder = nn.Linear(ninp, ntoken)
        self.ninp = ninp

    def forward(self, src, mask):
        src = self.pos_encoder(self.embedding(src) * math.sqrt(self.ninp))
        return F.log_softmax(self.decoder(self.encoder(src, mask)), dim=-1)


NTOKEN = 501  # 500 words of the synthetic corpus and <eos>


def build_model():
    return TransformerModel(NTOKEN)


def write_corpus(path):
    words = [f"w{i}" for i in range(500)]
    for name, lines in (("train.txt", 200), ("valid.txt", 40)):
        with open(os.path.join(path, name), "w", encoding="utf8") as f:
            for i in range(lines):
                f.write(" ".join(words[(i * 7 + j * 13) % 500] for j in range(20)) + "\n")
    with open(os.path.join(path, "train.txt"), "a", encoding="utf8") as f:
        f.write(" ".join(words) + "\n")  # every word appears, so the vocabulary is fixed


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--log-interval", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(1111)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data_dir = tempfile.mkdtemp(prefix="wikitext_")
    write_corpus(data_dir)
    corpus = Corpus(data_dir)
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, 10, device)
    ntokens = len(corpus.dictionary.idx2word)
    assert ntokens == NTOKEN, ntokens
    model = build_model().to(device)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    mask = nn.Transformer.generate_square_subsequent_mask(args.bptt).to(device)
    model.train()
    total_loss = 0.0
    for batch, i in enumerate(range(0, 4 * args.bptt, args.bptt)):
        data, targets = get_batch(train_data, i, args.bptt)
        optimizer.zero_grad()
        output = model(data, mask[:data.size(0), :data.size(0)])
        loss = criterion(output.view(-1, ntokens), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        total_loss += loss.item()
        if batch % args.log_interval == 0:
            cur_loss = total_loss / args.log_interval
            print("| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | loss {:5.2f} | ppl {:8.2f}".format(
                1, batch, len(train_data) // args.bptt, args.lr, cur_loss, math.exp(cur_loss)))
            total_loss = 0.0
    model.eval()
    val_loss = 0.0
    with torch.no_grad():
        for i in range(0, val_data.size(0) - 1, args.bptt):
            data, targets = get_batch(val_data, i, args.bptt)
            output = model(data, mask[:data.size(0), :data.size(0)])
            val_loss += len(data) * criterion(output.view(-1, ntokens), targets).item()
    print("| end of epoch | valid loss {:5.2f}".format(val_loss / (len(val_data) - 1)))
    torch.save(model.state_dict(), os.path.join(data_dir, "model.pt"))


if __name__ == "__main__":
    main()
