"""Replay buffers: numpy only, no TensorFlow."""
