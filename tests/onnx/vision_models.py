"""torchvision's ResNet-18 and MobileNetV3-Small rebuilt from torch.nn layers (torchvision itself is not a
dependency): the same layers, shapes and order as `torchvision.models.resnet18()` and
`mobilenet_v3_small()`, so their ONNX exports have the same ops. Random weights, BatchNorm statistics
made non-trivial by `randomize_batchnorm`."""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = nn.ReLU(), nn.Hardsigmoid()

    def forward(self, x):
        return x * self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))


def _conv_bn(cin: int, cout: int, kernel: int, stride: int, groups: int, act) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=0.001, momentum=0.01)]
    return nn.Sequential(*layers, *([act()] if act is not None else []))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act, stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers = []
        if expanded != cin:
            layers.append(_conv_bn(cin, expanded, 1, 1, 1, act))
        layers.append(_conv_bn(expanded, expanded, kernel, stride, expanded, act))
        if se:
            layers.append(SqueezeExcitation(expanded, _divisible(expanded // 4)))
        layers.append(_conv_bn(expanded, cout, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


# (input channels, kernel, expanded channels, output channels, squeeze-excitation, activation, stride)
_SMALL = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
          (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
          (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
          (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]


class MobileNetV3Small(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers = [_conv_bn(3, 16, 3, 2, 1, nn.Hardswish)]
        for cin, k, exp, cout, se, act, stride in _SMALL:
            layers.append(InvertedResidual(cin, k, exp, cout, se, nn.ReLU if act == "RE" else nn.Hardswish, stride))
        layers.append(_conv_bn(96, 576, 1, 1, 1, nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(1024, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def randomize_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Running statistics and affine parameters away from 0 and 1, so BatchNorm's arithmetic is tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.rand(n, generator=g) * 0.2 - 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.rand(n, generator=g) * 0.2 - 0.1)
    return model.eval()
