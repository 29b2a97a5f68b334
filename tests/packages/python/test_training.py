"""test_training.py - a tiny model with MultiheadDilatedAttention trains on CPU: the loss of a
previous-token task falls over 20 Adam steps (gradients flow through the library's backward)."""
import math

from helpers import import_torch

torch = import_torch()
from dilattn.torch import MultiheadDilatedAttention  # noqa: E402


class TinyModel(torch.nn.Module):
    def __init__(self, vocab, embed_dim, num_heads):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embed_dim)
        self.position = torch.nn.Parameter(torch.randn(16, embed_dim) * 0.1)
        self.attention = MultiheadDilatedAttention(embed_dim, num_heads, dilation_rates=[1, 2],
                                                   segment_lengths=[8, 16])
        self.head = torch.nn.Linear(embed_dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        y, _ = self.attention(x, x, x, is_causal=True)
        return self.head(x + y)


def test_loss_falls_over_20_steps():
    torch.manual_seed(0)
    vocab, B, N = 8, 16, 16
    tokens = torch.randint(0, vocab, (B, N))
    target = torch.roll(tokens, 1, dims=1)            # predict the previous token
    model = TinyModel(vocab, 16, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tokens)[:, 1:].reshape(-1, vocab),
                                                 target[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.6 * losses[0], losses
    # The tokens are random: without attending to the previous position no model beats the
    # chance loss ln(vocab); the trained one must.
    assert losses[-1] < 0.5 * math.log(vocab), losses
    grad = model.attention.q_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0   # the attention itself was trained
