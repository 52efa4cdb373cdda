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
