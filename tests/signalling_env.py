"""An env that sends its own process SIGTERM at its `at`-th step: a stop request that lands at a
step the test chooses, wherever the loop is then (inside a compiled call driving the env steps, or
before the updates an episode's end makes due). `gymnasium.make("signalling_env:SignalsAt-v0",
base="Pendulum-v1", at=600)` imports this module, so a train.py subprocess with tests/ on its
PYTHONPATH can use it too."""
import signal
import threading

import gymnasium as gym


class SignalsAt(gym.Wrapper):
    def __init__(self, base: str, at: int):
        super().__init__(gym.make(base))
        self.at, self.steps = at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at:  # to this thread, so that it has arrived when the call returns
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        return self.env.step(action)


gym.register("SignalsAt-v0", entry_point=SignalsAt)
