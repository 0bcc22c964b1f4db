"""Small models for the importer's lit tests (`import_model Inputs/models.py:<name>`).
Line numbers matter: the tests check locations against them."""

import torch
from torch import nn


class Counter(nn.Module):
    """A buffer written in place every call, a constant tensor, symbolic sizes."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.example_inputs = (torch.randn(3, 4),)
        self.dynamic_shapes = ({0: torch.export.Dim("rows", min=1, max=8)},)

    def forward(self, x):
        self.count.add_(1)
        rows = x.shape[0]
        return (x + self.count).reshape(rows * 2, 2)


class WithCond(nn.Module):
    example_inputs = (torch.randn(3),)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))


class WritesInput(nn.Module):
    example_inputs = (torch.randn(3),)

    def forward(self, x):
        x.mul_(2)
        return x
