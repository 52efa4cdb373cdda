"""Network builders: how their weights start."""
import numpy as np
import pytest

from networks.mlp import dueling_mlp, mlp


def dense_layers(model):
    return [layer for layer in model.layers if layer.weights]


@pytest.mark.parametrize("build", [mlp, dueling_mlp])
def test_torch_init_is_pytorch_linears_default(build):
    """PyTorch's nn.Linear: kernel and bias U(+-1/sqrt(fan_in)), as in the reference code."""
    model = build(40, 6, hidden=[300, 200], init="torch")
    for layer in dense_layers(model):
        kernel, bias = layer.get_weights()
        bound = 1 / np.sqrt(kernel.shape[0])
        assert np.abs(kernel).max() <= bound
        assert np.abs(kernel).max() > 0.95 * bound  # spread over the whole range, not narrower
        assert np.abs(bias).max() <= bound and np.abs(bias).max() > 0
        assert np.std(kernel) == pytest.approx(bound / np.sqrt(3), rel=0.15)  # uniform's std


def test_keras_init_is_glorot_with_zero_bias():
    model = mlp(40, 6, hidden=[300, 200], init="keras")
    for layer in dense_layers(model):
        kernel, bias = layer.get_weights()
        limit = np.sqrt(6 / sum(kernel.shape))
        assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.95 * limit
        assert not bias.any()


def test_unknown_init_names_the_choices():
    with pytest.raises(ValueError, match="network.init must be one of torch, keras, orthogonal, got 'xavier'"):
        mlp(4, 2, init="xavier")


def test_elu_is_pytorchs_expm1_near_zero_and_has_elus_gradient():
    """TensorFlow's Elu computes exp(x) - 1: near 0 it loses digits that PyTorch's expm1 keeps."""
    import tensorflow as tf

    from networks.activations import elu
    x = np.array([-3e-6, -1e-4, -2e-3, -0.3, -4.0, 0.0, 0.7], np.float32)
    exact = np.where(x > 0, x, np.expm1(x.astype(np.float64)))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    ours, keras_elu = elu(tf.constant(x)).numpy(), tf.nn.elu(tf.constant(x)).numpy()
    assert np.all(np.abs(ours - exact) <= ulp)
    assert (np.abs(keras_elu - exact) / ulp).max() > 1000  # what the test tells apart: exp(x) - 1 near 0
    with tf.GradientTape() as tape:
        t = tf.constant(x)
        tape.watch(t)
        y = elu(t)
    np.testing.assert_allclose(tape.gradient(y, t).numpy(), np.where(x > 0, 1.0, np.exp(x.astype(np.float64))),
                               rtol=1e-6, atol=1e-7)  # y + 1 (as PyTorch's backward) rounds at y's ulp


def test_mrqs_networks_take_the_elu_pytorch_computes():
    """Every ELU of MR.Q's encoder and value (the author's F.elu), the action embedding's too."""
    from agents.mrq.networks import MRQNetworks
    from networks.activations import elu
    nets = MRQNetworks()
    for model in (nets.state_encoder((5,), "zs"), nets.state_action_encoder(2, "zsa"), nets.value("value")):
        acts = [layer.activation for layer in model.layers if hasattr(layer, "activation")]
        assert elu in acts and "elu" not in [getattr(a, "__name__", None) for a in acts if a is not elu]
