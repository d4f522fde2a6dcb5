"""posemb="none": no position information at all (the paper's "no positional embedding" row)."""

from keras_vit.posembs.base import PosembType


class NoPosition(PosembType):
    name = "none"


TYPE = NoPosition()
