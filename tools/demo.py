"""`make demo`: export a small model and print its IR at each stage.

This grows with the pipeline; for now it shows the aten and edge dialects.
"""

import torch


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


def main() -> None:
    model = SmallCNN().eval()
    ep = torch.export.export(model, (torch.randn(1, 3, 16, 16),))
    print(ep.graph_module.code)


if __name__ == "__main__":
    main()
