"""A model.source model that sees the future is named when its training starts, and by diagnose at any run length
(was: "no problems found" until its position 0 fell below the one-token floor, so a short run passed)."""

import json

from conftest import run_cli, tiny_cli_args

LEAKY = '''
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self, vocab_size=11, n_embd=16, block_size=16, mask=False):
        super().__init__()
        self.mask = mask
        self.tok, self.pos = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.qkv, self.head = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, vocab_size)
    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T))
        q, k, v = self.qkv(x).split(x.size(-1), dim=-1)
        att = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
        if self.mask:
            att = att.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
        return self.head(x + att.softmax(-1) @ v)
'''


def _train(capsys, tmp_path, text_file, mask: bool):
    (tmp_path / "net.py").write_text(LEAKY)
    run = tmp_path / ("masked" if mask else "leaky")
    args = tiny_cli_args(text_file, run, train__max_iters=4, train__eval_interval=2)
    flags = dict(zip(args[::2], args[1::2]))
    for k in ("--model.n_layer", "--model.n_head", "--model.n_embd"):
        flags.pop(k, None)
    init = json.dumps({"mask": True}) if mask else "gpt2"
    rc, out, err = run_cli(capsys, "train", *[a for kv in flags.items() for a in kv],
                           "--model.source", f"{tmp_path / 'net.py'}:Net", "--model.init", init)
    assert rc == 0, err
    return run, out, err


def test_a_leaking_model_is_warned_of_at_start_and_diagnosed_after_four_steps(tmp_path, capsys, tiny_text_file):
    run, out, err = _train(capsys, tmp_path, tiny_text_file, mask=False)
    text = out + err
    assert "the model sees the tokens it predicts: the logits at position t depend on later tokens" in text, text
    assert "depthlab check" in text and "is_causal=True" in text
    rec = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    leak = [r for r in rec if r.get("event") == "causal_leak_check"]
    assert len(leak) == 1 and leak[0]["ok"] is False and leak[0]["step"] == 0
    rc, diag, err = run_cli(capsys, "diagnose", str(run))
    assert rc == 0, err
    assert "[causal_leak] at the start of training (step 0), depthlab check's causal_leak test: the logits at " \
           "position t depend on later tokens" in diag, diag
    assert "no problems found" not in diag


def test_a_masked_model_is_tested_too_and_found_clean(tmp_path, capsys, tiny_text_file):
    run, out, err = _train(capsys, tmp_path, tiny_text_file, mask=True)
    assert "sees the tokens it predicts" not in out + err
    rec = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    leak = [r for r in rec if r.get("event") == "causal_leak_check"]
    assert len(leak) == 1 and leak[0]["ok"] is True, leak
    rc, diag, _ = run_cli(capsys, "diagnose", str(run))
    assert "causal_leak]" not in diag
