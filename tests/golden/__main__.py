"""`uv run python -m tests.golden [case ...]`: regenerate the golden records tests/golden/<case>.json
(tests/test_golden.py) — only when an agent's maths changed on purpose."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for path in (os.path.join(ROOT, "tests"), ROOT):  # as under pytest: the repo's packages, and the tests' modules
    if path not in sys.path:
        sys.path.insert(0, path)

from training.runtime import prepare_process  # noqa: E402

prepare_process()  # before anything imports TensorFlow or Keras, as train.py and tests/conftest.py do

from test_golden import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
