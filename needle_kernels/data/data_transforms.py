"""Data augmentation on single images in HWC layout (numpy arrays).

Randomness comes from numpy's global RNG, as in needle, so ``np.random.seed``
makes an augmented epoch reproducible.
"""
import numpy as np


class Transform:
    """A callable that maps one HWC image (numpy array) to another."""

    def __call__(self, x):
        raise NotImplementedError


class RandomFlipHorizontal(Transform):
    """Mirror the image left-right with probability ``p``."""

    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, img):
        flip_img = np.random.rand() < self.p
        if flip_img:
            return img[:, ::-1, :]
        return img


class RandomCrop(Transform):
    """Zero-pad by ``padding`` on each side, then crop back to (H, W) at a random shift.

    The shift (dx, dy) is drawn uniformly from [-padding, padding]^2 with one
    ``np.random.randint(..., size=2)`` call; the result's pixel (i, j) is the
    input's pixel (i + dx, j + dy), or 0 outside the image.
    """

    def __init__(self, padding=3):
        self.padding = padding

    def __call__(self, img):
        if img.ndim != 3:
            raise ValueError(f"RandomCrop expects an HWC image, got shape {img.shape}")
        p = self.padding
        shift_x, shift_y = np.random.randint(low=-p, high=p + 1, size=2)
        H, W, _ = img.shape
        padded = np.pad(img, ((p, p), (p, p), (0, 0)))
        return padded[p + shift_x:p + shift_x + H, p + shift_y:p + shift_y + W, :]
