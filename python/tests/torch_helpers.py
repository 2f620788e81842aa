"""The small model and data the torch tests share (not a test module)."""
import torch


def mlp(seed=0):
    """Linear 16 -> 32, GELU, LayerNorm, Linear 32 -> 8: two matrices and four vectors."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 8))


def data(seed=1, n=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=g), torch.randn(n, 8, generator=g)
