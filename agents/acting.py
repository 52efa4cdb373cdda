"""Acting on the weights the update hands back, as acme's variable client does.

An agent acts through `Forward(network)`: the network's forward pass in numpy on a copy of its
weights, which the compiled update refreshes with the weights it has just written, returned as one
flat output of the same call. A TensorFlow call per environment step costs hundreds of
microseconds of fixed overhead for a few microseconds of arithmetic; this costs about what a plain
numpy forward pass does. A network that is not a plain stack of Dense layers, or `numpy=False`,
runs through one tf.function instead (the same outputs, slower). SimBa's residual networks run in
numpy too (`networks.numpy_forward.graph_forward_fn`).
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from networks.numpy_forward import forward_fn


class Forward:
    """`forward(obs)`: the network's outputs for a batch of observations, as numpy (a tuple of
    arrays for a model of several outputs)."""

    def __init__(self, network: keras.Model, numpy: bool = True):
        self.network = network
        sizes = [int(np.prod(w.shape)) for w in network.weights]
        ends = np.cumsum(sizes, dtype=np.int64)
        self._layout = [((int(e - n), int(e)), tuple(w.shape)) for e, n, w in zip(ends, sizes, network.weights)]
        self.obs_dtype = tf.as_dtype(network.inputs[0].dtype)  # float32 vectors; uint8 images
        self._np_dtype = self.obs_dtype.as_numpy_dtype
        self._tf_call = tf.function(lambda obs: network(obs, training=False),
                                    input_signature=[tf.TensorSpec([None, *network.input_shape[1:]], self.obs_dtype)],
                                    autograph=False)
        self.use_numpy(numpy)

    def use_numpy(self, numpy: bool) -> None:
        """Act in numpy where the network allows it (True), or through the tf.function (False)."""
        self._np_forward = forward_fn(self.network) if numpy else None
        self.refresh()

    @property
    def in_numpy(self) -> bool:
        return self._np_forward is not None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=self._np_dtype)
        if self._np_forward is not None:
            return self._np_forward(self._weights, obs)
        out = self._tf_call(obs)
        return out.numpy() if isinstance(out, tf.Tensor) else tuple(o.numpy() for o in out)  # a model of several outputs

    def refresh(self) -> None:
        """Re-read the network's weights (after a restore, or weights changed outside an update)."""
        self._weights = [np.array(w) for w in self.network.get_weights()] if self.in_numpy else []

    def flat_weights(self) -> tf.Tensor:
        """The network's weights as one flat tensor: in a compiled update, read after its writes
        (automatic control dependencies), so one read back to numpy serves all of them."""
        if not self.in_numpy:
            return tf.zeros([0])
        return tf.concat([tf.reshape(v, [-1]) for v in self.network.weights], axis=0)

    def receive(self, flat) -> None:
        """Take the weights `flat_weights` returned (a tensor, or an array TF may reuse)."""
        if not self.in_numpy:
            return
        flat = flat.numpy() if isinstance(flat, tf.Tensor) else np.array(flat)
        self._weights = [flat[a:b].reshape(shape) for (a, b), shape in self._layout]
