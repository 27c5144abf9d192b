"""training.protocol: what the trainer needs of a model, spoken to any nn.Module."""


import torch

from depthlab.training.protocol import ModelPort


class _Tiny(torch.nn.Module):
    """A model that is not depthlab's GPT: forward(idx) -> logits only."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(torch.relu(self.mix(self.emb(idx))))


def test_model_port_speaks_the_protocol_to_any_module():
    torch.manual_seed(0)
    m = _Tiny()
    port = ModelPort(m)
    x = torch.randint(0, 11, (2, 5))
    loss = port.loss(m, x, x)
    want = torch.nn.functional.cross_entropy(m(x).reshape(-1, 11), x.reshape(-1))
    assert not port.native and torch.allclose(loss, want)
    assert port.hidden_matrices() == [m.mix.weight]  # not the embedding, not the head
    assert port.num_params() == sum(p.numel() for p in m.parameters())
    port.set_attention(True)  # an extra only depthlab's GPT has: a no-op here
