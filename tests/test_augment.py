"""Random shift (network.random_shift, the author's DrQ-v2 augmentation): each offset from -pad to pad,
the edge-padded crop, updates only (acting and evaluation see the frames as they are)."""
import gymnasium as gym
import keras
import numpy as np
from helpers import Scripted

from buffers.types import Batch
from networks.cnn import conv_net


def test_random_shift_crops_the_edge_padded_image_at_each_offset():
    """DrQ's shift by hand on a 4x4 image padded by 1: offset (1, 1) is the image itself, (0, 0)
    moves it down-right with its first row and column repeated, (2, 2) up-left with its last
    repeated; each image of a batch takes its own offsets."""
    import tensorflow as tf

    from agents.augment import RandomShift, random_shift

    image = np.arange(16, dtype=np.uint8).reshape(4, 4)
    batch = tf.constant(np.stack([image, image, image])[..., None])
    shifted = random_shift(batch, tf.constant([[1, 1], [0, 0], [2, 2]]), 1)[..., 0].numpy()
    np.testing.assert_array_equal(shifted[0], image)
    np.testing.assert_array_equal(shifted[1], [[0, 0, 1, 2], [0, 0, 1, 2], [4, 4, 5, 6], [8, 8, 9, 10]])
    np.testing.assert_array_equal(shifted[2], [[5, 6, 7, 7], [9, 10, 11, 11], [13, 14, 15, 15], [13, 14, 15, 15]])
    assert shifted.dtype == np.uint8
    shift = RandomShift(2, seed=0)  # its offsets' range: test_random_shift_moves_images_by_each_amount_...
    big = tf.constant(np.random.default_rng(0).integers(0, 256, (64, 8, 8, 3)).astype(np.uint8))
    moved = shift(big).numpy()
    assert moved.shape == big.shape and np.mean(np.all(moved == big.numpy(), axis=(1, 2, 3))) < 0.2  # 1 in 25 stays


def test_random_shift_moves_images_by_each_amount_from_minus_pad_to_pad():
    """RandomShift(pad=2) on 2000 copies of a 9x9 image whose pixels are all different: each copy
    is the edge-padded image cropped at some offset (row, column), recovered from where the centre
    pixel lands; the offsets drawn are exactly 0..4 on both axes (shifts of -2..+2 pixels)."""
    import tensorflow as tf

    from agents.augment import RandomShift

    pad, n = 2, 2000
    image = np.arange(81, dtype=np.uint8).reshape(9, 9, 1)
    moved = RandomShift(pad, seed=3)(tf.constant(np.repeat(image[None], n, axis=0))).numpy()
    rows, cols = np.nonzero(moved[..., 0] == image[4, 4, 0])[1:]  # the centre is never repeated into a border
    assert len(rows) == n, "each copy holds the centre pixel once"
    offsets = np.stack([4 + pad - rows, 4 + pad - cols], axis=1)  # out[i] = padded[offset + i]
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)), mode="edge")
    for copy, (r, c) in zip(moved[:100], offsets[:100]):
        np.testing.assert_array_equal(copy, padded[r:r + 9, c:c + 9])
    assert set(offsets[:, 0]) == set(offsets[:, 1]) == {0, 1, 2, 3, 4}
    counts = np.unique(offsets, axis=0, return_counts=True)[1]
    assert len(counts) == 25 and counts.min() > n / 25 / 2  # every pair, roughly uniformly


def test_the_compiled_update_trains_on_shifted_images():
    """TD3 on images with `random_shift` (K = 1, then K = 2 fused updates) ends with the weights of
    the same TD3 without it, fed the batches shifted by hand with a generator seeded alike (obs,
    then next_obs, update by update); and with other weights than on the unshifted batches."""
    import tensorflow as tf
    from helpers import compiled, stack

    from agents.augment import RandomShift
    from agents.td3 import TD3

    def learner(shift=None):
        keras.utils.set_random_seed(0)
        net = lambda *a, **k: conv_net(*a, convs=[[4, 3, 2]], hidden=[8], **k)  # noqa: E731
        agent = TD3((9, 9, 3), np.array([-1.0]), np.array([1.0]), net, np.random.default_rng(0), policy_delay=1)
        return compiled(agent, random_shift=shift)

    rng = np.random.default_rng(0)

    def batch():
        images = lambda: rng.integers(0, 256, (8, 9, 9, 3)).astype(np.uint8)  # noqa: E731
        return Batch(images(), rng.uniform(-1, 1, (8, 1)).astype(np.float32), rng.normal(size=8).astype(np.float32),
                     images(), np.full(8, 0.99, np.float32), np.ones(8, np.float32))

    batches = [batch() for _ in range(3)]
    shifted, by_hand, plain = learner(RandomShift(2, seed=7)), learner(), learner()
    clone = RandomShift(2, seed=7)
    hand = [b._replace(obs=clone(tf.constant(b.obs)).numpy(), next_obs=clone(tf.constant(b.next_obs)).numpy())
            for b in batches]
    for learner_, feed in ((shifted, batches), (by_hand, hand), (plain, batches)):
        learner_.update(stack(feed[:1]))
        learner_.update(stack(feed[1:]))
    weights = [[w.numpy() for w in learner.agent.critic1.weights + learner.agent.actor.weights]
               for learner in (shifted, by_hand, plain)]
    for a, b in zip(weights[0], weights[1]):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for a, c in zip(weights[0], weights[2]))


def test_random_shift_is_for_updates_only_acting_and_evaluation_see_the_frames_as_they_are():
    """A learner with DrQ's shift acts on the observations unshifted (its agent's own actions for
    them), and neither acting nor an evaluation draws from the shift's generator (a resumed run's
    shifts depend on updates only)."""
    import tensorflow as tf
    from helpers import compiled

    from agents.augment import RandomShift
    from agents.td3 import TD3
    from training.evaluation import evaluate

    keras.utils.set_random_seed(0)
    net = lambda *a, **k: conv_net(*a, convs=[[4, 3, 2]], hidden=[8], **k)  # noqa: E731
    agent = TD3((9, 9, 3), np.array([-1.0]), np.array([1.0]), net, np.random.default_rng(0), policy_delay=1)
    learner = compiled(agent, random_shift=RandomShift(2, seed=7))
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (16, 9, 9, 3)).astype(np.uint8)
    state = learner.random_shift.rng.state.numpy().copy()
    np.testing.assert_array_equal(learner.act(obs, explore=False), agent.act(obs, explore=False))
    frames = [rng.integers(0, 256, (9, 9, 3)).astype(np.uint8) for _ in range(6)]
    env = Scripted(frames, rewards=[1.0] * 5)
    env.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    env = gym.wrappers.TimeLimit(env, 5)
    assert evaluate(learner, env, episodes=2, seed=0)["return_mean"] == 5.0
    np.testing.assert_array_equal(learner.random_shift.rng.state.numpy(), state)
    assert not np.array_equal(RandomShift(2, seed=7)(tf.constant(obs)).numpy(), obs)  # a shift would show
