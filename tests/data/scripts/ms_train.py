# ruff: noqa
# Test input for knowledge/edit.py: a realistic user script, kept as users write it (not linted).
"""ResNet-50 data-parallel training with MindSpore on 8 Ascend cards (MindSpore guide, cases 1 and 3)."""
import mindspore as ms
import mindspore.dataset as ds
import mindspore.dataset.vision as vision
from mindspore import context, nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.context import ParallelMode
from mindspore.train import Model
from mindspore.train.callback import LossMonitor

from resnet import resnet50


def create_dataset(path, batch_size=32):
    data = ds.ImageFolderDataset(path, num_shards=get_group_size(), shard_id=get_rank(), shuffle=True)
    trans = [vision.Decode(), vision.RandomCrop(224), vision.HWC2CHW()]
    data = data.map(operations=trans, input_columns="image")
    data = data.batch(batch_size, drop_remainder=True)
    return data


def main():
    context.set_context(mode=context.GRAPH_MODE, device_target="Ascend")
    init()
    context.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                      device_num=get_group_size())
    net = resnet50(num_classes=1001)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    model = Model(net, loss_fn=loss, optimizer=opt, metrics={"acc"})
    train_ds = create_dataset("/data/imagenet/train")
    model.train(90, train_ds, callbacks=[LossMonitor()], dataset_sink_mode=True)


if __name__ == "__main__":
    main()
