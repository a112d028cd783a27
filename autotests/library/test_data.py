"""Data loading: readers on files in the real formats, DataLoader, transforms, PTB batching, downloads."""
import gzip
import hashlib
import io
import os
import pickle
import tarfile
import urllib.error
from pathlib import Path

import numpy as np
import pytest

import needle_kernels as ndl
from needle_kernels.data import download as dl
from needle_kernels.data import paths, synthetic


def _real_dir():
    """The data directory when it holds the real MNIST test files (as ``$NEEDLE_DATA_DIR`` may)."""
    if not os.environ.get(paths.ENV_VAR):
        return None
    d = paths.data_dir()
    return d if all(p.is_file() for p in paths.mnist_paths("t10k", d)) else None


# ---------------------------------------------------------------- MNIST


@pytest.fixture
def mnist_files(tmp_path):
    images, labels = synthetic.synthetic_images(37, (28, 28), seed=3)
    ip = synthetic.write_idx_images(tmp_path / "imgs.gz", images)
    lp = synthetic.write_idx_labels(tmp_path / "labels.gz", labels)
    return ip, lp, images, labels


def test_idx_files_are_real_format(mnist_files):
    ip, lp, images, labels = mnist_files
    raw = gzip.decompress(ip.read_bytes())
    assert np.frombuffer(raw[:16], ">i4").tolist() == [2051, 37, 28, 28]
    assert len(raw) == 16 + 37 * 28 * 28
    raw = gzip.decompress(lp.read_bytes())
    assert np.frombuffer(raw[:8], ">i4").tolist() == [2049, 37]


def test_parse_mnist(mnist_files):
    ip, lp, images, labels = mnist_files
    X, y = ndl.data.parse_mnist(ip, lp)
    assert X.dtype == np.float32 and X.shape == (37, 784) and y.dtype == np.uint8
    np.testing.assert_allclose(X, images.reshape(37, -1) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y, labels)


def test_mnist_dataset_items(mnist_files):
    ip, lp, images, labels = mnist_files
    ds = ndl.data.MNISTDataset(str(ip), str(lp))
    assert len(ds) == 37
    x, y = ds[5]
    assert x.shape == (28, 28, 1) and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0
    np.testing.assert_allclose(x[:, :, 0], images[5] / 255.0, rtol=1e-6)
    assert y == labels[5]
    xb, yb = ds[np.array([3, 1, 4])]
    assert xb.shape == (3, 28, 28, 1)
    np.testing.assert_array_equal(yb, labels[[3, 1, 4]])


def test_mnist_dataset_transforms_per_image(mnist_files):
    ip, lp, images, _ = mnist_files
    ds = ndl.data.MNISTDataset(str(ip), str(lp), transforms=[ndl.data.RandomFlipHorizontal(p=1.0)])
    x, _ = ds[2]
    np.testing.assert_allclose(x[:, :, 0], images[2][:, ::-1] / 255.0, rtol=1e-6)
    xb, _ = ds[np.array([2, 3])]
    np.testing.assert_allclose(xb[1, :, :, 0], images[3][:, ::-1] / 255.0, rtol=1e-6)


def test_idx_bad_header(tmp_path):
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(synthetic.idx_bytes(np.zeros((2, 3), np.uint8), 2049)))
    with pytest.raises(ValueError, match="magic number 2049"):
        ndl.data.datasets.read_idx_images(bad)
    trunc = tmp_path / "trunc.gz"
    trunc.write_bytes(gzip.compress(synthetic.idx_bytes(np.zeros((4, 2, 2), np.uint8), 2051)[:-3]))
    with pytest.raises(ValueError, match="header says"):
        ndl.data.datasets.read_idx_images(trunc)


def test_missing_mnist_file_names_path_and_command(tmp_path):
    missing = tmp_path / "nope" / "t10k-images-idx3-ubyte.gz"
    with pytest.raises(FileNotFoundError) as e:
        ndl.data.MNISTDataset(str(missing), str(missing))
    assert str(missing) in str(e.value)
    assert "python -m needle_kernels.data.download mnist" in str(e.value)


@pytest.mark.skipif(_real_dir() is None, reason="real MNIST t10k files not in $NEEDLE_DATA_DIR")
def test_real_mnist_t10k():
    ds = ndl.data.MNISTDataset(*map(str, paths.mnist_files("t10k")))
    assert len(ds) == 10000
    assert [int(ds[i][1]) for i in range(5)] == [7, 2, 1, 0, 4]
    counts = np.bincount(ds.labels, minlength=10)
    assert counts.tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    x, _ = ds[0]
    assert x.shape == (28, 28, 1) and x.max() == 1.0 and x.min() == 0.0


@pytest.mark.skipif(_real_dir() is None, reason="real MNIST t10k files not in $NEEDLE_DATA_DIR")
def test_load_mnist_split_real(capsys):
    X_tr, y_tr, X_te, y_te = ndl.data.load_mnist_split(8000, 2000)
    assert X_tr.shape == (8000, 784) and X_te.shape == (2000, 784)
    assert "real MNIST" in capsys.readouterr().out
    assert y_tr[:3].tolist() == [7, 2, 1]


def test_load_mnist_split_sources(tmp_path, capsys):
    X_tr, y_tr, X_te, y_te = ndl.data.load_mnist_split(80, 20, root=tmp_path)
    assert "synthetic" in capsys.readouterr().out
    assert X_tr.shape == (80, 784) and X_te.shape == (20, 784) and y_tr.dtype == np.uint8
    synthetic.ensure_sample_data(tmp_path, mnist_n=(60, 50))
    X_tr, y_tr, X_te, y_te = ndl.data.load_mnist_split(30, 20, root=tmp_path)
    assert "t10k" in capsys.readouterr().out
    X, y = ndl.data.parse_mnist(*paths.mnist_files("t10k", tmp_path))
    np.testing.assert_array_equal(X_tr, X[:30])
    np.testing.assert_array_equal(y_te, y[-20:])
    with pytest.raises(ValueError, match="exceeds"):
        ndl.data.load_mnist_split(40, 20, root=tmp_path, verbose=False)
    with pytest.raises(FileNotFoundError, match="download mnist"):
        ndl.data.load_mnist_split(10, 10, root=tmp_path / "empty", source="train", verbose=False)


# ---------------------------------------------------------------- CIFAR-10


def test_cifar10_dataset_synthetic(tmp_path):
    folder = synthetic.write_cifar10(tmp_path / "cifar-10-batches-py", n_per_batch=6)
    train = ndl.data.CIFAR10Dataset(str(folder), train=True)
    test = ndl.data.CIFAR10Dataset(str(folder), train=False)
    assert len(train) == 30 and len(test) == 6
    x, y = train[7]
    assert x.shape == (3, 32, 32) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    with open(folder / "data_batch_2", "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    # item 7 is item 1 of the second batch; its row is the R plane, then G, then B
    np.testing.assert_allclose(x[1], raw[b"data"][1, 1024:2048].reshape(32, 32) / 255.0, rtol=1e-6)
    assert y == raw[b"labels"][1]
    xb, yb = train[np.array([0, 7])]
    assert xb.shape == (2, 3, 32, 32) and yb.tolist() == [train[0][1], y]


def test_cifar10_transforms_see_hwc(tmp_path):
    folder = synthetic.write_cifar10(tmp_path, n_per_batch=2)
    plain = ndl.data.CIFAR10Dataset(str(folder), train=False)
    flipped = ndl.data.CIFAR10Dataset(str(folder), train=False, transforms=[ndl.data.RandomFlipHorizontal(1.0)])
    np.testing.assert_array_equal(flipped[0][0], plain[0][0][:, :, ::-1])


def test_cifar10_missing_batch(tmp_path):
    with pytest.raises(FileNotFoundError, match="download cifar10"):
        ndl.data.CIFAR10Dataset(str(tmp_path), train=True)


# ---------------------------------------------------------------- transforms


def test_random_flip():
    img = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    np.testing.assert_array_equal(ndl.data.RandomFlipHorizontal(1.0)(img), img[:, ::-1, :])
    np.testing.assert_array_equal(ndl.data.RandomFlipHorizontal(0.0)(img), img)
    np.random.seed(0)
    flips = [ndl.data.RandomFlipHorizontal(0.5)(img)[0, 0, 0] != img[0, 0, 0] for _ in range(2000)]
    assert 0.45 < np.mean(flips) < 0.55


def test_random_crop_matches_shift_definition():
    img = np.random.rand(8, 9, 2).astype(np.float32)
    crop = ndl.data.RandomCrop(padding=3)
    for seed in range(20):
        np.random.seed(seed)
        dx, dy = np.random.randint(low=-3, high=4, size=2)
        np.random.seed(seed)
        out = crop(img)
        assert out.shape == img.shape
        expect = np.zeros_like(img)
        for i in range(8):
            for j in range(9):
                if 0 <= i + dx < 8 and 0 <= j + dy < 9:
                    expect[i, j] = img[i + dx, j + dy]
        np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(ndl.data.RandomCrop(0)(img), img)


# ---------------------------------------------------------------- DataLoader


class _IntOnly(ndl.data.Dataset):
    """A dataset that only supports integer indexing (no batch fetch)."""

    def __init__(self, X, y):
        super().__init__()
        self.X, self.y = X, y

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return self.X[i], self.y[i]


def test_dataloader_batches_in_order():
    X = np.random.randn(23, 4).astype(np.float32)
    y = np.arange(23)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=5)
    batches = list(loader)
    assert len(batches) == len(loader) == 5
    assert [b[0].shape for b in batches] == [(5, 4)] * 4 + [(3, 4)]
    assert all(isinstance(t, ndl.Tensor) for b in batches for t in b)
    np.testing.assert_allclose(np.concatenate([b[0].numpy() for b in batches]), X)
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), y)
    # a second pass gives the same batches
    np.testing.assert_allclose(next(iter(loader))[0].numpy(), X[:5])


def test_dataloader_shuffle_is_seeded_permutation():
    X = np.arange(17, dtype=np.float32)[:, None]
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X), batch_size=4, shuffle=True)
    np.random.seed(11)
    order = np.concatenate([b[0].numpy()[:, 0] for b in loader])
    np.random.seed(11)
    np.testing.assert_array_equal(order, np.random.permutation(17))
    np.random.seed(11)
    again = np.concatenate([b[0].numpy()[:, 0] for b in loader])
    np.testing.assert_array_equal(order, again)
    other = np.concatenate([b[0].numpy()[:, 0] for b in loader])  # next epoch: a new order
    assert sorted(other.tolist()) == list(range(17)) and not np.array_equal(other, order)


def test_dataloader_generic_dataset_matches_batch_fetch():
    X = np.random.randn(10, 2, 3).astype(np.float32)
    y = np.arange(10) % 3
    a = list(ndl.data.DataLoader(_IntOnly(X, y), batch_size=4))
    b = list(ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=4))
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.shape == xb.shape
        np.testing.assert_array_equal(xa.numpy(), xb.numpy())
        np.testing.assert_array_equal(ya.numpy(), yb.numpy())


def test_dataloader_mnist_batches(mnist_files):
    ip, lp, images, labels = mnist_files
    loader = ndl.data.DataLoader(ndl.data.MNISTDataset(str(ip), str(lp)), batch_size=10)
    X, y = next(iter(loader))
    assert X.shape == (10, 28, 28, 1) and y.shape == (10,)
    np.testing.assert_array_equal(y.numpy(), labels[:10])


def test_dataloader_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        ndl.data.DataLoader(ndl.data.NDArrayDataset(np.zeros(3)), batch_size=0)
    with pytest.raises(ValueError, match=r"\(4, 2\).*\(3,\)"):
        ndl.data.NDArrayDataset(np.zeros((4, 2)), np.zeros(3))


# ---------------------------------------------------------------- PTB


@pytest.fixture
def ptb_dir(tmp_path):
    (tmp_path / "train.txt").write_text(" the cat sat \n a dog ran \n the end \n")
    (tmp_path / "test.txt").write_text(" a cat ran away \n")
    return tmp_path


def test_corpus_tokenize(ptb_dir):
    corpus = ndl.data.Corpus(str(ptb_dir))
    d = corpus.dictionary
    assert d.idx2word[:4] == ["the", "cat", "sat", "<eos>"]
    assert corpus.train == [0, 1, 2, 3, 4, 5, 6, 3, 0, 7, 3]
    assert corpus.test == [4, 1, 6, 8, 3]
    assert len(d) == 9 and d.word2idx["away"] == 8
    short = ndl.data.Corpus(str(ptb_dir), max_lines=1)
    assert short.train == [0, 1, 2, 3] and len(short.dictionary) == 7


@pytest.mark.parametrize("make, missing, name", [
    (lambda d: ndl.data.CIFAR10Dataset(str(d / "cifar-10-batches-py"), train=True),
     "cifar-10-batches-py/data_batch_1", "cifar10"),
    (lambda d: ndl.data.CIFAR10Dataset(str(d / "cifar-10-batches-py"), train=False),
     "cifar-10-batches-py/test_batch", "cifar10"),
    (lambda d: ndl.data.Corpus(str(d / "ptb")), "ptb/train.txt", "ptb"),
    (lambda d: ndl.data.MNISTDataset(str(d / "train-images-idx3-ubyte.gz"), str(d / "train-labels-idx1-ubyte.gz")),
     "train-images-idx3-ubyte.gz", "mnist"),
])
def test_needle_data_paths_name_the_file_and_the_command_that_puts_it_there(tmp_path, make, missing, name):
    data = tmp_path / "data"
    with pytest.raises(FileNotFoundError) as e:
        make(data)
    assert str(data / missing) in str(e.value)
    assert f"python -m needle_kernels.data.download {name} --dir {data}" in str(e.value)


def test_downloaded_layout_serves_needle_paths(tmp_path):
    # the downloader's layout under data/ is what needle code names
    data = tmp_path / "data"
    images, labels = synthetic.synthetic_images(12, (28, 28), seed=1)
    synthetic.write_idx_images(data / "mnist" / "train-images-idx3-ubyte.gz", images)
    synthetic.write_idx_labels(data / "mnist" / "train-labels-idx1-ubyte.gz", labels)
    ds = ndl.data.MNISTDataset(str(data / "train-images-idx3-ubyte.gz"), str(data / "train-labels-idx1-ubyte.gz"))
    assert len(ds) == 12 and ds[3][1] == labels[3]
    (data / "ptb").mkdir()
    (data / "ptb" / "train.txt").write_text("a b\nc\n")
    (data / "ptb" / "test.txt").write_text("b a\n")
    corpus = ndl.data.Corpus(str(data / "ptb"))
    assert corpus.train == [0, 1, 2, 3, 2] and corpus.test == [1, 0, 2]


def test_corpus_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        ndl.data.Corpus(str(tmp_path))
    assert str(tmp_path / "train.txt") in str(e.value) and "download ptb" in str(e.value)


def test_batchify_and_get_batch():
    data = list(range(103))
    b = ndl.data.batchify(data, batch_size=4, device=ndl.cpu(), dtype="float32")
    assert b.shape == (25, 4)
    # column j is the j-th contiguous quarter of the stream
    np.testing.assert_array_equal(b[:, 2], np.arange(50, 75))
    X, y = ndl.data.get_batch(b, 3, bptt=5)
    assert X.shape == (5, 4) and y.shape == (20,)
    np.testing.assert_array_equal(X.numpy(), b[3:8])
    np.testing.assert_array_equal(y.numpy(), b[4:9].reshape(-1))
    X, y = ndl.data.get_batch(b, 21, bptt=5)  # near the end the chunk is shorter
    assert X.shape == (3, 4) and y.shape == (12,)
    with pytest.raises(IndexError):
        ndl.data.get_batch(b, 24, bptt=5)
    with pytest.raises(ValueError):
        ndl.data.batchify([1, 2], batch_size=3, device=None, dtype="float32")


def _ptb_real():
    d = paths.data_dir() / "ptb"
    return d if os.environ.get(paths.ENV_VAR) and (d / "valid.txt").is_file() and (d / "test.txt").is_file() else None


@pytest.mark.skipif(_ptb_real() is None, reason="real PTB valid/test files not in $NEEDLE_DATA_DIR")
def test_real_ptb_valid_test():
    corpus = ndl.data.Corpus(str(_ptb_real()), train_file="valid.txt")
    assert len(corpus.train) == 73760 and len(corpus.test) == 82430
    assert len(corpus.dictionary) == 7596
    b = ndl.data.batchify(corpus.train, 20, ndl.cpu(), "float32")
    X, y = ndl.data.get_batch(b, 0, 35)
    assert X.shape == (35, 20) and y.shape == (700,)


def test_synthetic_ptb_files(tmp_path):
    synthetic.write_ptb(tmp_path)
    corpus = ndl.data.Corpus(str(tmp_path))
    lines = (tmp_path / "train.txt").read_text().splitlines()
    assert len(lines) == 200 and all(l.startswith(" ") for l in lines)
    assert corpus.train.count(corpus.dictionary.word2idx["<eos>"]) == 200


# ---------------------------------------------------------------- paths and sample data


def test_data_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.ENV_VAR, str(tmp_path))
    assert paths.data_dir() == tmp_path
    monkeypatch.delenv(paths.ENV_VAR)
    assert paths.data_dir() == Path("~/.cache/needle_kernels/data").expanduser()
    with pytest.raises(FileNotFoundError) as e:
        paths.mnist_files("train", tmp_path)
    assert str(tmp_path / "mnist" / "train-images-idx3-ubyte.gz") in str(e.value)
    with pytest.raises(FileNotFoundError, match="download ptb"):
        paths.ptb_file("valid", tmp_path)
    with pytest.raises(ValueError):
        paths.mnist_paths("validation")


def test_ensure_sample_data_layout(tmp_path):
    root = synthetic.ensure_sample_data(tmp_path, mnist_n=(20, 10))
    for split in ("train", "t10k"):
        assert all(p.is_file() for p in paths.mnist_files(split, root))
    assert all(paths.ptb_file(s, root).is_file() for s in ("train", "valid", "test"))
    folder = paths.cifar10_dir(root)
    assert len(ndl.data.CIFAR10Dataset(str(folder), train=True)) == 100
    before = (root / "mnist" / "train-images-idx3-ubyte.gz").stat().st_mtime_ns
    synthetic.ensure_sample_data(tmp_path, mnist_n=(20, 10))  # present files are left alone
    assert (root / "mnist" / "train-images-idx3-ubyte.gz").stat().st_mtime_ns == before


def test_synthetic_images_are_learnable():
    """Class templates make the synthetic data separable (lectures train on it when files are missing)."""
    images, labels = synthetic.synthetic_images(600, (28, 28), seed=0)
    X = images.reshape(600, -1) / 255.0
    means = np.stack([X[:300][labels[:300] == c].mean(0) for c in range(10)])
    pred = np.argmin(((X[300:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(pred == labels[300:]) > 0.9


# ---------------------------------------------------------------- downloads (local files only)


def _md5(b):
    return hashlib.md5(b).hexdigest()


@pytest.fixture
def payload(tmp_path):
    data = os.urandom(200_000)
    src = tmp_path / "src" / "blob.bin"
    src.parent.mkdir()
    src.write_bytes(data)
    return src, data


def test_download_file_url_and_checksums(tmp_path, payload):
    src, data = payload
    dest = tmp_path / "out" / "blob.bin"
    sums = {"md5": _md5(data), "sha256": hashlib.sha256(data).hexdigest()}
    got = dl.download_file(src.as_uri(), dest, sums, progress=False)
    assert got == dest and dest.read_bytes() == data
    assert not dest.with_name("blob.bin.part").exists()

    def no_network(*a, **k):
        raise AssertionError("a verified file must not be downloaded again")

    dl.download_file(src.as_uri(), dest, sums, progress=False, opener=no_network)


def test_download_bad_checksum_leaves_nothing(tmp_path, payload):
    src, data = payload
    dest = tmp_path / "blob.bin"
    with pytest.raises(dl.ChecksumError, match="md5 is .* expected 0+"):
        dl.download_file(src.as_uri(), dest, {"md5": "0" * 32}, progress=False)
    assert not dest.exists() and not dest.with_name("blob.bin.part").exists()


def test_download_replaces_corrupt_existing_file(tmp_path, payload):
    src, data = payload
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"corrupt")
    dl.download_file(src.as_uri(), dest, {"md5": _md5(data)}, progress=False)
    assert dest.read_bytes() == data


class _FakeResponse(io.BytesIO):
    def __init__(self, body, status):
        super().__init__(body)
        self.status = status
        self.headers = {"Content-Length": str(len(body))}

    def getcode(self):
        return self.status


def test_download_resumes_partial_file(tmp_path, payload):
    _, data = payload
    dest = tmp_path / "blob.bin"
    dest.with_name("blob.bin.part").write_bytes(data[:70_000])
    seen = {}

    def opener(request, timeout=None):
        seen["range"] = request.get_header("Range")
        start = int(seen["range"].split("=")[1].rstrip("-"))
        return _FakeResponse(data[start:], 206)

    dl.download_file("https://example.invalid/blob.bin", dest, {"md5": _md5(data)}, progress=False, opener=opener)
    assert seen["range"] == "bytes=70000-"
    assert dest.read_bytes() == data


def test_download_restarts_when_range_ignored(tmp_path, payload):
    _, data = payload
    dest = tmp_path / "blob.bin"
    dest.with_name("blob.bin.part").write_bytes(b"x" * 1000)

    def opener(request, timeout=None):
        return _FakeResponse(data, 200)

    dl.download_file("https://example.invalid/blob.bin", dest, {"md5": _md5(data)}, progress=False, opener=opener)
    assert dest.read_bytes() == data


def test_fetch_resource_tries_mirrors(tmp_path, payload):
    src, data = payload
    res = dl.Resource("sub/blob.bin", ((tmp_path / "missing.bin").as_uri(), src.as_uri()), {"md5": _md5(data)})
    out = dl.fetch_resource(res, tmp_path / "root", progress=False)
    assert out == tmp_path / "root" / "sub" / "blob.bin" and out.read_bytes() == data
    bad = dl.Resource("x.bin", ((tmp_path / "missing.bin").as_uri(), src.as_uri()), {"md5": "1" * 32})
    with pytest.raises(RuntimeError) as e:
        dl.fetch_resource(bad, tmp_path / "root", progress=False)
    assert "missing.bin" in str(e.value) and "md5" in str(e.value)


def test_download_unknown_dataset():
    with pytest.raises(ValueError, match="unknown data set"):
        dl.download("imagenet")


def test_published_checksums_match_real_files():
    """The PTB checksums in the download table are those of the files that are available."""
    real = _ptb_real()
    if real is None:
        pytest.skip("real PTB files not in $NEEDLE_DATA_DIR")
    for res in dl.RESOURCES["ptb"]:
        p = paths.data_dir() / res.dest
        if p.is_file():
            dl.verify_checksums(p, res.checksums)


def _cifar_tarball(tmp_path):
    staging = tmp_path / "staging"
    synthetic.write_cifar10(staging / "cifar-10-batches-py", n_per_batch=3)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(staging / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return archive


def test_download_cifar10_extracts(tmp_path, monkeypatch):
    archive = _cifar_tarball(tmp_path)
    res = dl.Resource("cifar-10-python.tar.gz", (archive.as_uri(),), {"md5": _md5(archive.read_bytes())})
    monkeypatch.setitem(dl.RESOURCES, "cifar10", [res])
    root = tmp_path / "root"
    (folder,) = dl.download("cifar10", root, progress=False)
    assert folder == root / "cifar-10-batches-py"
    assert not (root / "cifar-10-python.tar.gz").exists()
    assert len(ndl.data.CIFAR10Dataset(str(folder), train=False)) == 3
    # present: nothing is fetched again
    monkeypatch.setitem(dl.RESOURCES, "cifar10", [dl.Resource("c.tgz", ("file:///nonexistent",), {})])
    assert dl.download("cifar10", root, progress=False) == [folder]


def test_extract_refuses_path_traversal(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(ValueError, match="refusing"):
        dl.extract_cifar10(archive, tmp_path / "root")
    assert not (tmp_path / "escape.txt").exists()


def test_download_cli(tmp_path, monkeypatch, capsys):
    texts = {s: f" {s} text \n".encode() for s in ("train", "valid", "test")}
    resources = []
    for s, body in texts.items():
        src = tmp_path / f"ptb.{s}.txt"
        src.write_bytes(body)
        resources.append(dl.Resource(f"ptb/{s}.txt", (src.as_uri(),), {"md5": _md5(body)}))
    monkeypatch.setitem(dl.RESOURCES, "ptb", resources)
    assert dl.main(["ptb", "--dir", str(tmp_path / "d"), "--no-progress"]) == 0
    assert (tmp_path / "d" / "ptb" / "valid.txt").read_bytes() == texts["valid"]
    monkeypatch.setitem(dl.RESOURCES, "ptb", [dl.Resource("ptb/x.txt", ((tmp_path / "none").as_uri(),), {})])
    assert dl.main(["ptb", "--dir", str(tmp_path / "d"), "--no-progress"]) == 1
    assert "FAILED" in capsys.readouterr().err
