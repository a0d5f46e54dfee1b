"""The block stacks benchmarks/fused_bench.py runs: their shapes (``STACKS``) and their torch models
(``stack_model``): ResNet-50 bottlenecks 1x1-BN-ReLU, 3x3-BN-ReLU, 1x1-BN, + input, ReLU; MobileNetV2
inverted residuals 1x1 expand-BN-ReLU6, 3x3 depthwise-BN-ReLU6, 1x1 project-BN, + input where shapes allow."""
from __future__ import annotations

from typing import Any

# (stack name, batch, input size, channels, blocks); bottleneck (c, mid); inverted residual (cin, cout, stride, t)
STACKS = {
    "gpu": [("mobilenetv2/112x112x16-24", 32, 112, 16, [("ir", 16, 24, 2, 6), ("ir", 24, 24, 1, 6)]),
            ("mobilenetv2/14x14x64", 32, 14, 64, [("ir", 64, 64, 1, 6)] * 3),
            ("resnet50/56x56x256", 32, 56, 256, [("bottleneck", 256, 64)] * 2),
            ("resnet50/14x14x1024", 32, 14, 1024, [("bottleneck", 1024, 256)] * 2)],
    "smoke": [("mobilenetv2/8x8x4-6", 1, 8, 4, [("ir", 4, 6, 2, 2), ("ir", 6, 6, 1, 2)]),
              ("resnet50/8x8x8", 1, 8, 8, [("bottleneck", 8, 4)])]}


def stack_model(torch: Any, blocks: list) -> Any:
    """The stack ``blocks`` (as in ``STACKS``) as an nn.Sequential of fx-traceable blocks, float32 on the CPU,
    its BatchNorm statistics and affine parameters drawn (seeded) away from the identity."""
    nn = torch.nn

    def cbr(cin: int, cout: int, k: int, act: Any, stride: int = 1, groups: int = 1) -> list:  # Conv-BN-act
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), act()]

    class Bottleneck(nn.Module):
        def __init__(self, c: int, mid: int) -> None:
            super().__init__()
            self.a = nn.Sequential(*cbr(c, mid, 1, nn.ReLU), *cbr(mid, mid, 3, nn.ReLU))
            self.conv3, self.bn3, self.relu = nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()

        def forward(self, x: Any) -> Any:  # (N, c, H, W) -> (N, c, H, W)
            return self.relu(self.bn3(self.conv3(self.a(x))) + x)

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
            super().__init__()
            hid, self.res = cin * t, stride == 1 and cin == cout
            self.expand = nn.Sequential(*cbr(cin, hid, 1, nn.ReLU6))
            self.dw = nn.Sequential(*cbr(hid, hid, 3, nn.ReLU6, stride, hid))
            self.project, self.bn = nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout)

        def forward(self, x: Any) -> Any:  # (N, cin, H, W) -> (N, cout, H / stride, W / stride)
            y = self.bn(self.project(self.dw(self.expand(x))))
            return x + y if self.res else y

    kinds = {"bottleneck": Bottleneck, "ir": InvertedResidual}
    model = nn.Sequential(*[kinds[b[0]](*b[1:]) for b in blocks])
    g = torch.Generator().manual_seed(0)
    for m in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):  # statistics away from identity
        for t, lo, hi in ((m.running_mean, -.5, .5), (m.running_var, .5, 2), (m.weight, .5, 1.5), (m.bias, -.5, .5)):
            t.data.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)
    return model
