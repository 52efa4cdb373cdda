"""Keras model builders. They know nothing about RL."""
