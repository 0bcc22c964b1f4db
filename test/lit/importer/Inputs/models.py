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


class WithMap(nn.Module):
    example_inputs = (torch.randn(2, 3),)

    def forward(self, xs):
        from functorch.experimental.control_flow import map as control_flow_map

        return control_flow_map(lambda x: x * 2, xs)


class DoublingLoop(nn.Module):
    """while_loop: the trip count depends on the input (double y until its sum passes the limit)."""

    example_inputs = (torch.ones(3), torch.tensor(20.0))

    def forward(self, x, limit):
        def cond_fn(i, y):
            return y.sum() < limit

        def body_fn(i, y):
            return i + 1, y * 2

        return torch.while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


class DynamicMap(nn.Module):
    """map over a dynamic leading size: not supported (the loop's trip count is the static size)."""

    example_inputs = (torch.randn(2, 3),)
    dynamic_shapes = ({0: torch.export.Dim("rows", min=1, max=8)},)

    def forward(self, xs):
        from functorch.experimental.control_flow import map as control_flow_map

        return control_flow_map(lambda x: x * 2, xs)


class SizeCond(nn.Module):
    """A cond on a size under a Dim: the predicate is a comparison of sizes, not a tensor."""

    example_inputs = (torch.randn(3, 4),)
    dynamic_shapes = ({0: torch.export.Dim("rows", min=1, max=8)},)

    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda v: v * 2, lambda v: v - 1, (x,))
