# ruff: noqa
# Test input for knowledge/edit.py: a realistic user script, kept as users write it (not linted).
"""ResNet-50 data-parallel training with MindSpore, already tuned."""
import gc

import mindspore as ms
import mindspore.dataset as ds
import mindspore.dataset.vision as vision
from mindspore import nn
from mindspore.communication import init

from resnet import resnet50


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                 all_reduce_fusion_config=[85, 160])
    data = ds.ImageFolderDataset("/data/imagenet/train")
    data = data.map(operations=[vision.Decode()], input_columns="image", num_parallel_workers=12)
    data = data.batch(32, drop_remainder=True)
    net = resnet50()
    model = ms.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True),
                     optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9), amp_level="O2")
    gc.collect()
    gc.freeze()
    model.train(90, data, dataset_sink_mode=True)
