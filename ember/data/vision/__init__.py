"""ember.data.vision: MNIST (from IDX files, or the embedded 5,000-image sample), image folders
and NumPy image augmentations.

Example:
    >>> from ember.data.vision import mnist_sample
    >>> image, label = mnist_sample("test")[0]
    >>> image.shape
    (28, 28)
"""

from .idx import read_idx
from .image_folder import ImageFolder
from .mnist import MNIST, LabeledImages, mnist_sample

__all__ = ["MNIST", "ImageFolder", "LabeledImages", "mnist_sample", "read_idx"]
