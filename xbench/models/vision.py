"""Image and flat-feature classifiers."""

from __future__ import annotations

from torch import nn

from xbench.data.spec import InputSpec
from xbench.extras import require
from xbench.models import register


def _flat_inputs(spec: InputSpec) -> int:
    if spec.modality == "features":
        return spec.num_features
    return spec.channels * spec.image_size * spec.image_size


@register("mlp", modalities=("image", "features"))
def mlp(spec: InputSpec, hidden: int = 512, depth: int = 2, dropout: float = 0.0) -> nn.Module:
    """MLP over flattened inputs: the MNIST MLP of the CPU-vs-GPU study."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = _flat_inputs(spec)
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        width = hidden
    layers.append(nn.Linear(width, spec.num_classes))
    return nn.Sequential(*layers)


@register("cnn_small")
def cnn_small(spec: InputSpec, width: int = 32) -> nn.Module:
    """Two conv blocks and two linear layers (the small MNIST CNN of the CPU-vs-GPU study)."""
    if spec.image_size < 4:
        raise ValueError(f"cnn_small needs images of at least 4x4 pixels, got {spec.image_size}")
    side = spec.image_size // 4  # two 2x2 poolings
    return nn.Sequential(
        nn.Conv2d(spec.channels, width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * width * side * side, max(64, 4 * width)),
        nn.ReLU(),
        nn.Linear(max(64, 4 * width), spec.num_classes),
    )


@register("vgg_cifar")
def vgg_cifar(spec: InputSpec, width: int = 64, stages: int = 4, convs_per_stage: int = 2,
              batch_norm: bool = True, dropout: float = 0.5) -> nn.Module:
    """Deep VGG-like CNN for 32x32 images (the CIFAR-10 model of the CPU-vs-GPU study).

    `stages` blocks of `convs_per_stage` 3x3 convolutions, each block followed by a 2x2 max-pool;
    widths double per stage up to 8x `width`. Defaults: 8 conv layers, 64..512 channels, ~4.7M params.
    """
    if spec.image_size < 2**stages:
        raise ValueError(f"vgg_cifar with {stages} stages needs images of at least {2**stages}px, "
                         f"got {spec.image_size}")
    layers: list[nn.Module] = []
    cin = spec.channels
    for s in range(stages):
        cout = width * min(2**s, 8)
        for _ in range(convs_per_stage):
            layers.append(nn.Conv2d(cin, cout, 3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(cout))
            layers.append(nn.ReLU(inplace=True))
            cin = cout
        layers.append(nn.MaxPool2d(2))
    side = spec.image_size // 2**stages
    head: list[nn.Module] = [nn.Flatten(), nn.Linear(cin * side * side, cin), nn.ReLU(inplace=True)]
    if dropout:
        head.append(nn.Dropout(dropout))
    head.append(nn.Linear(cin, spec.num_classes))
    return nn.Sequential(*layers, *head)


def _torchvision_resnet(arch: str, spec: InputSpec, zero_init_residual: bool) -> nn.Module:
    require(f"model {arch}", "torchvision")  # the GPU image may lack it: say what to install
    import torchvision

    # torchvision's ResNet-50 is v1.5 (stride 2 in the 3x3 conv of each downsampling bottleneck).
    return getattr(torchvision.models, arch)(weights=None, num_classes=spec.num_classes,
                                             zero_init_residual=zero_init_residual)


@register("resnet50", packages=("torchvision",))
def resnet50(spec: InputSpec, zero_init_residual: bool = False) -> nn.Module:
    """ResNet-50 v1.5 (torchvision): the studies' ImageNet model."""
    return _torchvision_resnet("resnet50", spec, zero_init_residual)


@register("resnet18", packages=("torchvision",))
def resnet18(spec: InputSpec, zero_init_residual: bool = False) -> nn.Module:
    """ResNet-18 (torchvision): a smaller ResNet for quick runs."""
    return _torchvision_resnet("resnet18", spec, zero_init_residual)
