"""The CNNs: the papers' layers (Nature, IMPALA), dueling heads, scaling and initialisation, a
convolutional critic, and acting in numpy with the networks' own outputs."""
import keras
import numpy as np
import pytest

from networks.cnn import conv_net, impala_cnn


def params(model) -> int:
    return int(sum(np.prod(w.shape) for w in model.weights))


def test_the_nature_network_has_the_papers_layers():
    """84x84x4 -> 20x20x32 -> 9x9x64 -> 7x7x64 = 3136 -> 512 -> 4 actions: by hand, 8*8*4*32+32 +
    4*4*32*64+64 + 3*3*64*64+64 + 3136*512+512 + 512*4+4 = 1,686,180 weights."""
    net = conv_net((84, 84, 4), 4)
    convs = [tuple(layer.output.shape[1:]) for layer in net.layers if "conv" in layer.name]
    assert convs == [(20, 20, 32), (9, 9, 64), (7, 7, 64)]
    assert params(net) == 1_686_180
    assert net.inputs[0].dtype == "uint8"


def test_the_impala_network_has_the_papers_layers():
    """Per stage a conv, a stride-2 pool (84 -> 42 -> 21 -> 11) and two residual blocks of two convs:
    by hand, 592 + 4*2320 + 4640 + 4*9248 + 9248 + 4*9248 + (11*11*32)*256+256 + 256*4+4 = 1,090,260."""
    net = impala_cnn((84, 84, 4), 4)
    assert params(net) == 1_090_260
    assert sum(isinstance(layer, keras.layers.Add) for layer in net.layers) == 6


def test_dueling_cnn_heads_combine_value_and_advantage():
    net = conv_net((10, 10, 4), 3, convs=[[4, 3, 1]], hidden=[8], dueling=True)
    names = {layer.name for layer in net.layers}
    assert {"cnn_v", "cnn_a", "cnn_out"} <= names
    x = np.random.default_rng(0).integers(0, 256, (5, 10, 10, 4)).astype(np.uint8)
    q = np.asarray(net(x))
    v, a = (np.asarray(keras.Model(net.inputs[0], net.get_layer(n).output)(x)) for n in ("cnn_v", "cnn_a"))
    np.testing.assert_allclose(q, v + a - a.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_images_are_scaled_to_unit_range_and_torch_init_bounds_the_kernels():
    net = conv_net((10, 10, 4), 3, convs=[[16, 3, 1]], hidden=[8])
    kernel = np.asarray(net.get_layer("cnn_conv0").kernel)
    bound = 1 / np.sqrt(3 * 3 * 4)  # PyTorch's Conv2d default: U(+-1/sqrt(fan_in))
    assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.9 * bound
    x = np.full((1, 10, 10, 4), 255, np.uint8)
    after_scale = keras.Model(net.inputs[0], net.get_layer("cnn_scale").output)(x)
    np.testing.assert_array_equal(np.asarray(after_scale), np.ones((1, 10, 10, 4), np.float32))


@pytest.mark.parametrize("build,shape,in_numpy", [
    (lambda: conv_net((84, 84, 4), 6), (84, 84, 4), True),
    (lambda: conv_net((84, 84, 4), 6, dueling=True), (84, 84, 4), True),
    (lambda: conv_net((10, 10, 7), 6, convs=[[16, 3, 1]], hidden=[128]), (10, 10, 7), True),
    (lambda: conv_net((12, 12, 3), 4, convs=[[8, 3, 2], [8, 2, 1]], hidden=[16, 16], activation="tanh"), (12, 12, 3),
     True),
    (lambda: impala_cnn((20, 20, 4), 5, channels=[4, 8]), (20, 20, 4), False),  # max-pooling: through TF
])
def test_cnn_acting_in_numpy_gives_the_networks_outputs(build, shape, in_numpy):
    from agents.acting import Forward

    net = build()
    fast, tf_call = Forward(net, numpy=True), Forward(net, numpy=False)
    assert fast.in_numpy == in_numpy and fast.obs_dtype == "uint8"
    x = np.random.default_rng(0).integers(0, 256, (5, *shape)).astype(np.uint8)
    np.testing.assert_allclose(fast(x), tf_call(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fast(x[:1]), np.asarray(net(x[:1])), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("build", [
    lambda **k: conv_net((12, 12, 3), 1, convs=[[4, 3, 2]], hidden=[8], **k),
    lambda **k: impala_cnn((12, 12, 3), 1, channels=[4], hidden=[8], **k),
], ids=["conv_net", "impala_cnn"])
def test_a_convolutional_critic_joins_the_action_to_the_flattened_convolutions(build):
    """Q(s, a) of a continuous agent's CNN critic (TD3, DDPG, SAC from pixels), by hand: the image's
    flattened convolutions concatenated with the action, then the dense layers."""
    net = build(action_dim=2, name="q")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 12, 12, 3)).astype(np.uint8)
    actions = rng.uniform(-1, 1, (3, 2)).astype(np.float32)
    flat = np.asarray(keras.Model(net.inputs[0], net.get_layer("q_flat").output)(images))
    (w0, b0), (w1, b1) = net.get_layer("q_h0").get_weights(), net.get_layer("q_out").get_weights()
    by_hand = np.maximum(np.concatenate([flat, actions], axis=1) @ w0 + b0, 0.0) @ w1 + b1
    np.testing.assert_allclose(np.asarray(net([images, actions])), by_hand, rtol=1e-5, atol=1e-5)


def test_a_dueling_mlp_acts_in_numpy_too():
    from agents.acting import Forward
    from networks.mlp import dueling_mlp

    net = dueling_mlp(6, 3, hidden=[16, 8])
    fast = Forward(net, numpy=True)
    x = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    assert fast.in_numpy
    np.testing.assert_allclose(fast(x), np.asarray(net(x)), rtol=1e-5, atol=1e-6)
