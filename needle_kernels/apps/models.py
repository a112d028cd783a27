"""The models of hw4: ResNet9 for CIFAR-10 and a word-level language model."""
import needle_kernels.nn as nn
from needle_kernels import ops
from needle_kernels.autograd import Tensor


class ConvBN(nn.Module):
    """Conv(a, b, k, stride s) -> BatchNorm2d(b) -> ReLU, NCHW in and out.

    In training (with the batch norm's fused kernels) the three are one op, ``conv_batch_norm``:
    one graph node, the batch norm run on the rows the convolution writes. Otherwise (evaluation,
    a traced model) the modules one after another, the ReLU the batch norm's own (``relu=True``).
    """

    def __init__(self, a, b, k, s, device=None, dtype="float32"):
        super().__init__()
        self.conv = nn.Conv(a, b, k, stride=s, device=device, dtype=dtype)
        self.bn = nn.BatchNorm2d(b, device=device, dtype=dtype)

    def forward(self, x):
        conv, bn = self.conv, self.bn
        if not (self.training and bn.fused):
            return bn(conv(x), relu=True)
        if len(x.shape) != 4 or x.shape[1] != conv.in_channels:
            raise ValueError(f"ConvBN: expected input (N, {conv.in_channels}, H, W), got shape {x.shape}")
        out, running = ops.conv_batch_norm(
            x, conv.weight, conv.bias, bn.weight, bn.bias, conv.stride, conv.kernel_size // 2, bn.eps, bn.momentum,
            bn.running_mean.realize_cached_data(), bn.running_var.realize_cached_data(), relu=True)
        bn.running_mean.data, bn.running_var.data = (Tensor.make_const(r) for r in running)
        return out


class ResNet9(nn.Module):
    """The hw4 ResNet9 on (N, 3, 32, 32) images -> (N, 10) logits; 431,946 parameters.

    ConvBN 3->16 k7 s4, 16->32 k3 s2, Residual(ConvBN 32->32, ConvBN 32->32),
    ConvBN 32->64 k3 s2, 64->128 k3 s2, Residual(ConvBN 128->128 x 2),
    Flatten, Linear 128->128, ReLU, Linear 128->10.
    """

    def __init__(self, device=None, dtype="float32"):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.model = nn.Sequential(
            ConvBN(3, 16, 7, 4, **kw),
            ConvBN(16, 32, 3, 2, **kw),
            nn.Residual(nn.Sequential(ConvBN(32, 32, 3, 1, **kw), ConvBN(32, 32, 3, 1, **kw))),
            ConvBN(32, 64, 3, 2, **kw),
            ConvBN(64, 128, 3, 2, **kw),
            nn.Residual(nn.Sequential(ConvBN(128, 128, 3, 1, **kw), ConvBN(128, 128, 3, 1, **kw))),
            nn.Flatten(),
            nn.Linear(128, 128, **kw),
            nn.ReLU(),
            nn.Linear(128, 10, **kw),
        )

    def forward(self, x):
        if len(x.shape) != 4 or tuple(x.shape[1:]) != (3, 32, 32):
            raise ValueError(f"ResNet9 expects images of shape (N, 3, 32, 32), got {tuple(x.shape)}")
        return self.model(x)


class LanguageModel(nn.Module):
    """Embedding -> RNN / LSTM / Transformer -> Linear, over token ids x (T, B).

    forward(x, h=None) -> (logits (T*B, output_size), h), where h is the
    sequence model's final state (for the Transformer, zeros).
    """

    def __init__(self, embedding_size, output_size, hidden_size, num_layers=1, seq_model="rnn", seq_len=40,
                 device=None, dtype="float32"):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.embedding_size, self.output_size, self.seq_model_name = embedding_size, output_size, seq_model
        self.embedding = nn.Embedding(output_size, embedding_size, **kw)
        if seq_model == "rnn":
            self.seq_model = nn.RNN(embedding_size, hidden_size, num_layers, **kw)
        elif seq_model == "lstm":
            self.seq_model = nn.LSTM(embedding_size, hidden_size, num_layers, **kw)
        elif seq_model == "transformer":
            self.seq_model = nn.Transformer(embedding_size, hidden_size, num_layers, sequence_len=seq_len, **kw)
            hidden_size = embedding_size  # the Transformer keeps the embedding width
        else:
            raise ValueError(f"seq_model must be 'rnn', 'lstm' or 'transformer', got {seq_model!r}")
        self.hidden_size = hidden_size
        self.linear = nn.Linear(hidden_size, output_size, **kw)

    def forward(self, x, h=None):
        if len(x.shape) != 2:
            raise ValueError(f"LanguageModel expects token ids of shape (T, B), got {tuple(x.shape)}")
        T, B = x.shape
        out, h = self.seq_model(self.embedding(x), h)
        return self.linear(out.reshape((T * B, self.hidden_size))), h
